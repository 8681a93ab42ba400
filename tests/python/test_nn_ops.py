"""nn ops of a training loop (norms, losses, embedding, convolution, pooling): forward results and
gradients on "tpu" against PyTorch on the CPU, on the same inputs. The error fallback policy
(conftest.py) makes every op here run natively or fail."""

import math

import pytest
import torch
import torch.nn.functional as F

from compare import assert_same, check, on_the_other_kernel_paths, to_device


def grad_check(fn, *args, seed=0, f32_grad_reference=False, **tol):
    """Runs fn on CPU and on tpu copies of args, backpropagates the same upstream gradient through each
    and compares the outputs and the gradients of every argument that requires grad.

    f32_grad_reference: the CPU gradients come from the same (bf16) inputs and upstream gradient
    computed in float32, then rounded to the arguments' dtype. The tpu rows compute half types in float32
    throughout; torch's CPU backward kernels for bf16 round their intermediates to bf16, so their
    gradients are further from the exact result than ours (by a bf16 ulp where sums cancel)."""
    cpu_args = to_device(args, "cpu")
    tpu_args = to_device(args, "tpu")
    expected = fn(*cpu_args)
    got = fn(*tpu_args)
    exp_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got_list = list(got) if isinstance(got, (tuple, list)) else [got]
    assert_same([g.detach() for g in got_list], [e.detach() for e in exp_list], **tol)
    if f32_grad_reference:
        cpu_args = tuple(_upcast(a) for a in cpu_args)
        exp_list = fn(*cpu_args)
        exp_list = list(exp_list) if isinstance(exp_list, (tuple, list)) else [exp_list]
    gen = torch.Generator().manual_seed(seed + 1)
    outs_c, outs_t, ups_c, ups_t = [], [], [], []
    for e, g in zip(exp_list, got_list):
        if not e.requires_grad:
            continue
        up = torch.randn(e.shape, generator=gen).to(g.dtype)
        outs_c.append(e)
        outs_t.append(g)
        ups_c.append(up.to(e.dtype))
        ups_t.append(up.to("tpu"))
    assert outs_c, "nothing to differentiate"
    torch.autograd.backward(outs_c, ups_c)
    torch.autograd.backward(outs_t, ups_t)
    leaves = [(t, c) for t, c in zip(_leaves(tpu_args), _leaves(cpu_args)) if c.requires_grad]
    assert leaves, "no argument requires grad"
    for t, c in leaves:
        assert c.grad is not None
        assert t.grad is not None, "tpu gradient missing"
        assert_same(t.grad, c.grad.to(t.dtype), **tol)
    return got


def _upcast(a):
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a.detach().float().requires_grad_(a.requires_grad)
    return a


def _leaves(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_leaves(a))
    return out


def randn(*shape, dtype=torch.float32, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad)


# ------------------------------------------------------------------------------------------ norms
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,normalized", [((4, 8), (8,)), ((2, 3, 4, 5), (4, 5)), ((3, 6), (3, 6))])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm(dtype, shape, normalized, affine):
    x = randn(*shape, dtype=dtype, seed=1)
    w = randn(*normalized, dtype=dtype, seed=2) if affine != "none" else None
    b = randn(*normalized, dtype=dtype, seed=3) if affine == "both" else None
    grad_check(lambda x, w, b: F.layer_norm(x, normalized, w, b, eps=1e-5), x, w, b,
               f32_grad_reference=dtype == torch.bfloat16)


def test_layer_norm_module_input_grad_only():
    x = randn(5, 7, seed=4)
    grad_check(lambda x: F.layer_norm(x, (7,)), x)


def test_layer_norm_weight_grad_only():
    x = randn(5, 7, grad=False, seed=4)
    w = randn(7, seed=5)
    grad_check(lambda x, w: F.layer_norm(x, (7,), w), x, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 4), 3), ((2, 4, 5), 2), ((3, 4, 2, 3), 1), ((2, 4, 3, 3), 4)])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(dtype, shape, groups, affine):
    x = randn(*shape, dtype=dtype, seed=1)
    w = randn(shape[1], dtype=dtype, seed=2) if affine else None
    b = randn(shape[1], dtype=dtype, seed=3) if affine else None
    grad_check(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-5), x, w, b)


@pytest.mark.parametrize("shape,groups", [((0, 2), 1), ((0, 4, 3), 2), ((2, 4, 0), 2)])
def test_group_norm_empty(shape, groups):
    """Empty batches and empty groups: mean 0 and rstd NaN for empty groups, as the CPU gives."""
    x = randn(*shape, seed=1)
    w, b = randn(shape[1], seed=2), randn(shape[1], seed=3)
    n, c, hw = shape[0], shape[1], math.prod(shape[2:])
    check(lambda x, w, b: torch.native_group_norm(x, w, b, n, c, hw, groups, 1e-5), x, w, b, equal_nan=True)


