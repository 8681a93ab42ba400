"""torch.tpu: the device module, shaped like torch.cuda."""

import os
import threading
from typing import Any, List, Optional, Union

import torch

from . import _C

__torch_pjrt__ = True

_initialized = False
_init_lock = threading.Lock()
_in_bad_fork = False
_queued_calls = []  # (callable, traceback) run at first initialization, like torch.cuda

_DeviceLike = Union[torch.device, str, int, None]


def _index(device: _DeviceLike = None, optional: bool = True) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return current_device() if device.index is None else device.index
    raise TypeError(f"expected a device, index or None, got {type(device).__name__}")


def is_available() -> bool:
    """True when a PJRT plugin is loaded and reports at least one device."""
    return _C._is_available()


def is_initialized() -> bool:
    return _initialized and not _in_bad_fork


def _after_fork_in_child():
    global _in_bad_fork
    if _initialized:
        _in_bad_fork = True  # the plugin's threads do not survive fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_in_bad_fork() -> bool:
    return _in_bad_fork


def init():
    _lazy_init()


def _lazy_init():
    global _initialized
    if is_initialized():
        return
    with _init_lock:
        if is_initialized():
            return
        if _in_bad_fork:
            raise RuntimeError("tpu: cannot re-initialize the device in a forked subprocess; use 'spawn'")
        _C._init()
        _initialized = True
        for call, _ in _queued_calls:
            call()
        _queued_calls.clear()


def _lazy_call(callable, **kwargs):
    if is_initialized():
        callable()
    else:
        _queued_calls.append((callable, None))


def device_count() -> int:
    """The plugin's addressable devices (0 without a plugin). On the CPU plugin it is a setting:
    TORCH_PJRT_CPU_DEVICES (default 1; under torchrun LOCAL_WORLD_SIZE)."""
    return _C._device_count()


def current_device() -> int:
    return _C._get_device()


def set_device(device: _DeviceLike) -> None:
    idx = _index(device)
    if idx >= 0:
        _C._set_device(idx)


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device: _DeviceLike):
        self.idx = _index(device) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *args):
        if self.prev_idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of `obj` (a tensor) current."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else -1)


def synchronize(device: _DeviceLike = None) -> None:
    """Waits for all work issued on the device; raises a pending asynchronous failure naming its op."""
    _lazy_init()
    _C._synchronize(_index(device))


def get_device_name(device: _DeviceLike = None) -> str:
    """The PJRT device kind, e.g. 'cpu', 'NVIDIA H200' or 'TPU v5 lite'."""
    _lazy_init()
    return _C._device_kind(_index(device))


class _DeviceProperties:
    def __init__(self, index: int):
        info = _C._plugin_info()
        dev = info["devices"][index]
        self.name = dev["kind"]
        self.index = index
        self.platform = info["platform"]
        self.platform_version = info["platform_version"]
        stats = _C._memory_stats(index)
        limit = stats["plugin_bytes_limit"]
        self.total_memory = limit if limit > 0 else mem_get_info(index)[1]
        self.description = dev["description"]

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // (1024 * 1024)}MB)")


def get_device_properties(device: _DeviceLike = None) -> _DeviceProperties:
    _lazy_init()
    return _DeviceProperties(_index(device))


def get_device_capability(device: _DeviceLike = None):
    return (0, 0)


# ------------------------------------------------------------------------------------------ randomness

def _generator(device: _DeviceLike = None) -> torch.Generator:
    _lazy_init()
    return _C._get_default_generator(_index(device))


class _DefaultGenerators:
    def __getitem__(self, i: int) -> torch.Generator:
        return _generator(i)

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    seed = int(seed)
    _lazy_call(lambda: _generator().manual_seed(seed))


def manual_seed_all(seed: int) -> None:
    seed = int(seed)

    def cb():
        for i in range(device_count()):
            _generator(i).manual_seed(seed)

    _lazy_call(cb)


def seed() -> None:
    _lazy_call(lambda: _generator().seed())


def seed_all() -> None:
    def cb():
        s = _generator(0).seed()
        for i in range(1, device_count()):
            _generator(i).manual_seed(s)

    _lazy_call(cb)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = "tpu") -> torch.Tensor:
    """The generator's state: a uint8 CPU tensor (seed and offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "tpu") -> None:
    state = new_state.clone(memory_format=torch.contiguous_format)
    _lazy_call(lambda: _generator(device).set_state(state))


def get_rng_state_all() -> List[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# ---------------------------------------------------------------------------------------------- memory

def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes of device buffers held by tensors on the device."""
    return _C._memory_stats(_index(device))["live_bytes"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return _C._memory_stats(_index(device))["peak_bytes"]


def memory_reserved(device: _DeviceLike = None) -> int:
    """PJRT allocates on demand and keeps no cache of ours: reserved equals allocated."""
    return memory_allocated(device)


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory(_index(device))


def reset_max_memory_allocated(device: _DeviceLike = None) -> None:
    reset_peak_memory_stats(device)


def memory_stats(device: _DeviceLike = None) -> dict:
    s = _C._memory_stats(_index(device))
    return {
        "allocated_bytes.all.current": s["live_bytes"],
        "allocated_bytes.all.peak": s["peak_bytes"],
        "reserved_bytes.all.current": s["live_bytes"],
        "num_alloc_retries": 0,
        "num_ooms": 0,
        "active.all.current": s["live_buffers"],
    }


def mem_get_info(device: _DeviceLike = None):
    """(free, total) bytes, as far as the plugin reports memory (the host's memory on the CPU plugin)."""
    _lazy_init()
    s = _C._memory_stats(_index(device))
    limit, used = s["plugin_bytes_limit"], s["plugin_bytes_in_use"]
    if limit > 0 and used >= 0:
        return limit - used, limit
    return _host_memory()


def _host_memory():
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return avail, pages


def empty_cache() -> None:
    """Device buffers are freed as soon as their tensors are; on the CPU plugin, whose device memory is
    the process's heap, the freed memory the process keeps for reuse (TORCH_PJRT_KEEP_FREED_MEMORY) goes
    back to the system here."""
    _C._empty_cache()


# ------------------------------------------------------------------------------------------------- amp

def get_amp_supported_dtype() -> List[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# ------------------------------------------------------------------------------------- streams, events

def current_stream(device: _DeviceLike = None) -> torch.Stream:
    return torch.Stream(device=torch.device("tpu", _index(device)))


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    return current_stream(device)


def stream(s):
    import contextlib

    return contextlib.nullcontext()


Stream = torch.Stream
Event = torch.Event
