"""torch.compile on "tpu": the Dynamo backend ``"tpu"``.

``torch.compile(model, backend="tpu")`` traces with AOTAutograd to ATen (PyTorch's core ATen
decompositions only for ops without a lowering row) and lowers each graph, the forward and separately the
backward, to ONE StableHLO program through the same lowering rows as eager (``_C._GraphBuilder``). The
program is compiled through the program cache (memory and disk) and runs on the tensors' device buffers.

- View nodes are read from their dense input with the view model: their sizes, strides and offset come
  from replaying the op on a contiguous meta tensor, so no view op needs a row.
- Input mutations (``keep_inference_input_mutations``: ``copy_`` into a graph input at the graph's end)
  are extra program outputs written back into the input's storage by swapping its buffer; the old
  buffer is donated to the program, so XLA may update it in place (optimizer state, KV caches).
  Mutations of CPU inputs computed from CPU values only (the optimizer's step counts) are computed on
  the host, so writing them back does not wait for the device.
- A graph with an op that has no row (after decompositions) runs eagerly op by op, with a warning naming
  the ops (``TORCH_PJRT_FALLBACK=error``, i.e. ``set_fallback_policy("error")``, makes it an error).
- A graph with functional collectives (DTensor's redistributions under torch.compile) is lowered in pieces:
  a program for each stretch between collectives, the collectives run by the device's c10d backend
  (tpu_dist) in between, so that no rank's program waits inside for another rank's.
- Shapes are static: a graph that Dynamo hands over with symbolic shapes (``dynamic=True``, or automatic
  dynamic shapes after a recompile) is specialised here per distinct input shapes, each its own program.
- A plain ``torch.compile(model)`` (Inductor) whose inputs are on "tpu" is routed to this backend:
  Inductor's own "tpu" path generates Pallas kernels through JAX, which does not drive our devices.
"""

import collections
import math
import operator
import warnings

import torch

from . import _C
from .graph_program import Compiled as _Compiled

__all__ = ["tpu_backend"]

_aten = torch.ops.aten
# Graphs this backend was handed: lowered as one program each, or run eagerly (they had an op without a row).
stats = {"graphs_lowered": 0, "graphs_eager": 0}
_MAX_SPECIALIZATIONS = 64


class Unsupported(Exception):
    """A graph this backend cannot lower as one program (it then runs eagerly)."""


def _overload_name(op):
    s = op._schema
    name = s.name.split("::", 1)[1]
    return name + ("." + s.overload_name if s.overload_name else "")


def _is_sym(x):
    return isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _is_tpu(x):
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


def _fake_val(node):
    return node.meta.get("val", node.meta.get("example_value"))


def _storage_order(val):
    """The dims of a dense, non-contiguous tensor by decreasing stride (its storage order), or None for a
    contiguous tensor or any other layout."""
    if val.is_contiguous() or val.storage_offset() != 0 or val.numel() == 0:
        return None
    order = sorted(range(val.dim()), key=lambda d: -val.stride(d))
    expected = 1
    for d in reversed(order):
        if val.shape[d] != 1 and val.stride(d) != expected:
            return None
        expected *= val.shape[d]
    return order


def _contiguous_strides(shape):
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= d
    return strides[::-1]


def _reads_whole(view, dims):
    """Whether `view` (a meta view of a dense value of sizes `dims`) is that value itself or a permutation of
    its dims: what a program takes as the value's buffer (GraphBuilder.input with strides)."""
    if view.storage_offset() != 0 or view.numel() != math.prod(dims):
        return False
    if list(view.shape) == dims and view.is_contiguous():
        return True
    order = _storage_order(view)
    return order is not None and [view.shape[d] for d in order] == dims


def _static_shape(val, what):
    for d in val.shape:
        if not isinstance(d, int):
            raise Unsupported(f"symbolic shape {tuple(val.shape)} of {what}")
    return list(val.shape)


# Writes into views, as functionalization leaves them: the view each one writes through.
# Dynamo's run-time checks on symbolic scalars: the host's (graph_syms), nothing in a program
_ASSERTS = {torch.ops.aten._assert_scalar.default, torch.ops.aten.sym_constrain_range_for_size.default}

_SCATTERS = {
    _aten.slice_scatter.default: _aten.slice.Tensor,
    _aten.select_scatter.default: _aten.select.int,
    _aten.diagonal_scatter.default: _aten.diagonal.default,
    _aten.as_strided_scatter.default: _aten.as_strided.default,
}

# Factory nodes: a constant of the node's shape and dtype, filled with this value (or taken from the node).
_FACTORIES = {
    _aten.full.default: lambda n: n.args[1],
    _aten.full_like.default: lambda n: n.args[1],
    _aten.new_full.default: lambda n: n.args[2],
    _aten.scalar_tensor.default: lambda n: n.args[0],
    _aten.zeros.default: 0,
    _aten.zeros_like.default: 0,
    _aten.new_zeros.default: 0,
    _aten.ones.default: 1,
    _aten.ones_like.default: 1,
    _aten.new_ones.default: 1,
    # uninitialized memory reads as zeros here, as it does in eager
    _aten.empty.memory_format: 0,
    _aten.empty_like.default: 0,
    _aten.empty_strided.default: 0,
    _aten.empty_permuted.default: 0,
    _aten.new_empty.default: 0,
    _aten.new_empty_strided.default: 0,
}