@pytest.mark.parametrize("loss", ["multi_margin", "multilabel_margin"])
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_margin_loss_result_shapes_and_gradients(loss, shape, reduction, fallback_policy):
    """reduction='none' on a 0-d or 1-d input gives a 0-d loss on the CPU (torch's meta kernels say [1]);
    the backward (the CPU fallback: no row yet) gets autograd's undefined optional weight and must run."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    if loss == "multi_margin":
        t = torch.tensor([1, 2])[: shape[0]] if len(shape) == 2 else torch.tensor(0)
        fn = lambda x, t: F.multi_margin_loss(x, t, reduction=reduction)  # noqa: E731
    else:
        t = torch.zeros(shape, dtype=torch.long)
        if len(shape) == 2:
            t[:, 1] = -1
        fn = lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction)  # noqa: E731
    check(fn, x, t)
    fallback_policy("silent")
    grads = []
    for dev in ("cpu", "tpu"):
        xd = x.detach().to(dev).requires_grad_()
        fn(xd, t.to(dev)).sum().backward()
        grads.append(xd.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("eps", [None, 1e-5])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm(dtype, eps, affine):
    x = randn(3, 4, 8, dtype=dtype, seed=1)
    w = randn(8, dtype=dtype, seed=2) if affine else None
    grad_check(lambda x, w: F.rms_norm(x, (8,), w, eps=eps), x, w)


def test_rms_norm_module():
    m = torch.nn.RMSNorm([4, 6])
    x = randn(2, 4, 6, seed=7)
    with torch.no_grad():
        m.weight.copy_(torch.randn(4, 6))
    grad_check(lambda x, w: F.rms_norm(x, (4, 6), w, m.eps), x, m.weight)


# ----------------------------------------------------------------------------------------- losses
def log_probs(*shape, seed=0, dim=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).log_softmax(dim).requires_grad_()


def targets(n_classes, *shape, seed=0):
    return torch.randint(0, n_classes, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_nll_loss_2d_input(reduction, weighted, ignore_index):
    x = log_probs(6, 5, seed=1)
    t = targets(5, 6, seed=2)
    t[1] = 2
    w = torch.rand(5, generator=torch.Generator().manual_seed(3)) if weighted else None
    grad_check(lambda x, t, w: F.nll_loss(x, t, w, ignore_index=ignore_index, reduction=reduction), x, t, w)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_1d_input(reduction, weighted):
    x = log_probs(5, seed=1, dim=0)
    t = torch.tensor(3)
    w = torch.rand(5, generator=torch.Generator().manual_seed(3)) if weighted else None
    grad_check(lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction), x, t, w)


def test_nll_loss_all_ignored_mean_is_nan():
    x = log_probs(3, 4, seed=1)
    t = torch.tensor([1, 1, 1])
    check(lambda x, t: F.nll_loss(x, t, ignore_index=1), x.detach(), t, equal_nan=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_4d_input(reduction, weighted):
    x = log_probs(2, 4, 3, 5, seed=1)
    t = targets(4, 2, 3, 5, seed=2)
    t[0, 1, 2] = -100
    w = torch.rand(4, generator=torch.Generator().manual_seed(3)) if weighted else None
    grad_check(lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction), x, t, w)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy(label_smoothing, reduction, weighted):
    x = randn(8, 5, seed=1)
    t = targets(5, 8, seed=2)
    w = torch.rand(5, generator=torch.Generator().manual_seed(3)) if weighted else None
    grad_check(lambda x, t, w: F.cross_entropy(x, t, w, reduction=reduction, label_smoothing=label_smoothing), x, t, w)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_cross_entropy_spatial(label_smoothing):
    x = randn(2, 5, 3, 3, seed=1)
    t = targets(5, 2, 3, 3, seed=2)
    t[1, 0, 0] = -100
    grad_check(lambda x, t: F.cross_entropy(x, t, label_smoothing=label_smoothing), x, t)


def test_cross_entropy_probability_targets():
    x = randn(4, 6, seed=1)
    p = torch.rand(4, 6, generator=torch.Generator().manual_seed(2)).softmax(1)
    grad_check(lambda x, p: F.cross_entropy(x, p), x, p)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mse_loss(reduction, dtype):
    x, y = randn(4, 6, dtype=dtype, seed=1), randn(4, 6, dtype=dtype, seed=2)
    grad_check(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, y)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_l1_loss(reduction):
    x, y = randn(4, 6, seed=1), randn(4, 6, seed=2)
    grad_check(lambda x, y: F.l1_loss(x, y, reduction=reduction), x, y)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    gen = torch.Generator().manual_seed(1)
    p = (torch.rand(5, 4, generator=gen) * 0.98 + 0.01).requires_grad_()
    y = torch.rand(5, 4, generator=gen)
    w = torch.rand(5, 4, generator=gen) if weighted else None
    grad_check(lambda p, y, w: F.binary_cross_entropy(p, y, w, reduction=reduction), p, y, w)


def test_binary_cross_entropy_saturates():
    p = torch.tensor([0.0, 1.0, 0.5, 1e-30])
    y = torch.tensor([1.0, 0.0, 1.0, 1.0])
    check(lambda p, y: F.binary_cross_entropy(p, y, reduction="none"), p, y)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
def test_binary_cross_entropy_with_logits(reduction, weighted, pos_weighted):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(5, 4, generator=gen) * 4).requires_grad_()
    y = torch.rand(5, 4, generator=gen)
    w = torch.rand(5, 4, generator=gen) if weighted else None
    pw = torch.rand(4, generator=gen) * 3 if pos_weighted else None
    grad_check(lambda x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, w, reduction=reduction, pos_weight=pw),
               x, y, w, pw)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
def test_smooth_l1_loss(reduction, beta):
    x, y = randn(5, 6, seed=1), randn(5, 6, seed=2)
    grad_check(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=beta), x, y)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("delta", [1.0, 0.3])
def test_huber_loss(reduction, delta):
    x, y = randn(5, 6, seed=1), randn(5, 6, seed=2)
    grad_check(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=delta), x, y)


# -------------------------------------------------------------------------------------- embedding
@pytest.mark.parametrize("padding_idx", [None, 0, 3])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
@pytest.mark.parametrize("index_shape", [(7,), (3, 4)])
def test_embedding(padding_idx, scale_grad_by_freq, index_shape):
    w = randn(10, 5, seed=1)
    idx = torch.randint(0, 10, index_shape, generator=torch.Generator().manual_seed(2))
    idx.view(-1)[0] = 3
    idx.view(-1)[1] = 3
    idx.view(-1)[2] = 0
    grad_check(lambda w, i: F.embedding(i, w, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq), w, idx)


def test_embedding_bf16():
    w = randn(12, 4, dtype=torch.bfloat16, seed=1)
    idx = torch.tensor([[1, 2, 2], [11, 0, 1]])
    grad_check(lambda w, i: F.embedding(i, w), w, idx)


def test_embedding_int32_indices():
    w = randn(9, 3, seed=1)
    idx = torch.tensor([4, 8, 4, 0], dtype=torch.int32)
    grad_check(lambda w, i: F.embedding(i, w), w, idx)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    w = randn(10, 3, seed=2, grad=False)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offsets = torch.tensor([0, 4, 4, 6])  # an empty bag among them
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), w, idx, offsets)
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=4), w, idx, offsets)
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, include_last_offset=True), w, idx,
          torch.tensor([0, 3, 8]))
    check(lambda w, i: F.embedding_bag(i, w, mode=mode), w, torch.tensor([[0, 9, 9], [3, 1, 2]], dtype=torch.int32))
    if mode == "sum":
        check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode=mode, per_sample_weights=p), w, idx, offsets,
              randn(8, seed=3, grad=False))
    # the auxiliary results the backward reads
    out = torch.ops.aten._embedding_bag(w.to("tpu"), idx.to("tpu"), offsets.to("tpu"), False,
                                        ["sum", "mean", "max"].index(mode), False, None, False, -1)
    ref = torch.ops.aten._embedding_bag(w, idx, offsets, False, ["sum", "mean", "max"].index(mode), False, None, False, -1)
    torch.testing.assert_close(out[0].cpu(), ref[0])
    if mode != "sum":
        torch.testing.assert_close(out[1].cpu(), ref[1])
        torch.testing.assert_close(out[2].cpu(), ref[2])
    if mode == "max":
        torch.testing.assert_close(out[3].cpu(), ref[3])


def test_embedding_max_norm():
    w = randn(10, 4, seed=4, grad=False) * 3

    def f(w, i):
        w = w.clone()
        out = F.embedding(i, w, max_norm=2.0)  # renormalizes the named rows of w in place
        return out, w

    check(f, w, torch.tensor([1, 3, 3, 7]))
    check(lambda w, i: F.embedding_bag(i, w, torch.tensor([0, 2], device=i.device), max_norm=1.5, norm_type=1.0),
          w, torch.tensor([0, 5, 5, 9]))


@pytest.mark.parametrize("dims", [2, 3])
def test_fractional_max_pool(dims):
    g = torch.Generator().manual_seed(5)
    if dims == 2:
        x, samples = randn(2, 3, 10, 9, seed=6), torch.rand(2, 3, 2, generator=g)
        fn = lambda x, s: F.fractional_max_pool2d(x, (3, 2), output_size=(5, 4), return_indices=True, _random_samples=s)
    else:
        x, samples = randn(2, 3, 7, 8, 9, seed=6), torch.rand(2, 3, 3, generator=g)
        fn = lambda x, s: F.fractional_max_pool3d(x, (2, 2, 3), output_size=(4, 5, 3), return_indices=True,
                                                   _random_samples=s)
    if dims == 2:
        grad_check(fn, x, samples)
    else:  # fractional_max_pool3d_backward has no meta kernel, so no shape inference: forward only
        check(fn, x.detach(), samples)


def test_batch_norm_with_update():
    x, w, bias = randn(4, 3, 5, seed=7, grad=False), randn(3, seed=8, grad=False), randn(3, seed=9, grad=False)

    def f(x, w, bias, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        out = torch.ops.aten._batch_norm_with_update(x, w, bias, rm, rv, 0.1, 1e-5)
        return out[0], out[1], out[2], rm, rv

    check(f, x, w, bias, randn(3, seed=10, grad=False), torch.rand(3) + 0.5)


def test_unfold_backward():
    grad_check(lambda x: x.unfold(1, 3, 2), randn(3, 11, 5, seed=11))
    grad_check(lambda x: x.unfold(0, 4, 3), randn(10, seed=12))
    grad_check(lambda x: x.unfold(-1, 2, 5), randn(2, 12, seed=13))


def test_rrelu_eval():
    check(lambda x: F.rrelu(x, 0.1, 0.3, training=False), randn(50, seed=14, grad=False))


# ------------------------------------------------------------------------------------ convolution
CONV2D_CASES = [
    # (in_ch, out_ch, kernel, stride, padding, dilation, groups, hw)
    (3, 4, 3, 1, 0, 1, 1, (6, 7)),
    (3, 4, 3, 1, 1, 1, 1, (6, 6)),
    (2, 3, (3, 2), (2, 1), (1, 0), 1, 1, (7, 6)),
    (2, 3, 3, 2, 0, 1, 1, (8, 8)),
    (4, 6, 3, 1, 2, 2, 2, (7, 7)),
    (4, 4, 3, 1, 1, 1, 4, (5, 6)),
    (4, 8, 3, 2, 1, 1, 4, (6, 6)),
    (2, 2, 1, 1, 1, 1, 1, (3, 4)),
    (3, 2, 4, 3, 2, 1, 1, (9, 10)),
]


@pytest.mark.parametrize("case", CONV2D_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(case, bias):
    cin, cout, k, stride, padding, dilation, groups, hw = case
    kk = k if isinstance(k, tuple) else (k, k)
    x = randn(2, cin, *hw, seed=1)
    w = randn(cout, cin // groups, *kk, seed=2)
    b = randn(cout, seed=3) if bias else None
    grad_check(lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups), x, w, b)


@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 2), (3, 1, 1, 4)])
def test_conv1d(stride, padding, dilation, groups):
    x = randn(2, 4, 11, seed=1)
    w = randn(4, 4 // groups, 3, seed=2)
    b = randn(4, seed=3)
    grad_check(lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation, groups), x, w, b)


def test_conv3d():
    x = randn(1, 2, 5, 4, 6, seed=1)
    w = randn(3, 2, 2, 3, 2, seed=2)
    b = randn(3, seed=3)
    grad_check(lambda x, w, b: F.conv3d(x, w, b, (1, 2, 1), (1, 0, 1)), x, w, b)


def test_conv2d_same_padding():
    x = randn(1, 2, 6, 5, seed=1)
    w = randn(3, 2, 3, 3, seed=2)
    grad_check(lambda x, w: F.conv2d(x, w, padding="same"), x, w)


def test_conv2d_unbatched():
    x = randn(2, 5, 5, seed=1)
    w = randn(3, 2, 3, 3, seed=2)
    grad_check(lambda x, w: F.conv2d(x, w, padding=1), x, w)


def test_conv2d_input_grad_only():
    x = randn(2, 3, 6, 6, seed=1)
    w = randn(4, 3, 3, 3, grad=False, seed=2)
    grad_check(lambda x, w: F.conv2d(x, w, stride=2), x, w)


def test_conv2d_weight_grad_only():
    x = randn(2, 3, 6, 6, grad=False, seed=1)
    w = randn(4, 3, 3, 3, seed=2)
    grad_check(lambda x, w: F.conv2d(x, w, padding=1), x, w)


def test_conv2d_bf16():
    x = randn(2, 3, 5, 5, dtype=torch.bfloat16, seed=1)
    w = randn(4, 3, 3, 3, dtype=torch.bfloat16, seed=2)
    b = randn(4, dtype=torch.bfloat16, seed=3)
    grad_check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, f32_grad_reference=True)


CONV_T2D_CASES = [
    # (in_ch, out_ch, kernel, stride, padding, output_padding, dilation, groups, hw)
    (3, 2, 3, 1, 0, 0, 1, 1, (4, 5)),
    (3, 2, 3, 2, 1, 1, 1, 1, (4, 4)),
    (2, 4, (2, 3), (2, 1), (0, 1), 0, 1, 1, (3, 4)),
    (4, 6, 3, 2, 1, 0, 2, 2, (4, 4)),
    (4, 4, 3, 2, 0, 1, 1, 4, (3, 3)),
    (2, 3, 1, 1, 0, 0, 1, 1, (3, 3)),
]


@pytest.mark.parametrize("case", CONV_T2D_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d(case, bias):
    cin, cout, k, stride, padding, output_padding, dilation, groups, hw = case
    kk = k if isinstance(k, tuple) else (k, k)
    x = randn(2, cin, *hw, seed=1)
    w = randn(cin, cout // groups, *kk, seed=2)
    b = randn(cout, seed=3) if bias else None
    grad_check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation), x, w, b)


def test_conv_transpose1d():
    x = randn(2, 3, 6, seed=1)
    w = randn(3, 2, 4, seed=2)
    b = randn(2, seed=3)
    grad_check(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1), x, w, b)


def test_conv2d_module():
    torch.manual_seed(0)
    m = torch.nn.Conv2d(3, 5, 3, padding=1, stride=2)
    x = randn(2, 3, 8, 8, seed=1)
    grad_check(lambda x, w, b: F.conv2d(x, w, b, m.stride, m.padding), x, m.weight, m.bias)


# ---------------------------------------------------------------------------------------- pooling
MAXPOOL_CASES = [
    # (kernel, stride, padding, dilation, ceil_mode, shape)
    (2, None, 0, 1, False, (2, 3, 6, 6)),
    (3, 2, 1, 1, False, (2, 2, 7, 8)),
    (3, 2, 1, 1, True, (2, 2, 8, 8)),
    ((2, 3), (1, 2), (1, 1), 1, False, (1, 3, 5, 7)),
    (3, 1, 1, 2, False, (1, 2, 6, 6)),
    (2, 2, 0, 1, True, (3, 5, 5)),
    (3, 3, 0, 1, False, (2, 1, 7, 7)),
]


@pytest.mark.parametrize("case", MAXPOOL_CASES)
def test_max_pool2d(case):
    kernel, stride, padding, dilation, ceil_mode, shape = case
    x = randn(*shape, seed=1)

    def fn(x):
        return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True)

    out, idx = grad_check(lambda x: fn(x)[0], x), fn(to_device(x, "tpu"))[1]
    assert_same(idx, fn(x.detach())[1])
    assert out.device.type == "tpu"


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("dims", [2, 3])
def test_max_pool_integers(dims, dtype):
    """Integer max pooling, padding included (a padded tap never wins), values and indices as the CPU's."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 9, (2, 3) + (7,) * dims, generator=g).to(dtype)
    if dtype != torch.uint8:
        x = x - 4
    pool = F.max_pool2d if dims == 2 else F.max_pool3d
    got = pool(x.to("tpu"), 3, 2, 1, return_indices=True)
    want = pool(x, 3, 2, 1, return_indices=True)
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])


