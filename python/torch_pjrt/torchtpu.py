"""TorchTPU's public names where the same thing exists here, so code written for TorchTPU runs unchanged
(``torch.tpu.EagerMode``, ``set_eager_mode``, ``eager_mode``, ``torch.tpu.ops.ragged_dot`` and
``torch.ops.tpu.ragged_dot``; ``torch.tpu.pallas`` is python/torch_pjrt/pallas.py). docs/torchtpu.md lists
which of TorchTPU's names exist here and which do not."""

import enum

import torch

from . import _C

__all__ = ["EagerMode", "set_eager_mode", "eager_mode", "ops"]


class EagerMode(enum.Enum):
    """TorchTPU's eager modes, as torch-pjrt runs them."""

    DEFER_NEVER = "strict"  # every op its own cached program, asynchronous (the default)
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "debug"  # strict, waiting for every op (TORCH_PJRT_LAUNCH_BLOCKING=1)
    DEFER_AND_FUSE = "fused"  # ops recorded and run as one program at the next sync point


def eager_mode() -> EagerMode:
    """The current eager mode."""
    from . import get_eager_mode

    if get_eager_mode() == "fused":
        return EagerMode.DEFER_AND_FUSE
    return EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING if _C._launch_blocking() else EagerMode.DEFER_NEVER


def _apply(mode):
    from . import set_eager_mode as set_mode

    set_mode("fused" if mode is EagerMode.DEFER_AND_FUSE else "strict")
    _C._set_launch_blocking(mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)


class set_eager_mode:
    """Sets the eager mode (an EagerMode, or torch-pjrt's "strict", "debug", "fused") at once; used as a
    context manager, the previous mode comes back at the block's end (a fused stream runs when it is left)."""

    def __init__(self, mode):
        if isinstance(mode, str):
            try:
                mode = EagerMode(mode)
            except ValueError:
                raise ValueError(f"torch.tpu.set_eager_mode: expected an EagerMode or one of 'strict', 'debug', "
                                 f"'fused', not {mode!r}") from None
        if not isinstance(mode, EagerMode):
            raise TypeError(f"torch.tpu.set_eager_mode: expected an EagerMode, not {type(mode).__name__}")
        self.previous = eager_mode()
        _apply(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _apply(self.previous)
        return False


_lib = torch.library.Library("tpu", "FRAGMENT")  # torch.ops.tpu: TorchTPU's custom-op namespace
_lib.define("ragged_dot(Tensor x, Tensor w, Tensor group_sizes) -> Tensor")


def _ragged_dot(x, w, group_sizes):
    return torch.ops.torch_pjrt.ragged_dot(x, w, group_sizes)


_lib.impl("ragged_dot", _ragged_dot, "CompositeImplicitAutograd")


class ops:
    """``torch.tpu.ops``: TorchTPU's op helpers."""

    @staticmethod
    def ragged_dot(x, w, group_sizes):
        """x[M, K], w[G, K, N], group_sizes[G] -> [M, N]: rows in contiguous groups, group g's rows times
        w[g], rows past the groups zero (torch.ops.torch_pjrt.ragged_dot; torch_pjrt.moe)."""
        return torch.ops.torch_pjrt.ragged_dot(x, w, group_sizes)
