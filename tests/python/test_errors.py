"""Failures: asynchronous device failures in strict mode (reported at the next sync point, naming the
op) and in debug mode (raised by the op itself), immediate out-of-memory on allocation, device memory
released by freed tensors, and the CPU-fallback policy ("warn" runs on the CPU, "error" raises).

After every failure the process keeps working: a normal op still gives the CPU result.
"""

import gc
import re

import pytest
import torch

import torch_pjrt

HUGE = 2**36  # elements: a float32 result of 256 GiB, more than the device can allocate


def _drain():
    """Clears a failure left pending by an earlier test, so each test sees only its own."""
    try:
        torch.tpu.synchronize()
    except (RuntimeError, torch.OutOfMemoryError):
        pass


@pytest.fixture(autouse=True)
def isolated():
    _drain()
    yield
    _drain()


@pytest.fixture
def blocking():
    """Debug eager (launch blocking) for one test; the previous mode is restored afterwards."""
    old = torch.backends.tpu.launch_blocking()
    try:
        torch.backends.tpu.set_launch_blocking(True)
        yield
    finally:
        torch.backends.tpu.set_launch_blocking(old)


def assert_still_works():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    got = (x.to("tpu") * 2 + 1).sum(0)
    assert torch.equal(got.cpu(), (x * 2 + 1).sum(0))


def huge():
    return torch.ones(1, device="tpu").expand(HUGE)


# ------------------------------------------------------------------------------------------ strict mode

def test_strict_mode_is_default():
    assert torch.backends.tpu.launch_blocking() is False
    assert torch_pjrt._C._launch_blocking() is False


def test_strict_failure_surfaces_at_item():
    x = huge()
    y = x * 1  # fails on the device; strict mode returns at once
    assert y.shape == (HUGE,) and y.device.type == "tpu"
    s = y.sum()  # depends on the failed result: also returns
    assert s.shape == ()
    with pytest.raises(torch.OutOfMemoryError, match=re.escape("aten::mul.Tensor")):
        s.item()
    assert_still_works()


def test_strict_failure_surfaces_at_synchronize(strict_eager):
    x = huge()
    y = x + 1  # a fresh failure, of another op
    del y
    with pytest.raises(torch.OutOfMemoryError, match=re.escape("aten::add.Tensor")):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # reported once: the next sync point is clean
    assert_still_works()


def test_strict_failure_surfaces_at_copy_to_cpu():
    y = huge() * 1
    with pytest.raises(torch.OutOfMemoryError, match=re.escape("aten::mul.Tensor")):
        y[:4].cpu()
    assert_still_works()


# ------------------------------------------------------------------------------------------- debug mode

def test_debug_mode_raises_at_the_op(blocking):
    assert torch.backends.tpu.launch_blocking() is True
    x = huge()
    with pytest.raises(torch.OutOfMemoryError, match=re.escape("aten::mul.Tensor")):
        x * 1
    torch.tpu.synchronize()  # nothing left pending: the failure was raised already
    assert_still_works()


def test_debug_mode_through_private_switch():
    old = torch_pjrt._C._launch_blocking()
    try:
        torch_pjrt._C._set_launch_blocking(True)
        assert torch.backends.tpu.launch_blocking() is True
        with pytest.raises(torch.OutOfMemoryError, match=re.escape("aten::add.Tensor")):
            huge() + 1
    finally:
        torch_pjrt._C._set_launch_blocking(old)
    assert torch.backends.tpu.launch_blocking() is old
    assert_still_works()


# ----------------------------------------------------------------------------------------------- memory

def test_direct_allocation_too_large():
    gc.collect()
    before = torch_pjrt.metrics()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(2**40, device="tpu")
    gc.collect()
    after = torch_pjrt.metrics()
    assert after["live_buffers"] == before["live_buffers"]
    assert after["live_bytes"] == before["live_bytes"]
    assert_still_works()


