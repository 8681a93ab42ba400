"""Conformance of every collective of the c10d backend tpu_dist at world size 2, each result compared with the
value plain torch computes on the CPU from the same inputs.

Run under torchrun (one process per device):

    TORCH_PJRT_FALLBACK=error python -m torch.distributed.run --standalone --nproc_per_node=2 \
        tests/python/distributed/collectives_worker.py FORM [SECTION ...]

FORM is how the default group is made:
  default:  ``init_process_group()``                        (no backend: the device map picks tpu_dist for "tpu")
  tpu_dist: ``init_process_group("tpu_dist")``             (tpu_dist alone: barrier and the object
                                                             collectives run through it too)
  mixed:    ``init_process_group("cpu:gloo,tpu:tpu_dist")``
SECTION names a group of checks (see SECTIONS; default: every section but "init", the short check of a form).

DIST_DEVICE=cpu runs the same checks on CPU tensors with gloo (FORM is then ignored): a check of the checks
themselves, without torch-pjrt (gloo lacks some dtypes and ops that tpu_dist stages, so those fail there).

Inputs: every rank's input of a check is made from a seed that names the check and the rank, so every rank
can make every other rank's input and compute the expected result with plain torch on the CPU. The
expected values are never written out by hand. Exact comparison, except where a result is rounded more than
once (a floating AVG, PREMUL_SUM): torch.testing's default tolerances of the dtype there.

Output (rank 0): one line per check, ``OK <section>/<check>``, ``SKIP <section>/<check>: <why>`` (a dtype the
device cannot hold: float8_e4m3fn on the CPU plugin) or ``FAIL <section>/<check>: rank 0: ... | rank 1: ...``;
then ``SECTION <name> ok=<n> skipped=<n> failed=<n> of=<n>`` per section, ``INFO <section> ...`` lines (backend
names, error messages, counters) and ``DONE failed=<n> time=<s>s``. A failing check does not stop the others:
each rank's outcome is shared through a gloo group of its own (CTL), so the ranks stay in step; checks that
hang when they fail run on groups with a short timeout (DIST_SHORT_TIMEOUT_S, 3 s). Exit status 1 when a
check failed. DIST_TRACEBACK=1 adds the traceback to a FAIL line.
"""

import datetime
import functools
import os
import pickle
import sys
import time
import traceback
import zlib

import torch
import torch.distributed as dist

DEVICE_KIND = os.environ.get("DIST_DEVICE", "tpu")
TIMEOUT_S = float(os.environ.get("DIST_TIMEOUT_S", "60"))
# Checks that are expected to hang when they fail (a point-to-point exchange where both ranks send first)
# run on a group with this timeout, so that a hang costs seconds.
SHORT_TIMEOUT_S = float(os.environ.get("DIST_SHORT_TIMEOUT_S", "3"))
FORMS = {"default": None, "tpu_dist": "tpu_dist", "mixed": "cpu:gloo,tpu:tpu_dist"}

RANK = 0
WORLD = 2
DEV = torch.device("cpu")
CTL = None  # a gloo group for the checks' own bookkeeping, independent of the backend under test
F8 = torch.float8_e4m3fn
ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
              torch.int32, torch.int64, torch.bool, torch.complex64, F8]
# gloo lacks these too: tpu_dist moves them as bytes and reduces them widened to int64, as it would float8
# (widened to float32). Values are chosen above the signed range of their width (see make).
UINTS = [torch.uint16, torch.uint32]
R = dist.ReduceOp


class Mismatch(Exception):
    pass


class Skip(Exception):
    """A check that cannot run here (a dtype the device does not hold): reported, not a failure."""


_DEVICE_DTYPES = {}


def require_device_dtype(dtype):
    """Skips the check when the device cannot hold `dtype` at all (then no collective can take it; the
    device's own error is the reason shown)."""
    if dtype not in _DEVICE_DTYPES:
        try:
            torch.zeros(2, dtype=dtype).to(DEV).cpu()
            _DEVICE_DTYPES[dtype] = None
        except Exception as e:
            _DEVICE_DTYPES[dtype] = f"{type(e).__name__}: {e}".splitlines()[0]
    if _DEVICE_DTYPES[dtype]:
        raise Skip(f"{DEV.type} tensors of {dtype}: {_DEVICE_DTYPES[dtype]}")


# --------------------------------------------------------------------------------------------------------
# Inputs and expected values (CPU, plain torch)


def seed_of(*key):
    return zlib.crc32(repr(key).encode())


def make(key, dtype, shape, rank, big=False):
    """Rank `rank`'s input of check `key`: the same on every rank. Value ranges keep sums and products of
    WORLD inputs inside the dtype (no overflow, so the expected value is unambiguous); big: int64 values
    beyond 2**53, which a trip through float64 would round."""
    g = torch.Generator().manual_seed(seed_of(key, str(dtype), tuple(shape), rank))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g)).to(dtype)
    if dtype.is_floating_point:
        # Multiples of 1/8 in [-8, 8]: exact in every floating dtype here (float8_e4m3fn included), so
        # that sums and products of two are exact or rounded once, the same way on every path.
        return (torch.randint(-64, 65, shape, generator=g).double() / 8).to(dtype)
    lo, hi = {torch.int8: (-11, 12), torch.uint8: (0, 16), torch.int16: (-150, 151), torch.int32: (-40000, 40001),
              torch.int64: (-(10**9), 10**9 + 1),
              # the sum of two exceeds the signed type of the same width, but not the unsigned one
              torch.uint16: (2**14, 2**15), torch.uint32: (2**30, 2**31)}[dtype]
    t = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64)
    if big and dtype == torch.int64:
        t = t + (2**60 + 1)  # odd and above 2**53: a float64 detour loses the low bits
    return t.to(dtype)


def inputs(key, dtype, shape, **kw):
    return [make(key, dtype, shape, r, **kw) for r in range(WORLD)]


def wide(dtype):
    """The CPU dtype an expected reduction is computed in (torch's CPU kernels lack float8 and most unsigned
    arithmetic; the inputs' ranges keep every result exact in the narrow dtype)."""
    return torch.float32 if dtype == F8 else torch.int64 if dtype in UINTS else dtype


def reduce_cpu(op, xs, factor=None):
    """The reduction of the list `xs` under ReduceOp `op`, with plain torch on the CPU (in the tensors' own
    dtype; float8 through float32, where the value is then rounded once)."""
    dtype = xs[0].dtype
    ys = [x.to(wide(dtype)) for x in xs]
    if op == R.SUM:
        out = functools.reduce(torch.add, ys)
    elif op == R.AVG:
        s = functools.reduce(torch.add, ys)
        if dtype.is_floating_point or dtype.is_complex:
            out = s / len(ys)
        else:  # NCCL's integer average: the sum divided, truncated
            out = torch.div(s, len(ys), rounding_mode="trunc")
    elif op == R.PREMUL_SUM:
        f = factor.cpu().to(wide(dtype)) if isinstance(factor, torch.Tensor) else factor
        out = functools.reduce(torch.add, [y * f for y in ys])
    elif op == R.PRODUCT:
        out = functools.reduce(torch.mul, ys)
    elif op == R.MIN:
        out = functools.reduce(torch.minimum, ys)
    elif op == R.MAX:
        out = functools.reduce(torch.maximum, ys)
    elif op == R.BAND:
        out = functools.reduce(torch.bitwise_and, ys)
    elif op == R.BOR:
        out = functools.reduce(torch.bitwise_or, ys)
    elif op == R.BXOR:
        out = functools.reduce(torch.bitwise_xor, ys)
    else:
        raise ValueError(op)
    return out.to(dtype)


