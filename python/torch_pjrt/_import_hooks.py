"""Run a callback once a module has been imported, without importing it ourselves.

torch_pjrt integrates with Dynamo, Transformers and Accelerate, but ``import torch`` must not pay for
importing any of them. ``when_imported(name, fn)`` calls ``fn(module)`` right after ``name`` executes
(or at once when it is already imported). One finder serves every hook: it locates the module through
the finders behind it and wraps its loader's ``exec_module``.
"""

import importlib.abc
import sys
from typing import Callable, Dict, List

_pending: Dict[str, List[Callable]] = {}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        callbacks = _pending.pop(fullname, None)
        if callbacks is None:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            _pending[fullname] = callbacks  # not importable this way: try again at the next import
            return None
        exec_module = spec.loader.exec_module

        def exec_then_call(module):
            exec_module(module)
            for fn in callbacks:
                fn(module)

        spec.loader.exec_module = exec_then_call
        return spec


_finder = _Finder()


def when_imported(name: str, fn: Callable) -> None:
    """Calls ``fn(module)`` once ``name`` is imported (now, if it already is)."""
    if name in sys.modules:
        fn(sys.modules[name])
        return
    _pending.setdefault(name, []).append(fn)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
