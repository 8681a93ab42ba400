"""Symbols of a torch.compile graph: scalars known only at run time, and symbolic sizes.

Dynamo turns a Python int that changes between calls (a scheduler's ``sigmas[self.step_index]``, ``t[i]``
in a loop) into a SymInt after its second value ("automatic dynamic"). Where such a scalar does not shape
any tensor, one program serves every value: the host computes the graph's symbolic scalars before each run
(their arithmetic is a few Python operations on the call's ints) and, for each view at a symbolic index,
the view's offset, checked as eager checks it (an out-of-range index raises IndexError); all of them go to
the program as one s64 vector input. Inside the program such a view reads at its run-time offset, and a
scalar used as an operand (``x + i``, ``torch.tensor(i)``) is that vector's element.

A scalar that shapes a tensor (``t[:i]``) is not this case: the graph is then lowered per value (PerShape
below, as graphs with symbolic sizes are: ``dynamic=True``).
"""

import torch
from torch.fx.node import map_arg

from .dynamo import _ASSERTS, Unsupported, _fake_val as fake_val, _is_sym as is_sym


def sym_node(v):
    """True for an FX node whose value is a symbolic scalar."""
    return isinstance(v, torch.fx.Node) and is_sym(fake_val(v))


def has_sym_args(node):
    found = []
    map_arg((node.args, node.kwargs), lambda n: found.append(n) if sym_node(n) else None)
    return bool(found)


def hint(v):
    """A symbolic scalar's example value (the one this graph was traced with)."""
    v = fake_val(v) if isinstance(v, torch.fx.Node) else v
    if is_sym(v):
        h = v.node.hint
        if h is None:
            raise Unsupported(f"symbolic scalar {v} without an example value")
        return h
    return v


class SymPlan:
    """The host's work before each run: the value of each symbolic scalar of the graph and the offset of
    each view or scatter at a symbolic index, in slot order (the program's s64 vector input)."""

    def __init__(self, gm, placeholder_index, is_view):
        # one per slot, (kind, node, data): "arg" (data: the argument's index), "sym" (Python arithmetic on
        # scalars), "view" (data: add_view's)
        self.steps = []
        self.asserts = []  # checked after the steps
        self.slots = {}  # node -> slot in the vector
        self.placeholder_index = placeholder_index
        for node in gm.graph.nodes:
            val = fake_val(node)
            if node.op == "placeholder" and is_sym(val):
                if isinstance(val, torch.SymFloat):
                    raise Unsupported(f"symbolic float input {node.name}")
                self._slot(node, ("arg", node, placeholder_index[node]))
            elif node.op == "call_function" and (is_sym(val) or node.target in _ASSERTS):
                self._check_host_args(node)
                if node.target in _ASSERTS:
                    self.asserts.append(node)
                elif isinstance(val, torch.SymFloat):
                    raise Unsupported(f"symbolic float {node.name}")
                else:
                    self._slot(node, ("sym", node, None))
            elif node.op == "call_function" and is_view(node) and has_sym_args(node):
                self._slot(node, ["view", node, None])  # its data comes when it is lowered (add_view)

    def _slot(self, node, step):
        self.slots[node] = len(self.steps)
        self.steps.append(step)

    def _check_host_args(self, node):
        def check(n):
            if not (sym_node(n) or n.op == "placeholder"):
                raise Unsupported(f"symbolic scalar {node.name} computed from {n.name}")

        map_arg((node.args, node.kwargs), check)

    def add_view(self, node, base, view_target, first, out):
        """A view (or a scatter's view) at a symbolic index: its offset gets a slot, computed on the host
        from `view_target` applied to `base` (a meta tensor) and the node's arguments from `first` on, with
        the run's scalars. `out`: that view as compiled (its shape and strides are checked at each run)."""
        slot = self.slots[node]
        self.steps[slot][2] = (base, view_target, first, tuple(out.shape), tuple(out.stride()))
        return slot

    def is_scalar(self, node):
        """True for a node whose value is a run-time scalar (not a view's offset)."""
        slot = self.slots.get(node)
        return slot is not None and self.steps[slot][0] != "view"

    def __len__(self):
        return len(self.slots)

    def __call__(self, args):
        env = {}

        def value(n):
            if n in env:
                return env[n]
            return args[self.placeholder_index[n]]

        values = []
        for kind, node, data in self.steps:
            if kind == "arg":
                v = args[data]
            elif kind == "view":
                base, target, first, sizes, strides = data
                rest = map_arg(node.args[first:], value)
                try:
                    out = target(base, *rest, **map_arg(node.kwargs, value))
                except IndexError as e:
                    raise IndexError(f"{node.target}: {e}") from None
                if tuple(out.shape) != sizes or tuple(out.stride()) != strides:
                    raise RuntimeError(
                        f"torch.compile(backend=\"tpu\"): {node.target} at {list(rest)} has shape "
                        f"{list(out.shape)}, strides {list(out.stride())}; the graph was compiled for "
                        f"{list(sizes)}, {list(strides)}"
                    )
                v = out.storage_offset()
            else:
                v = node.target(*map_arg(node.args, value), **map_arg(node.kwargs, value))
            env[node] = v
            values.append(int(v))
        for node in self.asserts:
            node.target(*map_arg(node.args, value), **map_arg(node.kwargs, value))
        return values


