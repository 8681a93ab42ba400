"""PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations.op_db) run on "tpu" and
compared with the CPU: every op in NATIVE_OPS runs its first MAX_SAMPLES float32 sample inputs natively
(the CPU fallback is an error in tests, see conftest.py) and must match PyTorch's CPU result on the same
inputs with assert_close's default tolerances (equal_nan=True). Where the CPU rejects a sample the tpu
must reject it too.

NATIVE_OPS lists the entries that tools/coverage.py classifies as "native" for float32. Left out, with
their reasons:
  - random ops (randn, randint, rand_like, normal, bernoulli, dropout, ...) and uninitialized memory
    (empty, new_empty, empty_like, ...): their values are not comparable with the CPU's;
  - addbmm, nn.functional.conv_transpose3d: a few elements differ from the CPU by ~1e-5 (the device
    sums in a different order; see the report of the coverage run);
  - as_strided.partial_views: the sample reads storage outside the view, which a device copy of the
    view does not have;
  - to: a device transfer (its samples return CPU tensors by design); jiterator_*: CUDA-only (the CPU
    rejects every sample, so nothing would be compared);
  - ops that fall back (no lowering yet; repeat_interleave and linalg.matrix_power from their fourth
    sample on) or whose existing rows have known bugs (std, var, std_mean, var_mean with a dim,
    logical_and with a broadcast self, native_batch_norm in eval mode).

Factory samples (a device= argument) are built on tpu here; tools/coverage.py leaves them on the CPU.

GRAD_CASES compares gradients (the backward rows: upsampling, padding, pooling, grid_sample, ...) with
the CPU's through autograd.
"""

import importlib.util
import math
import os

import pytest
import torch
import torch.nn.functional as F

_TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "coverage.py")
_spec = importlib.util.spec_from_file_location("torch_pjrt_coverage_tool", _TOOL)
_coverage = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_coverage)  # its to(): the same device transfer as the coverage tool

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

MAX_SAMPLES = 3

# Made native by csrc/lowering/extra.cpp and extra_nn.cpp.
EXTRA_OPS = [
    '_upsample_bilinear2d_aa', '_segment_reduce.lengths', '_segment_reduce.offsets',
    'cdist', 'copysign', 'cross', 'cummax', 'cummin', 'fmax', 'fmin', 'stft', 'i0', 'frexp', 'isin',
    'kthvalue', 'logaddexp', 'logaddexp2', 'median', 'nanmedian', 'logical_xor', 'heaviside', 'aminmax',
    'nn.functional.adaptive_avg_pool3d', 'nn.functional.adaptive_max_pool1d',
    'nn.functional.adaptive_max_pool2d', 'nn.functional.adaptive_max_pool3d', 'nn.functional.avg_pool3d',
    'nn.functional.pad.reflect', 'nn.functional.pad.replicate', 'nn.functional.pad.replicate_negative',
    'nn.functional.unfold', 'nn.functional.interpolate.nearest', 'nn.functional.interpolate.nearest-exact',
    'nn.functional.interpolate.linear', 'nn.functional.interpolate.bilinear',
    'nn.functional.interpolate.bicubic', 'nn.functional.interpolate.trilinear',
    'nn.functional.upsample_bilinear', 'nn.functional.upsample_nearest', 'nn.functional.multi_margin_loss',
    'nn.functional.multilabel_margin_loss', 'nn.functional.multilabel_soft_margin_loss',
    'nn.functional.max_pool3d', 'nn.functional.max_unpool1d', 'nn.functional.max_unpool1d.grad',
    'nn.functional.max_unpool2d', 'nn.functional.max_unpool2d.grad', 'nn.functional.max_unpool3d',
    'nn.functional.max_unpool3d.grad', 'nn.functional.glu', 'nn.functional.prelu',
    'nn.functional.logsigmoid', 'nn.functional.triplet_margin_loss',
    'nn.functional.triplet_margin_with_distance_loss', 'nextafter', 'nn.functional.softshrink',
    'nn.functional.hardshrink', 'mode', 'dist', 'round.decimals_0', 'round.decimals_3',
    'round.decimals_neg_3', 'sinc', 'signbit', 'angle', 'polar', 'polygamma.polygamma_n_0',
    'polygamma.polygamma_n_1', 'polygamma.polygamma_n_2', 'polygamma.polygamma_n_3',
    'polygamma.polygamma_n_4', 'index_reduce.mean', 'index_reduce.prod', 'index_reduce.amin',
    'index_reduce.amax', 'hypot', 'histc', 'bucketize', 'searchsorted', 'renorm', 'xlogy', 'trace', 'logit',
    'nonzero_static', 'nn.functional.grid_sample', 'grid_sampler_2d', 'nanmean', 'nansum',
    'nn.functional.pdist', 'nn.functional.pairwise_distance', 'nn.functional.channel_shuffle',
    'nn.functional.kl_div', 'fft.fft', 'fft.fft2', 'fft.fftn', 'fft.hfft', 'fft.hfft2', 'fft.hfftn',
    'fft.rfft', 'fft.rfft2', 'fft.rfftn', 'fft.ifft', 'fft.ifft2', 'fft.ifftn', 'fft.ihfft', 'fft.ihfft2',
    'fft.ihfftn', 'fft.irfft', 'fft.irfft2', 'fft.irfftn', 'linalg.cross', 'special.i0e', 'special.i1',
    'special.i1e', 'special.polygamma.special_polygamma_n_0', 'special.xlog1py', 'special.zeta',
    'special.entr', 'special.ndtri', 'special.log_ndtr', 'special.erfcx', 'masked.median',
    'masked.logaddexp',
]

