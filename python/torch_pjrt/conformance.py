"""Op conformance measured with PyTorch's own OpInfo database.

    python -m torch_pjrt.conformance [--dtype float32,bfloat16,...] [--grad] [--only add,nn.functional.conv2d]
                                     [--samples N] [--json out.json] [--markdown out.md]

(also ``python -m torch_pjrt conformance ...``). Every OpInfo of
``torch.testing._internal.common_methods_invocations.op_db`` (every variant) runs its reference inputs
(``reference_inputs``: the sample inputs plus, where the OpInfo defines them, the extremal reference
inputs; ``--samples N`` keeps the first N) on "tpu" with the CPU fallback as an error, and on the CPU.
Samples are built on the CPU from a fixed seed and moved; a ``device`` argument (factory ops) becomes
"tpu", and every tensor result must be on "tpu", so nothing runs on the CPU by accident.

Each (op, dtype) is exactly one of

  pass         every sample matched the CPU (``torch.testing.assert_close`` with the dtype's default
               tolerances, NaN equal to NaN, dtypes checked); where the CPU rejects a sample, "tpu" must too
  mismatch     a result differed: the first difference is named
  not lowered  an ATen op without a native lowering was needed (named)
  error        "tpu" raised where the CPU did not (the first exception)
  skipped      with the reason (the CPU lacks the dtype, PyTorch's sample generator raised, the CPU
               rejects every sample)

Where a sample defines ``output_process_fn_grad`` (PyTorch's linalg samples: the singular vectors and
eigenvectors, unique only up to sign, become their absolute values or U @ Vh), both results are compared
through it, as PyTorch's own CPU-vs-device test (``TestCommon.test_compare_cpu``) and gradient tests do.

Random ops (their values are not the CPU's stream) pass when their results have the CPU's shapes and
dtypes and are reproduced exactly under ``torch.manual_seed``; their distributions are tested in
tests/python/test_random.py. Ops returning uninitialized memory (empty, new_empty, ...) are compared by
shape, dtype and strides only.

``--grad`` adds float32 gradients for OpInfos with ``supports_autograd``: the same samples with
``requires_grad``, the gradients of all outputs (weighted by fixed random cotangents) with respect to all
inputs, compared with the CPU's. The last lines are the totals per dtype and for gradients.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Iterable

import torch

DTYPES = ("float32", "bfloat16", "float16", "int64", "int32", "bool")
STATUSES = ("pass", "mismatch", "not lowered", "error", "skipped")
GRAD = "grad"  # the report's key for float32 gradients

# Ops whose values come from a random stream (not the CPU's): checked by properties.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "normal.in_place", "normal.number_mean", "uniform", "rand_like", "randn", "randn_like", "randint",
    "randint_like", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
}
# Samples of other ops that draw from the random stream (attention with dropout): by properties too.
def _random_sample(name: str, s) -> bool:
    if name == "nn.functional.scaled_dot_product_attention":
        return s.kwargs.get("dropout_p", 0.0) > 0
    if name == "nn.functional.multi_head_attention_forward":
        p = s.kwargs.get("dropout_p", s.args[9] if len(s.args) > 9 else 0.0)
        return p > 0 and s.kwargs.get("training", True)
    return False


# (values, indices) ops whose indices among equal values are unspecified (the CPU's depend on its partial
# sort, or for mode on std::sort, which is unstable on rows longer than 16): values must match, and the
# indices must select those values from the input.
TIED_INDEX_OPS = {"topk": 1, "mode": 0, "kthvalue": 1}  # -> the position of the dim argument after the input
# sort and argsort without stable=True: the order among equal elements is unspecified (the CPU's is its
# unstable sort's): the values (sort) must match, and the indices must select them.
UNSTABLE_SORT_OPS = {"sort", "argsort"}
# Ops whose tensor arguments after the input are host data by definition (PyTorch requires them on the CPU).
HOST_TENSOR_ARGS = {"tensor_split"}
# Ops returning uninitialized memory: shapes, dtypes and strides only.
UNINITIALIZED_OPS = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}


@dataclasses.dataclass
class Result:
    status: str
    detail: str = ""
    samples: int = 0  # samples compared
    seconds: float = 0.0
    # a floating-point mismatch where tpu's result is no farther from the float64 result on the same inputs
    # than the CPU's own (another summation order or rounding, not a wrong answer): still a mismatch
    nearer_exact: bool = False


def key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# ----------------------------------------------------------------------------------- moving samples


def _with_storage(x: torch.Tensor) -> torch.Tensor:
    """x on "tpu" as the same view of a copy of its whole storage: a view that reaches past its own
    elements (as_strided with a storage offset, of a slice) reads what the CPU's would."""
    if x.layout != torch.strided or x.is_conj() or x.is_neg() or x.dtype.is_complex:
        return x.to("tpu")
    n = x.untyped_storage().nbytes() // max(x.element_size(), 1)
    if x.storage_offset() == 0 and n == x.numel() and x.is_contiguous():
        return x.to("tpu")
    whole = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0, (n,), (1,))
    return whole.to("tpu").as_strided(x.size(), x.stride(), x.storage_offset())


