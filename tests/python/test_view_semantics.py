"""Views and in-place semantics, case by case, against the CPU.

Each case is a function of a device: it builds its inputs (the same values on every device), does
something with views and in-place ops, and returns every tensor worth comparing, aliases included. The
case runs on the CPU and on "tpu"; values, dtypes, shapes, strides and version counters must agree, and
so must the exception when the CPU raises one.
"""

import pytest
import torch


def base(dev, *shape, dtype=torch.float32):
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float64).reshape(shape).to(dtype).to(dev)


def case_slice_assign(dev):
    x = base(dev, 4, 5)
    x[1:3] = 5
    return [x]


def case_transpose_add_(dev):
    x = base(dev, 3, 4)
    t = x.t()
    t.add_(1)
    return [x, t]


def case_strided_setitem(dev):
    x = base(dev, 8)
    x[::2] = torch.tensor([10.0, 20.0, 30.0, 40.0]).to(dev)
    return [x]


def case_index_put_into_view(dev):
    x = base(dev, 4, 3)
    v = x[1:]
    v.index_put_((torch.tensor([0, 2]).to(dev),), torch.tensor([-1.0, -2.0, -3.0]).to(dev))
    return [x, v]


def case_masked_fill_narrowed(dev):
    x = base(dev, 3, 4)
    mask = torch.tensor([[True, False], [False, True], [True, True]]).to(dev)
    x.narrow(1, 1, 2).masked_fill_(mask, -1)
    return [x]


def case_copy_between_disjoint_views(dev):
    x = base(dev, 6)
    x[:3].copy_(x[3:])
    return [x]


def case_copy_overlapping_views(dev):
    x = base(dev, 6)
    x[1:].copy_(x[:-1])  # partial overlap: the CPU refuses
    return [x]


def case_detach_shares(dev):
    x = base(dev, 4).requires_grad_()
    d = x.detach()
    d.add_(1)
    return [x.detach(), d]


def case_data_assignment(dev):
    p = torch.nn.Parameter(base(dev, 3))
    p.data = torch.zeros(5, device=dev)
    p.data.add_(2)
    return [p.detach()]


def case_set_(dev):
    a = base(dev, 2)
    b = base(dev, 3, 2)
    a.set_(b)
    b.mul_(3)
    return [a, b]


def case_set_storage_offset(dev):
    a = torch.empty(0, device=dev)
    b = base(dev, 10)
    a.set_(b.untyped_storage(), 2, (2, 3), (3, 1))
    a.add_(100)
    return [a, b]


def case_resize_grow_keeps_prefix(dev):
    x = base(dev, 4)
    x.resize_(2, 2)
    y = x.clone()
    x.resize_(6)
    return [y, x[:4]]


def case_as_strided_overlapping_read(dev):
    x = base(dev, 6)
    return [x.as_strided((3, 3), (1, 1)), x.as_strided((2, 2), (0, 2), 1)]


def case_inplace_on_expanded_raises(dev):
    x = base(dev, 4)
    x.expand(3, 4).add_(1)
    return [x]


def case_version_counter(dev):
    x = base(dev, 4)
    v = x[1:]
    v.mul_(2)
    x.add_(1)
    x[0] = 3
    return [x, torch.tensor([x._version, v._version])]


def case_modified_inplace_autograd_error(dev):
    x = base(dev, 3).requires_grad_()
    w = x.sigmoid()  # sigmoid saves its output for backward
    w.mul_(2)
    w.sum().backward()  # RuntimeError: ... modified by an inplace operation
    return [x.grad]


def case_view_dtype_read_write(dev):
    x = base(dev, 4)
    i = x.view(torch.int32)
    i[1] = 0
    return [x, i]


def case_view_as_real_write(dev):
    c = torch.complex(base(dev, 3), -base(dev, 3))
    r = torch.view_as_real(c)
    r[:, 1] = 7
    return [c, r]


def case_view_as_complex_read(dev):
    x = base(dev, 3, 2)
    c = torch.view_as_complex(x)
    x.add_(1)
    return [torch.view_as_real(c), c.abs()]


def case_unfold_read(dev):
    x = base(dev, 10)
    return [x.unfold(0, 3, 2)]


def case_diagonal_fill(dev):
    x = base(dev, 4, 4)
    x.diagonal().fill_(0)
    x.diagonal(1).mul_(-1)
    return [x]


def case_select_write(dev):
    x = base(dev, 3, 4)
    x[1].mul_(2)
    x[:, 2].sub_(1)
    return [x]


def case_chunk_writes(dev):
    x = base(dev, 6, 2)
    for i, c in enumerate(x.chunk(3)):
        c.add_(i * 10)
    return [x]


def case_split_unbind_writes(dev):
    x = base(dev, 4, 3)
    a, b = x.split([1, 3])
    b.neg_()
    for i, row in enumerate(x.unbind(1)):
        row.add_(i)
    return [x, a, b]


def case_permute_contiguous(dev):
    x = base(dev, 2, 3, 4)
    p = x.permute(2, 0, 1)
    c = p.contiguous()
    p.add_(1)
    return [x, p, c]


def case_reshape_viewable_shares(dev):
    x = base(dev, 2, 6)
    r = x.reshape(3, 4)
    r[0, 0] = -5
    return [x, r]


def case_reshape_copy_does_not_share(dev):
    x = base(dev, 3, 4).t()
    r = x.reshape(12)
    r[0] = -5
    return [x, r]