def op_name(op):
    return str(op).split(".")[-1]


# --------------------------------------------------------------------------------------------------------
# Comparison


def cpu(t):
    return t.detach().to("cpu")


def as_comparable(t):
    # float8 and the wide unsigned types have few CPU kernels: compared as float32 / int64 (exactly).
    return t.to(wide(t.dtype))


def same(got, want, what, exact=True):
    """got (any device) against want (CPU): dtype, shape and values; exact, or within the dtype's default
    tolerances of torch.testing (for results rounded more than once: an average, a premultiplied sum)."""
    got = cpu(got)
    if got.dtype != want.dtype:
        raise Mismatch(f"{what}: dtype {got.dtype}, expected {want.dtype}")
    if tuple(got.shape) != tuple(want.shape):
        raise Mismatch(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    g, w = as_comparable(got), as_comparable(want)
    if exact:
        eq = (g == w) | (g.isnan() & w.isnan()) if g.is_floating_point() or g.is_complex() else g == w
        if not bool(eq.all()):
            bad = (~eq).flatten().nonzero().flatten()
            i = int(bad[0])
            raise Mismatch(f"{what}: {len(bad)} of {eq.numel()} elements differ; first at flat index {i}: "
                           f"got {g.flatten()[i].item()!r}, expected {w.flatten()[i].item()!r} "
                           f"(got {g.flatten()[:6].tolist()}, expected {w.flatten()[:6].tolist()})")
    else:
        try:
            torch.testing.assert_close(g, w)
        except AssertionError as e:
            raise Mismatch(f"{what}: {e}") from None


def expect_error(fn, types, words, what):
    """fn() must raise one of `types` whose message names every one of `words` (either spelling of a dtype:
    'float32' or c10's 'Float'). Returns the message."""
    try:
        fn()
    except types as e:
        msg = str(e)
        missing = [w for w in words if not any(alt in msg for alt in (w if isinstance(w, tuple) else (w,)))]
        if missing:
            raise Mismatch(f"{what}: {type(e).__name__} does not name {missing}: {msg[:400]!r}") from None
        return msg
    except Exception as e:
        raise Mismatch(f"{what}: raised {type(e).__name__} (expected {[t.__name__ for t in types]}): "
                       f"{str(e)[:400]!r}") from None
    raise Mismatch(f"{what}: no error raised")


C10_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
             torch.int8: "Char", torch.uint8: "Byte", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
             torch.bool: "Bool", torch.complex64: "ComplexFloat", F8: "Float8_e4m3fn", torch.uint16: "UInt16",
             torch.uint32: "UInt32"}


def dtype_words(dtype):
    return (str(dtype).replace("torch.", ""), C10_NAMES[dtype])


def tpu(t):
    """A copy of the CPU tensor `t` on the device under test (a copy on the CPU too: the collectives write
    into it, and the CPU inputs must stay as they were for the expected values)."""
    return t.to(DEV, copy=True)


def collectives_count():
    if DEVICE_KIND != "tpu":
        return 0
    import torch_pjrt.distributed

    return torch_pjrt.distributed.metrics()["collectives"]


# --------------------------------------------------------------------------------------------------------
# Checks. Each section is a list of (name, fn); every rank runs them all, in the same order.

SHAPE = (3, 5)


def all_reduce_case(op, dtype, factor=None, big=False):
    def fn():
        require_device_dtype(dtype)
        key = ("all_reduce", op_name(op), factor is not None and type(factor).__name__, big)
        xs = inputs(key, dtype, SHAPE, big=big)
        if factor is None:
            red, fval = op, None
        elif factor == "tensor":  # a 0-d factor tensor of the input's dtype, on the input's device
            fval = torch.tensor(0.375, dtype=dtype)
            red = dist._make_nccl_premul_sum(tpu(fval))
        else:
            fval = factor
            red = dist._make_nccl_premul_sum(factor)
        want = reduce_cpu(op, xs, fval)
        t = tpu(xs[RANK])
        dist.all_reduce(t, op=red)
        exact = op not in (R.AVG, R.PREMUL_SUM) or not (dtype.is_floating_point or dtype.is_complex)
        same(t, want, f"all_reduce({op_name(op)}) {dtype}", exact=exact)
    return fn


def all_reduce_invalid(op, dtype):
    def fn():
        require_device_dtype(dtype)
        t = tpu(make("invalid", dtype, SHAPE, RANK))
        # torch itself refuses complex with MIN/MAX/PRODUCT/bitwise ops (ValueError, before any backend).
        types = (RuntimeError, ValueError) if dtype.is_complex else (RuntimeError,)
        words = [op_name(op)] + ([] if dtype.is_complex else [dtype_words(dtype)])
        if dtype.is_complex:
            words.append("complex")
        msg = expect_error(lambda: dist.all_reduce(t, op=op), types, words, f"all_reduce({op_name(op)}) {dtype}")
        info(f"all_reduce({op_name(op)}) {dtype} raises: {msg.splitlines()[0][:200]}")
        # The group is still usable afterwards.
        u = tpu(make("after_invalid", torch.float32, (2,), RANK))
        dist.all_reduce(u)
        same(u, reduce_cpu(R.SUM, inputs("after_invalid", torch.float32, (2,))), "all_reduce after the error")
    return fn


def premul_int():
    """PREMUL_SUM on int32 with the float factor 2.0: NCCL casts the factor to the tensor's type (the result is
    the sum of 2 * x); a backend that does not take it must refuse it like any invalid op/dtype pair, with a
    RuntimeError naming PREMUL_SUM and the dtype."""
    def fn():
        xs = inputs("premul_int", torch.int32, SHAPE)
        t = tpu(xs[RANK])
        try:
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
        except RuntimeError as e:
            msg = str(e)
            if "PREMUL_SUM" not in msg or not any(w in msg for w in dtype_words(torch.int32)):
                raise Mismatch(f"PREMUL_SUM(2.0) on int32 raised a RuntimeError that does not name both the op and the "
                               f"dtype: {msg[:300]!r}") from None
            info(f"all_reduce(PREMUL_SUM(2.0)) int32 raises: {msg.splitlines()[0][:200]}")
            return
        same(t, reduce_cpu(R.PREMUL_SUM, xs, 2), "all_reduce(PREMUL_SUM(2.0)) int32")
    return fn


