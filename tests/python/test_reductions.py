"""Extremum reductions against PyTorch on the CPU, on the same inputs: argmax/argmin (lowered as the
extremum and then the least index holding it), and bfloat16 extrema (reduced in float32 and rounded back).
Inputs put the special cases where the two reductions must agree: NaN anywhere in a row (the first NaN's
index wins), ties (the first index), infinities, signed zeros, rows of one repeated value."""

import pytest
import torch

from compare import check, on_the_other_kernel_paths

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


# float32 sums over a run of adjacent dims of 4096 elements or more go to the host kernel (kernels/reduce.cpp):
# columns (leading dims), rows (trailing), middle dims, everything; rows longer than its float32 blocks (16384
# lanes' worth), more rows than a block (1024), more columns than a work item (256) with a ragged tail, a
# sum large enough to be spread over the kernels' threads; and beside them sums that stay with XLA (dims not
# adjacent, under 4096 elements)
_SUMS = [((8, 32, 64), (0, 1)), ((8, 32, 64), (-1,)), ((8, 32, 64), (1,)), ((8, 32, 64), None),
         ((3, 70001), (1,)), ((5003, 3), (0,)), ((2, 3, 40, 50), (1, 2)), ((300, 1000), (0,)),
         ((17, 33, 129), (2,)), ((4, 70000, 5), (1,)), ((2, 3, 40, 50), (0, 2)), ((30, 40), (0,))]


@pytest.mark.parametrize("shape, dims", _SUMS, ids=[f"{s}-{d}" for s, d in _SUMS])
def test_float32_sums_match_cpu(shape, dims):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=g) * 3
    check(lambda t: t.sum(dims) if dims else t.sum(), x, rtol=1e-5, atol=1e-4)
    check(lambda t: t.mean(dims) if dims else t.mean(), x, rtol=1e-5, atol=1e-5)
    flat = x.reshape(-1).clone()
    flat[7], flat[-3], flat[len(flat) // 2] = NAN, INF, -INF  # NaN and both infinities reach some sums
    check(lambda t: t.reshape(shape).sum(dims) if dims else t.sum(), flat, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_float32_sums_on_the_other_kernel_paths():
    """The sum tests again in children with the host kernels' 256-bit and portable code."""
    on_the_other_kernel_paths(__file__, "float32_sums_match_cpu")


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
