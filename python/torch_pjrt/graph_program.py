"""A lowered torch.compile graph as AOTAutograd calls it: its program and the plan around it (which
arguments are program inputs, what the host computes before the run, how results are made)."""

import torch

from . import _C
from .device import _index


class Compiled:
    """One graph's program, called with AOTAutograd's boxed calling convention. The argument plan
    (which arguments are program inputs, which move from the CPU, where mutations go) is fixed here;
    Dynamo's guards keep each argument's device as traced."""

    _boxed_call = True

    def __init__(self, program, inputs, on_tpu, template, writes, single, host=None, syms=None):
        self.program = program
        self.syms = syms  # graph_syms.SymPlan: computes the run-time scalars from the arguments
        self.inputs = inputs
        self.template = template
        self.single = single
        self.host = host
        self.consts = {}
        self.args = [v for kind, v in inputs if kind == "arg"]
        self.plain = len(self.args) == len(inputs)  # no graph constants
        position = {v: p for p, (kind, v) in enumerate(inputs) if kind == "arg"}  # among program inputs
        self.moved = [p for i, p in position.items() if not on_tpu.get(i, True)]  # CPU inputs
        # the first tpu argument's device is the program's device
        self.device_arg = next((i for i in self.args if on_tpu.get(i)), None)
        # mutated tpu arguments are swapped to the new value in the runner (position of the argument
        # among the program inputs, output); others are copied
        self.swaps = [(position[i], o) for i, o in writes if on_tpu.get(i) and i in position]
        self.copies = [(i, o) for i, o in writes if not (on_tpu.get(i) and i in position)]
        self.outs = [v for kind, v in template if kind == "out"]
        self.all_out = len(self.outs) == len(template) and self.outs == list(range(len(self.outs)))
        self._build, self._build_consts = self._results_function(template)

    @staticmethod
    def _results_function(template):
        """The template as one generated function (args, outs, consts) -> results: the per-call work of
        a forward returning dozens of views is a few list reads and one call making every view
        (_C._Views), not a loop of Python dispatch."""
        exprs, consts, bases, specs = [], [], [], []
        for kind, v in template:
            if kind == "out":
                exprs.append(f"outs[{int(v)}]")
            elif kind == "arg":
                exprs.append(f"args[{int(v)}]")
            elif kind == "sym":
                exprs.append(f"syms[{int(v)}]")
            elif kind == "alias_at":  # a view of an argument at a run-time offset
                i, sizes, strides, slot = v
                a = f"args[{int(i)}]"
                exprs.append(f"{a}.as_strided({list(map(int, sizes))}, {list(map(int, strides))}, "
                             f"{a}.storage_offset() + syms[{int(slot)}])")
            elif kind in ("alias", "view"):  # a view of an argument at its offset, or of a program output
                i, sizes, strides, offset = v
                bases.append(f"{'args' if kind == 'alias' else 'outs'}[{int(i)}]")
                specs.append((list(map(int, sizes)), list(map(int, strides)), int(offset), kind == "alias"))
                exprs.append(f"views[{len(specs) - 1}]")
            else:
                exprs.append(f"consts[{len(consts)}]")
                consts.append(v)
        namespace = {"make_views": _C._Views(specs)}
        body = f"    views = make_views([{', '.join(bases)}])\n" if specs else ""
        exec("def build(args, outs, consts, syms):\n" + body + "    return [" + ", ".join(exprs) + "]\n", namespace)
        return namespace["build"], consts

    def _const(self, t, device):
        c = self.consts.get(device)
        if c is None:
            c = self.consts[device] = {}
        key = id(t)
        if key not in c:
            c[key] = t.detach().to(device)
        return c[key]

    def _device(self, args):
        return args[self.device_arg].device if self.device_arg is not None else torch.device("tpu")

    def __call__(self, args):
        syms = self.syms(args) if self.syms is not None else None
        if self.plain:
            tensors = [args[i] for i in self.args]
        else:
            device = self._device(args)
            tensors = [
                args[v] if kind == "arg"
                else _C._pack_scalars([args[i] for i in v], _index(device)) if kind == "pack"
                else torch.tensor(syms, dtype=torch.int64).to(device) if kind == "syms"
                else self._const(v, device)
                for kind, v in self.inputs
            ]
        for p in self.moved:
            tensors[p] = tensors[p].to(self._device(args))
        outs, unswapped = self.program.run_writing(tensors, self.swaps)
        for p, o in unswapped:
            with torch.no_grad():
                tensors[p].copy_(outs[o])
        for index, o in self.copies:
            with torch.no_grad():
                args[index].copy_(outs[o])
        if self.host is not None:
            fn, inputs, indices, add = self.host
            if add is None or not _C._add_scalars_([args[i] for i in add[0]], add[1]):
                with torch.no_grad():
                    for index, v in zip(indices, fn(*[args[i] for i in inputs])):
                        args[index].copy_(v)
        if self.all_out:
            return outs[0] if self.single else outs[: len(self.outs)]
        result = self._build(args, outs, self._build_consts, syms)
        return result[0] if self.single else result