class _Const:
    """A non-tensor result of a node (a value shape inference already knows)."""

    def __init__(self, value):
        self.value = value


class _Lowering:
    """Walks one ATen graph and drives a _C._GraphBuilder."""

    def __init__(self, gm, name, env=None):
        self.gm = gm
        self.g = _C._GraphBuilder(name)
        # sizes (sympy symbol -> int) a graph with symbolic shapes is lowered for: its nodes' values then
        # come from graph_syms.Concrete, every symbolic scalar a constant
        self.val = _fake_val
        if env is not None:
            from .graph_syms import Concrete

            self.val = Concrete(env)
        self.ids = {}  # node -> value id, or list of ids (multi-result nodes)
        self.py = {}  # node -> Python value (non-tensor placeholders)
        self.inputs = []  # per program tensor input: ("arg", index), ("const", tensor) or ("pack", indices)
        self.mutations = []  # (arg index, value id)
        self.host_writes = []  # (arg index, node): mutations of CPU inputs, computed on the host
        self.meta = {}
        # node -> meta view of its root's dense (contiguous) meta tensor, for roots and their views: a graph
        # input (a weight's transpose saved for the backward) is returned as a view of the argument, an
        # intermediate returned more than once (the normed hidden state saved for q, k and v) as one
        # program output and views of it; neither is copied by the program
        self.aliases = {}
        self.roots = {}  # view node -> the placeholder or intermediate its chain of views starts from
        self.placeholders = {}  # placeholder node -> its argument index
        self.pack_ids = {}  # dtype -> value id of the program input packing 0-d CPU inputs of that dtype
        self.elements = {}  # value id -> (vector value id, index, length): the elements of such vectors
        self.syms = None  # graph_syms.SymPlan: the run-time scalars (SymInts), when the graph has any
        self.sym_vec = None  # value id of the program input holding them
        # views at a run-time offset, and views of them: a result among them needs its offset at run time
        self.run_time_views = set()

    def lower(self):
        placeholder = 0
        out_node = None
        # inputs on tpu that the graph writes: the runner swaps them to their new value, so the program
        # may take over their buffers (donation: XLA updates them in place)
        donors = {
            n.args[0]
            for n in self.gm.graph.nodes
            if n.op == "call_function" and n.target is _aten.copy_.default and _is_tpu(self.val(n.args[0]))
        }
        packs = self.scalar_packs()
        if self.val is _fake_val:
            self.run_time_scalars()
        else:  # every symbolic scalar is a constant for these sizes
            self.py.update({n: self.val(n) for n in self.gm.graph.nodes if _is_sym(_fake_val(n))})
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.placeholders[node] = placeholder
                val = self.val(node)
                if node in packs:
                    members = packs[node]
                    if members[0] is node:  # one program input for the group, then each member's element
                        self.pack_ids[val.dtype] = self.g.input(val.dtype, [len(members)])
                        self.inputs.append(("pack", [self.placeholder_index(n) for n in members]))
                    self.ids[node] = self.element(self.pack_ids[val.dtype], members.index(node), len(members),
                                                  val.dtype)
                elif isinstance(val, torch.Tensor):
                    # a dense input in another storage order (a weight's transpose saved for the backward)
                    # is passed as its storage and transposed in the program, not copied before the run
                    strides = [] if not _is_tpu(val) or val.is_contiguous() else list(val.stride())
                    self.ids[node] = self.g.input(val.dtype, _static_shape(val, node.name), node in donors, strides)
                    self.inputs.append(("arg", placeholder))
                    if _is_tpu(val) and val.is_contiguous():
                        self.aliases[node] = self.meta_of(node)
                elif node in self.py:
                    pass
                elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                    self.ids[node] = self.sym_value(node)
                else:
                    self.py[node] = val
                placeholder += 1
            elif node.op == "get_attr":
                t = getattr(self.gm, node.target)
                if not isinstance(t, torch.Tensor):
                    raise Unsupported(f"attribute {node.target} of type {type(t).__name__}")
                self.ids[node] = self.g.input(t.dtype, list(t.shape))
                self.inputs.append(("const", t))
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                out_node = node
            else:
                raise Unsupported(f"{node.op} node {node.target}")
        return self.finish(out_node)

    def run_time_scalars(self):
        from .graph_syms import SymPlan

        index = {n: i for i, n in enumerate(n for n in self.gm.graph.nodes if n.op == "placeholder")}
        plan = SymPlan(self.gm, index, lambda n: isinstance(n.target, torch._ops.OpOverload)
                       and (n.target.is_view or n.target in _SCATTERS))
        if len(plan):
            self.syms = plan
            self.sym_vec = self.g.input(torch.int64, [len(plan)])
            self.inputs.append(("syms", None))

    def sym_value(self, node):
        """The program's value (s64) of a run-time scalar: its element of the scalars' input."""
        if self.syms is None or node not in self.syms.slots:
            raise Unsupported(f"symbolic value {node.name}")
        return self.element(self.sym_vec, self.syms.slots[node], len(self.syms), torch.int64)

    def alias_root(self, node):
        return self.roots.get(node, node)

    def placeholder_index(self, node):
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"].index(node)

    def scalar_packs(self):
        """0-d CPU tensor inputs (the optimizer's step counts) grouped by dtype, for groups of two or
        more: placeholder -> its group. Each group is one program input, uploaded in one transfer."""
        groups = {}
        for n in self.gm.graph.nodes:
            v = self.val(n) if n.op == "placeholder" else None
            if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0:
                groups.setdefault(v.dtype, []).append(n)
        return {n: g for g in groups.values() if len(g) > 1 for n in g}

    def call(self, node):
        target = node.target
        if node in self.py or self.val is not _fake_val and target in _ASSERTS:
            return  # a symbolic scalar's value (or its check) for these sizes
        if self.syms is not None and (node in self.syms.asserts or self.syms.is_scalar(node)):
            if node in self.syms.slots:  # computed on the host (graph_syms), read from the scalars' input
                self.ids[node] = self.sym_value(node)
            return
        if target is operator.getitem:
            base = self.ids.get(node.args[0])
            if not isinstance(base, list):
                raise Unsupported(f"getitem of {node.args[0].target}")
            item = base[node.args[1]]
            if isinstance(item, _Const):
                self.py[node] = item.value
            else:
                self.ids[node] = item
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise Unsupported(f"{target} (not an ATen op)")
        if target.namespace == "torch_pjrt_jax":
            return self.jax_call(node)
        if target is _aten.copy_.default:
            return self.copy_(node)
        if target.is_view:
            return self.view(node)
        if target in _SCATTERS:
            return self.scatter(node)
        if target in _FACTORIES:
            return self.factory(node)
        if target in (_aten._to_copy.default, _aten.lift_fresh_copy.default):
            return self.to_copy(node)
        if target is torch.ops.prims.convert_element_type.default and isinstance(self.ids.get(node.args[0]), int):
            # a scalar's dtype in the arithmetic AOTAutograd makes of a symbolic scalar (i * 0.5)
            val = self.val(node)
            self.ids[node] = self.g.cast(self.ids[node.args[0]], (val.dtype, _static_shape(val, node.name)))
            return
        if self.syms is not None:
            target = self.tensor_overload(node, target)
        name = _overload_name(target)
        if target._schema.is_mutable:
            raise Unsupported(f"in-place op aten::{name}")
        if not _C._GraphBuilder.has_row(name):
            raise Unsupported(f"aten::{name} (no lowering row)")
        if name.startswith("_foreach_") and self.foreach_of_scalars(node, name):
            return
        args, ids = self.arguments(node, target._schema)
        val = self.val(node)
        vals = list(val) if isinstance(val, (tuple, list)) else [val]
        outs = []  # the row's results: tensor returns (None: undefined), as the eager kernel sees them
        for v in vals:
            if v is None:
                outs.append(None)
            elif isinstance(v, torch.Tensor):
                outs.append((v.dtype, _static_shape(v, node.name)))
            elif not isinstance(v, (int, float, bool)):
                raise Unsupported(f"aten::{name} returns {type(v).__name__}")
        try:
            res = iter(self.g.apply(name, args, ids, outs))
        except Exception as e:  # a row that cannot lower this case: name the node
            raise Unsupported(f"aten::{name} failed to lower: {e}") from e
        # non-tensor returns (sdpa's max_q/max_k) are the shape inference's values
        res = [_Const(v) if isinstance(v, (int, float, bool)) else next(res) for v in vals]
        res = [None if r is None or (isinstance(r, int) and r < 0) else r for r in res]
        self.ids[node] = res if isinstance(val, (tuple, list)) else res[0]

    def jax_call(self, node):
        """A jax_op (python/torch_pjrt/jax_ops.py): its lowered functions called from this program."""
        from .jax_ops import lookup

        op = lookup(node.target._schema.name)
        if op is None:
            raise Unsupported(f"{node.target} (a jax_op of another process)")
        tensors, sid = node.args[0], node.args[1]
        ids = []
        for n in tensors:
            i = self.ids.get(n)
            if not isinstance(i, int):
                raise Unsupported(f"argument {n} of {node.target}")
            ids.append(i)
        try:
            self.ids[node] = list(op.graph_call(self.g, ids, [self.val(n) for n in tensors], sid))
        except Exception as e:
            raise Unsupported(f"{node.target} failed to lower: {e}") from e

    def foreach_of_scalars(self, node, name):
        """A _foreach_ op whose tensor lists are 0-d tensors (the optimizer's per-parameter step counts
        and bias corrections) as the same op on one vector of them: one fused computation instead of one
        per parameter. The results are that vector's elements. False when the op has other tensors."""
        lists = [a for a in node.args if isinstance(a, (list, tuple)) and any(isinstance(e, torch.fx.Node) for e in a)]
        if not lists or any(isinstance(a, torch.fx.Node) for a in node.args) or any(
            isinstance(v, (torch.fx.Node, list, tuple)) for v in node.kwargs.values()
        ):
            return False
        n = len(lists[0])
        val = self.val(node)
        if n < 2 or any(len(a) != n for a in lists) or not isinstance(val, (list, tuple)) or len(val) != n:
            return False
        for a in lists:
            vals = [self.val(e) if isinstance(e, torch.fx.Node) else None for e in a]
            if not all(isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype == vals[0].dtype for v in vals):
                return False
            if not all(isinstance(self.ids.get(e), int) for e in a):
                return False
        if not all(isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype == val[0].dtype for v in val):
            return False
        args, _ = self.arguments(node)
        ids, k = [], 0
        for i, a in enumerate(args):
            if isinstance(a, list) and a and all(isinstance(e, torch.Tensor) and e.device.type == "meta" for e in a):
                dtype = a[0].dtype
                ids.append(self.vector_of([self.ids[e] for e in lists[k]], dtype))
                args[i] = [torch.empty([n], dtype=dtype, device="meta")]
                k += 1
        if k != len(lists):
            return False
        try:
            (vec,) = self.g.apply(name, args, ids, [(val[0].dtype, [n])])
        except Exception:
            return False  # the op per element, as without vectors
        self.ids[node] = [self.element(vec, i, n, val[0].dtype) for i in range(n)]
        return True

    def element(self, vec, i, n, dtype):
        """Element i of vector value `vec` (of n), remembered as such (vector_of)."""
        e = self.g.view(vec, [], [], i, dtype)
        self.elements[e] = (vec, i, n)
        return e

    def vector_of(self, ids, dtype):
        """A vector value of the 0-d values `ids`: the vector they are the elements of, in order, or them
        concatenated."""
        first = self.elements.get(ids[0])
        if first is not None and first[2] == len(ids) and all(
            self.elements.get(e) == (first[0], i, first[2]) for i, e in enumerate(ids)
        ):
            return first[0]
        meta = torch.empty([1], dtype=dtype, device="meta")
        ones = [self.g.view(e, [1], [1], 0, dtype) for e in ids]
        (vec,) = self.g.apply("cat", [[meta] * len(ids), 0], ones, [(dtype, [len(ids)])])
        return vec

    def scatter(self, node):
        base, src = node.args[0], node.args[1]
        if not (isinstance(self.ids.get(base), int) and isinstance(self.ids.get(src), int)):
            raise Unsupported(f"{node.target} of non-tensors")
        rest = node.args[2:]
        if self.syms is not None and node in self.syms.slots:  # at a symbolic index: a run-time offset
            from .graph_syms import hint

            meta = self.meta_of(base)
            view = _SCATTERS[node.target](meta, *[hint(v) for v in rest], **node.kwargs)
            slot = self.syms.add_view(node, meta, _SCATTERS[node.target], 2, view)
            offset = self.element(self.sym_vec, slot, len(self.syms), torch.int64)
            self.ids[node] = self.g.scatter_view(
                self.ids[base], self.ids[src], list(view.shape), list(view.stride()), 0, offset
            )
            return
        rest = self.resolved(rest)
        if any(isinstance(v, (torch.fx.Node, torch.SymInt)) for v in rest):
            raise Unsupported(f"{node.target} with symbolic arguments")
        view = _SCATTERS[node.target](self.meta_of(base), *rest, **node.kwargs)
        self.ids[node] = self.g.scatter_view(
            self.ids[base], self.ids[src], list(view.shape), list(view.stride()), view.storage_offset()
        )

    def factory(self, node):
        val = self.val(node)
        fill = _FACTORIES[node.target]
        v = self.resolved(fill(node)) if callable(fill) else fill
        if isinstance(v, torch.fx.Node) and self.syms is not None and self.syms.is_scalar(v):
            # filled with a run-time scalar (torch.tensor(i), i * 0.5)
            self.ids[node] = self.g.cast(self.sym_value(v), (val.dtype, _static_shape(val, node.name)))
            return
        if not isinstance(v, (bool, int, float)):
            raise Unsupported(f"{node.target} filled with {type(v).__name__}")
        self.ids[node] = self.g.full(val.dtype, _static_shape(val, node.name), v)

    def to_copy(self, node):
        src, val = node.args[0], self.val(node)
        if not isinstance(self.ids.get(src), int) or not _is_tpu(val):
            raise Unsupported(f"{node.target} to {getattr(val, 'device', None)}")
        self.ids[node] = self.g.cast(self.ids[src], (val.dtype, _static_shape(val, node.name)))

    def meta_of(self, node):
        t = self.meta.get(node)
        if t is None:
            val = self.val(node)
            t = torch.empty(_static_shape(val, node.name), dtype=val.dtype, device="meta")
            self.meta[node] = t
        return t

    def resolved(self, v):
        """`v` with the nodes of symbolic scalars that are constants here (self.py) replaced by their values."""
        if isinstance(v, (list, tuple)):
            return type(v)(self.resolved(e) for e in v)
        return self.py[v] if isinstance(v, torch.fx.Node) and v in self.py else v

    def tensor_overload(self, node, target):
        """With a run-time scalar where `target` takes a Scalar (eq.Scalar(x, i), as decompositions of
        select_backward make): its Tensor overload (eq.Tensor), which takes it as a 0-d value."""
        schema = target._schema
        args = list(node.args) + [node.kwargs.get(a.name) for a in schema.arguments[len(node.args):]]
        if not any(self.syms.is_scalar(v) and not isinstance(a.type, torch.TensorType)
                   for v, a in zip(args, schema.arguments) if isinstance(v, torch.fx.Node)):
            return target
        packet = getattr(torch.ops.aten, schema.name.split("::", 1)[1])
        other = getattr(packet, schema.overload_name.replace("Scalar", "Tensor"), None)
        return other if other is not None and _C._GraphBuilder.has_row(_overload_name(other)) else target

    def arguments(self, node, schema=None):
        """The functional schema arguments, positional, with tensors as meta placeholders, and the value
        ids of the tensors in order of appearance."""
        ids = []

        def conv(v, tensor_position=False):
            if isinstance(v, torch.fx.Node):
                if v in self.py:
                    return self.py[v]
                if self.syms is not None and self.syms.is_scalar(v):
                    # a run-time scalar operand (x + i): a 0-d s64 value where the schema takes a tensor
                    if not tensor_position or not isinstance(self.val(v), torch.SymInt):
                        raise Unsupported(f"symbolic argument {v.name} of {node.target}")
                    ids.append(self.sym_value(v))
                    return torch.empty((), dtype=torch.int64, device="meta")
                i = self.ids.get(v)
                if not isinstance(i, int):
                    raise Unsupported(f"argument {v.name} of {node.target}")
                ids.append(i)
                return self.meta_of(v)
            if isinstance(v, (list, tuple)):
                return [conv(e) for e in v]
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                raise Unsupported(f"symbolic argument of {node.target}")
            if isinstance(v, torch.device) and v.type == "tpu":
                return torch.device("meta")
            return v

        args = []
        for i, a in enumerate((schema or node.target._schema).arguments):
            if i < len(node.args):
                v = node.args[i]
            elif a.name in node.kwargs:
                v = node.kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                v = None
            args.append(conv(v, isinstance(a.type, torch.TensorType)))
        return args, ids

    def view(self, node):
        src = node.args[0]
        if not isinstance(src, torch.fx.Node) or not isinstance(self.ids.get(src), int):
            raise Unsupported(f"view {node.target} of a non-tensor")
        if node.target in (_aten.as_strided.default, _aten._reshape_alias.default):
            # strides relative to the source's storage: the dense value is that storage only when the
            # source is contiguous from offset 0
            v = self.val(src)
            if not (v.is_contiguous() and v.storage_offset() == 0):
                raise Unsupported(f"{node.target} of a non-contiguous tensor")
        base = self.meta_of(src)
        if self.syms is not None and node in self.syms.slots:
            return self.view_at_run_time_offset(node, src, base)
        rest = []
        for v in self.resolved(node.args[1:]):
            if isinstance(v, torch.fx.Node) or (
                isinstance(v, (list, tuple)) and any(isinstance(e, (torch.fx.Node, torch.SymInt)) for e in v)
            ):
                raise Unsupported(f"view {node.target} with tensor or symbolic arguments")
            rest.append(v)
        out = node.target(base, *rest, **node.kwargs)
        i = self.ids[src]
        if src in self.run_time_views:
            self.run_time_views.add(node)
        if src not in self.aliases and src.op != "placeholder":
            self.aliases[src] = base  # an intermediate: the program's value of it is dense
        if src in self.aliases and not isinstance(out, (list, tuple)) and out.dtype == base.dtype:
            try:  # the same view of the root's layout (a view of a strided alias may need a copy: none then)
                self.aliases[node] = node.target(self.aliases[src], *rest, **node.kwargs)
                self.roots[node] = self.alias_root(src)
            except (RuntimeError, ValueError):
                pass

        def one(t):
            return self.g.view(i, list(t.shape), list(t.stride()), t.storage_offset(), t.dtype)

        self.ids[node] = [one(t) for t in out] if isinstance(out, (list, tuple)) else one(out)

    def view_at_run_time_offset(self, node, src, base):
        """A view at a symbolic index (t[i]): read at the offset the host computes for the run. A result
        that is such a view is made at run time (run_time_alias)."""
        from .graph_syms import hint

        out = node.target(base, *[hint(v) for v in node.args[1:]], **node.kwargs)
        if isinstance(out, (list, tuple)):
            raise Unsupported(f"view {node.target} with symbolic arguments and several results")
        slot = self.syms.add_view(node, base, node.target, 1, out)
        offset = self.element(self.sym_vec, slot, len(self.syms), torch.int64)
        self.ids[node] = self.g.view(self.ids[src], list(out.shape), list(out.stride()), 0, out.dtype, offset)
        self.run_time_views.add(node)

    def run_time_alias(self, node, written):
        """A result that is a view at a run-time offset: AOTAutograd makes the caller's view from this
        result's offset, so it must be the argument's own view there (a view of an input the graph does
        not write; others are compiled per value)."""
        src = node.args[0]
        if node not in self.syms.slots or src.op != "placeholder" or src not in self.aliases:
            raise Unsupported(f"result {node.name}: a view of a view at a symbolic index")
        index = self.placeholders[src]
        if index in written:
            raise Unsupported(f"result {node.name}: a view at a symbolic index of a written input")
        _, _, _, sizes, strides = self.syms.steps[self.syms.slots[node]][2]
        return index, list(sizes), list(strides), self.syms.slots[node]

    def copy_(self, node):
        dst, src = node.args[0], node.args[1]
        if dst.op != "placeholder" or not isinstance(self.ids.get(src), int):
            raise Unsupported("copy_ into an intermediate")
        val = self.val(dst)
        index = self.placeholders[dst]
        if val.device.type == "cpu" and self.host_cone([src]) is not None:
            # a CPU input updated from CPU values only (the optimizer's step counts): computed on the host
            # after the program is launched, so writing it back does not wait for the device
            self.host_writes.append((index, src))
            self.ids[node] = self.ids[src]
            return
        v = self.g.cast(self.ids[src], (val.dtype, _static_shape(val, dst.name)))
        self.mutations.append((index, v))
        self.ids[node] = v

    def host_cone(self, nodes):
        """The nodes `nodes` are computed from, in graph order, when all of them are functional ATen ops
        (or getitems) on CPU tensors and inputs; None otherwise."""
        seen, stack = set(), list(nodes)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == "placeholder":
                continue
            val = self.val(n)
            vals = list(val) if isinstance(val, (list, tuple)) else [val]
            if n.op != "call_function" or not all(isinstance(v, torch.Tensor) and v.device.type == "cpu"
                                                  for v in vals):
                return None
            if n.target is not operator.getitem and not (
                isinstance(n.target, torch._ops.OpOverload) and not n.target._schema.is_mutable
            ):
                return None
            stack.extend(n.all_input_nodes)
        return [n for n in self.gm.graph.nodes if n in seen]

    def host_program(self):
        """(GraphModule computing the host writes' values, the argument indices of its inputs, those of
        the written arguments, the in-place add's (argument indices, number) where the writes are the
        optimizer's `step += 1`, else None), or None without host writes."""
        if not self.host_writes:
            return None
        g, env, arg_indices = torch.fx.Graph(), {}, []
        cone = self.host_cone([src for _, src in self.host_writes])
        inplace = self.host_inplace(cone)
        for n in cone:
            if n.op == "placeholder":
                env[n] = g.placeholder(n.name)
                arg_indices.append(self.placeholders[n])
            elif inplace is None:
                env[n] = g.node_copy(n, lambda a: env[a])
            elif n is inplace[0]:  # the op itself, in place; its getitems are not needed
                g.call_function(inplace[1], torch.fx.node.map_arg(n.args, lambda a: env[a]), dict(n.kwargs))
        if inplace is not None:  # the op wrote the arguments: nothing to copy back
            g.output([])
            node, op = inplace
            add = None  # `step += 1`: the arguments (in the op's order) and the number, for _C._add_scalars_
            if op is torch.ops.aten._foreach_add_.Scalar and len(node.args) == 2 and not node.kwargs \
                    and isinstance(node.args[1], (int, float)) and not isinstance(node.args[1], bool):
                add = ([self.placeholders[a] for a in node.args[0]], float(node.args[1]))
            return torch.fx.GraphModule(self.gm, g), arg_indices, [], add
        g.output([env[src] for _, src in self.host_writes])
        return torch.fx.GraphModule(self.gm, g), arg_indices, [index for index, _ in self.host_writes], None

    def host_inplace(self, cone):
        """(node, in-place overload) when the host writes are one out-of-place _foreach_ op whose results
        all go back into its first list (the optimizer's `step += 1` for every parameter): run as the
        in-place op, one call without copies. None otherwise."""
        ops = [n for n in cone if n.op == "call_function" and n.target is not operator.getitem]
        if len(ops) != 1 or not isinstance(ops[0].target, torch._ops.OpOverload):
            return None
        node = ops[0]
        packet = node.target.overloadpacket.__name__
        if not packet.startswith("_foreach_") or packet.endswith("_") or not node.args:
            return None
        first = node.args[0]
        if not isinstance(first, (list, tuple)) or len(first) != len(self.host_writes):
            return None
        written = set()
        for index, src in self.host_writes:  # result k written into the argument first[k], for every k
            k = src.args[1] if src.target is operator.getitem and src.args[0] is node else None
            if not (isinstance(k, int) and 0 <= k < len(first) and isinstance(first[k], torch.fx.Node)
                    and first[k].op == "placeholder" and self.placeholders[first[k]] == index):
                return None
            written.add(k)
        if len(written) != len(first):
            return None
        inplace = getattr(getattr(torch.ops.aten, packet + "_", None), node.target._overloadname, None)
        if inplace is None or any(isinstance(a, torch.fx.Node) for a in node.args[1:]):
            return None
        return node, inplace

    def finish(self, out_node):
        results = out_node.args[0]
        single = not isinstance(results, (list, tuple))
        results = [results] if single else list(results)
        program_ids, template = [], []
        written = {index for index, _ in self.mutations} | {index for index, _ in self.host_writes}
        out_index = {}  # value id -> its program output: a value returned twice is one output
        view_outs = {}  # (root, sizes, strides, offset) -> the program output of that view of an intermediate

        def output(v):
            if v not in out_index:
                out_index[v] = len(program_ids)
                program_ids.append(v)
            return out_index[v]

        nodes = [r for r in results if isinstance(r, torch.fx.Node)]
        shared = collections.Counter(self.alias_root(r) for r in nodes if r in self.aliases)
        for r in results:
            if self.syms is not None and self.syms.is_scalar(r):
                template.append(("sym", self.syms.slots[r]))  # a scalar the host computed (saved for the backward)
                continue
            if r in self.run_time_views:
                template.append(("alias_at", self.run_time_alias(r, written)))
                continue
            alias = self.aliases.get(r) if isinstance(r, torch.fx.Node) else None
            root = self.alias_root(r) if alias is not None else None
            if alias is not None and root.op == "placeholder" and self.placeholders[root] not in written:
                # an input, or a view of one, that the graph does not write: the argument, or its own view
                index = self.placeholders[root]
                if r.op == "placeholder":
                    template.append(("arg", index))
                else:
                    template.append(("alias", (index, list(alias.shape), list(alias.stride()),
                                               alias.storage_offset())))
            elif alias is not None and root.op != "placeholder" and shared[root] > 1:
                # one of several results that are an intermediate or views of it: the intermediate is one
                # output, and the views a program can read as its buffer (itself, a transpose) views of it;
                # a reshape or a slice (which a program reading it would copy) is its own output, one per
                # distinct view (the forward saves the normed hidden state as [tokens, hidden] per projection)
                if r is root:
                    template.append(("out", output(self.ids[root])))
                elif _reads_whole(alias, list(self.val(root).shape)):
                    template.append(("view", (output(self.ids[root]), list(alias.shape), list(alias.stride()),
                                              alias.storage_offset())))
                else:
                    key = (root, tuple(alias.shape), tuple(alias.stride()), alias.storage_offset())
                    if key not in view_outs:
                        view_outs[key] = output(self.ids[r])
                    template.append(("view", (view_outs[key], list(alias.shape), _contiguous_strides(alias.shape), 0)))
            elif isinstance(r, torch.fx.Node) and isinstance(self.ids.get(r), int):
                val = self.val(r)
                order = _storage_order(val) if _is_tpu(val) else None
                if order is None:
                    template.append(("out", output(self.ids[r])))
                else:
                    # a dense result in another storage order (a transpose of a projection, saved for the
                    # backward): the program returns it in that order and the result is its view, with the
                    # strides eager gives it (the backward reads it as laid out, with no copy)
                    o = output(self.g.transpose(self.ids[r], order))
                    template.append(("view", (o, list(val.shape), list(val.stride()), 0)))
            elif isinstance(r, torch.fx.Node) and r in self.py:
                template.append(("py", self.py[r]))
            elif r is None or not isinstance(r, torch.fx.Node):
                template.append(("py", r))
            else:
                raise Unsupported(f"output {r.name}")
        writes = []
        for index, v in self.mutations:
            writes.append((index, len(program_ids)))
            program_ids.append(v)
        on_tpu = {i: _is_tpu(self.val(n)) for n, i in self.placeholders.items()}
        return _Compiled(self.g.compile(program_ids), self.inputs, on_tpu, template, writes, single,
                         self.host_program(), self.syms)