def to_tpu(x, grad: bool = False):
    """x with every CPU tensor copied to "tpu" (requires_grad kept when `grad`) and every device
    argument turned into "tpu"."""
    if isinstance(x, torch.Tensor):
        y = _with_storage(x.detach())
        if grad and x.requires_grad:
            y.requires_grad_(True)
        return y
    if isinstance(x, torch.device):
        return torch.device("tpu") if x.type == "cpu" else x
    if isinstance(x, str) and x == "cpu":  # a device argument written as a string
        return "tpu"
    if isinstance(x, torch.Size):
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(e, grad) for e in x) if not hasattr(x, "_fields") else type(x)(*(to_tpu(e, grad) for e in x))
    if isinstance(x, dict):
        out = {k: to_tpu(v, grad) for k, v in x.items()}
        if isinstance(out.get("device"), str) and out["device"].startswith("cpu"):
            out["device"] = "tpu"
        return out
    return x


def _tensors(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for e in x for t in _tensors(e)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


# ---------------------------------------------------------------------------------------- comparing


class Mismatch(AssertionError):
    pass


def _first_difference(got: torch.Tensor, exp: torch.Tensor, rtol: float, atol: float) -> str:
    if got.shape != exp.shape:
        return f"shape {tuple(got.shape)} != CPU {tuple(exp.shape)}"
    if got.dtype != exp.dtype:
        return f"dtype {got.dtype} != CPU {exp.dtype}"
    g, e = got, exp
    if g.is_conj():
        g = g.resolve_conj()
    if e.is_conj():
        e = e.resolve_conj()
    if g.dtype == torch.bool or not (g.is_floating_point() or g.is_complex()):
        bad = g != e
    else:
        bad = ~torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
    n = int(bad.sum())
    if n == 0:
        return "values differ"
    idx = tuple(int(i) for i in bad.nonzero()[0]) if bad.dim() else ()
    return f"{n}/{bad.numel()} elements differ; first at {list(idx)}: tpu {g[idx].item()!r}, CPU {e[idx].item()!r}"


def assert_same(got, exp, path: str = "result") -> None:
    """got (from "tpu") equals exp (from the CPU) under assert_close's default tolerances for the dtype."""
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Mismatch(f"{path}: expected a tensor, got {type(got).__name__}")
        if exp.device.type == "cpu" and got.device.type != "tpu":
            raise Mismatch(f"{path}: result is on {got.device}, not tpu")
        g = got.detach().cpu()
        e = exp.detach()
        try:
            torch.testing.assert_close(g, e, equal_nan=True, check_device=False)
        except AssertionError:
            from torch.testing._comparison import default_tolerances

            rtol, atol = default_tolerances(e)
            raise Mismatch(f"{path}: {_first_difference(g, e, rtol, atol)}") from None
    elif isinstance(exp, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(exp):
            raise Mismatch(f"{path}: expected a sequence of {len(exp)}, got {type(got).__name__}")
        for i, (g, e) in enumerate(zip(got, exp)):
            assert_same(g, e, f"{path}[{i}]")
    elif isinstance(exp, float) and isinstance(got, float):
        if not (math.isnan(exp) and math.isnan(got)):
            try:
                torch.testing.assert_close(got, exp)
            except AssertionError:
                raise Mismatch(f"{path}: tpu {got!r}, CPU {exp!r}") from None
    elif got != exp:
        raise Mismatch(f"{path}: tpu {got!r}, CPU {exp!r}")


def _assert_like(got, exp, path="result", strides=False):
    """Shapes, dtypes (and strides) only: uninitialized memory and random values."""
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.device.type != "tpu":
            raise Mismatch(f"{path}: expected a tpu tensor, got {got!r:.60}")
        if got.shape != exp.shape or got.dtype != exp.dtype:
            raise Mismatch(f"{path}: {tuple(got.shape)} {got.dtype} != CPU {tuple(exp.shape)} {exp.dtype}")
        if strides and got.stride() != exp.stride():
            raise Mismatch(f"{path}: strides {got.stride()} != CPU {exp.stride()}")
    elif isinstance(exp, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(exp):
            raise Mismatch(f"{path}: expected a sequence of {len(exp)}")
        for i, (g, e) in enumerate(zip(got, exp)):
            _assert_like(g, e, f"{path}[{i}]", strides)


def _assert_same_values_tied_indices(got, exp, sample, dim_arg):
    assert_same(got[0], exp[0], "result[0]")
    dim = sample.kwargs.get("dim", sample.args[dim_arg] if len(sample.args) > dim_arg else -1)
    idx = got[1].cpu()
    if idx.dtype != exp[1].dtype or idx.shape != exp[1].shape:
        raise Mismatch(f"result[1]: {tuple(idx.shape)} {idx.dtype} != CPU {tuple(exp[1].shape)} {exp[1].dtype}")
    if not sample.input.dim():
        picked = sample.input.reshape(idx.shape)
    elif idx.dim() < sample.input.dim():  # a reduction without keepdim
        picked = sample.input.gather(dim, idx.unsqueeze(dim)).squeeze(dim)
    else:
        picked = sample.input.gather(dim, idx)
    try:
        torch.testing.assert_close(picked, exp[0], equal_nan=True, rtol=0, atol=0)
    except AssertionError:
        raise Mismatch("result[1]: the indices do not select the values") from None


def _assert_sorted_tied(got, exp, sample, indices_only):
    dim = sample.kwargs.get("dim", sample.args[0] if sample.args and isinstance(sample.args[0], int) else -1)
    x = sample.input
    idx, want = (got, exp) if indices_only else (got[1], exp[1])
    if not indices_only:
        assert_same(got[0], exp[0], "result[0]")
    idx = idx.cpu()
    if idx.dtype != want.dtype or idx.shape != want.shape:
        raise Mismatch(f"indices: {tuple(idx.shape)} {idx.dtype} != CPU {tuple(want.shape)} {want.dtype}")
    if x.dim() == 0:
        if not torch.equal(idx, want):
            raise Mismatch(f"indices: {idx} != CPU {want}")
        return
    try:
        torch.testing.assert_close(x.gather(dim, idx), x.gather(dim, want), equal_nan=True, rtol=0, atol=0)
    except AssertionError:
        raise Mismatch("indices: they do not select the CPU's sorted values") from None


# PyTorch's own tests that compare the CPU's result with an independent implementation: where an OpInfo
# widens their tolerance, the CPU itself is that far from the reference. Reported, never used to pass.
_REFERENCE_TESTS = {("TestCommon", "test_numpy_refs"), ("TestCommon", "test_compare_cpu")}


def _to_double(x, keep_grad: bool = False):
    """x with its floating-point tensors in float64 (detached; a leaf requiring grad where x's did and
    `keep_grad`)."""
    if isinstance(x, torch.Tensor):
        y = x.detach().double() if x.dtype.is_floating_point else x.detach()
        return y.requires_grad_(True) if keep_grad and x.requires_grad and y.is_floating_point() else y
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_to_double(e, keep_grad) for e in x)
    if isinstance(x, dict):
        return {k: _to_double(v, keep_grad) for k, v in x.items()}
    return x


def _max_error(v, r) -> float:
    """The largest |v - r| where r is finite; inf where v is NaN there, or differs from a non-finite r (a
    NaN or infinity in place of a number is never "nearer")."""
    finite = torch.isfinite(r)
    d = (v - r)[finite].abs()
    if d.isnan().any():
        return math.inf
    other = ~finite & ~((v == r) | (v.isnan() & r.isnan()))
    return math.inf if other.any() else (d.max().item() if d.numel() else 0.0)


def _nearer_exact(op, sample, dtype, got, exp, grad_seed: int | None = None) -> tuple[str, bool]:
    """For a floating-point mismatch: which side is nearer the CPU's float64 result on the same inputs (a
    note, never used to pass), and whether it is tpu. With `grad_seed`, got and exp are gradients (of the
    sample numbered grad_seed), and the reference is the float64 gradient with the same cotangents."""
    if dtype not in (torch.float32, torch.bfloat16, torch.float16) or got is None:
        return "", False
    try:
        if grad_seed is None:
            ref = op(_to_double(sample.input), *_to_double(sample.args), **_to_double(sample.kwargs))
        else:
            ref = _grads(op, _to_double((sample.input, sample.args, sample.kwargs), keep_grad=True), grad_seed,
                         sample.output_process_fn_grad)
        errs, differing = [0.0, 0.0], 0
        for g, e, r in zip(_tensors(got), _tensors(exp), _tensors(ref)):
            if not r.dtype.is_floating_point or g.dtype == r.dtype or g.shape != r.shape or e.shape != r.shape:
                return "", False
            # judged over the elements where the two differ at all: where they agree both are equally near,
            # and such elements far off on both sides (near a pole) would decide the maximum for nothing
            gd, ed = g.detach().cpu().double(), e.detach().double()
            differ = (gd != ed) & ~(gd.isnan() & ed.isnan())
            differing += int(differ.sum())
            for j, v in enumerate((gd, ed)):
                errs[j] = max(errs[j], _max_error(v[differ], r.detach()[differ]))
    except Exception:
        return "", False
    if not differing:
        return "", False
    side = "tpu" if errs[0] <= errs[1] else "the CPU"
    return (f" ({side} is nearer the float64 result where they differ: max error tpu {errs[0]:.3g}, CPU "
            f"{errs[1]:.3g}, over {differing} elements)", errs[0] <= errs[1])


def _within_opinfo_tolerance(op, dtype, got, exp) -> str:
    for info in getattr(op, "decorators", ()) or ():
        if (getattr(info, "cls_name", None), getattr(info, "test_name", None)) not in _REFERENCE_TESTS:
            continue
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        for d in getattr(info, "decorators", ()):
            t = getattr(d, "d", {}).get(dtype) if isinstance(getattr(d, "d", None), dict) else None
            if t is None or got is None:
                continue
            try:
                for g, e in zip(_tensors(got), _tensors(exp)):
                    torch.testing.assert_close(g.detach().cpu(), e.detach(), atol=t.atol, rtol=t.rtol, equal_nan=True)
            except Exception:
                return ""
            return (f" (within the tolerance PyTorch's {info.cls_name}.{info.test_name} allows this op: "
                    f"atol={t.atol}, rtol={t.rtol})")
    return ""


def _assert_equal(a, b, path="result"):
    """Bitwise equality (NaN == NaN) of two tpu results: reproducibility."""
    for i, (x, y) in enumerate(zip(_tensors(a), _tensors(b))):
        x, y = x.detach().cpu(), y.detach().cpu()
        if x.shape != y.shape or not torch.equal(torch.nan_to_num(x) if x.is_floating_point() else x,
                                                 torch.nan_to_num(y) if y.is_floating_point() else y):
            raise Mismatch(f"{path}: not reproduced under torch.manual_seed (output {i})")


# ------------------------------------------------------------------------------------------ running


def _classify_exception(e: BaseException) -> Result:
    msg = str(e)
    if isinstance(e, NotImplementedError) and "is not supported natively" in msg and "operator '" in msg:
        name = msg.split("operator '", 1)[1].split("'", 1)[0]
        return Result("not lowered", name)
    if isinstance(e, NotImplementedError) and msg.startswith("Could not run '"):
        # no kernel for the tensor's layout (sparse) on this backend
        name = msg.split("'", 2)[1]
        layout = msg.split("from the '", 1)[1].split("'", 1)[0] if "from the '" in msg else "?"
        return Result("not lowered", f"{name} ({layout})")
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    return Result("error", f"{type(e).__name__}: {first[:200]}")


def _describe(sample) -> str:
    def d(x):
        if isinstance(x, torch.Tensor):
            return f"T{list(x.shape)}"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(d(e) for e in x[:4]) + (", ..." if len(x) > 4 else "") + "]"
        return repr(x)[:30]

    parts = [d(sample.input)] + [d(a) for a in sample.args] + [f"{k}={d(v)}" for k, v in sample.kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _call(op, sample, moved):
    inp, args, kwargs = moved
    return op(inp, *args, **kwargs)


def _grads(op, moved, cotangent_seed: int, process=lambda out: out):
    """Gradients of the op's outputs (weighted by fixed cotangents) w.r.t. its inputs requiring grad.

    `process` is the sample's ``output_process_fn_grad``: PyTorch's gradient tests differentiate the
    processed outputs (for SVD and eigenvectors, quantities independent of each vector's sign)."""
    inputs = [t for t in _tensors(moved) if t.requires_grad]
    out = process(_call(op, None, moved))
    outs = [t for t in _tensors(out) if t.requires_grad]
    if not outs or not inputs:
        return None
    g = torch.Generator().manual_seed(cotangent_seed)
    # float64 outputs (the float64 reference of a float32 sample) take the float32 sample's cotangents
    narrow = {torch.float64: torch.float32, torch.complex128: torch.complex64}
    cot = [torch.randn(o.shape, generator=g, dtype=narrow.get(o.dtype, o.dtype)).to(o.device, o.dtype) for o in outs]
    return list(torch.autograd.grad(outs, inputs, cot, allow_unused=True))


def _samples(op, dtype, grad: bool, limit: int | None):
    torch.manual_seed(0)
    if grad:
        it = op.sample_inputs("cpu", dtype, requires_grad=True)
    else:
        it = op.reference_inputs("cpu", dtype)
    out = []
    for s in it:
        out.append(s)
        if limit is not None and len(out) >= limit:
            break
    return out


def _with_device(op, s):
    """The sample with device="cpu" when the op accepts it and gives the same answer, else None."""
    import copy

    try:
        torch.manual_seed(0)
        plain = op(s.input, *s.args, **s.kwargs)
        t = copy.copy(s)
        t.kwargs = dict(s.kwargs, device="cpu")
        torch.manual_seed(0)
        explicit = op(t.input, *t.args, **t.kwargs)
    except Exception:
        return None
    if type(plain) is not type(explicit):
        return None
    return t


def check_op(op, dtype: torch.dtype, samples: int | None = None, grad: bool = False) -> Result:
    """Runs one OpInfo for one dtype (or its float32 gradients when `grad`) on "tpu" and on the CPU."""
    t0 = time.perf_counter()
    r = _check_op(op, dtype, samples, grad)
    r.seconds = time.perf_counter() - t0
    return r


def _check_op(op, dtype, limit, grad) -> Result:
    name = key(op)
    if grad:
        if not op.supports_autograd:
            return Result("skipped", "not differentiable (supports_autograd=False)")
        if dtype not in op.supported_backward_dtypes("cpu"):
            return Result("skipped", f"the CPU has no {dtype} backward")
        if name in RANDOM_OPS or name in UNINITIALIZED_OPS:
            return Result("skipped", "random values: gradients not comparable with the CPU's")
    elif dtype not in op.supported_dtypes("cpu"):
        return Result("skipped", f"the CPU lacks {str(dtype).replace('torch.', '')}")
    try:
        samples = _samples(op, dtype, grad, limit)
    except Exception as e:  # PyTorch's own generator failed: nothing to compare
        return Result("skipped", f"PyTorch's sample generator raised {type(e).__name__}: {str(e)[:120]}")
    if not samples:
        return Result("skipped", "no samples for this dtype")
    compared = 0
    rejected = 0
    host_only = 0
    for i, s in enumerate(samples):
        if not _tensors((s.input, s.args, s.kwargs)) and "device" not in s.kwargs:
            # no tensor argument: a factory op is called with device="tpu"; a sample that cannot take
            # one (Python numbers in, a CPU tensor out by definition) has nothing to run on "tpu"
            s = _with_device(op, s)
            if s is None:
                host_only += 1
                continue
        try:
            moved = to_tpu((s.input, s.args, s.kwargs), grad)
            if name in HOST_TENSOR_ARGS:  # arguments the op requires on the CPU
                moved = (moved[0], s.args, moved[2])
        except Exception as e:
            return _classify_exception(e)
        # the CPU's answer (from its own copy: in-place ops mutate their inputs)
        try:
            torch.manual_seed(0)
            exp = (_grads(op, (s.input, s.args, s.kwargs), i, s.output_process_fn_grad) if grad
                   else _call(op, s, (s.input, s.args, s.kwargs)))
            cpu_error = None
        except Exception as e:
            cpu_error = e
        if grad and cpu_error is None and exp is None:
            continue  # no differentiable output or input in this sample
        random = name in RANDOM_OPS or _random_sample(name, s)
        if grad and random:
            continue  # random values: gradients not comparable with the CPU's
        try:
            torch.manual_seed(0)
            got = _grads(op, moved, i, s.output_process_fn_grad) if grad else _call(op, s, moved)
            if cpu_error is None:
                if name in UNINITIALIZED_OPS:
                    _assert_like(got, exp, strides=name == "empty_strided")
                elif random and not grad:
                    _assert_like(got, exp)
                    torch.manual_seed(0)
                    again = _call(op, s, to_tpu((s.input, s.args, s.kwargs)))
                    _assert_equal(got, again)
                elif name in TIED_INDEX_OPS and not grad:
                    _assert_same_values_tied_indices(got, exp, s, TIED_INDEX_OPS[name])
                elif name in UNSTABLE_SORT_OPS and not grad and not s.kwargs.get("stable", False):
                    _assert_sorted_tied(got, exp, s, name == "argsort")
                elif grad:
                    assert_same(got, exp)
                else:  # results unique only up to sign (SVD, eigenvectors) are compared as PyTorch's
                    # test_compare_cpu does, through the sample's output_process_fn_grad
                    assert_same(s.output_process_fn_grad(got), s.output_process_fn_grad(exp))
            else:
                for t in _tensors(got):  # force an asynchronous failure to surface
                    t.cpu()
        except Mismatch as e:
            note = "" if grad else _within_opinfo_tolerance(op, dtype, got if cpu_error is None else None, exp)
            nearer = False
            if cpu_error is None and name not in TIED_INDEX_OPS:
                more, nearer = _nearer_exact(op, s, dtype, got, exp, i if grad else None)
                note += more
            return Result("mismatch", f"sample {i} {_describe(s)}: {e}{note}", compared, nearer_exact=nearer)
        except Exception as e:
            if cpu_error is not None:
                rejected += 1  # both reject it
                continue
            r = _classify_exception(e)
            r.detail = f"{r.detail} (sample {i} {_describe(s)})" if r.status == "error" else r.detail
            r.samples = compared
            return r
        if cpu_error is not None:
            return Result("mismatch", f"sample {i} {_describe(s)}: the CPU raises "
                          f"{type(cpu_error).__name__}: {str(cpu_error)[:100]}; tpu does not", compared)
        compared += 1
    if compared == 0:
        if rejected:
            return Result("skipped", f"the CPU rejects every sample ({rejected}); tpu rejects them too")
        if host_only:
            return Result("skipped", f"no sample has a tensor or device argument ({host_only} host-only samples)")
        return Result("skipped", "no sample has a differentiable output" if grad else "no samples")
    return Result("pass", "random: shapes, dtypes, seed reproducibility" if name in RANDOM_OPS and not grad else "",
                  compared)


# ------------------------------------------------------------------------------------------- report


@dataclasses.dataclass
class Report:
    results: dict = dataclasses.field(default_factory=dict)  # kind ("float32", ..., "grad") -> {op key: Result}
    seconds: dict = dataclasses.field(default_factory=dict)
    # checking processes that wrote all their results and then exited with an error (a deviceless target's
    # failed compiles, TORCH_PJRT_AOT_TARGETS): (kind, first op, exit status)
    failed_children: list = dataclasses.field(default_factory=list)

    def counts(self, kind: str) -> collections.Counter:
        return collections.Counter(r.status for r in self.results.get(kind, {}).values())

    def totals_line(self, kind: str) -> str:
        c = self.counts(kind)
        tested = sum(c.values()) - c["skipped"]
        pct = f"{100.0 * c['pass'] / tested:.1f}%" if tested else "-"
        label = "float32 gradients" if kind == GRAD else kind
        parts = ", ".join(f"{c[s]} {s}" for s in STATUSES[1:])
        nearer = sum(r.nearer_exact for r in self.results.get(kind, {}).values())
        if nearer:  # mismatches where tpu is no farther from the float64 result than the CPU
            parts = parts.replace(" mismatch", f" mismatch ({nearer} nearer float64 than the CPU)", 1)
        return f"{label:17} {c['pass']}/{tested} pass = {pct} ({parts}; {self.seconds.get(kind, 0):.0f}s)"

    def missing(self) -> collections.Counter:
        return collections.Counter(r.detail for rs in self.results.values() for r in rs.values()
                                   if r.status == "not lowered")

    def to_json(self) -> dict:
        return {kind: {k: dataclasses.asdict(r) for k, r in rs.items()} for kind, rs in self.results.items()}

    def to_markdown(self) -> str:
        lines = ["# Op conformance (PyTorch OpInfo database)", "", "| kind | pass | tested | rate | mismatch | "
                 "not lowered | error | skipped |", "|---|---|---|---|---|---|---|---|"]
        for kind in self.results:
            c = self.counts(kind)
            tested = sum(c.values()) - c["skipped"]
            rate = f"{100.0 * c['pass'] / tested:.1f}%" if tested else "-"
            lines.append(f"| {kind} | {c['pass']} | {tested} | {rate} | {c['mismatch']} | {c['not lowered']} | "
                         f"{c['error']} | {c['skipped']} |")
        for kind, rs in self.results.items():
            bad = [(k, r) for k, r in rs.items() if r.status != "pass"]
            if not bad:
                continue
            lines += ["", f"## {kind}", "", "| op | status | detail |", "|---|---|---|"]
            for k, r in sorted(bad, key=lambda kr: (STATUSES.index(kr[1].status), kr[0])):
                lines.append(f"| `{k}` | {r.status} | {r.detail.replace('|', '/')} |")
        m = self.missing()
        if m:
            lines += ["", "## Most wanted lowerings", ""]
            lines += [f"- `{name}`: {n}" for name, n in m.most_common()]
        return "\n".join(lines) + "\n"


def run(ops: Iterable | None = None, dtypes: Iterable[str] = ("float32",), grad: bool = False,
        samples: int | None = None, log: Callable[[str], None] | None = print,
        record: Callable[[str, str, Result], None] | None = None) -> Report:
    """Runs the conformance check (fallback as an error for its duration) and returns the report;
    `record(kind, op key, result)` is called as each result is known."""
    import torch_pjrt
    from torch.testing._internal.common_methods_invocations import op_db

    ops = list(op_db if ops is None else ops)
    kinds = [(d, getattr(torch, d), False) for d in dtypes] + ([(GRAD, torch.float32, True)] if grad else [])
    report = Report()
    old = torch_pjrt.get_fallback_policy()
    torch_pjrt.set_fallback_policy("error")
    try:
        for kind, dtype, g in kinds:
            t0 = time.perf_counter()
            rs = report.results.setdefault(kind, {})
            for op in ops:
                try:
                    r = check_op(op, dtype, samples, g)
                except Exception as e:  # the harness itself must not stop the run
                    r = Result("error", f"harness: {type(e).__name__}: {str(e)[:150]}")
                rs[key(op)] = r
                if record:
                    record(kind, key(op), r)
                if log:
                    log(f"{kind:8} {r.status:11} {key(op):45} {r.detail}")
            report.seconds[kind] = time.perf_counter() - t0
    finally:
        torch_pjrt.set_fallback_policy(old)
    return report


# Each compiled program keeps a few memory mappings of machine code alive in the process, and a full sweep
# compiles tens of thousands: past the kernel's map limit (vm.max_map_count, 65530 by default) XLA's JIT
# fails to allocate and the process dies. Larger runs therefore check CHUNK OpInfos per child process.
CHUNK = 120


def run_in_workers(ops: list, dtypes: Iterable[str], grad: bool, samples: int | None, chunk: int = CHUNK,
                   quiet: bool = False) -> Report:
    """run() over `ops` in child processes of `chunk` OpInfos each, one kind at a time. A child that dies
    (a crash in the plugin) records an error for the op it was checking; the rest run in a new child."""
    report = Report()
    kinds = [(d, ["--dtype", d]) for d in dtypes] + ([(GRAD, ["--dtype", "", "--grad"])] if grad else [])
    for kind, kind_args in kinds:
        rs = report.results.setdefault(kind, {})
        todo = [key(op) for op in ops]
        t0 = time.perf_counter()
        while todo:
            part, todo = todo[:chunk], todo[chunk:]
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "results.jsonl")
                cmd = [sys.executable, "-m", "torch_pjrt.conformance", "--only", ",".join(part), "--worker", out,
                       *kind_args] + (["--samples", str(samples)] if samples else []) + (["--quiet"] if quiet else [])
                proc = subprocess.run(cmd)
                done = {}
                if os.path.exists(out):
                    with open(out) as f:
                        for line in f:
                            r = json.loads(line)
                            k = r.pop("key")
                            done[k] = Result(**r)
            rs.update(done)
            missing = [k for k in part if k not in done]
            if proc.returncode != 0 and not missing:
                report.failed_children.append((kind, part[0], proc.returncode))
            if missing:
                rs[missing[0]] = Result("error", f"the checking process died (exit status {proc.returncode})")
                if not quiet:
                    print(f"{kind:8} {'error':11} {missing[0]:45} {rs[missing[0]].detail}", flush=True)
                todo = missing[1:] + todo
        report.seconds[kind] = time.perf_counter() - t0
    return report


def core_aten_without_rows() -> list:
    """Core ATen IR operators (torch.Tag.core) that have neither a "tpu" kernel nor a composite kernel (which
    would run them through other ops): each call of one runs the CPU fallback."""
    import torch_pjrt  # noqa: F401  (registers the kernels)

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    missing = []
    for packet_name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, packet_name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for ov in packet.overloads():
            op = getattr(packet, ov)
            if torch.Tag.core not in op.tags:
                continue
            name = op.name()
            # a composite kernel (implicit, or explicit for every backend) serves it through other ops
            if any(has(name, k) for k in ("PrivateUse1", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                                          "CompositeExplicitAutogradNonFunctional")):
                continue
            missing.append(name.replace("aten::", ""))
    return sorted(set(missing))


def select_ops(only: str = ""):
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(filter(None, (s.strip() for s in only.split(","))))
    if not wanted:
        return list(op_db)
    ops = [op for op in op_db if op.name in wanted or key(op) in wanted]
    unknown = wanted - {op.name for op in ops} - {key(op) for op in ops}
    if unknown:
        raise SystemExit(f"unknown OpInfo names: {', '.join(sorted(unknown))}")
    return ops


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_pjrt.conformance", description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default=",".join(DTYPES), help=f"comma-separated, default {','.join(DTYPES)}")
    p.add_argument("--grad", action="store_true", help="also float32 gradients of differentiable OpInfos")
    p.add_argument("--only", default="", help="comma-separated OpInfo names (name or name.variant)")
    p.add_argument("--samples", type=int, default=None, help="at most N samples per (op, dtype); default all")
    p.add_argument("--json", default="", help="write every result to this file")
    p.add_argument("--markdown", default="", help="write the report as Markdown to this file")
    p.add_argument("--quiet", action="store_true", help="print only the totals")
    p.add_argument("--core", action="store_true", help="list the Core ATen IR operators without a tpu kernel, then stop")
    p.add_argument("--chunk", type=int, default=CHUNK,
                   help=f"OpInfos per child process when checking more (default {CHUNK}; 0: all in this process)")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)  # a child of run_in_workers: its results file
    args = p.parse_args(argv)
    if args.core:
        missing = core_aten_without_rows()
        print(f"{len(missing)} Core ATen IR operators without a tpu kernel: {', '.join(missing)}")
        return 0
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    for d in dtypes:
        if not isinstance(getattr(torch, d, None), torch.dtype):
            raise SystemExit(f"unknown dtype {d!r}")
    ops = select_ops(args.only)
    log = None if args.quiet else lambda s: print(s, flush=True)
    if args.worker:
        with open(args.worker, "a") as f:
            def record(kind, k, r):
                f.write(json.dumps({"key": k, **dataclasses.asdict(r)}) + "\n")
                f.flush()
            run(ops, dtypes, args.grad, args.samples, log, record)
        return 0
    if args.chunk and len(ops) > args.chunk:
        report = run_in_workers(ops, dtypes, args.grad, args.samples, args.chunk, args.quiet)
    else:
        report = run(ops, dtypes, args.grad, args.samples, log)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(), f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report.to_markdown())
    m = report.missing()
    print()
    if m:
        print("most wanted lowerings: " + ", ".join(f"{k} ({v})" for k, v in m.most_common(30)))
    print(f"{len(ops)} OpInfos, " + (f"up to {args.samples} samples each" if args.samples else "all reference samples"))
    for kind in report.results:
        print(report.totals_line(kind))
    for kind, first, status in report.failed_children:
        print(f"the checking process of {kind} from {first} exited with status {status} after its results "
              "(its error output above says why)")
    return 1 if report.failed_children else 0


if __name__ == "__main__":
    sys.exit(main())
