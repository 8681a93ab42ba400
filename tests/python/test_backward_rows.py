"""Gradients of the backward rows (upsampling, padding, pooling, grid_sample, cdist, ...) compared with the
CPU's through autograd, on shapes that exercise their edge cases (align_corners, antialias, ceil_mode,
count_include_pad, padding modes). The forward OpInfo checks live in test_conformance.py (the CI slice of
python -m torch_pjrt.conformance), which also covers gradients in its full sweep (--grad).
"""

import pytest
import torch
import torch.nn.functional as F

from compare import assert_same as _assert_same


# ------------------------------------------------------------------------------------- gradients
def _target(x, values):
    return torch.tensor(values, device=x.device)


GRAD_CASES = {
    "upsample_nearest2d": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), [(2, 3, 5, 4)]),
    "upsample_nearest2d_size": (lambda x: F.interpolate(x, size=(7, 3), mode="nearest"), [(2, 3, 5, 4)]),
    "upsample_nearest_exact2d": (lambda x: F.interpolate(x, size=(7, 9), mode="nearest-exact"), [(2, 3, 5, 4)]),
    "upsample_nearest3d": (lambda x: F.interpolate(x, size=(4, 6, 7), mode="nearest"), [(1, 2, 3, 5, 4)]),
    "upsample_linear1d": (lambda x: F.interpolate(x, size=9, mode="linear"), [(2, 3, 5)]),
    "upsample_bilinear2d": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [(2, 3, 5, 4)]),
    "upsample_bilinear2d_align_corners": (
        lambda x: F.interpolate(x, size=(9, 3), mode="bilinear", align_corners=True),
        [(2, 3, 5, 4)],
    ),
    "upsample_bicubic2d": (lambda x: F.interpolate(x, size=(9, 7), mode="bicubic"), [(2, 3, 5, 4)]),
    "upsample_bilinear2d_antialias": (
        lambda x: F.interpolate(x, size=(5, 9), mode="bilinear", antialias=True),
        [(2, 3, 17, 7)],
    ),
    "upsample_bicubic2d_antialias": (
        lambda x: F.interpolate(x, size=(5, 9), mode="bicubic", antialias=True),
        [(2, 3, 17, 7)],
    ),
    "upsample_trilinear3d": (lambda x: F.interpolate(x, size=(4, 6, 7), mode="trilinear"), [(1, 2, 3, 5, 4)]),
    "reflection_pad1d": (lambda x: F.pad(x, (3, 2), mode="reflect"), [(2, 3, 5)]),
    "reflection_pad2d": (lambda x: F.pad(x, (1, 2, 3, 1), mode="reflect"), [(2, 3, 5, 4)]),
    "reflection_pad3d": (lambda x: F.pad(x, (1, 2, 2, 1, 1, 1), mode="reflect"), [(1, 2, 3, 5, 4)]),
    "replication_pad2d": (lambda x: F.pad(x, (1, 2, 3, 1), mode="replicate"), [(2, 3, 5, 4)]),
    "replication_pad3d": (lambda x: F.pad(x, (1, 2, 3, 1, 1, 0), mode="replicate"), [(1, 2, 3, 5, 4)]),
    "glu": (lambda x: F.glu(x, 1), [(3, 6, 2)]),
    "logsigmoid": (F.logsigmoid, [(3, 6)]),
    "hardshrink": (lambda x: F.hardshrink(x, 0.7), [(3, 6)]),
    "softshrink": (lambda x: F.softshrink(x, 0.7), [(3, 6)]),
    "prelu": (F.prelu, [(2, 3, 4), (3,)]),
    "logit": (lambda x: torch.logit(x.sigmoid(), 1e-3), [(3, 6)]),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (3, 2)), [(2, 3, 7, 5)]),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, (3, 2, 2)), [(2, 3, 7, 5, 4)]),
    "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, (3, 2, 2)), [(2, 3, 7, 5, 4)]),
    "max_pool3d": (lambda x: F.max_pool3d(x, 3, 2, 1), [(2, 3, 7, 5, 6)]),
    "avg_pool3d": (lambda x: F.avg_pool3d(x, 3, 2, 1), [(2, 3, 7, 5, 6)]),
    "avg_pool3d_ceil_exclude_pad": (
        lambda x: F.avg_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0), ceil_mode=True, count_include_pad=False),
        [(2, 3, 7, 5, 6)],
    ),
    "unfold": (lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), [(2, 3, 7, 6)]),
    "fold": (lambda x: F.fold(x, (5, 6), (2, 3), padding=1, stride=(2, 1)), [(2, 18, 18)]),
    "max_unpool2d": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), [(2, 3, 6, 4)]),
    "grid_sample_bilinear_zeros": (lambda x, g: F.grid_sample(x, g, align_corners=False), [(2, 3, 5, 6), (2, 3, 4, 2)]),
    "grid_sample_bilinear_border": (
        lambda x, g: F.grid_sample(x, g, padding_mode="border", align_corners=True),
        [(2, 3, 5, 6), (2, 3, 4, 2)],
    ),
    "grid_sample_bilinear_reflection": (
        lambda x, g: F.grid_sample(x, 1.5 * g, padding_mode="reflection", align_corners=False),
        [(2, 3, 5, 6), (2, 3, 4, 2)],
    ),
    "grid_sample_nearest": (lambda x, g: F.grid_sample(x, g, mode="nearest"), [(2, 3, 5, 6), (2, 3, 4, 2)]),
    "cdist_p1": (lambda x, y: torch.cdist(x, y, p=1), [(4, 5), (6, 5)]),
    "cdist_p2": (lambda x, y: torch.cdist(x, y, p=2), [(4, 5), (6, 5)]),
    "cdist_p3_batched": (lambda x, y: torch.cdist(x, y, p=3), [(3, 4, 5), (3, 6, 5)]),
    "cdist_pinf": (lambda x, y: torch.cdist(x, y, p=float("inf")), [(4, 5), (6, 5)]),
    "cdist_p0_5": (lambda x, y: torch.cdist(x, y, p=0.5), [(4, 5), (6, 5)]),
    "pdist": (F.pdist, [(5, 3)]),
    "pdist_p3": (lambda x: F.pdist(x, 3), [(5, 3)]),
    "norm_p3": (lambda x: torch.norm(x, 3, dim=1), [(4, 9)]),
    "renorm": (lambda x: torch.renorm(x, 2, 0, 1.0), [(5, 3)]),
    "cummax": (lambda x: torch.cummax(x, 1)[0], [(4, 9)]),
    "kthvalue": (lambda x: torch.kthvalue(x, 3, 1)[0], [(4, 7)]),
    "median": (lambda x: torch.median(x, 1)[0], [(4, 7)]),
    "nanmean": (lambda x: torch.nanmean(x, 1), [(5, 3)]),
    "hypot": (torch.hypot, [(4, 5), (4, 5)]),
    "logaddexp": (torch.logaddexp, [(4, 5), (4, 5)]),
    "logaddexp2": (torch.logaddexp2, [(4, 5), (4, 5)]),
    "xlogy": (lambda x, y: torch.xlogy(x, y.abs()), [(4, 5), (4, 5)]),
    "i0": (torch.i0, [(4, 5)]),
    "trace": (torch.trace, [(5, 5)]),
    "fft2_roundtrip": (lambda x: torch.fft.ifft2(torch.fft.fft2(x)).real, [(4, 8)]),
    "multilabel_soft_margin": (
        lambda x: F.multilabel_soft_margin_loss(x, _target(x, [[1.0, 0, 1, 0, 1]] * 4)),
        [(4, 5)],
    ),
}


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_gradient_matches_cpu(name):
    fn, shapes = GRAD_CASES[name]
    torch.manual_seed(0)
    inputs = [torch.randn(*s) for s in shapes]
    cpu = [x.clone().requires_grad_() for x in inputs]
    tpu = [x.to("tpu").requires_grad_() for x in inputs]
    expected = fn(*cpu)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    got = fn(*tpu)
    got.backward(grad.to("tpu"))
    _assert_same(got.detach(), expected.detach())
    for t, c in zip(tpu, cpu):
        _assert_same(t.grad, c.grad)


