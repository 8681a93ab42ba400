"""Indexing, scatter/gather, data movement, sort/topk and factory ops on "tpu" against PyTorch on CPU.

Every test runs the same function on CPU and on tpu copies of the same inputs (compare.check). Index
values are always in range: out-of-range indices are unchecked on the device (gathers clamp, scatters
drop), so they are not part of the contract tested here.
"""

import pytest
import torch
import torch_pjrt

from compare import check, to_device

DTYPES = [torch.float32, torch.int64, torch.bool]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def rand_index(size, shape, seed=1, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, size, shape, generator=g).to(dtype)


def distinct(shape, seed=0, dtype=torch.float32):
    """A tensor of distinct values (so sort / topk indices are unambiguous)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g).reshape(shape) - n // 2).to(dtype)


def view_of(x, kind):
    """The same values as `x` through a non-contiguous view (its storage holds other data too)."""
    if kind == "contiguous":
        return x
    if kind == "transposed":
        return x.transpose(0, 1).contiguous().transpose(0, 1)
    if kind == "sliced":
        big = torch.zeros((x.shape[0] * 2,) + tuple(x.shape[1:]), dtype=x.dtype)
        big[::2] = x
        return big[::2]
    raise ValueError(kind)


def check_grad(fn, x, *args):
    """fn(x, *args) forward and x's gradient (for a fixed upstream gradient) agree with CPU."""
    xc = x.detach().clone().requires_grad_(True)
    out = fn(xc, *args)
    g = make(out.shape, out.dtype, seed=7)
    out.backward(g)
    xt = x.detach().to("tpu").requires_grad_(True)
    out_t = fn(xt, *to_device(args, "tpu"))
    out_t.backward(g.to("tpu"))
    torch.testing.assert_close(out_t.detach().cpu(), out.detach())
    assert xt.grad is not None and xt.grad.device.type == "tpu"
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


# ----------------------------------------------------------------------------------- index_select


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((5,), 0), ((4, 6), 0), ((4, 6), 1), ((4, 6), -1), ((2, 3, 5), 1)])
def test_index_select(shape, dim, dtype):
    x = make(shape, dtype)
    idx = rand_index(shape[dim], (7,))
    check(lambda x, i: x.index_select(dim, i), x, idx)


@pytest.mark.parametrize("kind", ["transposed", "sliced"])
def test_index_select_views_and_int32(kind):
    x = view_of(make((6, 5)), kind)
    check(lambda x, i: torch.index_select(x, 1, i), x, rand_index(5, (3,), dtype=torch.int32))
    check(lambda x, i: torch.index_select(x, 0, i), x, torch.tensor(2))  # 0-d index


def test_index_select_out_and_grad():
    x = make((5, 4))
    idx = torch.tensor([4, 0, 0, 2])
    check(lambda x, i: torch.index_select(x, 0, i, out=torch.empty(0, device=x.device)), x, idx)
    check_grad(lambda x, i: x.index_select(0, i), x, idx)


# ----------------------------------------------------------------------------------------- gather


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim,ishape", [((5,), 0, (8,)), ((4, 6), 0, (3, 6)), ((4, 6), 1, (4, 9)),
                                             ((4, 6), 1, (2, 3)), ((2, 3, 5), -1, (2, 3, 4))])
def test_gather(shape, dim, ishape, dtype):
    x = make(shape, dtype)
    idx = rand_index(shape[dim], ishape)
    check(lambda x, i: torch.gather(x, dim, i), x, idx)


def test_gather_views_and_grad():
    x = view_of(make((5, 6)), "transposed")
    idx = rand_index(6, (5, 4))
    check(lambda x, i: x.gather(1, i), x, idx)
    idx = rand_index(5, (3, 6), dtype=torch.int64)
    check(lambda x, i: x.gather(0, i), view_of(make((5, 6)), "sliced"), idx)
    check_grad(lambda x, i: x.gather(0, i), make((5, 6)), idx)


# ---------------------------------------------------------------------------------------- scatter