def test_max_pool2d_ties_and_negative_infinity():
    x = torch.tensor([[[[1.0, 1.0, 0.0], [1.0, 0.5, 0.0], [-float("inf"), -float("inf"), 2.0]]]])
    check(lambda x: F.max_pool2d(x, 2, 1, return_indices=True), x)
    y = torch.full((1, 1, 4, 4), -float("inf"))
    check(lambda y: F.max_pool2d(y, 3, 2, padding=1, return_indices=True), y)


def test_max_pool2d_bf16():
    x = randn(2, 3, 6, 6, dtype=torch.bfloat16, seed=1)
    grad_check(lambda x: F.max_pool2d(x, 2), x)


AVGPOOL_CASES = [
    # (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, shape)
    (2, None, 0, False, True, None, (2, 3, 6, 6)),
    (3, 2, 1, False, True, None, (2, 2, 7, 8)),
    (3, 2, 1, False, False, None, (2, 2, 7, 8)),
    (3, 2, 1, True, True, None, (2, 2, 8, 8)),
    (3, 2, 1, True, False, None, (2, 2, 8, 8)),
    ((2, 3), (1, 2), (1, 1), False, True, 5, (1, 3, 5, 7)),
    (2, 2, 0, True, True, None, (3, 5, 5)),
    (3, 3, 0, False, True, None, (2, 1, 7, 7)),
]


