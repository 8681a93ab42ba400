"""The on-disk program cache across processes: two processes sharing one folder, a process killed while
compiling, a corrupt entry. Every result is checked against the CPU."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

# Each child runs a few distinct ops (new programs), checks them against the CPU and prints its metrics.
_CHILD = textwrap.dedent(
    """
    import sys, torch, torch_pjrt
    torch.manual_seed(0)
    x = torch.randn(7, 5)
    t = x.to("tpu")
    pairs = [(t.sin() * 3 + 1, x.sin() * 3 + 1), (t.cumsum(0), x.cumsum(0)), (t.softmax(1), x.softmax(1)),
             ((t @ t.T).tanh(), (x @ x.T).tanh()), (t.amax(1), x.amax(1))]
    for got, want in pairs:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    if len(sys.argv) > 1:  # hold here until killed
        print("READY", flush=True)
        import time
        while True:
            (t * float(time.time())).cpu()
    m = torch_pjrt.metrics()
    print(m["compiles"], m["disk_cache_hits"], m["disk_cache_corrupt"], flush=True)
    """
)


def _run(cache_dir, *args, **kw):
    env = dict(os.environ, TORCH_PJRT_CACHE_DIR=str(cache_dir))
    return subprocess.Popen([sys.executable, "-c", _CHILD, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _metrics(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    compiles, disk_hits, corrupt = map(int, out.split()[-3:])
    return compiles, disk_hits, corrupt


def test_two_processes_share_one_folder(tmp_path):
    a, b = _run(tmp_path), _run(tmp_path)  # concurrently, on an empty folder
    ma, mb = _metrics(a), _metrics(b)
    assert ma[2] == 0 and mb[2] == 0  # neither read a half-written entry
    third = _metrics(_run(tmp_path))
    assert third[0] == 0 and third[1] > 0 and third[2] == 0  # everything came from disk


def test_killed_process_leaves_the_cache_usable(tmp_path):
    p = _run(tmp_path, "hold")
    assert p.stdout.readline().strip() == "READY"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    compiles, disk_hits, corrupt = _metrics(_run(tmp_path))
    assert corrupt == 0 and disk_hits > 0


def test_corrupt_entry_is_evicted_and_recompiled(tmp_path):
    _metrics(_run(tmp_path))
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".bin")]
    assert files
    for f in files:  # damage every entry's payload
        with open(f, "r+b") as fh:
            fh.seek(-16, os.SEEK_END)
            fh.write(b"\xde\xad\xbe\xef" * 4)
    compiles, disk_hits, corrupt = _metrics(_run(tmp_path))
    assert corrupt == len(files) and compiles >= len(files) and disk_hits == 0
    compiles, disk_hits, corrupt = _metrics(_run(tmp_path))
    assert corrupt == 0 and compiles == 0


# A child that compiles new programs (a new shape each round) under a map limit just above what it
# starts with: compiling must stop with a clear error, not abort the process inside XLA:CPU's JIT linker.
_MAPS_CHILD = textwrap.dedent(
    """
    import os, torch, torch_pjrt
    # the limit: this process's mappings before its first program, plus 4096 (the headroom) and 600
    # (room for about 130 programs); read at the first compile
    os.environ["TORCH_PJRT_MAP_LIMIT"] = str(sum(1 for _ in open("/proc/self/maps")) + 4096 + 600)
    torch_pjrt.set_fallback_policy("error")
    x = torch.randn(3)
    assert torch.equal((x.to("tpu") * 2).cpu(), x * 2)
    err = None
    for n in range(1, 2000):  # about 130 new programs reach the limit
        try:
            y = torch.arange(float(n)).to("tpu").exp().cpu()
        except RuntimeError as e:
            err = e
            break
        torch.testing.assert_close(y, torch.arange(float(n)).exp())
    assert err is not None and "vm.max_map_count" in str(err) and "aten::exp" in str(err), err
    # the process goes on: known programs still run, and new ops take the CPU fallback where allowed
    assert torch.equal((x.to("tpu") * 2).cpu(), x * 2)
    torch_pjrt.set_fallback_policy("silent")
    z = torch.arange(float(n)).to("tpu").exp()
    assert torch.equal(z.cpu(), torch.arange(float(n)).exp())  # the CPU's own kernel
    print("OK", n)
    """
)


def test_too_many_programs_raise_instead_of_aborting(tmp_path):
    # strict eager: the child checks that an op whose own program cannot be compiled falls back to the CPU's
    # kernel (under fused eager the op is only compiled inside its stream)
    env = dict(os.environ, TORCH_PJRT_CACHE_DIR=str(tmp_path), TORCH_PJRT_EAGER="strict")
    r = subprocess.run([sys.executable, "-c", _MAPS_CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.startswith("OK"), r.stdout + r.stderr