def section_all_reduce():
    cases = []
    matrix = [
        (R.SUM, ALL_DTYPES + UINTS),
        (R.AVG, [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int16, torch.int32, torch.int64,
                 torch.complex64, F8]),
        (R.PRODUCT, [torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8, torch.int32, torch.int64,
                     torch.bool]),
        (R.MIN, [torch.float32, torch.bfloat16, torch.int8, torch.uint8, torch.int16, torch.int64, torch.bool, F8]),
        (R.MAX, [torch.float32, torch.float64, torch.float16, torch.int32, torch.uint8, torch.bool, F8] + UINTS),
        (R.BAND, [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.uint32]),
        (R.BOR, [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]),
        (R.BXOR, [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]),
    ]
    for op, dtypes in matrix:
        for d in dtypes:
            cases.append((f"{op_name(op)}/{str(d)[6:]}", all_reduce_case(op, d)))
    cases.append(("SUM/int64_above_2^53", all_reduce_case(R.SUM, torch.int64, big=True)))
    cases.append(("MAX/int64_above_2^53", all_reduce_case(R.MAX, torch.int64, big=True)))
    for d, f in [(torch.float32, 0.375), (torch.float32, "tensor"), (torch.float64, -1.5), (torch.float16, 0.375),
                 (torch.bfloat16, "tensor"), (torch.complex64, 0.375)]:
        kind = "tensor_factor" if f == "tensor" else "float_factor"
        cases.append((f"PREMUL_SUM/{str(d)[6:]}/{kind}", all_reduce_case(R.PREMUL_SUM, d, factor=f)))
    cases.append(("PREMUL_SUM/int32/float_factor", premul_int()))
    for op, d in [(R.BAND, torch.float32), (R.BOR, torch.bfloat16), (R.BXOR, torch.float64), (R.BAND, F8),
                  (R.AVG, torch.bool), (R.MIN, torch.complex64), (R.PRODUCT, torch.complex64),
                  (R.BXOR, torch.complex64)]:
        cases.append((f"invalid/{op_name(op)}/{str(d)[6:]}", all_reduce_invalid(op, d)))
    return cases


def section_all_reduce_coalesced():
    # torch.distributed.all_reduce_coalesced takes tensors of one dtype (its own check): shapes differ.
    def case(op, dtype):
        def fn():
            shapes = [(3, 5), (4,), (2, 1, 2), ()]
            xss = [inputs(("coalesced", op_name(op), i), dtype, s) for i, s in enumerate(shapes)]
            ts = [tpu(xs[RANK]) for xs in xss]
            dist.all_reduce_coalesced(ts, op=op)
            for i, (t, xs) in enumerate(zip(ts, xss)):
                same(t, reduce_cpu(op, xs), f"all_reduce_coalesced({op_name(op)}) {dtype} tensor {i} "
                     f"{tuple(xs[0].shape)}", exact=op != R.AVG)
        return fn
    return [(f"{op_name(op)}/{str(d)[6:]}", case(op, d))
            for op, d in [(R.SUM, torch.float32), (R.MAX, torch.int64), (R.AVG, torch.bfloat16), (R.SUM, torch.int16)]]


def section_reduce():
    def case(op, dtype):
        def fn():
            xs = inputs(("reduce", op_name(op)), dtype, SHAPE)
            t = tpu(xs[RANK])
            dist.reduce(t, dst=1, op=op)
            if RANK == 1:  # only the root's tensor is defined afterwards
                same(t, reduce_cpu(op, xs), f"reduce({op_name(op)}, dst=1) {dtype} on the root",
                     exact=op != R.AVG)
        return fn
    return [(f"{op_name(op)}/{str(d)[6:]}", case(op, d))
            for op, d in [(R.SUM, torch.float32), (R.MAX, torch.int32), (R.AVG, torch.bfloat16),
                          (R.SUM, torch.int16), (R.PRODUCT, torch.float64)]]


def section_broadcast():
    def case(dtype):
        def fn():
            require_device_dtype(dtype)
            xs = inputs("broadcast", dtype, SHAPE)
            t = tpu(xs[RANK])
            dist.broadcast(t, src=1)
            same(t, xs[1], f"broadcast(src=1) {dtype}")
        return fn
    return [(str(d)[6:], case(d)) for d in ALL_DTYPES + UINTS]


def section_all_gather():
    def case(dtype):
        def fn():
            xs = inputs("all_gather", dtype, SHAPE)
            outs = [tpu(torch.zeros(SHAPE, dtype=dtype)) for _ in range(WORLD)]
            dist.all_gather(outs, tpu(xs[RANK]))
            for r in range(WORLD):
                same(outs[r], xs[r], f"all_gather {dtype} output {r}")
        return fn
    def uneven(dtype):
        def fn():  # rank r's input has r + 2 rows: the output list's sizes differ (gloo gathers equal ones only)
            xs = [make("all_gather_uneven", dtype, (r + 2, 3), r) for r in range(WORLD)]
            outs = [tpu(torch.zeros((r + 2, 3), dtype=dtype)) for r in range(WORLD)]
            dist.all_gather(outs, tpu(xs[RANK]))
            for r in range(WORLD):
                same(outs[r], xs[r], f"all_gather of uneven sizes {dtype} output {r}")
            bad = tpu(torch.zeros((RANK + 3, 3), dtype=dtype))  # not the shape of its own rank's output
            expect_error(lambda: dist.all_gather(outs, bad), (RuntimeError, ValueError), ["allgather", "input"],
                         "all_gather whose input is not its rank's output shape")
        return fn
    return [(str(d)[6:], case(d)) for d in (torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.int16,
                                             torch.complex64)] + [
        (f"uneven/{str(d)[6:]}", uneven(d)) for d in (torch.float32, torch.bfloat16, torch.bool)]


def section_all_gather_into_tensor():
    def case(dtype, stacked=False):
        def fn():
            require_device_dtype(dtype)
            xs = inputs("all_gather_into_tensor", dtype, SHAPE)
            want = torch.stack(xs) if stacked else torch.cat(xs)
            out = tpu(torch.zeros(want.shape, dtype=dtype))
            dist.all_gather_into_tensor(out, tpu(xs[RANK]))
            same(out, want, f"all_gather_into_tensor {dtype} into {tuple(want.shape)}")
        return fn
    cases = [(str(d)[6:], case(d)) for d in ALL_DTYPES + UINTS]
    cases.append(("float32/stacked", case(torch.float32, stacked=True)))
    return cases


def section_objects():
    def objs(r):
        return {"rank": r, "text": "tpu" * (r + 1), "list": list(range(r + 3)), "t": torch.arange(r + 2)}

    def compare(got, want, what):
        if pickle.dumps({k: v for k, v in got.items() if k != "t"}) != pickle.dumps(
                {k: v for k, v in want.items() if k != "t"}):
            raise Mismatch(f"{what}: {got!r}, expected {want!r}")
        if not torch.equal(got["t"].cpu(), want["t"]):
            raise Mismatch(f"{what}: tensor {got['t']!r}, expected {want['t']!r}")

    def through_tpu_dist(name, before):
        # Under init_process_group("tpu_dist") the objects travel as "tpu" byte tensors, through tpu_dist.
        if DEVICE_KIND == "tpu" and dist.distributed_c10d._get_object_coll_device() == "tpu":
            if collectives_count() <= before:
                raise Mismatch(f"{name} ran no tpu_dist collective although the group's object device is tpu")

    def gather_objects():
        c0 = collectives_count()
        out = [None] * WORLD
        dist.all_gather_object(out, objs(RANK))
        for r in range(WORLD):
            compare(out[r], objs(r), f"all_gather_object entry {r}")
        through_tpu_dist("all_gather_object", c0)

    def broadcast_objects():
        c0 = collectives_count()
        lst = [objs(1), "second", 3.5] if RANK == 1 else [None, None, None]
        dist.broadcast_object_list(lst, src=1)
        compare(lst[0], objs(1), "broadcast_object_list entry 0")
        if lst[1:] != ["second", 3.5]:
            raise Mismatch(f"broadcast_object_list entries 1, 2: {lst[1:]!r}")
        through_tpu_dist("broadcast_object_list", c0)

    return [("all_gather_object", gather_objects), ("broadcast_object_list", broadcast_objects)]