# ------------------------------------------------------------------ composite ops keep their gradients
def test_no_backend_kernel_bypasses_a_composite_op():
    """A "tpu" kernel for a CompositeImplicitAutograd op would replace its decomposition under autograd too,
    where it has no formula: gradients through it were silently lost (square, outer, where with a scalar).
    Such ops decompose in eager (their rows serve compiled graphs)."""
    regs = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    bypassing = sorted(r for r in regs if has(r, "CompositeImplicitAutograd"))
    # not a data op: it answers whether .to("tpu") may keep a parameter's identity (issue 11)
    assert bypassing == ["aten::_has_compatible_shallow_copy_type"], bypassing


@pytest.mark.parametrize("fn", [
    lambda a, b: torch.square(a),
    lambda a, b: torch.outer(a[0], b[1]),
    lambda a, b: torch.where(a > 0, 1.5, b),
    lambda a, b: torch.where(a > 0, a, -2.0),
    lambda a, b: torch.logdet(a @ a.mT + torch.eye(4, device=a.device)),
    lambda a, b: torch.isfinite(a).float() * b,
], ids=["square", "outer", "where_scalar_self", "where_scalar_other", "logdet", "isfinite"])
def test_composite_op_gradients(fn):
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)
    grads = []
    for dev in ("cpu", "tpu"):
        x, y = a.to(dev).requires_grad_(), b.to(dev).requires_grad_()
        out = fn(x, y)
        gx, gy = torch.autograd.grad(out.sum(), (x, y), allow_unused=True, materialize_grads=True)
        grads.append((out.detach().cpu(), gx.cpu(), gy.cpu()))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fn", [
    lambda x: F.elu(x, alpha=0.7),
    lambda x: F.celu(x, alpha=1.3),
    lambda x: F.selu(x),
    lambda x: F.elu(x.clone(), alpha=0.5, inplace=True),  # is_result: the backward reads the output
    lambda x: F.hardswish(x),
    lambda x: F.hardsigmoid(x),
    lambda x: F.group_norm(x[:0, :8].reshape(0, 4, 2), 2),  # an empty batch
], ids=["elu", "celu", "selu", "elu_inplace", "hardswish", "hardsigmoid", "group_norm_empty"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_backward_rows(fn, dtype, fallback_policy):
    """elu_backward (both forms), hardswish_backward, hardsigmoid_backward and group norm's backward of an
    empty batch run natively and give the CPU's gradients."""
    fallback_policy("error")
    g = torch.Generator().manual_seed(6)
    x = (torch.randn(8, 9, generator=g) * 4).to(dtype)
    x[0, :4] = torch.tensor([-3.0, 3.0, 0.0, -0.0])
    up = torch.randn(fn(x).shape, generator=g).to(dtype)
    grads = []
    for dev in ("cpu", "tpu"):
        t = x.detach().to(dev).requires_grad_()
        out = fn(t)
        (gx,) = torch.autograd.grad(out, t, up.to(dev), allow_unused=True, materialize_grads=True)
        grads.append((out.detach().cpu(), gx.cpu()))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fn", [
    # an empty index of another rank than self: gather's backward scatters nothing
    lambda x: torch.gather(x[0], 0, torch.empty(2, 0, dtype=torch.long, device=x.device)).sum() + x[0].sum(),
    # a 0-d index_fill: the gradient of the value counts each index once (autograd calls _unique)
    lambda x: x[0, 0].index_fill(0, torch.tensor([0, 0], device=x.device), x[1, 1]) * 3,
    # polar's backward takes sgn of complex numbers
    lambda x: torch.view_as_real(torch.polar(x[0].abs() + 0.1, x[1])),
    lambda x: torch.view_as_real(torch.sgn(torch.complex(x[0], x[1] * (x[1] > 0)))),  # zeros included
    lambda x: torch.view_as_real(torch.sgn(torch.complex(x[0] * 0, x[1] * 0))),
], ids=["gather_empty_index", "index_fill_0d", "polar", "sgn_complex", "sgn_complex_zero"])
def test_gradients_found_by_the_sweep(fn, fallback_policy):
    # the OpInfo gradient sweep found these falling back to the CPU; natively now, against the CPU
    fallback_policy("error")
    x = torch.randn(2, 5, generator=torch.Generator().manual_seed(1))
    res = []
    for dev in ("cpu", "tpu"):
        xd = x.to(dev).requires_grad_()
        out = fn(xd)
        w = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(dev)
        (g,) = torch.autograd.grad((out * w).sum(), xd)
        res.append((out.detach().cpu(), g.cpu()))
    for got, want in zip(res[1], res[0]):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_transpose_output_padding_gradients(dims, fallback_policy):
    # output_padding adds output rows no input position reaches: the input's gradient (a convolution of
    # the output's) is cut back to the input's size (OpInfo's sample 2 fell back before)
    fallback_policy("error")
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 2, *(4,) * dims, generator=g)
    w = torch.randn(2, 2, *(4, 5, 3)[:dims], generator=g)
    # output_padding at least the stride (allowed below the dilation): whole extra rows
    kw = dict(stride=(2, 2, 1)[:dims], padding=(1, 2, 1)[:dims], output_padding=(2, 3, 1)[:dims], groups=2,
              dilation=(3, 4, 2)[:dims])
    f = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    res = []
    for dev in ("cpu", "tpu"):
        xd, wd = x.to(dev).requires_grad_(), w.to(dev).requires_grad_()
        out = f(xd, wd, **kw)
        gx, gw = torch.autograd.grad((out * out.detach().cos()).sum(), (xd, wd))
        res.append((out.detach().cpu(), gx.cpu(), gw.cpu()))
    for got, want in zip(res[1], res[0]):
        torch.testing.assert_close(got, want)


