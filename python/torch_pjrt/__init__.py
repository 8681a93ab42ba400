"""torch-pjrt: every PJRT device (TPU, NVIDIA GPU, CPU, ...) as the native PyTorch device "tpu".

``import torch_pjrt`` (or plain ``import torch``, through the ``torch.backends`` autoload entry point)
registers the device. See ``torch.tpu`` for the device API and :func:`metrics` for counters.
"""

import os
import site
import sys

# torch_pjrt drives the accelerator; JAX in this process (jax_op lowers with it) stays on the host unless
# told otherwise, so it never opens the TPU or GPU (nor probes the CUDA plugin and libtpu installed for
# deviceless compiles). Set JAX_PLATFORMS before importing torch_pjrt to choose otherwise.
if "jax" not in sys.modules:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _autoload():
    """Entry point of the ``torch.backends`` group. Importing this package does the registration; this
    is defined before ``import torch`` because torch may call it while this module is still importing."""


import torch  # noqa: E402

__all__ = ["metrics", "reset_metrics", "set_fallback_policy", "get_fallback_policy", "plugin_info", "fused",
           "set_eager_mode", "get_eager_mode", "flush", "compile_report", "set_log_compiles", "jax_op", "custom_jax_kernel"]
__version__ = "0.1.0"


def _claim_privateuse1():
    """Fails clearly when another backend already owns PrivateUse1 (or the name "tpu")."""
    name = torch._C._get_privateuse1_backend_name()
    if name == "privateuseone":
        return
    mod = getattr(torch, "tpu", None)
    if name == "tpu" and getattr(mod, "__torch_pjrt__", False):
        return
    raise RuntimeError(
        f"torch_pjrt cannot register the 'tpu' device: PyTorch's PrivateUse1 backend is already taken by "
        f"{name!r} (another package, e.g. torch_tpu, was imported first). Uninstall it or disable its "
        f"autoload (TORCH_DEVICE_BACKEND_AUTOLOAD=0)."
    )


_claim_privateuse1()


def _extensions():
    """{torch minor: path} of the extensions this install holds (``_C_torch2_13.*.so``; a wheel holds one
    per torch minor it supports, a source build the one for the torch it was built against)."""
    import importlib.machinery
    import re

    here = os.path.dirname(os.path.abspath(__file__))
    built = {}
    for name in os.listdir(here):
        m = re.fullmatch(r"_C_torch(\d+)_(\d+)(\..+)", name)
        if m and m.group(3) in importlib.machinery.EXTENSION_SUFFIXES:
            built[f"{m.group(1)}.{m.group(2)}"] = os.path.join(here, name)
    return dict(sorted(built.items(), key=lambda kv: tuple(map(int, kv[0].split(".")))))