def section_gather_scatter():
    def gather(dtype):
        def fn():
            xs = inputs("gather", dtype, SHAPE)
            lst = [tpu(torch.zeros(SHAPE, dtype=dtype)) for _ in range(WORLD)] if RANK == 0 else None
            dist.gather(tpu(xs[RANK]), gather_list=lst, dst=0)
            if RANK == 0:
                for r in range(WORLD):
                    same(lst[r], xs[r], f"gather(dst=0) {dtype} entry {r}")
        return fn

    def scatter(dtype):
        def fn():
            require_device_dtype(dtype)
            xs = inputs("scatter", dtype, SHAPE)  # the root's list: xs[r] goes to rank r
            out = tpu(torch.zeros(SHAPE, dtype=dtype))
            dist.scatter(out, scatter_list=[tpu(x) for x in xs] if RANK == 1 else None, src=1)
            same(out, xs[RANK], f"scatter(src=1) {dtype}")
        return fn

    return ([(f"gather/{str(d)[6:]}", gather(d)) for d in (torch.float32, torch.int16, torch.complex64)]
            + [(f"scatter/{str(d)[6:]}", scatter(d)) for d in (torch.float32, torch.int64, torch.bfloat16, F8)])


def section_reduce_scatter():
    def rs_list(op, dtype):
        def fn():
            # Rank r's input list: WORLD tensors; output on rank j: the reduction of every rank's entry j.
            per_rank = [[make(("reduce_scatter", op_name(op), j), dtype, SHAPE, r) for j in range(WORLD)]
                        for r in range(WORLD)]
            want = reduce_cpu(op, [per_rank[r][RANK] for r in range(WORLD)])
            out = tpu(torch.zeros(SHAPE, dtype=dtype))
            dist.reduce_scatter(out, [tpu(x) for x in per_rank[RANK]], op=op)
            same(out, want, f"reduce_scatter({op_name(op)}) {dtype}", exact=op != R.AVG)
        return fn

    def rs_tensor(op, dtype):
        def fn():
            shape = (WORLD * SHAPE[0], SHAPE[1])
            xs = inputs(("reduce_scatter_tensor", op_name(op)), dtype, shape)
            full = reduce_cpu(op, xs)
            want = full[RANK * SHAPE[0]:(RANK + 1) * SHAPE[0]]
            out = tpu(torch.zeros(SHAPE, dtype=dtype))
            dist.reduce_scatter_tensor(out, tpu(xs[RANK]), op=op)
            exact = op != R.AVG or not (dtype.is_floating_point or dtype.is_complex)
            same(out, want, f"reduce_scatter_tensor({op_name(op)}) {dtype}", exact=exact)
        return fn

    return ([(f"list/{op_name(op)}/{str(d)[6:]}", rs_list(op, d))
             for op, d in [(R.SUM, torch.float32), (R.MAX, torch.int32), (R.AVG, torch.float16)]]
            + [(f"tensor/{op_name(op)}/{str(d)[6:]}", rs_tensor(op, d))
               for op, d in [(R.SUM, torch.float32), (R.AVG, torch.float32), (R.SUM, torch.bfloat16),
                             (R.SUM, torch.int16), (R.AVG, torch.int64), (R.AVG, torch.bfloat16),
                             (R.SUM, torch.complex64)]])


# Uneven all-to-all: SPLITS[r][j] rows go from rank r to rank j.
SPLITS = [[1, 3], [2, 2]]


def section_all_to_all():
    def single_equal(dtype):
        def fn():
            n = 2
            xs = inputs("a2a_equal", dtype, (WORLD * n, 3))
            want = torch.cat([xs[j][RANK * n:(RANK + 1) * n] for j in range(WORLD)])
            out = tpu(torch.zeros(want.shape, dtype=dtype))
            dist.all_to_all_single(out, tpu(xs[RANK]))
            same(out, want, f"all_to_all_single {dtype} equal splits")
        return fn

    def single_uneven(dtype):
        def fn():
            xs = [make("a2a_uneven", dtype, (sum(SPLITS[r]), 3), r) for r in range(WORLD)]

            def part(r, j):  # rank r's rows for rank j
                start = sum(SPLITS[r][:j])
                return xs[r][start:start + SPLITS[r][j]]
            want = torch.cat([part(j, RANK) for j in range(WORLD)])
            out = tpu(torch.zeros(want.shape, dtype=dtype))
            dist.all_to_all_single(out, tpu(xs[RANK]), output_split_sizes=[SPLITS[j][RANK] for j in range(WORLD)],
                                   input_split_sizes=SPLITS[RANK])
            same(out, want, f"all_to_all_single {dtype} splits {SPLITS}")
        return fn

    def a2a_list(dtype, varied):
        def fn():
            def shape(src, dst):
                return (src + 2 * dst + 1, 2) if varied else (2, 2)

            def piece(src, dst):
                return make(("a2a_list", varied, dst), dtype, shape(src, dst), src)
            outs = [tpu(torch.zeros(shape(j, RANK), dtype=dtype)) for j in range(WORLD)]
            dist.all_to_all(outs, [tpu(piece(RANK, j)) for j in range(WORLD)])
            for j in range(WORLD):
                same(outs[j], piece(j, RANK), f"all_to_all {dtype} ({'varied' if varied else 'equal'} shapes) from {j}")
        return fn

    return ([(f"single_equal/{str(d)[6:]}", single_equal(d)) for d in (torch.float32, torch.int16)]
            + [(f"single_uneven/{str(d)[6:]}", single_uneven(d)) for d in (torch.float32, torch.int16, torch.bfloat16)]
            + [("list_equal/float32", a2a_list(torch.float32, False)),
               ("list_varied/int64", a2a_list(torch.int64, True))])


def short_group():
    """A group of both ranks with a short timeout, for a check that hangs when it fails (a failed wait can
    leave a gloo pair closed, so each such check gets its own group)."""
    return dist.new_group([0, 1], timeout=datetime.timedelta(seconds=SHORT_TIMEOUT_S))