# Native through the other category files.
OTHER_OPS = [
    'abs', 'acos', 'acosh', 'add', 'item', 'arange', 'clamp_max', 'clamp_min', 'mul', 'sub', 'addmm',
    'addmm.decomposed', 'addmv', 'baddbmm', 'dot', 'vdot', 'bmm', 'mv', 'addr', 'addcmul', 'addcdiv', 'asin',
    'asinh', 'atan', 'atan2', 'atanh', 'allclose', 'broadcast_to', 'broadcast_shapes', 'broadcast_tensors',
    'block_diag', 'combinations', 'cartesian_prod', 'ceil', 'chunk', 'unsafe_chunk', 'clone', 'contiguous',
    'sum_to_size', 'clamp', 'positive', 'conj', 'conj_physical', 'resolve_conj', 'resolve_neg',
    'view_as_complex', 'complex', 'cos', 'cosh', 'cumsum', 'cumprod', 'deg2rad', 'diff',
    'div.no_rounding_mode', 'div.trunc_rounding', 'div.floor_rounding', 'true_divide', 'exp', 'expand',
    'expand_as', 'expand_copy', 'diag', 'diag_embed', 'diagonal', 'diagonal_copy', 'diagonal_scatter',
    'alias_copy', 'eq', 'fmod', 'remainder', 'frac', 'floor', 'flip', 'fliplr', 'flipud', 'floor_divide',
    'log1p', 'ge', 'gt', 'gradient', 'le', 'linspace', 'linspace.tensor_overload', 'logspace',
    'logspace.tensor_overload', 'log', 'log10', 'log2', 'ldexp', 'logical_not', 'lt', 'masked_fill',
    'masked_scatter', 'masked_select', 'matmul', 'max.reduction_with_dim', 'max.reduction_no_dim',
    'var_mean.unbiased', 'std_mean.unbiased', 'meshgrid.variadic_tensors', 'meshgrid.list_of_tensors',
    'min.reduction_with_dim', 'min.reduction_no_dim', 'quantile', 'nanquantile', 'max.binary', 'maximum',
    'min.binary', 'minimum', 'logical_or', 'isclose', 'softmax', 'softmax.with_dtype',
    '_softmax_backward_data', 'nn.functional.softmin', 'nn.functional.softmin.with_dtype',
    'nn.functional.cross_entropy', 'nn.functional.linear_cross_entropy',
    'nn.functional.linear_cross_entropy.chunked', 'nn.functional.linear_cross_entropy.chunked_none',
    'nn.functional.normalize', 'as_strided', 'as_strided_copy', 'as_strided_scatter', 'native_group_norm',
    'native_layer_norm', 'nn.functional.cosine_similarity', 'nn.functional.adaptive_avg_pool1d',
    'nn.functional.adaptive_avg_pool2d', 'nn.functional.avg_pool1d',
    'nn.functional.binary_cross_entropy_with_logits', 'nn.functional.relu', 'nn.functional.conv_transpose1d',
    'nn.functional.conv_transpose2d', 'nn.functional.conv1d', 'nn.functional.conv2d', 'nn.functional.conv3d',
    'nn.functional.group_norm', 'nn.functional.instance_norm', 'nn.functional.layer_norm',
    'nn.functional.rms_norm', 'nn.functional.local_response_norm', 'constant_pad_nd',
    'nn.functional.pad.constant', 'nn.functional.pad.circular', 'nn.functional.hardswish',
    'nn.functional.interpolate.area', 'nn.functional.soft_margin_loss', 'nn.functional.margin_ranking_loss',
    'nn.functional.leaky_relu', 'nn.functional.avg_pool2d', 'nn.functional.max_pool1d',
    'nn.functional.max_pool2d', 'max_pool2d_with_indices_backward', 'nn.functional.linear',
    'nn.functional.bilinear', 'nn.functional.elu', 'nn.functional.celu', 'nn.functional.selu',
    'torch.ops.aten._safe_softmax.default', 'nn.functional.silu', 'nn.functional.hardsigmoid',
    'nn.functional.mish', 'nn.functional.softsign', 'nn.functional.tanhshrink', 'nn.functional.threshold',
    'topk', 'nn.functional.batch_norm', 'nn.functional.binary_cross_entropy', 'nn.functional.hardtanh',
    'nn.functional.gelu', 'nn.functional.relu6', 'mm', 'ne', 'narrow', 'narrow_copy', 'view_copy', 'neg',
    'outer', 'permute', 'permute_copy', 'pow', 'float_power', 'rad2deg', 'real', 'roll', 'rot90', 'round',
    'sin', 'sinh', 'sign', 'sgn', 'split', 'split.list_args', 'unsafe_split', 'split_with_sizes',
    'split_with_sizes_copy', '__radd__', '__rdiv__', '__rmul__', '__rmatmul__', '__rmod__', '__rpow__',
    '__rsub__', 'rsub', 'select', 'select_scatter', 'slice', 'slice_scatter', 'tan', 'tanh', 'hsplit',
    'vsplit', 'dsplit', 'trunc', 'exp2', 'expm1', 'nan_to_num', 'reciprocal', 'rsqrt', 'sqrt', 'square',
    'lerp', 'isfinite', 'isinf', 'isposinf', 'isneginf', 'isreal', 'isnan', 'einsum', 'ravel', 'reshape',
    'reshape_as', 'view', 'view_as', 'atleast_1d', 'atleast_2d', 'atleast_3d', 'flatten', 'unflatten',
    'column_stack', 'gather', 'index_fill', 'index_copy', 'index_select', 'index_add',
    '_unsafe_masked_index', '_unsafe_masked_index_put_accumulate', '__getitem__', 'index_put', 'sort', 'put',
    'take', 'scatter', 'bfloat16', 'bool', 'byte', 'char', 'double', 'float', 'half', 'int', 'long', 'short',
    'cdouble', 'cfloat', 'zeros_like', 'ones_like', 'full_like', 'new_zeros', 'new_ones', 'ones', 'zeros',
    'full', 'eye', 'scalar_tensor', 'new_full', 'scatter_add', 'stack', '_chunk_cat', 'hstack', 'cat',
    'unbind', 'unbind_copy', 'vstack', 'dstack', 'unfold', 'unfold_copy', 'msort', 'movedim', 'repeat',
    'squeeze', 'squeeze.multiple', 'squeeze_copy', 'fill', 'resize_', 'resize_as_', 'take_along_dim', 'tile',
    'trapz', 'trapezoid', 'cumulative_trapezoid', 'unsqueeze', 'unsqueeze_copy', 'zero_', 'logsumexp',
    'transpose', 'transpose_copy', 'T', 'H', 'mT', 'mH', 'tril', 'triu', 'kron', 'inner', 'tensordot',
    'sigmoid', 'digamma', 'erf', 'erfc', 'erfinv', 'nn.functional.smooth_l1_loss', 'nn.functional.l1_loss',
    'lgamma', 'log_softmax', 'log_softmax.with_dtype', 'where', 'nonzero', 
    
    'norm', 'norm.fro', 'norm.inf', 't', 't_copy', 'native_dropout_backward',
    'nn.functional.feature_alpha_dropout.without_train', 'nn.functional.embedding', 'nn.functional.softplus',
    'nn.functional.mse_loss', 'argwhere', 'all', 'any', 'amax', 'amin', 'argmax', 'argmin', 'count_nonzero',
    'mean', 'std.unbiased', 'var.unbiased', 'prod', 'sum', 'nn.functional.cosine_embedding_loss',
    'nn.functional.nll_loss', 'nn.functional.gaussian_nll_loss', 'nn.functional.hinge_embedding_loss',
    'nn.functional.huber_loss', 'nn.functional.poisson_nll_loss', 'argsort', 'nn.functional.pixel_shuffle',
    'nn.functional.pixel_unshuffle', 'diagflat', 'scatter_reduce.sum', 'scatter_reduce.prod',
    'scatter_reduce.mean', 'scatter_reduce.amin', 'scatter_reduce.amax', 'fft.fftshift', 'fft.ifftshift',
    'linalg.diagonal', 'linalg.vecdot', 'linalg.multi_dot', 'linalg.norm',
    'linalg.norm.subgradients_at_zero', 'linalg.matrix_norm', 'linalg.vander', 'linalg.vector_norm',
    'signal.windows.hamming', 'signal.windows.hann', 'signal.windows.bartlett', 'signal.windows.blackman',
    'signal.windows.cosine', 'signal.windows.exponential', 'signal.windows.gaussian',
    'signal.windows.kaiser', 'signal.windows.general_cosine', 'signal.windows.general_hamming',
    'signal.windows.nuttall', 'special.ndtr', 'masked.sum', 'masked.prod', 'masked.cumsum', 'masked.cumprod',
    'masked.amax', 'masked.amin', 'masked.argmax', 'masked.argmin', 'masked.mean', 'masked.norm',
    'masked.var', 'masked.std', 'masked.softmax', 'masked.log_softmax', 'masked.softmin', 'masked.normalize',
    'masked.logsumexp', 'bmm.triton_optimized',
]

