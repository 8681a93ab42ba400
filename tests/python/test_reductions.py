"""Extremum reductions against PyTorch on the CPU, on the same inputs: argmax/argmin (lowered as the
extremum and then the least index holding it), and bfloat16 extrema (reduced in float32 and rounded back).
Inputs put the special cases where the two reductions must agree: NaN anywhere in a row (the first NaN's
index wins), ties (the first index), infinities, signed zeros, rows of one repeated value."""

import pytest
import torch

from compare import check

NAN, INF = float("nan"), float("inf")


def _rows(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 37, generator=g) * 4
    x[0, 5] = NAN
    x[1, 3], x[1, 30] = NAN, NAN  # two NaNs: the first counts
    x[2, 9] = x[2, 20] = 50.0  # a tie for the max
    x[3, 4] = x[3, 33] = -50.0  # a tie for the min
    x[4] = -INF  # all -inf
    x[5] = INF
    x[6, 10], x[6, 11] = INF, -INF
    x[7] = 0.0
    x[7, 8], x[7, 2] = -0.0, -0.0  # zeros of both signs only
    x[8] = 3.0  # one repeated value
    x[9, 36] = NAN  # NaN at the end
    if dtype == torch.bool:
        return x > 0
    if not dtype.is_floating_point:
        return torch.nan_to_num(x, nan=7.0, posinf=100.0, neginf=-100.0).to(dtype)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
                                   torch.int32, torch.uint8])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_extremum_matches_cpu(op, dtype):
    x = _rows(dtype)
    f = getattr(torch, op)
    for dim in (1, 0, -1):
        for keepdim in (False, True):
            check(lambda t, d=dim, k=keepdim: f(t, dim=d, keepdim=k), x)
    check(f, x)  # over every element: the flat index
    check(lambda t: f(t[:, 3:17].T, dim=1), x)  # a strided view
    check(lambda t: f(t[2], dim=0), x)  # one row


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_extrema_of_half_types_match_cpu(dtype):
    x = _rows(dtype)
    for fn in (lambda t: t.amax(1), lambda t: t.amin(0), lambda t: t.amax((0, 1)), lambda t: t.max(),
               lambda t: t.min(), lambda t: t.max(1), lambda t: t.min(0), lambda t: torch.aminmax(t, dim=1)):
        check(fn, x, equal_nan=True)


def test_argmax_compiled_matches_cpu():
    """The same lowering in a compiled graph, after a producer (fused into both reductions)."""
    x = _rows(torch.float32)
    f = torch.compile(lambda t: (t * 2 - 1).argmax(-1), backend="tpu")
    got = f(x.to("tpu"))
    assert torch.equal(got.cpu(), (x * 2 - 1).argmax(-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_running_sums_and_products_match_cpu(op, dtype):
    """cumsum/cumprod along each dim (on the CPU plugin: the host kernel, accumulating as torch's CPU
    kernel does, float32 in double; elsewhere the log-step scan), with NaN and infinities, int64 wrapping
    around, a requested result dtype, a 0-d and an empty input."""
    g = torch.Generator().manual_seed(1)
    # products near 1 (no overflow, where the order of the products decides between inf and a number)
    x = torch.rand(6, 300, 5, generator=g) * 0.6 + 0.7 if op == "cumprod" else torch.randn(6, 300, 5, generator=g)
    if dtype == torch.bool:
        x = x > 0.7
    elif not dtype.is_floating_point:  # integers: products of 1s and a few 2s and -1s stay in range
        x = torch.where(x > 1.25, 2, 1) * torch.where(x < 0.72, -1, 1) if op == "cumprod" else (x * 100).round()
        x = x.to(dtype)
    else:
        x[1, 7, 2], x[2, 100, 0], x[3, 50, 4] = NAN, INF, -INF
        x = x.to(dtype)
    f = getattr(torch, op)
    tol = dict(equal_nan=True)
    if dtype == torch.bfloat16:  # one rounding apart where the CPU's float sum and ours round differently
        tol.update(atol=0.02, rtol=0.02)
    for dim in (0, 1, 2, -1):
        check(lambda t, d=dim: f(t, d), x, **tol)
    check(lambda t: f(t[:, ::3].transpose(0, 1), 0), x, **tol)  # a strided view
    check(lambda t: f(t, 1, dtype=torch.float64), x, **tol)
    check(lambda t: f(t.reshape(-1)[:0], 0), x)
    check(lambda t: f(t[0, 0, 0], 0), x)
    if dtype == torch.int64:
        big = torch.tensor([2**62, 2**62, 2**62, -5], dtype=torch.int64)  # wraps around, as on the CPU
        check(lambda t: f(t, 0), big)


def test_cumsum_of_float32_is_the_cpus_to_the_bit():
    """A long float32 running sum (a top-p step's cumulative probabilities over a 151936-token vocabulary)
    accumulates in double as torch's CPU kernel does: the same bits, not only close (the host kernel; the
    log-step scan elsewhere is only close)."""
    import torch_pjrt

    if not torch_pjrt.plugin_info().get("host_kernels"):
        pytest.skip("no host kernels on this plugin")
    g = torch.Generator().manual_seed(2)
    p = torch.rand(4, 151936, generator=g).softmax(-1)
    got = p.to("tpu").cumsum(-1).cpu()
    assert torch.equal(got, p.cumsum(-1))
