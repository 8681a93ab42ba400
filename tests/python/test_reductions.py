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