def unique_index(size, ishape, dim, seed=2):
    """Index for scatter along `dim` without duplicates within each slice (so plain scatter is defined)."""
    g = torch.Generator().manual_seed(seed)
    n = ishape[dim]
    assert n <= size
    perm = torch.stack([torch.randperm(size, generator=g)[:n] for _ in range(max(1, torch.Size(ishape).numel() // n))])
    other = list(ishape)
    del other[dim]
    perm = perm.reshape(*other, n) if other else perm.reshape(n)
    return perm.movedim(-1, dim).contiguous()


SCATTER_CASES = [((6,), 0, (4,)), ((4, 5), 0, (3, 5)), ((4, 5), 1, (4, 3)), ((4, 5), 1, (2, 2)),
                 ((3, 4, 5), 2, (3, 2, 5))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim,ishape", SCATTER_CASES)
def test_scatter_src_and_value(shape, dim, ishape, dtype):
    x = make(shape, dtype)
    idx = unique_index(shape[dim], ishape, dim)
    src = make(tuple(s + 1 for s in ishape), dtype, seed=3)  # larger than the index: only a corner is used
    check(lambda x, i, s: x.scatter(dim, i, s), x, idx, src)
    value = True if dtype == torch.bool else 7
    check(lambda x, i: x.scatter(dim, i, value), x, idx)
    check(lambda x, i, s: x.clone().scatter_(dim, i, s), x, idx, src)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("shape,dim,ishape", SCATTER_CASES)
def test_scatter_add(shape, dim, ishape, dtype):
    x = make(shape, dtype)
    idx = rand_index(shape[dim], ishape)  # duplicates accumulate
    src = make(ishape, dtype, seed=3)
    check(lambda x, i, s: x.scatter_add(dim, i, s), x, idx, src)
    check(lambda x, i, s: x.clone().scatter_add_(dim, i, s), x, idx, src)
    check(lambda x, i, s: x.scatter(dim, i, s, reduce="add"), x, idx, src)


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_legacy(reduce):
    x = make((4, 5))
    idx = rand_index(5, (4, 3))
    check(lambda x, i, s: x.scatter(1, i, s, reduce=reduce), x, idx, make((4, 3), seed=4))
    check(lambda x, i: x.scatter(1, i, 1.5, reduce=reduce), x, idx)
    check(lambda x, i: x.clone().scatter_(1, i, 2.0, reduce=reduce), x, idx)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce_two(reduce, include_self, dtype):
    x = make((5, 6), dtype)
    idx = rand_index(6, (5, 4))
    src = make((5, 4), dtype, seed=5)
    if reduce == "prod" and dtype == torch.float32:
        src = src.abs() + 0.5  # keep products well conditioned
    check(lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self), x, idx, src)
    idx0 = rand_index(5, (3, 4), seed=6)
    check(lambda x, i, s: x.clone().scatter_reduce_(0, i, s[:3], reduce, include_self=include_self), x, idx0, src)


def test_scatter_views_and_grad():
    x = view_of(make((5, 6)), "transposed")
    idx = unique_index(5, (3, 6), 0)
    src = view_of(make((3, 6), seed=8), "sliced")
    check(lambda x, i, s: x.scatter(0, i, s), x, idx, src)
    check(lambda x, i, s: x.scatter_add(0, i, s), x, idx, src)
    # gather's backward is a scatter_add onto zeros
    check_grad(lambda x, i: x.gather(1, i), make((4, 5)), rand_index(5, (4, 7)))
    # scatter's backward gathers
    check_grad(lambda s, x, i: x.scatter(0, i, s), make((3, 6), seed=8), make((5, 6)), idx)


def test_scatter_on_view_in_place():
    x = make((6, 6))

    def fn(x, i, s):
        y = x.clone()
        y[:, 1:4].scatter_(0, i, s)  # writes through a view of y
        return y

    check(fn, x, unique_index(6, (2, 3), 0), make((2, 3), seed=9))


# ----------------------------------------------------------------------------- index_add / fill / copy


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("shape,dim", [((6,), 0), ((5, 4), 0), ((5, 4), 1), ((2, 5, 3), 1)])
def test_index_add(shape, dim, dtype):
    x = make(shape, dtype)
    idx = rand_index(shape[dim], (7,))
    sshape = list(shape)
    sshape[dim] = 7
    src = make(sshape, dtype, seed=3)
    check(lambda x, i, s: x.index_add(dim, i, s), x, idx, src)
    check(lambda x, i, s: x.index_add(dim, i, s, alpha=3), x, idx, src)
    check(lambda x, i, s: x.clone().index_add_(dim, i, s, alpha=-2), x, idx, src)


def test_index_add_views_and_grad():
    x = view_of(make((5, 4)), "sliced")
    src = view_of(make((5, 3), seed=3), "transposed")
    check(lambda x, i, s: x.index_add(1, i, s), x, torch.tensor([3, 0, 3], dtype=torch.int32), src)
    check_grad(lambda s, x, i: x.index_add(0, i, s), make((3, 4), seed=2), make((5, 4)), torch.tensor([1, 4, 1]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((6,), 0), ((5, 4), 0), ((5, 4), -1)])
def test_index_fill_and_copy(shape, dim, dtype):
    x = make(shape, dtype)
    idx = torch.tensor([shape[dim] - 1, 0])
    value = False if dtype == torch.bool else -3
    check(lambda x, i: x.index_fill(dim, i, value), x, idx)
    check(lambda x, i: x.clone().index_fill_(dim, i, value), x, idx)
    check(lambda x, i, v: x.index_fill(dim, i, v), x, idx, torch.tensor(value, dtype=dtype))
    sshape = list(shape)
    sshape[dim] = 2
    check(lambda x, i, s: x.index_copy(dim, i, s), x, idx, make(sshape, dtype, seed=4))


# ------------------------------------------------------------------------------- advanced indexing


@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", DTYPES)
def test_index_tensor_forms(dtype, idx_dtype):
    x = make((4, 5, 6), dtype)
    i = torch.tensor([3, -1, 0, 2], dtype=idx_dtype)  # negative indices wrap
    j = torch.tensor([[1, 4], [0, -5]], dtype=idx_dtype)
    k = torch.tensor([5, 0, 2, 1], dtype=idx_dtype)
    check(lambda x, i: x[i], x, i)
    check(lambda x, j: x[:, j], x, j)
    check(lambda x, k: x[..., k], x, k)
    check(lambda x, i, k: x[i, :, k], x, i, k)  # separated: broadcast dims come first
    check(lambda x, i, k: x[i, 1:3, k], x, i, k)
    check(lambda x, j, k: x[:, j, k[:2]], x, j, k)  # adjacent, broadcast to 2x2
    check(lambda x, i, j, k: x[i, j[:1, :1] + 2, k], x, i, j, k)
    check(lambda x, i: x[i.reshape(2, 2)], x, i)
    check(lambda x: x[torch.tensor(2, device=x.device)], x)  # 0-d index


@pytest.mark.parametrize("kind", ["transposed", "sliced"])
def test_index_tensor_views(kind):
    x = view_of(make((6, 5)), kind)
    check(lambda x, i: x[i], x, torch.tensor([5, 0, 5]))
    check(lambda x, i, j: x[i, j], x, torch.tensor([5, 0, 5]), torch.tensor([1, 2, 4]))
    check(lambda x, i: x[:, i], x, torch.tensor([[4, 0], [1, 1]]))


def test_index_tensor_grad():
    i = torch.tensor([1, 3, 1, 0])
    check_grad(lambda x, i: x[i], make((5, 3)), i)  # repeated rows accumulate in the backward
    check_grad(lambda x, i: x[:, i], make((2, 5, 3)), i)
    check_grad(lambda x, i, j: x[i, :, j], make((4, 3, 4)), i, torch.tensor([0, 0, 2, 3]))


def test_index_tensor_bool_masks_and_cpu_indices():
    # masks become integer indices first (a device sync: the result's shape depends on the values)
    x = make((4, 5))
    check(lambda x: x[x > 0], x)
    check(lambda x, m: x[m], x, torch.tensor([True, False, True, True]))
    check(lambda x, m, i: x[i, m], x, torch.tensor([False, True, True, False, True]), torch.tensor([3, 0, 1]))
    # index tensors on the CPU index a tpu tensor, as on other accelerators
    xt = x.to("tpu")
    torch.testing.assert_close(xt[torch.tensor([3, -1, 0])].cpu(), x[torch.tensor([3, -1, 0])])
    torch.testing.assert_close(xt[:, torch.tensor([4, 0])].cpu(), x[:, torch.tensor([4, 0])])


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_index_put(dtype, accumulate):
    if accumulate and dtype == torch.bool:
        pytest.skip("accumulate on bool is logical or; covered by the float/int cases")
    x = make((5, 4, 3), dtype)
    i = torch.tensor([4, 0, -2])  # distinct: plain puts are well defined
    k = torch.tensor([2, 0, 1])
    v1 = make((3, 4, 3), dtype, seed=3)
    check(lambda x, i, v: x.index_put((i,), v, accumulate), x, i, v1)
    index_put = torch.ops.aten.index_put
    check(lambda x, i, k, v: index_put(x, [i, None, k], v, accumulate), x, i, k, make((3, 4), dtype, seed=4))
    check(lambda x, k, v: index_put(x, [None, None, k], v, accumulate), x, k, make((5, 4, 3), dtype, seed=5))
    check(lambda x, i, v: x.clone().index_put_((i,), v, accumulate), x, i, make((4, 3), dtype, seed=6))  # broadcast
    scalar = torch.tensor(True if dtype == torch.bool else 9, dtype=dtype)
    check(lambda x, i, k, v: x.clone().index_put_((i, k), v, accumulate), x, i, k, scalar)


def test_index_put_accumulate_duplicates_and_setitem():
    x = make((6, 4))
    i = torch.tensor([1, 5, 1, 1, 0])
    check(lambda x, i, v: x.index_put((i,), v, accumulate=True), x, i, make((5, 4), seed=3))
    check(lambda x, i, v: torch.ops.aten._index_put_impl_(x.clone(), (i,), v, True), x, i, make((5, 4), seed=3))

    def setitem(x, i, v):
        y = x.clone()
        y[i] = v
        y[:, i[:2] - 4] = 0.5
        y[i[:2], i[:2] - 1] += 1.0
        return y

    check(setitem, x, torch.tensor([3, 0]), make((2, 4), seed=4))


def test_index_put_through_views():
    def fn(x, i, v):
        y = x.clone()
        y.t()[i] = v  # index_put_ on a transposed view
        y[1:, ::2][i[1:]] = 2.0
        return y

    check(fn, make((4, 5)), torch.tensor([3, 1]), make((2, 4), seed=2))


def test_index_put_bool_mask_scalar_value():
    x = make((4, 5))

    def masked(x):
        y = x.clone()
        y[y > 0] = 0.25  # a single mask with a one-element value: a select
        return y

    check(masked, x)
    check(lambda x, m: x.index_put((m,), torch.tensor(3.0, device=x.device), accumulate=True), x, x < 0)
    check(lambda x, m: torch.ops.aten.index_put(x, [None, m], torch.tensor(-1.0, device=x.device)), x,
          torch.tensor([True, False, True, False, False]))


def test_index_put_bool_mask_with_values():
    x = make((4, 5))
    mask = x > 0
    values = make((int(mask.sum()),), seed=3)

    def put(x, m, v):
        y = x.clone()
        y[m] = v
        return y

    check(put, x, mask, values)
    check(lambda x, m, v: x.index_put((m,), v, accumulate=True), x, mask, values)
    rows = torch.tensor([True, False, False, True])
    check(put, x, rows, make((2, 5), seed=4))


# ------------------------------------------------------------------------------------- take / put


@pytest.mark.parametrize("dtype", DTYPES)
def test_take_put(dtype):
    x = make((4, 5), dtype)
    idx = torch.tensor([[19, 0], [-1, 7], [3, -20]])  # take and put index the flattened tensor; negatives wrap
    check(lambda x, i: torch.take(x, i), x, idx)
    check(lambda x, i: x.take(i), view_of(x, "transposed"), idx)
    src = make((3, 2), dtype, seed=3)
    unique = torch.tensor([[19, 0], [-2, 7], [3, 11]])
    check(lambda x, i, s: x.put(i, s), x, unique, src)
    check(lambda x, i, s: x.clone().put_(i, s), view_of(x, "sliced"), unique, src)
    if dtype != torch.bool:
        check(lambda x, i, s: x.put(i, s, accumulate=True), x, torch.tensor([1, 1, 5, 1, -19, 0]), src)


def test_take_grad():
    check_grad(lambda x, i: x.take(i), make((3, 4)), torch.tensor([0, 11, 0, 5]))


# ---------------------------------------------------------------------------------- masked_scatter


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_scatter(dtype):
    x = make((4, 5), dtype)
    mask = make((4, 5), torch.bool, seed=3)
    src = make((25,), dtype, seed=4)
    check(lambda x, m, s: x.masked_scatter(m, s), x, mask, src)
    check(lambda x, m, s: x.clone().masked_scatter_(m, s), x, mask, src.reshape(5, 5))
    check(lambda x, m, s: x.masked_scatter(m, s), x, mask[0], src)  # the mask broadcasts
    check(lambda x, m, s: x.masked_scatter(m, s), view_of(x, "transposed"), mask, src)


def test_masked_scatter_grad():
    mask = make((4, 5), torch.bool, seed=3)
    check_grad(lambda x, m, s: x.masked_scatter(m, s), make((4, 5)), mask, make((20,), seed=4))
    # the source's gradient (a masked_select of the upstream gradient, padded to the source's size)
    check_grad(lambda s, x, m: x.masked_scatter(m, s), make((22,), seed=4), make((4, 5)), mask)


# --------------------------------------------------------------------------------- data movement


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pad", [(1, 2), (0, 1, 2, 0), (1, 1, 1, 1, 1, 1), (-1, 2), (2, -2, -1, 1)])
def test_constant_pad_nd(pad, dtype):
    x = make((3, 4, 5), dtype)
    value = True if dtype == torch.bool else 3
    check(lambda x: torch.constant_pad_nd(x, pad, value), x)
    check(lambda x: torch.nn.functional.pad(x, pad), view_of(x, "transposed"))


def test_pad_grad():
    check_grad(lambda x: torch.nn.functional.pad(x, (1, 2, -1, 0), value=1.5), make((3, 4)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims", [(0,), (1,), (-1,), (0, 2), (0, 1, 2), ()])
def test_flip(dims, dtype):
    x = make((3, 4, 5), dtype)
    check(lambda x: x.flip(dims), x)
    check(lambda x: torch.flip(x, dims), view_of(x, "sliced"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shifts,dims", [(1, 0), (-2, 1), (7, -1), (3, None), ((1, -1), (0, 1)), ((2, 5), (1, 1))])
def test_roll(shifts, dims, dtype):
    x = make((3, 4), dtype)
    check(lambda x: torch.roll(x, shifts, dims), x)
    check(lambda x: torch.roll(x, shifts, dims), view_of(x, "transposed"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,reps", [((3,), (2,)), ((3,), (2, 2)), ((2, 3), (1, 1)), ((2, 3), (3, 1, 2)),
                                        ((2, 1, 3), (1, 4, 1)), ((), (3, 2))])
def test_repeat(shape, reps, dtype):
    check(lambda x: x.repeat(*reps), make(shape, dtype))


def test_flip_roll_repeat_grad():
    check_grad(lambda x: x.flip(0, 1), make((3, 4)))
    check_grad(lambda x: x.roll(2, 1), make((3, 4)))
    check_grad(lambda x: x.repeat(2, 1, 3), make((3, 4)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("diagonal", [0, 1, -1, 3, -4])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 5, 3)])
def test_tril_triu(shape, diagonal, dtype):
    x = make(shape, dtype)
    check(lambda x: torch.tril(x, diagonal), x)
    check(lambda x: torch.triu(x, diagonal), x)
    check(lambda x: x.clone().tril_(diagonal), view_of(x, "transposed"))
    check(lambda x: x.clone().triu_(diagonal), view_of(x, "sliced"))


def test_tril_grad():
    check_grad(lambda x: x.tril(1), make((4, 3)))
    check_grad(lambda x: x.triu(-1), make((4, 3)))


# ----------------------------------------------------------------------------------- sort and topk


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("shape,dim", [((7,), 0), ((4, 6), 0), ((4, 6), 1), ((3, 4, 5), -2)])
def test_sort_distinct(shape, dim, dtype, descending):
    x = distinct(shape, dtype=dtype)
    check(lambda x: torch.sort(x, dim=dim, descending=descending), x)
    check(lambda x: x.argsort(dim=dim, descending=descending), view_of(x, "transposed") if len(shape) > 1 else x)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_stable_with_ties(dtype, descending):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 3, (5, 40), generator=g).to(dtype)  # many ties
    check(lambda x: torch.sort(x, dim=1, descending=descending, stable=True), x)
    check(lambda x: torch.sort(x, dim=0, descending=descending, stable=True), x)


def test_sort_nan_and_out():
    x = torch.tensor([3.0, float("nan"), -1.0, float("inf"), 0.0, float("nan"), -float("inf")])
    check(lambda x: torch.sort(x, stable=True), x, equal_nan=True)
    check(lambda x: torch.sort(x, descending=True, stable=True), x, equal_nan=True)

    def out_variant(x):
        v = torch.empty(0, device=x.device)
        i = torch.empty(0, dtype=torch.int64, device=x.device)
        torch.sort(x, stable=True, out=(v, i))
        return v, i

    check(out_variant, distinct((3, 4)))


def test_sort_grad():
    check_grad(lambda x: torch.sort(x, dim=1)[0], distinct((3, 5)))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("shape,k,dim", [((9,), 3, 0), ((4, 6), 2, 1), ((4, 6), 4, 0), ((3, 4, 5), 5, -1),
                                         ((5,), 5, 0), ((5,), 0, 0)])
def test_topk(shape, k, dim, dtype, largest):
    x = distinct(shape, dtype=dtype)
    check(lambda x: torch.topk(x, k, dim=dim, largest=largest), x)
    if len(shape) > 1:
        check(lambda x: x.topk(k, dim, largest, True), view_of(x, "sliced"))


def test_topk_nan_and_grad():
    x = torch.tensor([1.0, float("nan"), 5.0, -2.0, 3.0])
    check(lambda x: torch.topk(x, 2), x, equal_nan=True)
    check(lambda x: torch.topk(x, 2, largest=False), x, equal_nan=True)
    check_grad(lambda x: torch.topk(x, 2, dim=1)[0], distinct((3, 5)))

    def out_variant(x):
        v = torch.empty(0, device=x.device)
        i = torch.empty(0, dtype=torch.int64, device=x.device)
        torch.topk(x, 3, out=(v, i))
        return v, i

    check(out_variant, distinct((2, 6)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sort_and_topk_of_router_rows(dtype):
    # an MoE router's top-8 of 128 experts per token, and full sorts of long rows: through the host kernel
    # on XLA:CPU (one custom call), against the CPU
    g = torch.Generator().manual_seed(2)
    # values distinct within a row (exact in every dtype), so the indices are unambiguous
    probs = torch.stack([torch.randperm(128, generator=g) + 1 for _ in range(64)]).to(dtype) / 256
    n = 1000 if dtype == torch.float32 else 250
    rows = torch.stack([torch.randperm(n, generator=g) for _ in range(4)]).to(dtype)
    check(lambda p: torch.topk(p, 8, dim=-1), probs)
    for largest in (True, False):
        check(lambda r: torch.topk(r, 17, dim=1, largest=largest, sorted=True)[0], rows)
    check(lambda r: torch.sort(r, dim=0, descending=True, stable=True), rows)


_SORT_CHILD = r"""
import sys, torch, torch_pjrt
g = torch.Generator().manual_seed(4)
out = []
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    x = torch.randn(6, 9, 40, generator=g).to(dtype)
    flat = x.view(-1)
    flat[::5] = float("nan"); flat[1::7] = 0.0; flat[2::7] = -0.0; flat[3::11] = 1.0  # NaN, signed zeros, ties
    x = x.to("tpu")
    for dim in (0, 1, 2):
        for flag in (True, False):
            for v, i in (torch.topk(x, 4, dim=dim, largest=flag), torch.sort(x, dim=dim, descending=flag, stable=True)):
                out += [v.cpu(), i.cpu()]
    # a few of many (k * 16 <= n: the kernel's heap of the k best so far), the special values again
    long = x.reshape(6, 360)
    for flag in (True, False):
        v, i = torch.topk(long, 5, dim=1, largest=flag)
        out += [v.cpu(), i.cpu()]
torch.save(out, sys.argv[1])
"""


def test_sort_kernel_as_the_sort_lowering(tmp_path):
    # sort and topk through the host kernel give exactly what the StableHLO sort gives (ties in index
    # order, NaN above every number, -0.0 kept), on rows with NaN, signed zeros and ties
    import os
    import subprocess
    import sys

    if not torch_pjrt.plugin_info().get("host_kernels"):
        pytest.skip("no host kernels on this plugin")
    res = {}
    for kernels in ("1", "0"):
        path = tmp_path / f"sorted_{kernels}.pt"
        env = dict(os.environ, TORCH_PJRT_HOST_KERNELS=kernels)
        run = subprocess.run([sys.executable, "-c", _SORT_CHILD, str(path)], env=env, capture_output=True, text=True,
                             timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        res[kernels] = torch.load(path)
    assert len(res["1"]) == len(res["0"]) == 84
    for a, b in zip(res["1"], res["0"]):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.is_floating_point():
            assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.signbit(), b.signbit())
            assert torch.equal(a.nan_to_num(), b.nan_to_num())
        else:
            assert torch.equal(a, b)


# --------------------------------------------------------------------------------------- factories


@pytest.mark.parametrize("args,kw", [((5,), {}), ((2, 9), {}), ((1, 4, 0.5), {}), ((10, 0, -3), {}),
                                     ((0.1, 1.0, 0.1), {}), ((5,), {"dtype": torch.float32}),
                                     ((-3, 7, 2), {"dtype": torch.int32}), ((0, 1, 0.25), {"dtype": torch.float64}),
                                     ((0,), {}), ((2.5,), {})])
def test_arange(args, kw):
    expected = torch.arange(*args, **kw)
    got = torch.arange(*args, device="tpu", **kw)
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("start,end,steps", [(50, 1, 50), (1, 50, 50), (-3, 100, 33)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_linspace_exact(start, end, steps, dtype):
    """Integer linspace truncates start + step * i: a step one ulp off (XLA turned the division by steps - 1
    into a multiplication by its rounded reciprocal) gave 24 for 25 in 19 of 50 places."""
    assert torch.equal(torch.linspace(start, end, steps, device="tpu", dtype=dtype).cpu(),
                       torch.linspace(start, end, steps, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("start,end,steps", [(0, 1, 7), (-3.5, 10, 50), (5, -5, 11), (2, 2, 1), (0, 1, 0), (1, 100, 10)])
def test_linspace_logspace(start, end, steps, dtype):
    torch.testing.assert_close(torch.linspace(start, end, steps, device="tpu", dtype=dtype).cpu(),
                               torch.linspace(start, end, steps, dtype=dtype))
    s, e = start / 10, end / 10  # (10 ** 10 overflows float16: inf on both sides)
    torch.testing.assert_close(torch.logspace(s, e, steps, device="tpu", dtype=dtype).cpu(),
                               torch.logspace(s, e, steps, dtype=dtype))
    torch.testing.assert_close(torch.logspace(s, e, steps, base=2.0, device="tpu", dtype=dtype).cpu(),
                               torch.logspace(s, e, steps, base=2.0, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_eye_full_zeros(dtype):
    for args in [(3,), (2, 5), (4, 1), (0,)]:
        torch.testing.assert_close(torch.eye(*args, device="tpu", dtype=dtype).cpu(), torch.eye(*args, dtype=dtype))
    fill = True if dtype == torch.bool else 7
    torch.testing.assert_close(torch.full((2, 3), fill, device="tpu", dtype=dtype).cpu(), torch.full((2, 3), fill, dtype=dtype))
    torch.testing.assert_close(torch.zeros(2, 3, device="tpu", dtype=dtype).cpu(), torch.zeros(2, 3, dtype=dtype))
    torch.testing.assert_close(torch.ones(4, device="tpu", dtype=dtype).cpu(), torch.ones(4, dtype=dtype))
    x = make((3, 2), dtype)
    check(lambda x: (torch.zeros_like(x), torch.ones_like(x), torch.full_like(x, fill)), x)


def test_factories_run_natively():
    import torch_pjrt

    before = torch_pjrt.metrics()["fallback_total"]
    torch.arange(3, 8, device="tpu").sum().item()
    torch.linspace(0, 1, 5, device="tpu").sum().item()
    torch.eye(3, device="tpu").sum().item()
    assert torch_pjrt.metrics()["fallback_total"] == before


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_and_unique_consecutive_with_dim(dim, fallback_policy):
    fallback_policy("error")
    x = torch.tensor([[1, 2, 1, 1], [3, 0, 3, 3], [1, 2, 1, 1], [1, 2, 1, 0]])
    x = torch.cat([x, x[:1]], 0)  # equal slices, not adjacent
    for t in (x, x.float(), x.bool()):
        for inv in (False, True):
            check(lambda a: torch.unique(a, dim=dim, return_inverse=inv, return_counts=True), t)
            check(lambda a: torch.unique_consecutive(a, dim=dim, return_inverse=inv, return_counts=True), t)
    check(lambda a: torch.unique(a, dim=1, return_inverse=True, return_counts=True), torch.empty(5, 0, 5))
    for d in (0, 2):  # a zero-sized dim that is not selected: the CPU's error
        with pytest.raises(RuntimeError, match="0 sized dimensions"):
            torch.unique(torch.empty(5, 0, 5, device="tpu"), dim=d)


def test_gather_with_an_empty_index_of_another_rank(fallback_policy):
    fallback_policy("error")
    check(lambda a, i: torch.gather(a, 0, i), torch.randn(5), torch.empty(2, 0, dtype=torch.long))


def test_repeat_interleave_with_tensor_repeats(fallback_policy):
    fallback_policy("error")
    for dt in (torch.int64, torch.int32):
        r = torch.tensor([2, 0, 3, 1], dtype=dt)
        check(torch.repeat_interleave, r)
        check(lambda t: torch.repeat_interleave(t, output_size=6), r)
        check(lambda x, t: torch.repeat_interleave(x, t, dim=0), torch.randn(4, 3), r)
    check(torch.repeat_interleave, torch.tensor([], dtype=torch.long))
    for bad, msg in ((torch.tensor([1, -1]), "negative"), (torch.tensor([[1]]), "1D")):
        with pytest.raises(RuntimeError, match=msg):
            torch.repeat_interleave(bad.to("tpu"))
    with pytest.raises(RuntimeError, match="does not match"):
        torch.repeat_interleave(torch.tensor([2, 0, 3], device="tpu"), output_size=4)


@pytest.mark.parametrize("shape,dim", [((7,), 0), ((3, 10), 1), ((3000,), 0), ((2, 2500), 1), ((2600, 3), 0)])
@pytest.mark.parametrize("spread", [5, 1000])
def test_mode(shape, dim, spread, fallback_policy):
    """mode: the CPU's values (the smallest of the most frequent); rows longer than 2048 go through sorted
    runs instead of pairwise counts. Indices: the CPU's on short rows (its sort is then stable); on long rows
    its std::sort is not, so any index holding the value is right."""
    fallback_policy("error")
    g = torch.Generator().manual_seed(spread)
    x = torch.randint(-spread, spread, shape, generator=g).float()
    x.view(-1)[::7] = -0.0
    want = torch.mode(x, dim)
    got = torch.mode(x.to("tpu"), dim)
    assert torch.equal(got.values.cpu(), want.values)
    idx = got.indices.cpu()
    assert torch.equal(x.gather(dim, idx.unsqueeze(dim)).squeeze(dim), want.values)
    if shape[dim] <= 16:
        assert torch.equal(idx, want.indices)