def section_p2p():
    peer = 1 - RANK

    def send_recv():
        xs = inputs("send_recv", torch.float32, SHAPE)
        buf = tpu(torch.zeros(SHAPE))
        if RANK == 0:
            dist.send(tpu(xs[0]), dst=1)
            dist.recv(buf, src=1)
        else:
            dist.recv(buf, src=0)
            dist.send(tpu(xs[1]), dst=0)
        same(buf, xs[peer], "send/recv float32")

    def isend_irecv(dtype):
        def fn():
            xs = inputs("isend_irecv", dtype, SHAPE)
            buf = tpu(torch.zeros(SHAPE, dtype=dtype))
            # Rank 0 sends first, rank 1 receives first: correct whether or not isend blocks.
            if RANK == 0:
                works = [dist.isend(tpu(xs[0]), dst=1), dist.irecv(buf, src=1)]
            else:
                works = [dist.irecv(buf, src=0), dist.isend(tpu(xs[1]), dst=0)]
            for w in works:
                w.wait()
            same(buf, xs[peer], f"isend/irecv {dtype}")
        return fn

    def batch(both_send_first):
        def fn():
            xs = inputs(("batch", both_send_first), torch.float32, SHAPE)
            buf = tpu(torch.zeros(SHAPE))
            group = short_group() if both_send_first else None
            send = dist.P2POp(dist.isend, tpu(xs[RANK]), peer, group=group)
            recv = dist.P2POp(dist.irecv, buf, peer, group=group)
            # both_send_first: both ranks list their send first, the usual pattern (NCCL and gloo take it:
            # an isend does not wait for the matching irecv). Otherwise the ranks' orders are mirrored.
            ops = [send, recv] if both_send_first or RANK == 0 else [recv, send]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            same(buf, xs[peer], f"batch_isend_irecv ({'both ranks send first' if both_send_first else 'mirrored'})")
        return fn

    def both_isend_first():
        xs = inputs("both_isend_first", torch.float32, SHAPE)
        buf = tpu(torch.zeros(SHAPE))
        group = short_group()
        works = [dist.isend(tpu(xs[RANK]), dst=peer, group=group), dist.irecv(buf, src=peer, group=group)]
        for w in works:
            w.wait()
        same(buf, xs[peer], "isend then irecv on both ranks")

    return [("send_recv/float32", send_recv), ("isend_irecv/float32", isend_irecv(torch.float32)),
            ("isend_irecv/int16", isend_irecv(torch.int16)), ("batch_isend_irecv/mirrored", batch(False)),
            ("isend_irecv/both_send_first", both_isend_first), ("batch_isend_irecv/both_send_first", batch(True))]


def section_barrier():
    def barrier():
        before = collectives_count()
        dist.barrier()
        if DEVICE_KIND == "tpu":
            # device_ids: the barrier on the "tpu" device, i.e. through tpu_dist whatever else the group has.
            dist.barrier(device_ids=[DEV.index])
            if collectives_count() <= before:
                raise Mismatch(f"barrier(device_ids=[{DEV.index}]) did not run through tpu_dist (collectives "
                               f"{before} -> {collectives_count()})")

    def barrier_orders():
        # Rank 0 reaches the barrier 0.3 s late: rank 1 must wait for it there.
        if RANK == 0:
            time.sleep(0.3)
        t0 = time.perf_counter()
        if DEVICE_KIND == "tpu":
            dist.barrier(device_ids=[DEV.index])
        else:
            dist.barrier()
        waited = time.perf_counter() - t0
        if RANK == 1 and waited < 0.2:
            raise Mismatch(f"rank 1 left the barrier after {waited:.3f} s although rank 0 reached it 0.3 s late")

    return [("barrier", barrier), ("barrier_waits", barrier_orders)]


def section_noncontiguous():
    def all_reduce_view(kind):
        def fn():
            bases = inputs(("nc_all_reduce", kind), torch.float32, (6, 8))

            def view(b):
                if kind == "sliced":
                    return b[1:5, 2:8:2]          # strided rows and columns
                if kind == "transposed":
                    return b.t()                  # the whole base, transposed
                return b[:, 1:4].t()              # transposed slice
            want = bases[RANK].clone()
            view(want).copy_(reduce_cpu(R.SUM, [view(b) for b in bases]))
            base = tpu(bases[RANK])
            v = view(base)
            if v.is_contiguous():
                raise Mismatch("the view is contiguous: the check tests nothing")
            dist.all_reduce(v)
            same(v, view(want), f"all_reduce into a {kind} view: the view")
            same(base, want, f"all_reduce into a {kind} view: the base (view region updated, the rest unchanged)")
        return fn

    def all_gather_view(kind):
        def fn():
            bases = inputs(("nc_all_gather_in", kind), torch.float32, (4, 6))
            src = [b[:, ::2] for b in bases]                  # input view [4, 3], strided
            gathered = torch.cat(src)                         # [8, 3]
            out_base_cpu = make(("nc_all_gather_out", kind), torch.float32, (10, 12), RANK)

            def out_view(b):
                if kind == "sliced":
                    return b[1:9, 3:9:2]                       # [8, 3]
                return b[2:5, 1:9].t()                         # [8, 3], transposed
            want = out_base_cpu.clone()
            out_view(want).copy_(gathered)
            out_base = tpu(out_base_cpu)
            out = out_view(out_base)
            inp = tpu(bases[RANK])[:, ::2]
            if out.is_contiguous() or inp.is_contiguous():
                raise Mismatch("a view is contiguous: the check tests nothing")
            dist.all_gather_into_tensor(out, inp)
            same(out, gathered, f"all_gather_into_tensor into a {kind} view: the view")
            same(out_base, want, f"all_gather_into_tensor into a {kind} view: the base")
            same(inp, src[RANK], "all_gather_into_tensor: the input view is unchanged")
        return fn

    def broadcast_view():
        bases = inputs("nc_broadcast", torch.int16, (3, 4))

        def view(b):
            return b.t()[1:3]  # columns 1 and 2, as rows
        want = bases[RANK].clone()
        view(want).copy_(view(bases[1]))
        base = tpu(bases[RANK])
        dist.broadcast(view(base), src=1)
        same(base, want, "broadcast into a transposed slice (int16): the base")

    return ([(f"all_reduce/{k}", all_reduce_view(k)) for k in ("sliced", "transposed", "transposed_slice")]
            + [(f"all_gather_into_tensor/{k}", all_gather_view(k)) for k in ("sliced", "transposed")]
            + [("broadcast/transposed_slice", broadcast_view)])


