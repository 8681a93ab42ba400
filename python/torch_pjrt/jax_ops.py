"""JAX functions, Pallas kernels included, as PyTorch ops on "tpu".

``torch_pjrt.jax_op(fn)`` (also ``torch.tpu.pallas.jax_op`` and ``custom_jax_kernel``, TorchTPU's names) makes
a PyTorch op of a JAX function of arrays. At its first call for given shapes, dtypes and static arguments it
lowers the function with JAX, for the platform of the device's plugin (cpu, cuda or tpu), to StableHLO; the
module's functions become private functions of one of our programs, which calls them on the op's tensors.
That program is compiled through the program cache like every other (memory and disk, keyed by its text) and
runs on the tensors' device buffers: no host copy. The lowered text is kept on disk beside the programs
(``<cache>/jax/``), keyed by the function's source and the call's signature, so a second process neither
traces nor compiles.

- Static arguments: every argument that is not a tensor is static (part of the key; it must be hashable);
  ``static_argnums`` / ``static_argnames`` are accepted for JAX's spelling (a tensor at a static position
  raises).
- Several outputs: a function may return one array or a tuple or list of them.
- In place: ``input_output_aliases={i: o}`` writes output ``o`` into tensor input ``i`` and returns that
  input, as Pallas's parameter of that name does.
- torch.compile: the op has a fake kernel from JAX's output shapes, and ``torch.compile(backend="tpu")``
  lowers it into the graph's program (the same functions, called from the graph).
- Autograd: the backward is ``jax.vjp`` of the function, made an op the same way.
- Pallas: on the CPU plugin a ``pallas_call`` is lowered in interpret mode (plain StableHLO that the plugin
  runs); on TPUs it is lowered to Mosaic, on GPUs (with JAX's CUDA plugin installed) to Triton.
  ``interpret=`` or ``TORCH_PJRT_PALLAS_INTERPRET=0/1`` overrides the choice.

JAX is optional: without it, making an op raises an ImportError naming the package; JAX itself is imported
at an op's first lowering. JAX is used to lower only: torch_pjrt sets ``JAX_PLATFORMS=cpu`` when it imports JAX first, so
JAX never opens the accelerator torch_pjrt drives.
"""

import functools
import hashlib
import inspect
import json
import os
import re
import sys
import threading

import torch

from . import _C

__all__ = ["jax_op", "custom_jax_kernel", "JaxOp"]

_NAMESPACE = "torch_pjrt_jax"
_lib = torch.library.Library(_NAMESPACE, "FRAGMENT")
_ops = {}  # qualified op name -> JaxOp
_lock = threading.Lock()
_JAX_VERSION_TESTED = "0.10.2"
_stats = {"ops": 0, "lowered": 0, "from_disk": 0}  # metrics()["jax_ops"]


def stats():
    """Ops made, lowerings JAX traced in this process, and lowerings read from the disk cache instead."""
    return dict(_stats)


_NO_JAX = (f"torch_pjrt.jax_op needs JAX to lower functions: pip install jax=={_JAX_VERSION_TESTED} "
           "(the CPU wheel is enough on every device)")