def test_cdist_gradient_with_an_empty_batch(fallback_policy):
    # x1 with an empty batch against an unbatched x2: no pairs, so x2's gradient is zeros of its own shape
    # (OpInfo's sample failed to broadcast and fell back)
    fallback_policy("error")
    g = torch.Generator().manual_seed(2)
    x1, x2 = torch.randn(0, 4, 5, generator=g), torch.randn(3, 5, generator=g)
    grads = []
    for dev in ("cpu", "tpu"):
        a, b = x1.to(dev).requires_grad_(), x2.to(dev).requires_grad_()
        out = torch.cdist(a, b, p=1.5)
        grads.append([t.cpu() for t in torch.autograd.grad(out.sum(), (a, b))])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want)


# targets of multilabel_margin_loss: each row's classes up to its first negative entry (repeats, none,
# and all classes included)
_MULTILABEL = [[3, 0, -1, 1, 2, 2, 2], [1, 2, 3, 4, 5, 6, 0], [-1, 1, 1, 1, 1, 1, 1], [6, 6, -1, 0, 0, 0, 0],
               [2, 3, 4, -1, 0, 0, 0]]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss", ["multi_margin_p1", "multi_margin_p2_weight", "multi_margin_1d", "multilabel",
                                  "multilabel_1d"])
