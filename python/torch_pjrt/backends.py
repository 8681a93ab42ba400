"""torch.backends.tpu: build and runtime switches of the tpu backend."""

from . import _C


def is_built() -> bool:
    """True: torch_pjrt is installed (whether a plugin is available is torch.tpu.is_available())."""
    return True


def is_available() -> bool:
    return _C._is_available()


def set_launch_blocking(on: bool):
    """Debug eager (True: wait for every op, failures name the op at once) or strict eager (False)."""
    _C._set_launch_blocking(bool(on))


def launch_blocking() -> bool:
    return _C._launch_blocking()