NATIVE_OPS = EXTRA_OPS + OTHER_OPS

# Integer-only entries (no float32 samples), run with int64 inputs; the shifts, gcd and lcm come from
# extra.cpp.
INT64_OPS = [
    'bitwise_left_shift', 'bitwise_right_shift', 'gcd', 'lcm', 'bitwise_not', 'bitwise_and', 'bitwise_or',
    'bitwise_xor', '__rand__', '__ror__', '__rxor__', 'unravel_index', 'triu_indices', 'tril_indices',
    'nn.functional.one_hot',
]


def _key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


_OPS = {_key(op): op for op in op_db}


def _assert_same(got, expected):
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got)}"
        assert got.device.type == "tpu", f"result is on {got.device}, not tpu"
        torch.testing.assert_close(got.cpu(), expected, equal_nan=True)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(expected)
        for g, e in zip(got, expected):
            _assert_same(g, e)
    elif isinstance(expected, float) and math.isnan(expected):
        assert isinstance(got, float) and math.isnan(got)
    else:
        assert got == expected, f"{got} != {expected}"


def _on_tpu(sample):
    """The sample's tensors moved to tpu; factory samples (a device= argument) build on tpu."""
    kwargs = _coverage.to(sample.kwargs, "tpu")
    if "device" in kwargs:
        kwargs["device"] = "tpu"
    return _coverage.to(sample.input, "tpu"), _coverage.to(sample.args, "tpu"), kwargs


def _compare_samples(name, dtype):
    op = _OPS[name]
    torch.manual_seed(0)
    samples = list(op.sample_inputs("cpu", dtype))[:MAX_SAMPLES]
    compared = 0
    for s in samples:
        on_tpu = _on_tpu(s)
        try:
            expected = op(s.input, *s.args, **s.kwargs)
        except Exception:
            with pytest.raises(Exception):
                op(on_tpu[0], *on_tpu[1], **on_tpu[2])
            continue
        got = op(on_tpu[0], *on_tpu[1], **on_tpu[2])
        _assert_same(got, expected)
        compared += 1
    assert compared > 0, "no sample ran on the CPU"


@pytest.mark.parametrize("name", NATIVE_OPS)
def test_opinfo_matches_cpu(name):
    _compare_samples(name, torch.float32)


@pytest.mark.parametrize("name", INT64_OPS)
def test_opinfo_int64_matches_cpu(name):
    _compare_samples(name, torch.int64)


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