def _load_extension():
    """Loads the extension built for this torch's minor as ``torch_pjrt._C``, or raises an ImportError naming
    the torch versions this install supports."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    built = _extensions()
    minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if minor not in built:
        have = list(built)
        supported = (f"it supports torch {', '.join(have)}: install one of those (e.g. pip install "
                     f"torch=={have[-1]}.*)") if have else f"{here} holds no built extension"
        raise ImportError(
            f"torch_pjrt {__version__} has no extension for torch {torch.__version__}: {supported}, or build "
            f"torch_pjrt from source against this torch (pip install --no-build-isolation .)."
        )
    spec = importlib.util.spec_from_file_location(f"{__name__}._C", built[minor])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


_C = _load_extension()  # kernels register for PrivateUse1 on import


def _drain_at_exit():
    # Launches queued on the dispatch thread (a fused stream, a compiled graph) finish before the interpreter
    # finalizes: their clean-up (a stream's recorded arguments) may release tensors that Python objects hold,
    # which takes the GIL, and a thread that takes it during finalization is ended mid-destructor (abort:
    # "terminate called without an active exception"). Registered first, so it runs after the user's.
    try:
        _C._drain_launches()
    except Exception:
        pass


import atexit  # noqa: E402

atexit.register(_drain_at_exit)


def _search_roots():
    roots = [p for p in sys.path if p and os.path.isdir(p)]
    try:
        roots += site.getsitepackages()
    except AttributeError:  # virtualenvs without site.getsitepackages
        pass
    return list(dict.fromkeys(roots))


_C._configure(_search_roots())

from . import aot  # noqa: E402,F401  (TORCH_PJRT_AOT_TARGETS: the report at exit)
from . import device as _device_module  # noqa: E402
from . import backends as _backends_module  # noqa: E402
from . import pallas as _pallas_module  # noqa: E402  (torch.tpu.pallas: TorchTPU's names for jax_op)
from . import jax_ops as _jax_ops  # noqa: E402
from .jax_ops import custom_jax_kernel, jax_op  # noqa: E402,F401  (JAX and Pallas functions as ops)
from . import torchtpu as _torchtpu  # noqa: E402  (TorchTPU's names: docs/torchtpu.md)


def _register():
    if torch._C._get_privateuse1_backend_name() != "tpu":
        torch.utils.rename_privateuse1_backend("tpu")
    if not getattr(getattr(torch, "tpu", None), "__torch_pjrt__", False):
        torch._register_device_module("tpu", _device_module)
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    torch.backends.tpu = _backends_module
    sys.modules.setdefault("torch.backends.tpu", _backends_module)
    _device_module.pallas = _pallas_module
    sys.modules.setdefault("torch.tpu.pallas", _pallas_module)
    for name in _torchtpu.__all__:  # TorchTPU's names: torch.tpu.EagerMode, set_eager_mode, eager_mode, ops
        setattr(_device_module, name, getattr(_torchtpu, name))


_register()


def metrics():
    """Counters since start (or :func:`reset_metrics`).

    Keys: ``fallbacks`` (dict op -> CPU fallback calls), ``fallback_total``, ``cache_hits`` and
    ``cache_misses`` (op calls served by a cached program / that built one), ``executions``,
    ``donation_copies`` (inputs a program updates in place that something else still held: copied first),
    ``compiles`` and ``compile_seconds`` (plugin compiles), ``disk_cache_hits``, ``live_buffers`` and
    ``live_bytes`` (device buffers held by tensors), ``scalar_cache_entries``, ``distributed`` (the
    transport of the c10d backend tpu_dist, its collectives and the bytes it staged to and from the host),
    ``aot`` (per deviceless target of ``TORCH_PJRT_AOT_TARGETS``: programs compiled, failed, found in the
    cache and pending; see :mod:`torch_pjrt.aot`), ``jax_ops`` (ops made by :func:`jax_op`, functions JAX
    lowered in this process, lowerings read from the disk cache instead), ``device_checks`` (out-of-range
    index and invalid value checks: ``enabled`` unless ``TORCH_PJRT_DEVICE_CHECKS=0``, codes ``pending``
    until the next sync point, ``read`` and ``failed`` so far; docs/execution.md).
    """
    d = _C._metrics()
    d["distributed"] = _distributed.metrics()
    d["jax_ops"] = _jax_ops.stats()
    return d


def reset_metrics():
    """Zeroes the counters of :func:`metrics` and empties :func:`compile_report`."""
    _C._reset_metrics()
    _C._reset_compile_report()


def compile_report():
    """The programs built since start (or :func:`reset_metrics`), per op, most first, with their reasons.

    Returns ``{op: {"programs": n, "from_disk": k, "seconds": s, "reasons": [...]}}``: ``op`` is an ATen
    overload (``"aten::add.Tensor"``), ``"fused eager stream"``, a ``torch.compile`` graph or an internal
    program (``"materialize_view"``); each reason reads ``"<arguments>: <why>"``, the why being what of the
    cache key was new against the op's nearest earlier program (``"new shape: self shape [4, 9] (was [4,
    8])"``) or ``"first program of <op>"``. A program counts when it was compiled or loaded from the disk
    cache, not when an identical program was already in memory. ``TORCH_PJRT_LOG_COMPILES=1`` (or
    :func:`set_log_compiles`) prints each as it is built.
    """
    report = {}
    for op, signature, reason, from_disk, seconds in _C._compile_records():
        r = report.setdefault(op, {"programs": 0, "from_disk": 0, "seconds": 0.0, "reasons": []})
        r["programs"] += 1
        r["from_disk"] += int(from_disk)
        r["seconds"] += seconds
        r["reasons"].append(f"{signature}: {reason}")
    return dict(sorted(report.items(), key=lambda kv: -kv[1]["programs"]))


def set_log_compiles(on: bool = True):
    """Prints a line per new program with its reason (as ``TORCH_PJRT_LOG_COMPILES=1``); returns the old
    setting."""
    old = _C._log_compiles()
    _C._set_log_compiles(bool(on))
    return old


def set_fallback_policy(policy: str):
    """'warn' (default: warn once per op), 'silent', or 'error' (ops without a lowering raise)."""
    _C._set_fallback_policy(policy)


def get_fallback_policy() -> str:
    return _C._get_fallback_policy()


def plugin_info():
    """The loaded PJRT plugin: path, API version, platform, attributes and devices."""
    return _C._plugin_info()


def set_eager_mode(mode: str):
    """'strict' (the default: every op runs as its own cached program) or 'fused' (ops are recorded and run as
    one program at the next sync point: ``.item()``, ``.cpu()``, printing, a data-dependent op,
    ``torch.tpu.synchronize()``, or a stream of 2000 ops). Leaving fused mode runs the pending stream.
    ``TORCH_PJRT_EAGER=fused`` sets fused mode at import."""
    if mode not in ("strict", "fused"):
        raise ValueError(f"torch_pjrt.set_eager_mode: mode must be 'strict' or 'fused', not {mode!r}")
    torch.ops.tpu_fused.set_mode(mode == "fused")


def get_eager_mode() -> str:
    was = torch.ops.tpu_fused.set_mode(True)
    torch.ops.tpu_fused.set_mode(was)
    return "fused" if was else "strict"


def flush():
    """Runs the pending fused eager stream now (a no-op in strict mode)."""
    torch.ops.tpu_fused.flush()


class fused:
    """Context manager: fused eager inside the block, the previous mode after it (the stream runs at exit).

    ``with torch_pjrt.fused(): loss = step(x)``"""

    def __enter__(self):
        self._was = torch.ops.tpu_fused.set_mode(True)
        return self

    def __exit__(self, *exc):
        torch.ops.tpu_fused.set_mode(self._was)
        return False


def _install_dynamo_hook():
    """Registers the Dynamo backend "tpu" when torch._dynamo's backend registry is imported, so that
    ``import torch`` does not pay for importing Dynamo; routes Inductor on "tpu" to it (torch_pjrt.dynamo)."""
    from . import dynamo
    from ._import_hooks import when_imported

    dynamo._route_inductor()
    when_imported("torch._dynamo.backends.registry", lambda module: dynamo._register())


_install_dynamo_hook()

if os.environ.get("TORCH_PJRT_EAGER", "strict") not in ("strict", "fused"):
    raise ValueError(f"TORCH_PJRT_EAGER must be 'strict' or 'fused', not {os.environ['TORCH_PJRT_EAGER']!r}")
if os.environ.get("TORCH_PJRT_EAGER") == "fused":
    set_eager_mode("fused")

from . import moe as _moe  # noqa: E402  (torch.ops.torch_pjrt.ragged_dot, Transformers' "ragged_dot" experts)

_moe._install_transformers_hook()

from . import accelerate_glue as _accelerate_glue  # noqa: E402  (Accelerate's disk offload onto "tpu")

_accelerate_glue.install()

from . import distributed as _distributed  # noqa: E402  (the c10d backend "tpu_dist")

_distributed._register()