def test_margin_loss_gradients(loss, reduction, fallback_policy):
    # multi_margin_loss_backward and multilabel_margin_loss_backward (the OpInfo gradient sweep found them
    # on the CPU fallback): the input's gradient against the CPU's, with a weighted grad_output
    fallback_policy("error")
    g = torch.Generator().manual_seed(3)
    if loss.startswith("multi_margin"):
        x = torch.randn(6) if loss.endswith("1d") else torch.randn(5, 7, generator=g)
        target = torch.tensor(2) if loss.endswith("1d") else torch.randint(0, 7, (5,), generator=g)
        kw = dict(p=2, margin=0.7, weight=torch.rand(7, generator=g)) if "weight" in loss else {}

        def f(a, t):
            w = kw.get("weight")
            return F.multi_margin_loss(a, t, reduction=reduction, **dict(kw, weight=None if w is None else w.to(a.device)))
    else:
        x = torch.randn(4, generator=g) if loss.endswith("1d") else torch.randn(5, 7, generator=g)
        target = torch.tensor([1, 3, -1, 0]) if loss.endswith("1d") else torch.tensor(_MULTILABEL)

        def f(a, t):
            return F.multilabel_margin_loss(a, t, reduction=reduction)
    res = []
    for dev in ("cpu", "tpu"):
        a = x.to(dev).requires_grad_()
        out = f(a, target.to(dev))
        w = torch.linspace(-1, 2, out.numel()).reshape(out.shape).to(dev)
        (grad,) = torch.autograd.grad((out * w).sum(), a)
        res.append((out.detach().cpu(), grad.cpu()))
    for got, want in zip(res[1], res[0]):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("padding_idx", [-1, 4])