def test_freed_tensors_release_device_memory():
    gc.collect()
    torch.tpu.synchronize()
    before = torch_pjrt.metrics()
    nbytes = 1 << 22
    a = torch.ones(nbytes // 4, device="tpu")
    b = a * 3
    view = b[::2]
    torch.tpu.synchronize()
    during = torch_pjrt.metrics()
    assert during["live_buffers"] >= before["live_buffers"] + 2
    assert during["live_bytes"] >= before["live_bytes"] + 2 * nbytes
    del a, b
    gc.collect()
    kept = torch_pjrt.metrics()  # the view keeps b's storage alive
    assert kept["live_bytes"] >= before["live_bytes"] + nbytes
    assert torch.equal(view[:3].cpu(), torch.full((3,), 3.0))
    del view
    gc.collect()
    after = torch_pjrt.metrics()
    assert after["live_buffers"] == before["live_buffers"]
    assert after["live_bytes"] == before["live_bytes"]


def test_failed_results_hold_no_memory():
    gc.collect()
    before = torch_pjrt.metrics()
    y = huge() * 2
    s = y.sum()
    with pytest.raises(torch.OutOfMemoryError):
        s.item()
    del y, s
    gc.collect()
    _drain()
    after = torch_pjrt.metrics()
    assert after["live_buffers"] == before["live_buffers"]
    assert after["live_bytes"] == before["live_bytes"]


# ------------------------------------------------------------------------------------- fallback policy

# Ops that exist in torch; the first that has no lowering on this build is the subject of the tests.
CANDIDATES = [
    ("median", lambda x: x.median()),
    ("kthvalue", lambda x: torch.kthvalue(x, 2, dim=1)),
    ("histc", lambda x: torch.histc(x, bins=5)),
    ("i0", lambda x: torch.special.i0(x)),
    ("fft", lambda x: torch.fft.fft(x)),
    ("qr", lambda x: torch.linalg.qr(x)),
    ("cholesky", lambda x: torch.linalg.cholesky(x @ x.T + 4 * torch.eye(4, device=x.device))),
]


def _input():
    return torch.randn(4, 4, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def unlowered(fallback_policy):
    """(name, fn, aten op) of an op without a lowering, found by calling candidates under 'error'."""
    fallback_policy("error")
    x = _input().to("tpu")
    for name, fn in CANDIDATES:
        try:
            fn(x)
        except NotImplementedError as e:
            m = re.search(r"operator '([^']+)' is not supported natively \(no native lowering\)", str(e))
            if m:
                return name, fn, m.group(1)
    pytest.skip("every candidate op has a lowering now; add one without to CANDIDATES")


def _same(got, expected):
    if isinstance(expected, torch.Tensor):
        assert got.device.type == "tpu"
        torch.testing.assert_close(got.cpu(), expected)
    else:
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _same(g, e)


def test_fallback_warn_runs_on_cpu(unlowered, fallback_policy):
    name, fn, op = unlowered
    fallback_policy("warn")
    torch_pjrt.reset_metrics()  # also forgets which ops already warned
    x_cpu = _input()
    x = x_cpu.to("tpu")
    expected = fn(x_cpu)
    with pytest.warns(UserWarning, match=re.escape(op)) as record:
        got1 = fn(x)
        got2 = fn(x)
    assert len([w for w in record if op in str(w.message)]) == 1, "the fallback must warn once per op"
    _same(got1, expected)
    _same(got2, expected)
    m = torch_pjrt.metrics()
    assert m["fallbacks"].get(op) == 2
    assert m["fallback_total"] >= 2
    assert_still_works()


def test_fallback_error_raises(unlowered, fallback_policy):
    name, fn, op = unlowered
    fallback_policy("error")
    assert torch_pjrt.get_fallback_policy() == "error"
    before = torch_pjrt.metrics()["fallbacks"].get(op, 0)
    with pytest.raises(NotImplementedError, match=re.escape(op)):
        fn(_input().to("tpu"))
    assert torch_pjrt.metrics()["fallbacks"].get(op, 0) == before  # nothing ran on the CPU
    assert_still_works()


def test_fallback_policy_values(fallback_policy):
    for p in ("warn", "silent", "error"):
        fallback_policy(p)
        assert torch_pjrt.get_fallback_policy() == p
    with pytest.raises(RuntimeError):
        fallback_policy("sometimes")