@pytest.mark.parametrize("case", AVGPOOL_CASES)
def test_avg_pool2d(case):
    kernel, stride, padding, ceil_mode, count_include_pad, divisor, shape = case
    x = randn(*shape, seed=1)
    grad_check(lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor), x)


def test_avg_pool2d_bf16():
    x = randn(2, 2, 7, 7, dtype=torch.bfloat16, seed=1)
    grad_check(lambda x: F.avg_pool2d(x, 3, 2, 1), x, f32_grad_reference=True)


@pytest.mark.parametrize("shape,out", [((2, 3, 8, 6), (4, 3)), ((2, 3, 7, 5), (3, 2)), ((3, 9, 9), (4, 4)),
                                       ((1, 2, 5, 6), (5, 6)), ((1, 2, 4, 4), (1, 1)), ((1, 2, 3, 2), (5, 4))])
def test_adaptive_avg_pool2d(shape, out):
    x = randn(*shape, seed=1)
    grad_check(lambda x: F.adaptive_avg_pool2d(x, out), x)


def test_adaptive_avg_pool2d_bf16():
    x = randn(2, 3, 7, 6, dtype=torch.bfloat16, seed=1)
    grad_check(lambda x: F.adaptive_avg_pool2d(x, (3, 3)), x, f32_grad_reference=True)