def _require_jax():
    """Raises the ImportError naming the package when JAX is not installed (without importing it)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("jax") is not None
    except (ValueError, ImportError):
        found = False
    if not found:
        raise ImportError(_NO_JAX)


def _jax():
    if "jax" not in sys.modules:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # lower only: never open the device torch_pjrt drives
    try:
        import jax
    except ImportError as e:
        raise ImportError(_NO_JAX) from e
    return jax


def _platform():
    p = _C._plugin_info().get("platform", "cpu").lower()
    return {"host": "cpu", "gpu": "cuda"}.get(p, p)


def _interpret_default(platform):
    env = os.environ.get("TORCH_PJRT_PALLAS_INTERPRET", "")
    if env:
        return env not in ("0", "false", "False")
    return platform == "cpu"  # Pallas lowers to Mosaic (TPU) and Triton (GPU) only


def _dtype_name(dtype):
    return str(dtype).rsplit(".", 1)[-1]


def _torch_dtype(name):
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"jax_op: JAX dtype {name} has no torch dtype")
    return dtype


# --- the function's identity on disk -------------------------------------------------------------------

def _file_digest(path, _memo={}):
    if path not in _memo:
        try:
            with open(path, "rb") as f:
                _memo[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            _memo[path] = None
    return _memo[path]


def _fingerprint(obj, depth=0):
    """A text that changes when the function's code, its source file, its closure or defaults, or the
    functions it calls by global name change; None when it cannot tell (then nothing goes to disk)."""
    if depth > 4:
        return None
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return repr(obj)
    if isinstance(obj, (tuple, list, frozenset)):
        parts = [_fingerprint(o, depth + 1) for o in obj]
        return None if None in parts else f"{type(obj).__name__}({','.join(parts)})"
    if isinstance(obj, functools.partial):
        parts = [_fingerprint(obj.func, depth + 1), _fingerprint(obj.args, depth + 1),
                 _fingerprint(tuple(sorted(obj.keywords.items())), depth + 1)]
        return None if None in parts else "partial(" + ",".join(parts) + ")"
    code = getattr(obj, "__code__", None)
    if code is None:
        module = getattr(obj, "__module__", None) or ""
        name = getattr(obj, "__qualname__", None)
        if name and module.split(".")[0] in ("jax", "jaxlib", "numpy", "math", "operator", "functools"):
            return f"{module}.{name}"  # versioned with the package (JAX's version is in the key)
        return None
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        path = None
    digest = _file_digest(path) if path else None
    if digest is None:
        return None
    parts = [obj.__module__ or "", obj.__qualname__, digest, code.co_code.hex()]
    for cell in obj.__closure__ or ():
        try:
            parts.append(_fingerprint(cell.cell_contents, depth + 1))
        except ValueError:  # an empty cell
            parts.append("<empty>")
    parts.append(_fingerprint(obj.__defaults__, depth + 1))
    parts.append(_fingerprint(tuple(sorted((obj.__kwdefaults__ or {}).items())), depth + 1))
    g = getattr(obj, "__globals__", {})
    for n in code.co_names:  # helpers it calls by global name, from other files too
        v = g.get(n)
        if callable(v) and getattr(v, "__code__", None) is not None and v is not obj:
            parts.append(_fingerprint(v, depth + 1))
    return None if None in parts else "|".join(parts)


def _cache_dir():
    if os.environ.get("TORCH_PJRT_JAX_CACHE", "1") in ("0", "false", "False"):
        return None
    d = _C._plugin_info().get("cache_dir") or ""
    return os.path.join(d, "jax") if d else None


# --- the lowered module ----------------------------------------------------------------------------

_FUNC = re.compile(r"^(\s*)func\.func\s+(?:(public|private|nested)\s+)?@([\w$.]+)", re.M)


def _as_functions(text, prefix):
    """The func.func definitions of a lowered module, renamed with `prefix` (so they cannot clash with our
    module's or another op's), all private; returns (text, the callee: the renamed @main)."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.lstrip().startswith("module")), None)
    if start is None:
        raise ValueError("jax_op: the lowered text has no module")
    body = "\n".join(lines[start + 1:])
    end = body.rstrip().rfind("}")
    body = body[:end]  # the module's closing brace and whatever follows (location aliases) dropped
    names = [m.group(3) for m in _FUNC.finditer(body)]
    if "main" not in names:
        raise ValueError("jax_op: the lowered module has no @main")
    pattern = re.compile(r"@(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")\b")
    body = pattern.sub(lambda m: "@" + prefix + m.group(1), body)
    body = _FUNC.sub(lambda m: f"{m.group(1)}func.func private @{m.group(3)}", body)
    if re.search(r"^\s*(?!func\.func|\}|//|$)\S", "\n".join(_top_level(body)), re.M):
        raise ValueError("jax_op: the lowered module holds more than functions (sharding meshes?)")
    return body.rstrip() + "\n", prefix + "main"


