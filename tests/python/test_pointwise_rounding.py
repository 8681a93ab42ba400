"""Pointwise arithmetic with the CPU kernels' order and rounding, bit for bit against PyTorch on the CPU:
addcmul and addcdiv compute self + value * t1 * t2 (and / t2) in that order, in float32 for float16 and
bfloat16 (the value not rounded to the tensors' type), rounded once; the _foreach_ forms (what torch.optim's
foreach implementations call) share those rows' arithmetic, lerp's two-sided formula included; cosh and
sinh as the CPU computes them, from exp(|x|)."""

import pytest
import torch

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


# A multiple of the CPU's vector width: the CPU's scalar tail of add with alpha rounds alpha * b to float16
# first, its vectorized body does not (the two disagree on the last elements of a 4099-element tensor);
# "tpu" computes as the vectorized body.
def _inputs(dtype, n=4096):
    g = torch.Generator().manual_seed(11)
    s, a, b = (torch.randn(n, generator=g) for _ in range(3))
    w = torch.rand(n, generator=g)
    return s.to(dtype), a.to(dtype), (b.abs() + 0.5).to(dtype), w.to(dtype)


def _tpu(*ts):
    return [t.to("tpu") for t in ts]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", [torch.addcmul, torch.addcdiv], ids=lambda f: f.__name__)
def test_addcmul_addcdiv_round_as_the_cpu(fn, dtype):
    s, a, b, _ = _inputs(dtype)
    for value in (1, 0.3, -2.7):
        assert torch.equal(fn(*_tpu(s, a, b), value=value).cpu(), fn(s, a, b, value=value))
    # in place, on a view
    x = s.clone()
    y = s.to("tpu")
    x[1:].copy_(fn(x[1:], a[1:], b[1:], value=0.3))
    getattr(y[1:], fn.__name__ + "_")(*_tpu(a[1:], b[1:]), value=0.3)
    assert torch.equal(y.cpu(), x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_foreach_rows_round_as_the_cpu(dtype):
    s, a, b, w = _inputs(dtype)
    ts, ta, tb, tw = _tpu(s, a, b, w)
    for name in ("_foreach_addcmul", "_foreach_addcdiv"):
        got = getattr(torch, name)([ts, ta], [ta, tb], [tb, ta.abs() + 1], 0.3)
        want = getattr(torch, name)([s, a], [a, b], [b, a.abs() + 1], 0.3)
        for g, e in zip(got, want):
            assert torch.equal(g.cpu(), e), name
    got = torch._foreach_add([ts, ta], [ta, tb], alpha=-0.1)
    want = torch._foreach_add([s, a], [a, b], alpha=-0.1)
    for g, e in zip(got, want):
        assert torch.equal(g.cpu(), e)
    # lerp with weights on both sides of 0.5 (torch's second form is exact at w = 1)
    got = torch._foreach_lerp([ts], [ta], [tw])[0]
    assert torch.equal(got.cpu(), torch.lerp(s, a, w))
    got = torch._foreach_lerp([ts], [ta], 0.75)[0]
    assert torch.equal(got.cpu(), torch.lerp(s, a, 0.75))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32])
@pytest.mark.parametrize("fn", [torch.cosh, torch.sinh], ids=lambda f: f.__name__)
def test_cosh_sinh_large_arguments(fn, dtype):
    """cosh and sinh from e = exp(|x|), as the CPU: XLA's form exp(|x| + log(0.5)) rounded the argument
    (float32 cosh(55) 1.4e-6 relative off) and stayed finite where the CPU's float32 result is inf (89)."""
    special = torch.tensor([55.0, 20.0, 80.0, 89.0, -89.0, 89.5, 0.0, -0.0, 1e-8, -0.5, 1.0, -1.0, 710.0,
                            float("inf"), float("-inf"), float("nan")])
    x = torch.cat([special, torch.linspace(-95, 95, 20001)])
    x = x[x.isfinite()].round().to(dtype) if dtype == torch.int32 else x.to(dtype)
    torch.testing.assert_close(fn(x.to("tpu")).cpu(), fn(x), equal_nan=True)
    if dtype.is_floating_point:  # the sign of zero
        z = torch.tensor([0.0, -0.0], dtype=dtype)
        assert torch.equal(fn(z.to("tpu")).cpu().signbit(), fn(z).signbit())


def test_cosh_sinh_complex():
    x = torch.randn(64, dtype=torch.complex64, generator=torch.Generator().manual_seed(2)) * 3
    for fn in (torch.cosh, torch.sinh):
        torch.testing.assert_close(fn(x.to("tpu")).cpu(), fn(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_lgamma_as_accurate_as_the_cpu(dtype):
    """lgamma in float64, rounded once: XLA's float32 expansion was 10x farther from the exact result than
    the CPU's lgammaf (4.9e-6 against 4.1e-7 at worst on [-6, 0)), enough for mvlgamma's sums of five
    terms to fail float32 tolerance. At least as near the float64 result as the CPU (within half a unit
    in the last place), poles and infinities as the CPU."""
    special = torch.tensor([0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, 1e-30, 1e30, 4e36, float("inf"),
                            float("-inf"), float("nan")])
    x = torch.cat([special, torch.linspace(-6, 12, 180001), torch.logspace(-8, 30, 1001)])
    x = x[x.isfinite()].round().clamp(-100, 100).to(dtype) if dtype == torch.int64 else x.to(dtype)
    got, want = torch.lgamma(x.to("tpu")).cpu(), torch.lgamma(x)
    torch.testing.assert_close(got, want, equal_nan=True)
    ref = torch.lgamma(x.double())
    finite = want.isfinite()
    err_tpu = (got.double() - ref)[finite].abs()
    err_cpu = (want.double() - ref)[finite].abs()
    half_ulp = torch.finfo(want.dtype).eps / 2 * ref[finite].abs()
    worse = err_tpu > err_cpu + half_ulp
    assert not worse.any(), (x[finite][worse][:5], err_tpu[worse][:5], err_cpu[worse][:5])