def test_adaptive_avg_pool2d_direct():
    # _adaptive_avg_pool2d itself, including output size 1 (F.adaptive_avg_pool2d uses mean for that)
    x = randn(2, 3, 5, 7, seed=1)
    grad_check(lambda x: torch.ops.aten._adaptive_avg_pool2d(x, [1, 1]), x)
    grad_check(lambda x: torch.ops.aten._adaptive_avg_pool2d(x, [2, 3]), x)


# ------------------------------------------------------------------------------ a training step
class SmallNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.GroupNorm(2, 8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = torch.nn.AdaptiveAvgPool2d((2, 2))
        self.ln = torch.nn.LayerNorm(32)
        self.emb = torch.nn.Embedding(10, 32)
        self.fc = torch.nn.Linear(32, 5)

    def forward(self, x, tok):
        h = F.max_pool2d(torch.relu(self.norm(self.conv(x))), 2)
        h = F.avg_pool2d(self.conv2(h), 1)
        h = self.pool(h).flatten(1)
        h = self.ln(h + self.emb(tok))
        return self.fc(h)


def test_training_step():
    torch.manual_seed(0)
    cpu = SmallNet()
    dev = SmallNet()
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("tpu")
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 8, 8, generator=gen)
    tok = torch.randint(0, 10, (4,), generator=gen)
    y = torch.randint(0, 5, (4,), generator=gen)
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1, foreach=False)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.1, foreach=False)
    for _ in range(2):
        for model, opt, dev_name in ((cpu, opt_c, "cpu"), (dev, opt_d, "tpu")):
            opt.zero_grad()
            loss = F.cross_entropy(model(x.to(dev_name), tok.to(dev_name)), y.to(dev_name), label_smoothing=0.1)
            loss.backward()
            opt.step()
    for (name, p_c), p_d in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(p_d.detach().cpu(), p_c.detach(), msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax])
def test_softmax_zero_dim(fn):
    for v in (0.5, float("inf"), float("nan")):
        grad_check(lambda t: fn(t, 0), torch.tensor(v, requires_grad=True), equal_nan=True)
    grad_check(lambda t: fn(t, -1), randn(3, 4, seed=15))