# ------------------------------------------------------------------ graphs with symbolic shapes
# dynamic=True (or Dynamo's automatic dynamic shapes) hands the backend a graph whose tensor sizes are
# symbols. AOTAutograd traces it once with them symbolic; each call then lowers it for the sizes it brings
# (the symbols' values, read from the arguments): a program per distinct set of sizes, every symbol a
# constant of that program.


def symbol_sources(gm):
    """sympy symbol -> (placeholder index, dim or None): where a call's arguments give its value."""
    sources = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        val = fake_val(node)
        pairs = [(None, val)] if is_sym(val) else list(enumerate(val.shape)) if isinstance(val, torch.Tensor) else []
        for dim, v in pairs:
            expr = v.node.expr if isinstance(v, torch.SymInt) else None
            if getattr(expr, "is_Symbol", False) and expr not in sources:
                sources[expr] = (i, dim)
    return sources


def _symbolic_tensor(v):
    return isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape)


def has_symbolic_shapes(gm):
    """True when a placeholder has a symbolic size."""
    return any(_symbolic_tensor(fake_val(n)) for n in gm.graph.nodes if n.op == "placeholder")


def has_symbols(gm):
    """True when a placeholder is a symbolic scalar or has a symbolic size."""
    return any(is_sym(fake_val(n)) or _symbolic_tensor(fake_val(n)) for n in gm.graph.nodes if n.op == "placeholder")


def concrete(x, env):
    """A symbolic value (or a sequence of them) for the sizes `env` (sympy symbol -> int)."""
    if isinstance(x, (list, tuple)):  # torch.Size too
        return [concrete(e, env) for e in x]
    if not is_sym(x):
        return x
    v = x.node.expr
    v = v.xreplace(env) if hasattr(v, "xreplace") else v
    if getattr(v, "free_symbols", None):
        raise Unsupported(f"symbolic value {x} of unknown size {sorted(map(str, v.free_symbols))}")
    return bool(v) if isinstance(x, torch.SymBool) else float(v) if isinstance(x, torch.SymFloat) else int(v)


class Concrete:
    """Node values of a symbolic graph for one set of sizes: scalars as Python numbers, tensors as fake
    tensors of those sizes (same dtype and device), made once per node."""

    def __init__(self, env):
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.env = env
        self.mode = FakeTensorMode()
        self.vals = {}

    def __call__(self, node):
        if node not in self.vals:
            self.vals[node] = self.of(fake_val(node))
        return self.vals[node]

    def of(self, val):
        if isinstance(val, (list, tuple)):
            return [self.of(v) for v in val]
        if not isinstance(val, torch.Tensor):
            return concrete(val, self.env)
        if all(isinstance(d, int) for d in val.shape) and all(isinstance(d, int) for d in val.stride()) and \
                isinstance(val.storage_offset(), int):
            return val
        shape, stride = concrete(val.shape, self.env), concrete(val.stride(), self.env)
        with self.mode:
            t = torch.empty_strided(shape, stride, dtype=val.dtype, device=val.device)
        offset = concrete(val.storage_offset(), self.env)
        if offset:
            with self.mode:
                t = t.as_strided(shape, stride, offset)
        return t


class PerShape:
    """A symbolic graph's runner: lowers it for each distinct set of sizes (at most `limit`), with
    `lower(env)` -> a boxed callable."""

    _boxed_call = True

    def __init__(self, gm, lower, limit):
        self.sources = symbol_sources(gm)
        self.lower, self.limit = lower, limit
        self.cache = {}

    def __call__(self, args):
        env = {s: int(args[i] if dim is None else args[i].shape[dim]) for s, (i, dim) in self.sources.items()}
        key = tuple(env.values())
        fn = self.cache.get(key)
        if fn is None:
            if len(self.cache) >= self.limit:
                raise RuntimeError(
                    f"torch.compile(backend=\"tpu\") compiles one program per set of sizes and has "
                    f"{len(self.cache)} for this graph: pad inputs to a few bucket sizes, or use dynamic=False"
                )
            fn = self.cache[key] = self.lower(env)
        return fn(args)
