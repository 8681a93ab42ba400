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

Multi-process runs: Accelerate (1.16) knows a multi-process accelerator run only for the device types it
lists (``TORCH_DISTRIBUTED_BACKENDS``, ``DistributedType.MULTI_<TYPE>``); under torchrun with "tpu" it
saw one process (``DistributedType.NO``) and prepared nothing. When ``accelerate.state`` is imported, "tpu"
gets the backend "tpu_dist" and a distributed type ``MULTI_TPU``, and ``PartialState.set_device`` puts each
process on ``tpu:<local process index>``. Accelerate decides what a multi-device run needs (DDP wrapping,
barriers with device ids, RNG synchronisation, gathers) by membership in literal lists of its types, which
cannot be extended from outside; ``MULTI_TPU`` therefore compares equal, as a string, to ``MULTI_XPU``, the
generic torch.accelerator device those lists already hold (its name and value stay "MULTI_TPU"). Remove when
Accelerate lists "tpu" itself.
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


def _add_multi_tpu(distributed_type):
    """DistributedType.MULTI_TPU: a member named and valued "MULTI_TPU" whose string content is "MULTI_XPU"
    (``str`` is the enum's mixin, so ``==``, ``in`` and hashing see MULTI_XPU)."""
    if "MULTI_TPU" in distributed_type.__members__:
        return distributed_type.MULTI_TPU
    member = str.__new__(distributed_type, "MULTI_XPU")
    member._name_ = member._value_ = "MULTI_TPU"
    member.__objclass__ = distributed_type
    member._sort_order_ = len(distributed_type._member_names_)
    type.__setattr__(distributed_type, "MULTI_TPU", member)
    distributed_type._member_map_["MULTI_TPU"] = member
    distributed_type._value2member_map_["MULTI_TPU"] = member
    distributed_type._member_names_.append("MULTI_TPU")
    return member


def _patch_state(state) -> None:
    from accelerate.utils import constants, dataclasses

    if getattr(state.PartialState.set_device, "__torch_pjrt__", False):
        return
    multi_tpu = _add_multi_tpu(dataclasses.DistributedType)
    constants.TORCH_DISTRIBUTED_BACKENDS.setdefault("tpu", "tpu_dist")
    set_device = state.PartialState.set_device

    @functools.wraps(set_device)
    def set_tpu_device(self):
        if self.device is None and self.distributed_type is multi_tpu:
            self.device = torch.device("tpu", self.local_process_index % torch.tpu.device_count())
            torch.tpu.set_device(self.device)
            return
        set_device(self)

    set_tpu_device.__torch_pjrt__ = True
    state.PartialState.set_device = set_tpu_device


def install() -> None:
    when_imported(_MODULE, _patch)
    when_imported("accelerate.state", _patch_state)