SOFTMAX_SHAPES = [(256, 256), (3, 7), (5, 33), (2, 3, 17), (4, 1), (300, 130), (2, 0)]


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax])
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=str)
def test_softmax_rows_match_cpu(fn, shape):
    """float32 softmax and log_softmax along the last dim (the host kernel on the CPU plugin, whole vectors
    and a partial last one) and their gradients against the CPU; rows of -inf, with a NaN, with +inf."""
    x = randn(*shape, seed=16) * 5
    if x.numel() > 8:
        x.view(-1)[3] = float("-inf")
    if x.dim() >= 2 and x.shape[0] >= 3 and x.shape[-1] >= 2:
        x[0] = float("-inf")
        x[1, 0] = float("nan")
        x[2, 1] = float("inf")
    grad_check(lambda t: fn(t, -1), x.detach().requires_grad_(), equal_nan=True)
    grad_check(lambda t: fn(t, 0), randn(5, 3, seed=17))  # not the last dim: the lowering


def test_softmax_rows_on_the_other_kernel_paths():
    """The softmax row tests again in children with the host kernels' 256-bit and portable code."""
    on_the_other_kernel_paths(__file__, "softmax_rows_match_cpu")


def test_histogramdd_matches_cpu(fallback_policy):
    """histogramdd natively: bin counts (edges from the data, one sync, or from range), edge tensors,
    weights, density, equal minimum and maximum, empty input."""
    fallback_policy("error")
    g = torch.Generator().manual_seed(4)
    x = torch.randn(40, 3, generator=g)
    w = torch.rand(40, generator=g)
    check(lambda a: torch.histogramdd(a, [3, 4, 2]), x)
    check(lambda a, b: torch.histogramdd(a, [2, 2, 5], range=[-1.0, 1.0, -2.0, 0.5, 0.0, 3.0], weight=b, density=True),
          x, w)
    check(lambda a: torch.histogramdd(a, 3), torch.ones(6, 2))  # equal min and max in every dim
    check(lambda a: torch.histogramdd(a, [2, 3]), torch.empty(0, 2))
    edges = [torch.tensor([-2.0, 0.0, 0.0, 1.5]), torch.tensor([-1.0, 1.0]), torch.tensor([-3.0, -1.0, 0.5, 2.0, 3.0])]
    check(lambda a, e0, e1, e2, b: torch.histogramdd(a, [e0, e1, e2], weight=b), x, *edges, w)
    check(lambda a: torch.histogramdd(a.reshape(4, 10, 3), [2, 2, 2], density=True), x)


def test_histogram_matches_cpu(fallback_policy):
    fallback_policy("error")
    torch.manual_seed(0)
    x = torch.randn(3, 50)
    w = torch.rand(3, 50)
    for dt in (torch.float32, torch.float64):
        xd, wd = x.to(dt), w.to(dt)
        check(lambda a: torch.histogram(a, 7), xd)
        check(lambda a, b: torch.histogram(a, 5, range=(-1.0, 1.5), weight=b, density=True), xd, wd)
        check(lambda a: torch.histogram(a, 3), torch.ones(4, dtype=dt))  # equal min and max
        check(lambda a: torch.histogram(a, 3), torch.empty(0, dtype=dt))
        edges = torch.tensor([-2.0, -0.5, 0.0, 0.0, 1.0, 2.5], dtype=dt)
        check(lambda a, e, b: torch.histogram(a, e, weight=b), xd, edges, wd)
        check(lambda a, e: torch.histogram(a, e, density=True), xd, edges, equal_nan=True)  # 0/0 in the empty bin
    for bad in (lambda d: torch.histogram(torch.tensor([0.0, float("nan")], device=d), 3),
                lambda d: torch.histogram(torch.randn(4, device=d), 3, range=(1.0, 0.0)),
                lambda d: torch.histogram(torch.randn(4, device=d), 0),
                lambda d: torch.histogram(torch.randn(4, device=d), torch.tensor([1.0], device=d))):
        with pytest.raises(RuntimeError) as cpu_error:
            bad("cpu")
        with pytest.raises(RuntimeError) as tpu_error:
            bad("tpu")
        assert str(tpu_error.value).split(":")[0] == str(cpu_error.value).split(":")[0]


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d_matches_cpu(mode, padding, align, fallback_policy):
    fallback_policy("error")
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6)
    g = torch.rand(2, 3, 4, 2, 3) * 2.6 - 1.3  # some points outside [-1, 1]
    check(lambda a, b: torch.nn.functional.grid_sample(a, b, mode=mode, padding_mode=padding, align_corners=align),
          x, g)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_bicubic_matches_cpu(padding, align, fallback_policy):
    fallback_policy("error")
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 7)
    g = torch.rand(2, 4, 6, 2) * 2.6 - 1.3
    check(lambda a, b: torch.nn.functional.grid_sample(a, b, mode="bicubic", padding_mode=padding, align_corners=align),
          x, g)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_coordinates_as_the_cpu(mode, padding, fallback_policy):
    # The CPU's vectorized kernel computes the source coordinate (g + 1) * size / 2 - 0.5, the reflection's
    # |x| - flips * span, and the corner sum with fused multiply-adds. In two roundings, OpInfo's large
    # sample (345x456, reflection) was 8.5e-4 off the CPU at values about 44; now bit for bit the CPU's.
    fallback_policy("error")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 345, 456, generator=g) * 3 + 40
    grid = torch.rand(2, 345, 456, 2, generator=g) * 2.4 - 1.2

    def f(a, b):
        return torch.nn.functional.grid_sample(a, b, mode=mode, padding_mode=padding, align_corners=False)

    got = check(f, x, grid)
    assert torch.equal(got.cpu(), f(x, grid))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_segment_reduce_along_any_axis(reduce, axis, fallback_policy):
    fallback_policy("error")
    torch.manual_seed(0)
    data = torch.randn(3, 4, 5)
    lead = data.shape[:axis]
    lengths = torch.tensor([1, 0, data.shape[axis] - 1]).expand(*lead, 3).contiguous()  # an empty segment
    offsets = torch.cat([torch.zeros(*lead, 1, dtype=torch.long), lengths.cumsum(-1)], -1)
    for kw in ({"lengths": lengths}, {"offsets": offsets}):
        for initial in (None, 2.0):
            exp = torch.segment_reduce(data, reduce, axis=axis, initial=initial, **kw)
            got = torch.segment_reduce(data.to("tpu"), reduce, axis=axis, initial=initial,
                                       **{k: v.to("tpu") for k, v in kw.items()})
            torch.testing.assert_close(got.cpu(), exp, equal_nan=True)