def case_flatten_strided_write(dev):
    x = base(dev, 12)
    x.view(-1)[::3] = 7
    return [x]


def case_nested_views_zero(dev):
    x = base(dev, 4, 6)
    x[1:][:, ::2].zero_()
    return [x]


def case_none_indexing_and_ellipsis(dev):
    x = base(dev, 2, 3)
    y = x[..., None]
    y.add_(1)
    return [x, y]


def case_transpose_of_transpose_write(dev):
    x = base(dev, 3, 5)
    x.t().t()[1:, 1:].mul_(10)
    return [x]


def case_unsqueeze_squeeze_inplace(dev):
    x = base(dev, 2, 3)
    x.unsqueeze_(1)
    shape1 = torch.tensor(x.shape)
    x.squeeze_()
    x.t_()
    return [x, shape1]


def case_transpose_inplace_metadata(dev):
    x = base(dev, 2, 3)
    y = x.transpose_(0, 1)
    y[0].fill_(-1)
    return [x, torch.tensor(x.stride())]


def case_out_into_view(dev):
    x = base(dev, 3, 4)
    a, b = base(dev, 4), base(dev, 4)
    torch.add(a, b, out=x[1])
    return [x]


def case_out_resizes_empty(dev):
    out = torch.empty(0, device=dev)
    torch.mul(base(dev, 2, 3), 2, out=out)
    return [out]


def case_inplace_promotion_error(dev):
    x = base(dev, 3, dtype=torch.int64)
    x.add_(0.5)
    return [x]


def case_clone_independent(dev):
    x = base(dev, 4)
    c = x.clone()
    c.add_(1)
    return [x, c]


def case_empty_then_partial_write(dev):
    x = torch.empty(6, device=dev)
    x[2:4] = 1.5
    return [x[2:4]]


def case_bool_view_write(dev):
    x = torch.zeros(3, 4, dtype=torch.bool, device=dev)
    x[:, 1] = True
    x[2].logical_not_()
    return [x]


def case_half_view_write(dev):
    x = base(dev, 4, 4, dtype=torch.float16)
    x[1:3, 1:3] *= 0.5
    return [x]


def case_int_view_write(dev):
    x = base(dev, 5, dtype=torch.int64)
    x[1:4] += 100
    return [x]


def case_storage_offset_contiguous(dev):
    x = base(dev, 5, 4)
    y = x[2:]
    return [y.contiguous(), torch.tensor([y.storage_offset()])]


def case_cpu_copy_into_view(dev):
    x = base(dev, 3, 3)
    x[:, 1].copy_(torch.tensor([9.0, 8.0, 7.0]))
    return [x]


def case_broadcast_copy_into_view(dev):
    x = base(dev, 3, 4)
    x[1:].copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]).to(dev))
    return [x]


def case_mT_and_T(dev):
    x = base(dev, 2, 3, 4)
    x.mT.add_(1)
    y = base(dev, 3, 4)
    return [x, y.T.contiguous()]


def case_where_out(dev):
    x = base(dev, 4)
    out = torch.empty(4, device=dev)
    torch.where(x > 1, x, -x, out=out)
    return [out]


def case_expand_read_then_write_base(dev):
    x = base(dev, 1, 3)
    e = x.expand(4, 3)
    x.mul_(2)
    return [e.contiguous()]


def case_swapdims_write(dev):
    x = base(dev, 2, 3, 4)
    x.swapdims(0, 2)[1].zero_()
    return [x]


def case_grad_through_views(dev):
    x = base(dev, 4, 4).requires_grad_()
    y = x[1:3].t() * 2
    y.sum().backward()
    return [x.grad]


def case_inplace_view_grad(dev):
    x = base(dev, 4).requires_grad_()
    y = x * 1
    y[1:3].mul_(3)
    y.sum().backward()
    return [x.grad, y.detach()]


def case_conj_view_reads_and_writes(dev):
    z = torch.complex(base(dev, 4), -base(dev, 4) * 0.5)
    c = z.conj()
    c[1:3].mul_(2j)  # writes through the lazy conjugate
    return [c.resolve_conj(), z, (c * 1).resolve_conj(), z.conj().clone().resolve_conj()]


def case_neg_view(dev):
    z = torch.complex(base(dev, 3), base(dev, 3))
    n = torch._neg_view(z)
    return [n.resolve_neg(), (n + 1).resolve_neg()]


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def run(fn, dev):
    try:
        return fn(dev), None
    except Exception as e:  # the CPU's exceptions are part of the expected behaviour
        return None, e


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name):
    fn = CASES[name]
    expected, cpu_error = run(fn, "cpu")
    got, tpu_error = run(fn, "tpu")
    if cpu_error is not None:
        assert tpu_error is not None, f"cpu raised {cpu_error!r} but tpu did not"
        assert type(tpu_error) is type(cpu_error), f"cpu raised {cpu_error!r}, tpu raised {tpu_error!r}"
        return
    assert tpu_error is None, f"tpu raised {tpu_error!r}"
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.device.type in ("tpu", "cpu")
        assert g.shape == e.shape and g.dtype == e.dtype
        if g.device.type == "tpu":
            assert g.stride() == e.stride(), f"strides {g.stride()} vs {e.stride()}"
        torch.testing.assert_close(g.cpu(), e, equal_nan=True)


def test_at_least_forty_cases():
    assert len(CASES) >= 40

