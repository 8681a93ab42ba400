"""Running the same function on CPU and on "tpu" and comparing, the core of every numeric test."""

import torch


def to_device(x, device):
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        y.requires_grad_(x.requires_grad)
        return y
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(e, device) for e in x)
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x


def assert_same(got, expected, **tol):
    """got (tpu results) equals expected (cpu results): values, dtypes and shapes."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got)}"
        assert got.device.type == "tpu", f"result is on {got.device}, not tpu"
        torch.testing.assert_close(got.cpu(), expected, **tol)
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e, **tol)
    else:
        assert got == expected, f"{got} != {expected}"


def check(fn, *args, **tol):
    """Calls fn(*args) on CPU copies and on tpu copies of the tensors in args and compares."""
    expected = fn(*to_device(args, "cpu"))
    got = fn(*to_device(args, "tpu"))
    assert_same(got, expected, **tol)
    return got


def on_the_other_kernel_paths(path, tests):
    """Runs the tests of the file at `path` matching `tests` (a -k expression) in children with the host
    kernels' 256-bit and portable code."""
    import os
    import subprocess
    import sys

    for isa in ("avx2", "portable"):
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", path,
               "-k", tests]
        out = subprocess.run(cmd, env=dict(os.environ, TORCH_PJRT_KERNEL_ISA=isa), capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, isa + ": " + out.stdout[-3000:] + out.stderr[-3000:]
        assert " passed" in out.stdout and "failed" not in out.stdout