def _eager(gm, reason):
    from torch._functorch.aot_autograd import make_boxed_func

    if _C._get_fallback_policy() == "error":
        raise RuntimeError(f"torch.compile(backend=\"tpu\"): cannot lower the graph as one program: {reason}")
    warnings.warn(
        f"torch.compile(backend=\"tpu\"): {reason}; this graph runs eagerly op by op", stacklevel=2
    )
    return make_boxed_func(gm.forward)


def _is_collective(node):
    """A functional collective (DTensor's redistributions, funcol calls): run by tpu_dist, between programs."""
    target = node.target if node.op == "call_function" else None
    return isinstance(target, torch._ops.OpOverload) and target.namespace in ("_c10d_functional", "_dtensor")


class _Boxed(torch.nn.Module):
    """A lowered piece of a split graph, called as a submodule (unboxed) by the graph around it."""

    def __init__(self, compiled):
        super().__init__()
        self.compiled = compiled

    def forward(self, *args):
        return self.compiled(list(args))


def _lower_split(gm, name):
    """A graph with collectives: the pieces between them lowered as one program each, the collectives (and
    their waits) run eagerly through the device's c10d backend in between. Pieces are cut where the graph
    switches between collectives and other nodes, in its order."""
    from torch.fx.passes.split_module import split_module

    part, last, parts = 0, None, {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        kind = _is_collective(node)
        if last is not None and kind != last:
            part += 1
        parts[node], last = part, kind
    split = split_module(gm, None, lambda node: parts[node], keep_original_order=True)
    pieces = 0
    for sub_name, sub in list(split.named_children()):
        if any(_is_collective(n) for n in sub.graph.nodes):
            continue
        setattr(split, sub_name, _Boxed(_Lowering(sub, f"{name}_{sub_name}").lower()))
        pieces += 1
    return pieces, split


def _per_shape(gm, name):
    """A graph with symbols (symbolic sizes, or scalars the run-time path cannot take): a program per set of
    their values, each lowered at its first call; one that cannot be lowered runs eagerly."""
    from torch.utils._python_dispatch import _disable_current_modes

    from .graph_syms import PerShape

    def lower(env):
        try:
            with _disable_current_modes():
                compiled = _Lowering(gm, name, env).lower()
            stats["graphs_lowered"] += 1
            return compiled
        except Unsupported as e:
            stats["graphs_eager"] += 1
            return _eager(gm, str(e))

    return PerShape(gm, lower, _MAX_SPECIALIZATIONS)


def _graph_compiler(kind):
    def compile_graph(gm, example_inputs):
        from torch._functorch.aot_autograd import make_boxed_func
        from torch.utils._python_dispatch import _disable_current_modes

        from .graph_syms import has_symbolic_shapes, has_symbols

        try:
            with _disable_current_modes():  # AOTAutograd's fake mode: lowering runs on real meta tensors
                if any(_is_collective(n) for n in gm.graph.nodes):
                    pieces, split = _lower_split(gm, f"graph_{kind}")
                    stats["graphs_lowered"] += 1
                    stats["collective_splits"] = stats.get("collective_splits", 0) + pieces
                    return make_boxed_func(split.forward)
                if has_symbolic_shapes(gm):
                    return _per_shape(gm, f"graph_{kind}")
                compiled = _Lowering(gm, f"graph_{kind}").lower()
            stats["graphs_lowered"] += 1
            return compiled
        except Unsupported as e:
            if has_symbols(gm):  # symbolic scalars that one program cannot take: a program per value
                return _per_shape(gm, f"graph_{kind}")
            stats["graphs_eager"] += 1
            return _eager(gm, str(e))

    return compile_graph


_decomps = None


def _decompositions():
    """Core ATen decompositions, only for ops without a lowering row (a row beats its decomposition)."""
    global _decomps
    if _decomps is None:
        from torch._decomp import core_aten_decompositions

        _decomps = {
            op: fn
            for op, fn in core_aten_decompositions().items()
            if isinstance(op, torch._ops.OpOverload)
            and not op.is_view
            and not _C._GraphBuilder.has_row(_overload_name(op))
        }
    return _decomps


def _aot(gm, example_inputs):
    from torch._functorch.aot_autograd import aot_module_simplified

    return aot_module_simplified(
        gm,
        example_inputs,
        fw_compiler=_graph_compiler("forward"),
        bw_compiler=_graph_compiler("backward"),
        decompositions=_decompositions(),
        keep_inference_input_mutations=True,
    )


def tpu_backend(gm, example_inputs, **kwargs):
    """The Dynamo backend "tpu" (``torch.compile(model, backend="tpu")``). ``mode=`` and ``options=``
    are accepted; every mode compiles the same whole-graph programs. A graph with symbolic sizes
    (``dynamic=True``) is traced once and lowered per set of sizes; symbolic scalars that shape no tensor
    (an index) are run-time inputs of one program (graph_syms)."""
    return _aot(gm, example_inputs)


def _register():
    """Registers "tpu" with Dynamo's backend registry (when torch._dynamo is imported: see
    torch_pjrt._install_dynamo_hook) and routes Inductor graphs whose inputs are on "tpu" here."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "tpu" not in _COMPILER_FNS:
        register_backend(compiler_fn=tpu_backend, name="tpu")


def _route_inductor():
    """``torch.compile(model)`` with Inductor on "tpu" tensors: Inductor's own "tpu" device path emits
    Pallas kernels through JAX. Route such graphs to this backend instead."""
    cls = getattr(torch, "_TorchCompileInductorWrapper", None)
    if cls is None or getattr(cls, "_torch_pjrt_routed", False):
        return
    original = cls.__call__

    def __call__(self, model_, inputs_, **kwargs):
        if any(_is_tpu(x) for x in inputs_):
            return tpu_backend(model_, inputs_)
        return original(self, model_, inputs_, **kwargs)

    cls.__call__ = __call__
    cls._torch_pjrt_routed = True
