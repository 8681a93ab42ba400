"""The differential fuzzer's device-side checks (python/torch_pjrt/fuzz.py, issue #36): programs with an
out-of-range index or invalid multinomial probabilities, each followed by a sync point, and the names those
programs run with (``sync(dev)``, ``compiled(fn, *args)``) and the marker they carry (``# checked: names``)."""

import types

import torch


def checked_names(line):
    """The tensors a line marked ``# checked: names`` writes with an op that fails a device-side check."""
    _, _, checked = line.partition("  # checked: ")
    return [n for n in checked.partition("  # inexact: ")[0].split(",") if n]


def _sync(device):
    """sync(dev): a sync point on "tpu", nothing on the CPU."""
    return (lambda dev: None) if device == "cpu" else (lambda dev: torch.tpu.synchronize(dev))


_COMPILED_GLOBALS = {}  # the globals of every compiled lambda: Dynamo adds names there for its cached code


def _compiled_call(device):
    """compiled(fn, *args): fn(*args) on the CPU; on "tpu" through torch.compile(backend="tpu"). The lambda's
    code object is shared by every run of its line (_compiled), and so is the code Dynamo makes of it, which
    reads globals Dynamo installs: the lambda runs with one globals dict for all runs."""
    def call(fn, *args):
        if device == "cpu":
            return fn(*args)
        from torch_pjrt.fuzz import index  # noqa: PLC0415

        _COMPILED_GLOBALS.update(__builtins__=__builtins__, torch=torch, index=index, dev=device)
        fn = types.FunctionType(fn.__code__, _COMPILED_GLOBALS, fn.__name__, fn.__defaults__, fn.__closure__)
        return torch.compile(fn, backend="tpu", fullgraph=True)(*args)
    return call


def op_bad_value(self):  # a fuzz.Gen method (self: the generator)
    """An op given an out-of-range index (or multinomial invalid probabilities), then a sync point. The
    CPU raises at the op; "tpu" raises the same exception type at the sync (a device-side check), and a
    failed write changes nothing. A third of them run through torch.compile(backend="tpu") on "tpu"."""
    from torch_pjrt.fuzz import _self_overlaps, _shape_src  # noqa: PLC0415 (fuzz imports this module)

    if self.coin(0.15):
        probs = self.choice([[0.5, -0.1, 0.6], [0.0, 0.0, 0.0], [0.2, float("nan"), 0.3],
                             [0.2, float("inf"), 0.3], [[0.1, 0.9], [0.0, 0.0]]])
        self.emit(f"torch.multinomial(torch.tensor({probs}, device=dev), {self.int(1, 2)}, {self.coin()})")
        self.emit("sync(dev)")
        return
    x = self.pick(lambda t: 1 <= t.dim() and t.numel() > 0 and t.dtype != torch.bool)
    if x is None:
        return
    t = self.t(x)
    d = self.int(0, t.dim() - 1)
    op = self.choice(["index_select", "getitem", "gather", "take", "index_copy_", "index_put_", "index_fill_",
                      "scatter_", "index_add_"])
    wraps = op in ("getitem", "take", "index_put_", "index_fill_")  # the ops that take negative indices
    if op == "index_put_":
        d = 0
    n = t.numel() if op == "take" else t.shape[d]
    bad = self.choice([n + self.int(0, 2), -n - 1 - self.int(0, 2)] + ([] if wraps else [-1 - self.int(0, n - 1)]))
    writes = op.endswith("_")
    if writes and (_self_overlaps(t) or not t.is_contiguous() and self.coin(0.5)):
        return
    # reads: some valid indices around the bad one; writes: the bad one alone (the CPU kernels write the
    # entries before a bad one, then raise; "tpu" writes nothing)
    idx = [bad] if writes else [self.int(0, n - 1) for _ in range(self.int(0, 2))] + [bad]
    lead = ":, " * d
    src = None
    if op in ("index_copy_", "index_add_"):
        shape = list(t.shape)
        shape[d] = 1
        src = self.op_input(tuple(shape), t.dtype)
    exprs = {  # the call on tensors named a (and b: the source)
        "index_select": "{a}.index_select(%d, index(%s, dev))" % (d, idx),
        "getitem": "{a}[%sindex(%s, dev)]" % (lead, idx),
        "take": "{a}.take(index(%s, dev))" % (idx,),
        "gather": "torch.gather({a}, %d, index(%s, dev).view(%s))" % (
            d, idx, _shape_src([len(idx) if k == d else 1 for k in range(t.dim())])),
        "scatter_": "{a}.scatter_(%d, index(%s, dev).view(%s), 1)" % (d, idx, _shape_src([1] * t.dim())),
        "index_fill_": "{a}.index_fill_(%d, index(%s, dev), 1)" % (d, idx),
        "index_put_": "{a}.index_put_((index(%s, dev),), torch.ones((), dtype={a}.dtype, device=dev))" % (idx,),
        "index_copy_": "{a}.index_copy_(%d, index(%s, dev), {b})" % (d, idx),
        "index_add_": "{a}.index_add_(%d, index(%s, dev), {b})" % (d, idx),
    }
    operands = [x] + ([src] if src else [])
    mark = f"  # checked: {x}" if writes else ""
    if self.coin(1 / 3):
        params = "a, b" if src else "a"
        line = f"compiled(lambda {params}: {exprs[op].format(a='a', b='b')}, {', '.join(operands)})"
    else:
        line = exprs[op].format(a=x, b=src)
    self.emit(line + mark, writes=[x] if writes else [], inputs=operands)
    self.emit("sync(dev)")
