"""Scalars of a torch.compile graph known only at run time.

Dynamo turns a Python int that changes between calls (a scheduler's ``sigmas[self.step_index]``, ``t[i]``
in a loop) into a SymInt after its second value ("automatic dynamic"). Where such a scalar does not shape
any tensor, one program serves every value: the host computes the graph's symbolic scalars before each run
(their arithmetic is a few Python operations on the call's ints) and, for each view at a symbolic index,
the view's offset, checked as eager checks it (an out-of-range index raises IndexError); all of them go to
the program as one s64 vector input. Inside the program such a view reads at its run-time offset, and a
scalar used as an operand (``x + i``, ``torch.tensor(i)``) is that vector's element.

A scalar that shapes a tensor (``t[:i]``) is not this case: the graph is then compiled per value
(dynamo._specializing).
"""

import torch
from torch.fx.node import map_arg

from .dynamo import Unsupported, _fake_val as fake_val

_SYM_TYPES = (torch.SymInt, torch.SymBool, torch.SymFloat)

# nodes the host evaluates and the program ignores: Dynamo's run-time asserts on symbolic scalars
_ASSERTS = {torch.ops.aten._assert_scalar.default, torch.ops.aten.sym_constrain_range_for_size.default}


def is_sym(v):
    return isinstance(v, _SYM_TYPES)


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
    if isinstance(v, _SYM_TYPES):
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