@pytest.mark.parametrize(
    "mode,antialias", [("bilinear", False), ("bicubic", False), ("bicubic", True)], ids=["bilinear", "bicubic", "bicubic_aa"]
)
def test_interpolate_source_coordinates_as_the_cpu(mode, antialias):
    # The CPU computes each output's source coordinate scale * (i + 0.5) - 0.5 (and the cubic weights) with
    # fused multiply-adds, rounded once; in two roundings, 345 -> 270 rows took other weights at 2 of 270,
    # and 345x456 -> 270x270 (OpInfo's large sample) differed by up to 2.3e-4 at values about 8. Now bilinear
    # is bit for bit the CPU's, the cubic modes within float32 rounding.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 345, 456, generator=g) * 3 + 8

    def f(v):
        return torch.nn.functional.interpolate(v, size=(270, 270), mode=mode, align_corners=False, antialias=antialias)

    got = check(f, x)
    if mode == "bilinear":
        assert torch.equal(got.cpu(), f(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,k,n", [(2, 300, 512), (5, 300, 512), (64, 300, 512), (65, 300, 512), (200, 1024, 1024),
                                      (8, 64, 32), (3, 64, 256), (300, 517, 509), (600, 1024, 1024), (1, 600, 1024)])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_linear_matches_cpu(dtype, rows, k, n, compiled):
    """nn.Linear at a few rows (decoding) and at many: on XLA:CPU the product of the weight's transpose goes
    to the host kernel of grouped rows up to 64 rows (256 for a weight of 1M elements, 8 for one of 1K; XLA's
    dot of that form is 10-20x slower there); beyond, a weight of 256K elements or more is transposed by the
    host kernel (edges of tiles included: 517 x 509) and the product is the dense one, on the host kernel of
    products, large ones included (XLA's dot sums all of k at once on some CPUs, 2-5x further from the float64
    result than the CPU at 517 and 1024 terms). float32 is as near the float64 result as the CPU's (within 2x) and
    within the CPU's tolerance scaled by sqrt(K); bfloat16 is the float32 sums rounded once. With a bias,
    and a 3-d input (the leading dims flattened into rows)."""
    torch.manual_seed(rows)
    x = torch.randn(rows, k).to(dtype)
    w = torch.randn(n, k).to(dtype)
    b = torch.randn(n).to(dtype)
    f = torch.nn.functional.linear
    g = torch.compile(f, backend="tpu") if compiled else f
    for args in ((x, w), (x, w, b), (x.view(1, rows, k), w, b)):
        got = g(*[a.to("tpu") for a in args]).cpu()
        assert got.dtype == dtype and got.shape == f(*args).shape
        exact = f(*[a.double() for a in args])
        if dtype == torch.float32:
            cpu = f(*args)
            ulp = 2.0**-23 * exact.abs().max()
            assert (got.double() - exact).abs().max() <= 2 * (cpu.double() - exact).abs().max() + ulp
            torch.testing.assert_close(got, cpu, atol=1e-5 * (k / 16) ** 0.5, rtol=1.3e-6 * (k / 16) ** 0.5)
        else:
            torch.testing.assert_close(got, exact.float().to(dtype), atol=1e-5 * (k / 16) ** 0.5, rtol=1.6e-2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64])