def section_async():
    def all_reduce_async():
        xs = inputs("async_all_reduce", torch.float32, SHAPE)
        want = reduce_cpu(R.SUM, xs)
        t = tpu(xs[RANK])
        work = dist.all_reduce(t, async_op=True)
        value = work.get_future().wait()
        if not isinstance(value, list) or len(value) != 1:
            raise Mismatch(f"the future's value is {type(value).__name__} {value!r}, expected a list of 1 tensor")
        same(value[0], want, "all_reduce(async_op=True): the future's tensor")
        if value[0].data_ptr() != t.data_ptr() or value[0].device != t.device:
            raise Mismatch(f"the future's tensor is not the input tensor ({value[0].device} vs {t.device})")
        work.wait()
        same(t, want, "all_reduce(async_op=True): the tensor after work.wait()")
        if not work.is_completed():
            raise Mismatch("work.is_completed() is False after wait()")

    def wait_first(name, run):
        def fn():
            outs, work, want = run()
            work.wait()
            for o, w in zip(outs, want):
                same(o, w, f"{name}(async_op=True): after work.wait()")
            value = work.get_future().wait()
            if not isinstance(value, list) or len(value) != len(want):
                raise Mismatch(f"{name}: the future's value is {value!r}, expected a list of {len(want)} tensors")
            for v, w in zip(value, want):
                same(v, w, f"{name}(async_op=True): the future's value")
        return fn

    def run_all_gather():
        xs = inputs("async_all_gather", torch.float32, SHAPE)
        out = tpu(torch.zeros((WORLD * SHAPE[0], SHAPE[1])))
        return [out], dist.all_gather_into_tensor(out, tpu(xs[RANK]), async_op=True), [torch.cat(xs)]

    def run_broadcast():
        xs = inputs("async_broadcast", torch.int32, SHAPE)
        t = tpu(xs[RANK])
        return [t], dist.broadcast(t, src=1, async_op=True), [xs[1]]

    def run_reduce_scatter():
        xs = inputs("async_rs", torch.float32, (WORLD * SHAPE[0], SHAPE[1]))
        out = tpu(torch.zeros(SHAPE))
        want = reduce_cpu(R.SUM, xs)[RANK * SHAPE[0]:(RANK + 1) * SHAPE[0]]
        return [out], dist.reduce_scatter_tensor(out, tpu(xs[RANK]), async_op=True), [want]

    def two_in_flight():
        # Two works outstanding at once, waited for in reverse order.
        xs = inputs("async_two_a", torch.float32, SHAPE)
        ys = inputs("async_two_b", torch.int64, SHAPE)
        a, b = tpu(xs[RANK]), tpu(ys[RANK])
        wa = dist.all_reduce(a, async_op=True)
        wb = dist.all_reduce(b, op=R.MAX, async_op=True)
        wb.wait()
        wa.wait()
        same(a, reduce_cpu(R.SUM, xs), "first of two async all_reduces")
        same(b, reduce_cpu(R.MAX, ys), "second of two async all_reduces")

    return [("all_reduce/future_then_wait", all_reduce_async),
            ("all_gather_into_tensor/wait_then_future", wait_first("all_gather_into_tensor", run_all_gather)),
            ("broadcast/wait_then_future", wait_first("broadcast", run_broadcast)),
            ("reduce_scatter_tensor/wait_then_future", wait_first("reduce_scatter_tensor", run_reduce_scatter)),
            ("two_in_flight", two_in_flight)]


