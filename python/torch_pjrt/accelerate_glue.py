"""Glue for Hugging Face Accelerate's big-model offload on the "tpu" device.

Accelerate (1.16) recognises "tpu" through ``torch.accelerator`` and dispatches a model whose
``device_map`` mixes "tpu" with "cpu" or "disk" (``from_pretrained(..., device_map=...)``). One path
does not: weights offloaded to disk are read back by ``OffloadedWeightsLoader.__getitem__`` with
``safetensors.safe_open(file, device=<execution device>)``, and safetensors only knows the devices
built into it, so every forward through a disk-offloaded module raised ``SafetensorError: device tpu is
invalid``. Accelerate's own checkpoint loader (``load_state_dict``) already reads "tpu" weights on the
CPU and moves them; this module gives the offload loader the same treatment: its ``safe_open`` opens
files for a "tpu" device on the CPU, and the loader's own ``tensor.to(device)`` then moves the tensor.

Installed by ``import torch_pjrt`` when ``accelerate.utils.offload`` is imported (an import hook: nothing
here imports Accelerate). Remove once Accelerate reads offloaded weights for "tpu" on the CPU itself.
"""

import functools

import torch

from ._import_hooks import when_imported

_MODULE = "accelerate.utils.offload"


def _is_tpu(device) -> bool:
    try:
        return torch.device(device).type == "tpu"
    except (TypeError, RuntimeError):
        return False


def _patch(module) -> None:
    open_ = getattr(module, "safe_open", None)
    if open_ is None or getattr(open_, "__torch_pjrt__", False):
        return

    @functools.wraps(open_)
    def safe_open(filename, framework, device="cpu", *args, **kwargs):
        return open_(filename, framework, "cpu" if _is_tpu(device) else device, *args, **kwargs)

    safe_open.__torch_pjrt__ = True
    module.safe_open = safe_open


def install() -> None:
    when_imported(_MODULE, _patch)
