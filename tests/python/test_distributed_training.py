"""Two-process training with torch.distributed (DDP, FSDP2, FSDP2 mixed precision, DTensor tensor parallelism
on an MLP and on a tiny Llama, DDP and FSDP2 under torch.compile), each checked by the worker against a
single-process float32 CPU reference: per-step losses and final parameters within 1e-5 (fsdp_mp: against a
bfloat16 emulation; see distributed/train_worker.py for the tolerances and their reasons).

The worker runs under torchrun (2 processes, one device each). DIST_DEVICE selects what is tested:
  tpu (default): "tpu" devices, init_process_group("cpu:gloo,tpu:tpu_dist"), torch.compile backend "tpu";
  cpu: device cpu with gloo, which checks the scenarios and references themselves without torch-pjrt.

The scenarios run in two torchrun launches (process start and imports cost seconds each); each scenario is
its own test, which passes on the worker's ``OK <scenario>`` line.
"""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parent / "distributed" / "train_worker.py"
NPROC = 2
DEVICE = os.environ.get("DIST_DEVICE", "tpu")
# Per launch. The cpu run takes ~10 s and ~20 s on 2 cores; "tpu" adds program compiles on a cold cache.
TIMEOUT_S = int(os.environ.get("DIST_TEST_TIMEOUT_S", "420"))

GROUPS = {
    "plain": ["ddp", "fsdp", "fsdp_mp", "tp_mlp"],
    # transformers' import and Dynamo's first compile are the slow parts: together in one launch
    "llama_compile": ["tp_llama", "ddp_compile", "fsdp_compile"],
}
SCENARIO_GROUP = {s: g for g, ss in GROUPS.items() for s in ss}

_results = {}


def _launch(group):
    """Runs one torchrun launch of the worker (once per group and test session): (returncode, output)."""
    if group in _results:
        return _results[group]
    env = dict(os.environ)
    env.update(
        DIST_DEVICE=DEVICE,
        # One thread per pool and process: 2 processes on 2 cores (README, TORCH_PJRT_CPU_THREADS).
        TORCH_PJRT_CPU_THREADS="1",
        TORCH_PJRT_KERNEL_THREADS="1",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={NPROC}",
           str(WORKER), *GROUPS[group]]
    # A session of its own, so that a timeout stops torchrun and both workers (the group of this child only).
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=str(WORKER.parent))
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = None
        out += f"\n[test_distributed_training] timed out after {TIMEOUT_S} s: {' '.join(cmd)}\n"
    _results[group] = (rc, out)
    return rc, out


def _tail(out, n=12000):
    return out if len(out) <= n else "...\n" + out[-n:]


@pytest.mark.parametrize("scenario", [s for ss in GROUPS.values() for s in ss])
def test_distributed_training(scenario):
    rc, out = _launch(SCENARIO_GROUP[scenario])
    ok = re.search(rf"^OK {re.escape(scenario)} .*$", out, re.MULTILINE)
    assert ok, (f"no 'OK {scenario}' line from the worker (DIST_DEVICE={DEVICE}, exit status {rc}); "
                f"its output:\n{_tail(out)}")
    # The scenario passed; a later one in the same launch may have failed, which its own test reports. But a
    # launch that ended badly with every scenario OK (a crash at shutdown) is a failure too.
    if all(re.search(rf"^OK {re.escape(s)} ", out, re.MULTILINE) for s in GROUPS[SCENARIO_GROUP[scenario]]):
        assert rc == 0, f"every scenario OK but the launch exited with {rc}; its output:\n{_tail(out)}"
    print(ok.group(0))