def _top_level(body):
    """Lines of `body` at brace depth 0 (outside every function)."""
    depth = 0
    for line in body.splitlines():
        if depth == 0:
            yield line
        depth += line.count("{") - line.count("}")


class _Lowered:
    __slots__ = ("functions", "callee", "outs", "tuple_out", "by_plugin", "program")

    def __init__(self, functions, callee, outs, tuple_out, by_plugin):
        self.functions, self.callee, self.outs, self.tuple_out = functions, callee, outs, tuple_out
        self.by_plugin = by_plugin  # plugin kind of deviceless targets -> the functions JAX lowered for it
        self.program = None  # the eager program, built at the first eager call


class JaxOp:
    """A JAX function as a PyTorch op (see the module's docstring). Call it with tensors on "tpu"."""

    def __init__(self, fn, name=None, static_argnums=(), static_argnames=(), input_output_aliases=None,
                 interpret=None, _vjp_of=None, **jit_kwargs):
        if not callable(fn):
            raise TypeError(f"jax_op: expected a function, got {type(fn).__name__}")
        _require_jax()
        self.fn = fn
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self.static_argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        self.aliases = dict(input_output_aliases or {})
        self.interpret = interpret
        self.jit_kwargs = jit_kwargs
        base = name or getattr(fn, "__name__", "fn")
        base = re.sub(r"\W", "_", base.replace("::", "_")).strip("_") or "fn"
        with _lock:
            op = base
            k = 2
            while f"{_NAMESPACE}::{op}" in _ops:
                op, k = f"{base}_{k}", k + 1
            self.name = f"{_NAMESPACE}::{op}"
            _ops[self.name] = self
            _stats["ops"] += 1
        self._statics = []  # static configurations, by the index the op is called with
        self._static_ids = {}
        self._lowered = {}  # (static index, (dtype, *sizes) per input) -> _Lowered
        self._tuple_out = {}  # static index -> whether the function returns a tuple (set by its lowering)
        self._vjp = None
        _lib.define(f"{op}(Tensor[] args, int statics) -> Tensor[]")
        _lib.impl(op, self._eager, "PrivateUse1")
        _lib.impl(op, self._not_on_tpu, "CPU")
        torch.library.register_fake(self.name, lib=_lib)(self._fake)
        if _vjp_of is None:
            torch.library.register_autograd(self.name, self._backward, setup_context=self._setup, lib=_lib)
        self.op = getattr(getattr(torch.ops, _NAMESPACE), op).default
        functools.update_wrapper(self, fn, updated=())

    def __repr__(self):
        return f"<jax_op {self.name}>"

    # --- calling ---------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                raise TypeError(f"jax_op {self.name}: tensor argument {k!r} passed by keyword; pass tensors "
                                "positionally (keyword arguments are static)")
        tensors = []
        layout = []  # per positional argument: the tensor's index, or the static value
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if i in self.static_argnums:
                    raise TypeError(f"jax_op {self.name}: argument {i} is static (static_argnums) but is a tensor")
                layout.append(("t", len(tensors)))
                tensors.append(a)
            else:
                layout.append(("s", a))
        if not tensors:
            raise TypeError(f"jax_op {self.name}: called with no tensor arguments")
        key = (tuple(layout), tuple(kwargs.items()) if len(kwargs) < 2 else tuple(sorted(kwargs.items())))
        sid = _static_id(self.name, key)
        if _direct(tensors):  # eager, nothing to record for autograd: the op's kernel without the dispatcher
            outs = self._eager(tensors, sid)
        else:
            outs = list(self.op(tensors, sid))
        for i, o in self.aliases.items():
            tensors[i].copy_(outs[o])
            outs[o] = tensors[i]
        return tuple(outs) if _tuple_out(self.name, sid) else outs[0]

    def _not_on_tpu(self, tensors, sid):
        devices = sorted({str(t.device) for t in tensors})
        raise RuntimeError(f"jax_op {self.name}: runs on tpu tensors; got tensors on {', '.join(devices)}")

    def _eager(self, tensors, sid):
        lowered = self._lower(sid, tensors)
        if lowered.program is None:
            g = _C._GraphBuilder("jax_op_" + self.name.split("::")[1])
            ids = [g.input(t.dtype, list(t.shape)) for t in tensors]
            lowered.program = g.compile(self.graph_call(g, ids, tensors, sid))
        return lowered.program.run(list(tensors))

    def _fake(self, tensors, sid):
        lowered = self._lower(sid, tensors)
        return [tensors[0].new_empty(shape, dtype=dtype) for dtype, shape in lowered.outs]

    def graph_call(self, builder, ids, arg_vals, sid):
        """torch.compile: the op's call in `builder` (a _C._GraphBuilder) on the value ids `ids` of
        tensors like `arg_vals`; returns the result ids."""
        lowered = self._lower(sid, arg_vals)
        return builder.call(lowered.functions, lowered.callee, ids, lowered.outs, lowered.by_plugin)

    # --- lowering ----------------------------------------------------------------------------------

    def _lower(self, sid, tensors):
        memo = (sid, *[(t.dtype, *t.shape) for t in tensors])
        lowered = self._lowered.get(memo)
        if lowered is None:
            sig = tuple((_dtype_name(t.dtype), tuple(t.shape)) for t in tensors)
            lowered = self._lower_new(self._statics[sid], sig)
            self._lowered[memo] = lowered
            self._tuple_out[sid] = lowered.tuple_out
        return lowered

    def _lower_new(self, key, sig):
        platform = _platform()
        interpret = self._interprets(platform)
        targets = _target_platforms(platform)  # deviceless targets' platforms (TORCH_PJRT_AOT_TARGETS)
        layout, kwargs = key
        disk = _cache_dir()
        fp = _fingerprint(self.fn) if disk else None
        statics = _fingerprint((layout, kwargs)) if fp is not None else None
        ident = json.dumps([_jax_version(), fp, statics, sig, sorted(self.jit_kwargs)])
        if statics is None:  # not on disk: unique to this op in this process
            ident += f"{self.name}@{id(self)}"
        path = None
        if statics is not None:
            where = json.dumps([ident, platform, interpret, sorted((t, self._interprets(t)) for t in targets)])
            path = os.path.join(disk, hashlib.sha256(where.encode()).hexdigest() + ".json")
            try:
                with open(path) as f:
                    d = json.load(f)
                outs = [(_torch_dtype(dt), list(shape)) for dt, shape in d["outs"]]
                _stats["from_disk"] += 1
                return _Lowered(d["functions"], d["callee"], outs, d["tuple_out"], d["by_plugin"])
            except (OSError, ValueError, KeyError, TypeError):
                pass
        for n in self.static_argnums:
            if n < len(layout) and layout[n][0] != "s":
                raise TypeError(f"jax_op {self.name}: static argument {n} is a tensor")
        # the functions' names are the same for every platform (the targets' texts replace this device's)
        prefix = "jaxop_" + hashlib.sha256(ident.encode()).hexdigest()[:16] + "_"
        text, out_info = self._lower_for(platform, interpret, key, sig)
        _stats["lowered"] += 1
        functions, callee = _as_functions(text, prefix)
        by_plugin = {}
        for t in targets:
            try:
                by_plugin[t] = _as_functions(self._lower_for(t, self._interprets(t), key, sig)[0], prefix)[0]
            except Exception as e:  # reported as that target's failure for the program (pjrt/aot.h)
                by_plugin[t] = "// not lowered for the targets: " + str(e).replace("\n", " ")
        import jax.numpy as jnp

        tuple_out = isinstance(out_info, (tuple, list))
        leaves = list(out_info) if tuple_out else [out_info]
        for leaf in leaves:
            if not hasattr(leaf, "shape"):
                raise TypeError(f"jax_op {self.name}: return one array or a tuple or list of arrays, got {out_info}")
        outs = [(_torch_dtype(jnp.dtype(leaf.dtype).name), list(leaf.shape)) for leaf in leaves]
        if path is not None:
            os.makedirs(disk, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"functions": functions, "callee": callee, "tuple_out": tuple_out, "by_plugin": by_plugin,
                           "outs": [(_dtype_name(dt), shape) for dt, shape in outs]}, f)
            os.replace(tmp, path)
        return _Lowered(functions, callee, outs, tuple_out, by_plugin)

    def _interprets(self, platform):
        return _interpret_default(platform) if self.interpret is None else bool(self.interpret)

    def _lower_for(self, platform, interpret, key, sig):
        """JAX's module text of the function for `platform`, and its output info."""
        jax = _jax()
        import jax.numpy as jnp
        from jax._src import config as jax_config

        layout, kwargs = key

        def flat(*arrays):
            args = [arrays[v] if kind == "t" else v for kind, v in layout]
            return self.fn(*args, **dict(kwargs))

        structs = [jax.ShapeDtypeStruct(shape, jnp.dtype(dt)) for dt, shape in sig]
        x64 = any(jnp.dtype(dt).itemsize == 8 or dt == "complex64" for dt, _ in sig)
        pallas_mode = jax_config.pallas_tpu_interpret_mode_context_manager  # every pallas_call, interpreted
        previous = pallas_mode.swap_local(True) if interpret else None
        # Pallas on GPUs: Triton (Ampere and newer; JAX lowers it without its GPU plugin), unless the user
        # chose Mosaic GPU (JAX_PALLAS_USE_MOSAIC_GPU=1, or a kernel's own compiler_params)
        mosaic_gpu = "JAX_PALLAS_USE_MOSAIC_GPU" in os.environ and jax_config.jax_pallas_use_mosaic_gpu.value
        try:
            with jax.enable_x64(x64), jax_config.jax_pallas_use_mosaic_gpu(mosaic_gpu):
                traced = jax.jit(flat, **self.jit_kwargs).trace(*structs)
                return traced.lower(lowering_platforms=(platform,)).as_text(), traced.out_info
        except Exception as e:
            shapes = ", ".join(f"{dt}{list(s)}" for dt, s in sig)
            # the function's own errors keep their type (a ValueError of a shape check stays one)
            kind = type(e) if type(e) in (ValueError, TypeError, NotImplementedError) else RuntimeError
            raise kind(f"jax_op {self.name}({shapes}): JAX could not lower it for {platform}: {e}") from e
        finally:
            if interpret:
                pallas_mode.set_local(previous)

    # --- autograd ----------------------------------------------------------------------------------

    def _setup(self, ctx, inputs, output):
        tensors, sid = inputs
        ctx.sid = sid
        ctx.save_for_backward(*tensors)

    def _backward(self, ctx, grads):
        tensors = ctx.saved_tensors
        lowered = self._lower(ctx.sid, tensors)
        diff = [i for i, t in enumerate(tensors) if t.is_floating_point() or t.is_complex()]
        outs = [i for i, (dt, _) in enumerate(lowered.outs) if dt.is_floating_point or dt.is_complex]
        if not diff or not outs:
            return [None] * len(tensors), None
        cts = [grads[o] if grads[o] is not None else tensors[0].new_zeros(lowered.outs[o][1], dtype=lowered.outs[o][0])
               for o in outs]
        got = self._vjp_op()(*tensors, *cts, (self._statics[ctx.sid], tuple(diff), tuple(outs)))
        got = got if isinstance(got, tuple) else (got,)
        result = [None] * len(tensors)
        for i, g in zip(diff, got):
            result[i] = g
        return result, None

    def _vjp_op(self):
        if self._vjp is None:
            fn = self.fn

            def vjp(*arrays_and_key):
                jax = _jax()
                *arrays, (key, diff, outs) = arrays_and_key
                layout, kwargs = key
                n = sum(1 for kind, _ in layout if kind == "t")
                primals, cts = list(arrays[:n]), arrays[n:]

                def f(*d):
                    xs = list(primals)
                    for i, v in zip(diff, d):
                        xs[i] = v
                    r = fn(*[xs[v] if kind == "t" else v for kind, v in layout], **dict(kwargs))
                    r = r if isinstance(r, (tuple, list)) else (r,)
                    return tuple(r[o] for o in outs)

                _, pullback = jax.vjp(f, *[primals[i] for i in diff])
                return tuple(pullback(tuple(cts)))

            vjp.__qualname__ = getattr(fn, "__qualname__", "fn") + ".<vjp>"
            self._vjp = JaxOp(vjp, name=self.name.split("::")[1] + "_vjp", interpret=self.interpret,
                              _vjp_of=self)
        return self._vjp