def section_functional():
    import torch.distributed._functional_collectives as fc

    group = dist.group.WORLD

    def fc_all_reduce():
        xs = inputs("fc_all_reduce", torch.float32, SHAPE)
        t = tpu(xs[RANK])
        r = fc.all_reduce(t, "sum", group)
        same(r, reduce_cpu(R.SUM, xs), "functional all_reduce(sum)")
        same(t, xs[RANK], "functional all_reduce leaves its input alone")
        r2 = fc.all_reduce(tpu(xs[RANK]), "max", group)
        same(r2, reduce_cpu(R.MAX, xs), "functional all_reduce(max)")

    def fc_all_gather(dim):
        def fn():
            xs = inputs(("fc_all_gather", dim), torch.float32, SHAPE)
            r = fc.all_gather_tensor(tpu(xs[RANK]), dim, group)
            same(r, torch.cat(xs, dim), f"functional all_gather_tensor(gather_dim={dim})")
        return fn

    def fc_reduce_scatter(dim):
        def fn():
            shape = (WORLD * SHAPE[0], SHAPE[1]) if dim == 0 else (SHAPE[0], WORLD * SHAPE[1])
            xs = inputs(("fc_reduce_scatter", dim), torch.float32, shape)
            want = reduce_cpu(R.SUM, xs).chunk(WORLD, dim)[RANK]
            r = fc.reduce_scatter_tensor(tpu(xs[RANK]), "sum", dim, group)
            same(r, want.contiguous(), f"functional reduce_scatter_tensor(scatter_dim={dim})")
        return fn

    def fc_all_to_all(uneven):
        def fn():
            if uneven:
                xs = [make("fc_a2a_uneven", torch.float32, (sum(SPLITS[r]), 3), r) for r in range(WORLD)]

                def part(r, j):
                    start = sum(SPLITS[r][:j])
                    return xs[r][start:start + SPLITS[r][j]]
                out_splits, in_splits = [SPLITS[j][RANK] for j in range(WORLD)], SPLITS[RANK]
            else:
                xs = inputs("fc_a2a_equal", torch.float32, (WORLD * 2, 3))

                def part(r, j):
                    return xs[r][2 * j:2 * j + 2]
                out_splits = in_splits = None
            want = torch.cat([part(j, RANK) for j in range(WORLD)])
            r = fc.all_to_all_single(tpu(xs[RANK]), out_splits, in_splits, group)
            same(r, want, f"functional all_to_all_single ({'uneven' if uneven else 'equal'} splits)")
        return fn

    def fc_coalesced():
        xs = inputs("fc_agc_a", torch.float32, (2, 3))
        ys = inputs("fc_agc_b", torch.bfloat16, (4,))
        ag = fc.all_gather_into_tensor_coalesced([tpu(xs[RANK]), tpu(ys[RANK])], group)
        same(ag[0], torch.cat(xs), "functional all_gather_into_tensor_coalesced tensor 0")
        same(ag[1], torch.cat(ys), "functional all_gather_into_tensor_coalesced tensor 1")
        us = inputs("fc_rsc_a", torch.float32, (WORLD * 2, 3))
        vs = inputs("fc_rsc_b", torch.int32, (WORLD * 3,))
        rs = fc.reduce_scatter_tensor_coalesced([tpu(us[RANK]), tpu(vs[RANK])], "sum", [0, 0], group)
        same(rs[0], reduce_cpu(R.SUM, us).chunk(WORLD)[RANK], "functional reduce_scatter_tensor_coalesced tensor 0")
        same(rs[1], reduce_cpu(R.SUM, vs).chunk(WORLD)[RANK], "functional reduce_scatter_tensor_coalesced tensor 1")

    def coalescing_manager():
        # What FSDP-style code does: several collectives of one kind issued as one coalesced call.
        xs = [inputs(("cm_ag", i), torch.float32, s) for i, s in enumerate([(2, 3), (1,)])]
        outs = [tpu(torch.zeros((WORLD * x[0].shape[0], *x[0].shape[1:]))) for x in xs]
        with dist._coalescing_manager(async_ops=True) as cm:
            for o, x in zip(outs, xs):
                dist.all_gather_into_tensor(o, tpu(x[RANK]))
        cm.wait()
        for i, (o, x) in enumerate(zip(outs, xs)):
            same(o, torch.cat(x), f"all_gather_into_tensor {i} in a _coalescing_manager")
        ys = [inputs(("cm_rs", i), torch.float32, s) for i, s in enumerate([(WORLD * 2, 3), (WORLD,)])]
        outs = [tpu(torch.zeros((y[0].shape[0] // WORLD, *y[0].shape[1:]))) for y in ys]
        with dist._coalescing_manager(async_ops=True) as cm:
            for o, y in zip(outs, ys):
                dist.reduce_scatter_tensor(o, tpu(y[RANK]))
        cm.wait()
        for i, (o, y) in enumerate(zip(outs, ys)):
            same(o, reduce_cpu(R.SUM, y).chunk(WORLD)[RANK], f"reduce_scatter_tensor {i} in a _coalescing_manager")
        zs = [inputs(("cm_ar", i), torch.float32, s) for i, s in enumerate([(2, 3), (5,)])]
        ts = [tpu(z[RANK]) for z in zs]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        for i, (t, z) in enumerate(zip(ts, zs)):
            same(t, reduce_cpu(R.SUM, z), f"all_reduce {i} in a _coalescing_manager")

    return [("all_reduce", fc_all_reduce), ("all_gather_tensor/dim0", fc_all_gather(0)),
            ("coalesced", fc_coalesced), ("coalescing_manager", coalescing_manager),
            ("all_gather_tensor/dim1", fc_all_gather(1)), ("reduce_scatter_tensor/dim0", fc_reduce_scatter(0)),
            ("reduce_scatter_tensor/dim1", fc_reduce_scatter(1)), ("all_to_all_single/equal", fc_all_to_all(False)),
            ("all_to_all_single/uneven", fc_all_to_all(True))]


def section_groups():
    def two_groups():
        g1 = dist.new_group([0, 1])
        g2 = dist.new_group([0, 1])
        if DEVICE_KIND == "tpu":
            names = [g._get_backend(DEV).group_name if hasattr(g._get_backend(DEV), "group_name") else "?"
                     for g in (g1, g2)]
            if names[0] == names[1]:
                raise Mismatch(f"the two groups' tpu_dist backends have the same group name {names[0]!r}")
        xs = inputs("group1", torch.float32, SHAPE)
        ys = inputs("group2", torch.int32, SHAPE)
        zs = inputs("group_world", torch.float32, SHAPE)
        a, b, c = tpu(xs[RANK]), tpu(ys[RANK]), tpu(zs[RANK])
        # Interleaved on three groups, one of them asynchronous across the others.
        wa = dist.all_reduce(a, group=g1, async_op=True)
        out = tpu(torch.zeros((WORLD * SHAPE[0], SHAPE[1]), dtype=torch.int32))
        dist.all_gather_into_tensor(out, b, group=g2)
        dist.all_reduce(c, op=R.MAX)
        dist.all_reduce(b, op=R.MIN, group=g2)
        wa.wait()
        same(a, reduce_cpu(R.SUM, xs), "all_reduce on new_group([0, 1]) #1")
        same(out, torch.cat(ys), "all_gather_into_tensor on new_group([0, 1]) #2")
        same(b, reduce_cpu(R.MIN, ys), "all_reduce(MIN) on new_group([0, 1]) #2")
        same(c, reduce_cpu(R.MAX, zs), "all_reduce(MAX) on the world group between them")
        dist.barrier(group=g1)
        dist.destroy_process_group(g2)

    def single_rank_group():
        g = dist.new_group([0])
        xs = inputs("single", torch.float32, SHAPE)
        t = tpu(xs[RANK])
        dist.all_reduce(t, group=g)  # rank 1 is not in g: a no-op (with a warning) there
        same(t, xs[RANK], "all_reduce on a group of one rank")

    def mesh():
        from torch.distributed.device_mesh import init_device_mesh

        m = init_device_mesh(DEV.type, (1, WORLD), mesh_dim_names=("dp", "tp"))
        tp, dp = m["tp"].get_group(), m["dp"].get_group()
        if (tp.size(), dp.size()) != (WORLD, 1):
            raise Mismatch(f"mesh group sizes tp={tp.size()} dp={dp.size()}")
        xs = inputs("mesh_tp", torch.float32, SHAPE)
        t = tpu(xs[RANK])
        dist.all_reduce(t, group=tp)
        same(t, reduce_cpu(R.SUM, xs), "all_reduce on the mesh's 'tp' group")
        u = tpu(xs[RANK])
        dist.all_reduce(u, group=dp)
        same(u, xs[RANK], "all_reduce on the mesh's 'dp' group (one rank)")
        ys = inputs("mesh_tp_gather", torch.bfloat16, SHAPE)
        out = tpu(torch.zeros((WORLD * SHAPE[0], SHAPE[1]), dtype=torch.bfloat16))
        dist.all_gather_into_tensor(out, tpu(ys[RANK]), group=tp)
        same(out, torch.cat(ys), "all_gather_into_tensor on the mesh's 'tp' group")

    return [("two_new_groups", two_groups), ("single_rank_group", single_rank_group), ("device_mesh", mesh)]


def section_metrics():
    def counted():
        if DEVICE_KIND != "tpu":
            return
        import torch_pjrt
        import torch_pjrt.distributed

        m0 = torch_pjrt.distributed.metrics()
        t = tpu(make("metrics", torch.float32, SHAPE, RANK))
        dist.all_reduce(t)
        out = tpu(torch.zeros((WORLD * SHAPE[0], SHAPE[1])))
        dist.all_gather_into_tensor(out, t)
        m1 = torch_pjrt.distributed.metrics()
        if m1["collectives"] - m0["collectives"] != 2:
            raise Mismatch(f"collectives counter went {m0['collectives']} -> {m1['collectives']} for 2 collectives")
        for k in ("bytes_to_host", "bytes_to_device"):
            if m1[k] <= m0[k]:
                raise Mismatch(f"{k} did not grow: {m0[k]} -> {m1[k]}")
        info(f"torch_pjrt.distributed.metrics() = {m1}")
        top = torch_pjrt.metrics()
        info(f"torch_pjrt.metrics() has a 'distributed' entry: {'distributed' in top} ({top.get('distributed')!r})")
        if top.get("distributed", {}).get("collectives") != m1["collectives"]:
            raise Mismatch(f"torch_pjrt.metrics()['distributed'] = {top.get('distributed')!r} differs from "
                           f"torch_pjrt.distributed.metrics() = {m1!r}")
        info(f"torch_pjrt.metrics(): fallback_total={top.get('fallback_total')} compiles={top.get('compiles')} "
             f"cache_misses={top.get('cache_misses')} disk_cache_hits={top.get('disk_cache_hits')}")
        if top.get("fallback_total"):
            raise Mismatch(f"ops fell back to the CPU: {top.get('fallbacks')}")
    return [("collectives_counter", counted)]


INFO = []  # (section, text): printed at the end as "INFO <section> <text>"
SECTION = ""


def info(text):
    if RANK == 0:
        INFO.append((SECTION, text))


def section_init():
    """The short check of a form: backend names, all_reduce, barrier, all_gather_object (each through
    tpu_dist where the form gives "tpu" to it)."""
    def names():
        pg = dist.group.WORLD
        details = {"get_backend()": dist.get_backend(), "pg._get_backend_name()": pg._get_backend_name(),
                   "device_types": [str(d) for d in pg._device_types]}
        if DEVICE_KIND == "tpu":
            b = pg._get_backend(DEV)
            details["tpu backend"] = f"{type(b).__name__} name={b.name()}"
            if "tpu_dist" not in b.name():
                raise Mismatch(f"the group's tpu backend is {b.name()!r}, not tpu_dist: {details}")
        info(f"form {FORM}: {details}")

    def all_reduce():
        c0 = collectives_count()
        xs = inputs("init_all_reduce", torch.float32, SHAPE)
        t = tpu(xs[RANK])
        dist.all_reduce(t)
        same(t, reduce_cpu(R.SUM, xs), "all_reduce(SUM) float32")
        if DEVICE_KIND == "tpu" and collectives_count() != c0 + 1:
            raise Mismatch(f"collectives counter {c0} -> {collectives_count()} for one all_reduce")

    def barrier():
        c0 = collectives_count()
        dist.barrier()
        info(f"form {FORM}: dist.barrier() ran {collectives_count() - c0} tpu_dist collective(s)")

    def gather_object():
        c0 = collectives_count()
        out = [None] * WORLD
        dist.all_gather_object(out, {"rank": RANK, "x": [RANK] * (RANK + 1)})
        if out != [{"rank": r, "x": [r] * (r + 1)} for r in range(WORLD)]:
            raise Mismatch(f"all_gather_object: {out!r}")
        info(f"form {FORM}: all_gather_object ran {collectives_count() - c0} tpu_dist collective(s) "
             f"(object device {dist.distributed_c10d._get_object_coll_device()})")

    return [("backend_names", names), ("all_reduce", all_reduce), ("barrier", barrier),
            ("all_gather_object", gather_object)]


def section_edges():
    def zero_dim():
        xs = inputs("zero_dim", torch.float32, ())
        t = tpu(xs[RANK])
        dist.all_reduce(t, op=R.MAX)
        same(t, reduce_cpu(R.MAX, xs), "all_reduce(MAX) of a 0-d float32 tensor")
        ys = inputs("zero_dim_gather", torch.int16, ())
        out = tpu(torch.zeros(WORLD, dtype=torch.int16))
        dist.all_gather_into_tensor(out, tpu(ys[RANK]))
        same(out, torch.stack(ys), "all_gather_into_tensor of a 0-d int16 tensor")

    def empty():
        t = tpu(torch.zeros((0, 5)))
        dist.all_reduce(t)
        same(t, torch.zeros((0, 5)), "all_reduce of an empty float32 tensor")
        u = tpu(torch.zeros((0, 5), dtype=torch.int16))
        dist.broadcast(u, src=1)
        same(u, torch.zeros((0, 5), dtype=torch.int16), "broadcast of an empty int16 tensor")

    def mismatch():
        # The ranks call all_reduce with different shapes: tpu_dist's agreement check must refuse it on every
        # rank with a RuntimeError that shows both calls (not hang, not reduce garbage); then the group works.
        g = short_group()
        t = tpu(torch.zeros(3 + RANK))
        msg = expect_error(lambda: dist.all_reduce(t, group=g), (RuntimeError,), ["allreduce", "[3]", "[4]"],
                           "all_reduce with shapes [3] and [4] on the two ranks")
        info(f"mismatched shapes: {msg.splitlines()[0][:200]}")
        xs = inputs("after_mismatch", torch.float32, (2,))
        u = tpu(xs[RANK])
        dist.all_reduce(u, group=g)
        same(u, reduce_cpu(R.SUM, xs), "all_reduce on the group after the refused call")

    return [("zero_dim", zero_dim), ("empty", empty), ("mismatched_shapes", mismatch)]


SECTIONS = {
    "init": section_init,
    "all_reduce": section_all_reduce,
    "all_reduce_coalesced": section_all_reduce_coalesced,
    "reduce": section_reduce,
    "broadcast": section_broadcast,
    "all_gather": section_all_gather,
    "all_gather_into_tensor": section_all_gather_into_tensor,
    "objects": section_objects,
    "gather_scatter": section_gather_scatter,
    "reduce_scatter": section_reduce_scatter,
    "all_to_all": section_all_to_all,
    "p2p": section_p2p,
    "barrier": section_barrier,
    "noncontiguous": section_noncontiguous,
    "async": section_async,
    "functional": section_functional,
    "groups": section_groups,
    "edges": section_edges,
    "metrics": section_metrics,
}


# --------------------------------------------------------------------------------------------------------
# Driver

FORM = "tpu_dist"


def init(form):
    global RANK, WORLD, DEV, CTL, FORM
    FORM = form
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    if DEVICE_KIND == "tpu":
        import torch_pjrt  # noqa: F401

        local_rank = int(os.environ["LOCAL_RANK"])
        if torch.tpu.current_device() != local_rank:
            raise RuntimeError(f"the process starts on tpu:{torch.tpu.current_device()}, not tpu:{local_rank}")
        DEV = torch.device("tpu", local_rank)
        if FORMS[form] is None:
            dist.init_process_group(timeout=timeout)
        else:
            dist.init_process_group(FORMS[form], timeout=timeout)
    else:
        DEV = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    if WORLD != 2:
        raise RuntimeError(f"collectives_worker runs at world size 2, not {WORLD}")
    CTL = dist.new_group(backend="gloo")


def run_case(full_name, fn):
    t0 = time.perf_counter()
    try:
        fn()
        status, detail = "OK", ""
    except Skip as e:
        status, detail = "SKIP", str(e)
    except Mismatch as e:
        status, detail = "FAIL", str(e)
    except Exception as e:
        status, detail = "FAIL", f"{type(e).__name__}: {e}".strip()
        if os.environ.get("DIST_TRACEBACK"):
            detail += "\n" + traceback.format_exc()
    dt = time.perf_counter() - t0
    outcomes = [None] * WORLD
    dist.all_gather_object(outcomes, (status, detail, dt), group=CTL)
    statuses = {o[0] for o in outcomes}
    # Every rank agrees: OK and SKIP when all ranks say so, FAIL otherwise (a skip on one rank only too).
    result = statuses.pop() if len(statuses) == 1 and statuses <= {"OK", "SKIP"} else "FAIL"
    if RANK == 0:
        took = max(o[2] for o in outcomes)
        if result == "SKIP":
            print(f"SKIP {full_name}: {outcomes[0][1]}", flush=True)
        elif result == "OK":
            print(f"OK {full_name} ({took:.2f}s)", flush=True)
        else:
            parts = [f"rank {r}: {o[0]} {o[1][:1500]}" for r, o in enumerate(outcomes)]
            print(f"FAIL {full_name} ({took:.2f}s): " + " | ".join(parts), flush=True)
    return result


def main(argv):
    if not argv:
        sys.exit(f"usage: collectives_worker.py {{{'|'.join(FORMS)}}} [SECTION ...]")
    form, names = argv[0], argv[1:] or [s for s in SECTIONS if s != "init"]
    if form not in FORMS:
        sys.exit(f"collectives_worker: unknown form {form!r}; known: {list(FORMS)}")
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        sys.exit(f"collectives_worker: unknown section(s) {unknown}; known: {list(SECTIONS)}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    t_start = time.perf_counter()
    init(form)
    if RANK == 0:
        print(f"collectives_worker: device {DEVICE_KIND} ({DEV}), form {form}, backend {dist.get_backend()}, "
              f"world {WORLD}, fallback {os.environ.get('TORCH_PJRT_FALLBACK')}", flush=True)
    failed = 0
    global SECTION
    for section in names:
        SECTION = section
        cases = SECTIONS[section]()
        results = [run_case(f"{section}/{name}", fn) for name, fn in cases]
        n_fail = results.count("FAIL")
        failed += n_fail
        if RANK == 0:
            print(f"SECTION {section} ok={results.count('OK')} skipped={results.count('SKIP')} failed={n_fail} "
                  f"of={len(cases)}", flush=True)
    if RANK == 0:
        for section, line in INFO:
            print(f"INFO {section} {line}", flush=True)
        print(f"DONE failed={failed} time={time.perf_counter() - t_start:.1f}s", flush=True)
    dist.destroy_process_group()
    from teardown import finish  # here: the test imports this file for SECTIONS, from elsewhere

    finish(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
