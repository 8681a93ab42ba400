"""Launching a worker script under torchrun from a test: 2 processes, one thread per pool each, its own
session (a timeout kills torchrun and both workers), output kept for the failure message.

Workers print `OK <scenario> ...` per scenario that passed; `expect_ok` checks them and the exit status.
"""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).resolve().parent / "distributed"
NPROC = 2
TIMEOUT_S = int(os.environ.get("TORCH_PJRT_DIST_TEST_TIMEOUT", "600"))

_cache = {}


def launch(worker, args=(), env=None, nproc=NPROC):
    """Runs `worker` (a file name in tests/python/distributed) under torchrun once per (worker, args, env) in
    this test session: (exit status or None on timeout, stdout and stderr together)."""
    key = (worker, tuple(args), tuple(sorted((env or {}).items())), nproc)
    if key in _cache:
        return _cache[key]
    full = dict(os.environ)
    full.update(
        # Several processes on a small machine: one thread each for the plugin's pools, the host kernels and torch.
        TORCH_PJRT_CPU_THREADS="1",
        TORCH_PJRT_KERNEL_THREADS="1",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    full.update(env or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(WORKERS / worker), *args]
    proc = subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=str(WORKERS))
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = None
        out += f"\n[torchrun.launch] timed out after {TIMEOUT_S} s: {' '.join(cmd)}\n"
    _cache[key] = (rc, out)
    return rc, out


def tail(out, n=12000):
    return out if len(out) <= n else "...\n" + out[-n:]


def expect_ok(worker, scenarios, args=None, env=None, only=None):
    """Launches `worker` with `args` (default: the scenario names) and asserts an `OK <name>` line for each
    name of `only` (default: every scenario) and, when all of the launch's scenarios passed, exit status 0 (a
    crash at shutdown fails too). Returns the OK lines checked."""
    rc, out = launch(worker, scenarios if args is None else args, env)
    lines = []
    for name in only or scenarios:
        ok = re.search(rf"^OK {re.escape(name)}\b.*$", out, re.MULTILINE)
        assert ok, f"no 'OK {name}' line from {worker} (exit status {rc}); its output:\n{tail(out)}"
        lines.append(ok.group(0))
    if all(re.search(rf"^OK {re.escape(s)}\b", out, re.MULTILINE) for s in scenarios):
        assert rc == 0, f"every scenario of {worker} OK but the launch exited with {rc}; its output:\n{tail(out)}"
    print("\n".join(lines))
    return lines