def _direct(tensors):
    """Whether a call may run the eager kernel directly: outside torch.compile and any dispatch mode, with
    every tensor on tpu and none needing a gradient."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack():
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t.device.type != "tpu" or (grad and t.requires_grad) or type(t) is not torch.Tensor:
            return False
    return True


# Called by JaxOp.__call__; torch.compile evaluates them while tracing (their arguments are constants there)
# rather than tracing into them.
@torch._dynamo.assume_constant_result
def _static_id(op_name, key):
    """The index of a static configuration of op `op_name`: the op's int argument."""
    op = _ops[op_name]
    try:
        sid = op._static_ids.get(key)
    except TypeError as e:
        raise TypeError(f"jax_op {op_name}: static (non-tensor) arguments must be hashable: {e}") from e
    if sid is None:
        with _lock:
            sid = op._static_ids.setdefault(key, len(op._statics))
            if sid == len(op._statics):
                op._statics.append(key)
    return sid


@torch._dynamo.assume_constant_result
def _tuple_out(op_name, sid):
    return _ops[op_name]._tuple_out[sid]


def _jax_version():
    if "jax" in sys.modules:
        return sys.modules["jax"].__version__
    try:
        from importlib.metadata import version

        return version("jax")
    except Exception:
        return "none"


def _target_platforms(platform):
    """The JAX platforms of the deviceless targets this run compiles for (TORCH_PJRT_AOT_TARGETS), other than
    this device's: a jax_op is lowered by JAX for each (a Pallas kernel to Mosaic for TPUs)."""
    configured = _C._aot_report(False)
    if not configured:
        return []
    kinds = {name: kind for name, kind, _ in _C._aot_targets()}
    return sorted({kinds[n] for n in configured["targets"] if n in kinds} - {platform})


def jax_op(name_or_fn=None, fn=None, *, name=None, static_argnums=(), static_argnames=(),
           input_output_aliases=None, interpret=None, **jit_kwargs):
    """Makes a PyTorch op of a JAX function (module docstring). Forms:
    ``@jax_op``, ``@jax_op(static_argnums=1)``, ``jax_op(fn)``, and TorchTPU's ``jax_op("ns::name", fn)``."""
    if isinstance(name_or_fn, str):
        name = name_or_fn
        name_or_fn = fn
    opts = dict(name=name, static_argnums=static_argnums, static_argnames=static_argnames,
                input_output_aliases=input_output_aliases, interpret=interpret, **jit_kwargs)
    if name_or_fn is None:
        return lambda f: JaxOp(f, **opts)
    return JaxOp(name_or_fn, **opts)


def custom_jax_kernel(jax_fn=None, name=None, static_argnums=(), **jit_kwargs):
    """TorchTPU's name for :func:`jax_op`."""
    return jax_op(jax_fn, name=name, static_argnums=static_argnums, **jit_kwargs)


def lookup(qualified_name):
    """The JaxOp of an op name ("torch_pjrt_jax::f"), or None."""
    return _ops.get(qualified_name)