def test_product_with_a_transposed_matrix_of_other_types_matches_cpu(dtype):
    """The transposed-weight path for 8-byte and 2-byte elements (and integers, which are exact)."""
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(300, 600, generator=g), torch.randn(600, 600, generator=g)
    if dtype == torch.int64:
        x, w = (x * 3).round(), (w * 3).round()
    x, w = x.to(dtype), w.to(dtype)
    got = (x.to("tpu") @ w.to("tpu").t()).cpu()
    if dtype == torch.float16:  # float32 sums rounded once, as the CPU's
        torch.testing.assert_close(got, (x.float() @ w.float().t()).half(), atol=0.05, rtol=2e-3)
    else:
        torch.testing.assert_close(got, x @ w.t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batched_product_with_transposed_factor_matches_cpu(dtype):
    """q @ k.transpose(-2, -1) as eager attention code writes it: on XLA:CPU the transposed factor is
    transposed by the host kernel (batched) and the product is the dense one; 3-d and 4-d, odd sizes."""
    g = torch.Generator().manual_seed(5)
    for qs, ks in (((16, 40, 64), (16, 130, 64)), ((2, 6, 33, 72), (2, 6, 257, 72))):
        q, k = torch.randn(*qs, generator=g).to(dtype), torch.randn(*ks, generator=g).to(dtype)
        got = (q.to("tpu") @ k.to("tpu").transpose(-2, -1)).cpu()
        if dtype == torch.float32:
            torch.testing.assert_close(got, q @ k.transpose(-2, -1), atol=2e-5, rtol=2e-6)
        else:  # float32 sums rounded once
            torch.testing.assert_close(got, (q.float() @ k.float().transpose(-2, -1)).to(dtype), atol=1e-2, rtol=1.6e-2)


def as_near_as_cpu(got, cpu, exact):
    """A float32 result from "tpu" as near the float64 result as the CPU's: within 2x of the CPU's own
    error, plus an ulp of the largest."""
    assert got.dtype == cpu.dtype and got.shape == cpu.shape
    ulp = 2.0**-23 * exact.abs().max()
    assert (got.double() - exact).abs().max() <= 2 * (cpu.double() - exact).abs().max() + ulp


def product_close(got, x, y):
    """... and, for a product of k terms, within the CPU's tolerance scaled by sqrt(k)."""
    cpu = x @ y
    as_near_as_cpu(got, cpu, x.double() @ y.double())
    scale = (x.shape[-1] / 16) ** 0.5
    torch.testing.assert_close(got, cpu, atol=1e-5 * scale, rtol=1.3e-6 * scale)


@pytest.mark.parametrize("m,k,n", [(256, 64, 64), (37, 50, 70), (8, 8, 16), (100, 300, 33), (130, 600, 96),
                                   (1000, 64, 200), (9, 17, 513), (64, 256, 128)], ids=str)
def test_matrix_products_of_every_layout_match_cpu(m, k, n):
    """float32 products at a small model's sizes (on XLA:CPU the host kernel of matrix products): each
    factor dense or a transposed view (x.t(), the four layouts the kernel takes), batched (bmm, and a
    transposed batch of matrices), rows past the last whole tile of rows, columns past the last whole panel,
    k past one block of 256 and not a multiple of the vector width, sizes both sides of the threads'
    threshold; and the gradients of a product with a transposed weight (a linear layer)."""
    g = torch.Generator().manual_seed(m + k + n)
    a, at = torch.randn(m, k, generator=g), torch.randn(k, m, generator=g)
    b, bt = torch.randn(k, n, generator=g), torch.randn(n, k, generator=g)
    for x, y in ((a, b), (a, bt.t()), (at.t(), b), (at.t(), bt.t())):
        product_close((x.to("tpu") @ y.to("tpu")).cpu(), x, y)
    xb, yb = torch.randn(3, m, k, generator=g), torch.randn(3, n, k, generator=g)
    product_close(torch.bmm(xb.to("tpu"), yb.to("tpu").transpose(1, 2)).cpu(), xb, yb.transpose(1, 2))
    product_close(torch.bmm(xb.to("tpu"), yb.to("tpu").mT.contiguous()).cpu(), xb, yb.mT.contiguous())
    def grads(x, w):  # a linear layer's: x w^T, then the gradients of a loss through it
        x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
        return torch.autograd.grad((x @ w.t()).square().sum(), (x, w))

    got, cpu, exact = grads(a.to("tpu"), bt.to("tpu")), grads(a, bt), grads(a.double(), bt.double())
    as_near_as_cpu(got[0].cpu(), cpu[0], exact[0])
    as_near_as_cpu(got[1].cpu(), cpu[1], exact[1])


def test_matrix_products_on_the_other_kernel_paths():
    """The products' tests again in children with the host kernels' 256-bit and portable code."""
    on_the_other_kernel_paths(__file__, "matrix_products_of_every_layout")


@pytest.mark.parametrize("m,k,n,transposed", [(600, 1024, 1024, False), (300, 517, 509, True)])
def test_large_products_sum_k_in_blocks(m, k, n, transposed):
    """A large float32 product sums its k terms in blocks, on every CPU: at least 2x nearer the float64
    result than one running float32 sum over k in order (what XLA's dot gave on a CPU whose caches let it
    take k whole: exactly that sum's error), and as near as the CPU's product (within 2x)."""
    g = torch.Generator().manual_seed(m + k)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) if transposed else torch.randn(k, n, generator=g)
    y = w.t() if transposed else w
    got = (x.to("tpu") @ (w.to("tpu").t() if transposed else w.to("tpu"))).cpu()
    exact = x.double() @ y.double()
    running = torch.zeros(m, n)
    for i in range(k):  # one running sum, in float32, term by term
        running = running + x[:, i:i + 1] * y[i:i + 1, :]
    err = (got.double() - exact).abs().max()
    assert err <= 0.5 * (running.double() - exact).abs().max()
    as_near_as_cpu(got, x @ y, exact)


def test_linear_on_the_portable_kernels():
    """The linear tests again in a child process with the host kernels' portable loops (CPUs without
    AVX2: the transpose element by element, the grouped rows without vector code)."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", __file__, "-k",
           "linear_matches_cpu and eager or transposed_matrix_of_other_types or transposed_factor"]
    env = dict(os.environ, TORCH_PJRT_KERNEL_ISA="portable")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