@pytest.mark.parametrize("offset2bag", ["filled", "empty"])
def test_embedding_bag_per_sample_weights_backward(offset2bag, padding_idx, fallback_policy):
    # the gradient of embedding_bag's per_sample_weights (sum mode): grad of the position's bag . its weight
    # row, 0 at padding_idx; an empty offset2bag (the CPU's fast path returns it so) is made from the offsets
    fallback_policy("error")
    g = torch.Generator().manual_seed(5)
    grad, weight = torch.randn(3, 4, generator=g), torch.randn(10, 4, generator=g)
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 5])
    o2b = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2]) if offset2bag == "filled" else torch.empty(0, dtype=torch.long)
    args = (grad, weight, indices, offsets, o2b, 0, padding_idx)
    op = torch.ops.aten._embedding_bag_per_sample_weights_backward
    want = op(*args)
    got = op(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args]).cpu()
    torch.testing.assert_close(got, want)
    with pytest.raises(RuntimeError, match="per_sample_weights only supported for mode='sum'"):
        op(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args[:5]], 1, padding_idx)


@pytest.mark.parametrize("mode,kw", [
    ("sum", {}), ("sum", {"per_sample_weights": True}), ("sum", {"padding_idx": 4, "scale_grad_by_freq": True}),
    ("mean", {}), ("mean", {"padding_idx": 2}), ("mean", {"scale_grad_by_freq": True}),
    ("max", {}), ("max", {"padding_idx": 4}), ("sum", {"include_last_offset": True}),
    ("mean", {"include_last_offset": True}), ("max", {"include_last_offset": True}),
], ids=["sum", "sum_weights", "sum_pad_freq", "mean", "mean_pad", "mean_freq", "max", "max_pad", "last_offset",
        "mean_last_offset", "max_last_offset"])
def test_embedding_bag_weight_gradient(mode, kw, fallback_policy):
    # _embedding_bag_backward (the weight's dense gradient) against the CPU, with the fallback as an
    # error; bags of 3, 2, 0 (empty) and 3 positions, repeated indices
    fallback_policy("error")
    g = torch.Generator().manual_seed(6)
    weight = torch.randn(10, 4, generator=g)
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 5, 5])
    if kw.get("include_last_offset"):  # the offsets then end with the number of indices
        offsets = torch.tensor([0, 3, 5, 5, 8])
    psw = torch.rand(8, generator=g) if kw.get("per_sample_weights") else None
    freq = kw.get("scale_grad_by_freq", False)
    res = []
    for dev in ("cpu", "tpu"):
        w = weight.to(dev).requires_grad_()
        # scale_grad_by_freq on the CPU: its embedding_bag kernel divides the rows by the counts of the
        # wrong indices (counts[sorted_indices[i]] for the i-th distinct index; rows 3 and 9 here get 1/2
        # though each is named once). The expected gradient is the CPU's unscaled one divided by each row's
        # count, as embedding's scale_grad_by_freq (and this option's documentation) define it.
        args = dict(kw, per_sample_weights=None if psw is None else psw.to(dev),
                    scale_grad_by_freq=freq and dev == "tpu")
        out = F.embedding_bag(indices.to(dev), w, offsets.to(dev), mode=mode, **args)
        cot = torch.linspace(-1, 2, out.numel()).reshape(out.shape).to(dev)
        (grad,) = torch.autograd.grad((out * cot).sum(), w)
        if freq and dev == "cpu":
            grad = grad / torch.bincount(indices, minlength=10).clamp(min=1).unsqueeze(1)
        res.append((out.detach().cpu(), grad.cpu()))
    for got, want in zip(res[1], res[0]):
        torch.testing.assert_close(got, want)
