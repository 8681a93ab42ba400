"""torch.distributed on "tpu": the c10d backend "tpu_dist" (docs/distributed.md).

Registered when torch_pjrt loads, as the default backend of the "tpu" device, so that under torchrun
``init_process_group()``, ``init_process_group("tpu_dist")`` and ``init_process_group("cpu:gloo,tpu:tpu_dist")``
all work, and DDP, FSDP2, DTensor and the functional collectives run on "tpu" tensors.

The backend is C++ (csrc/distributed/). Its transport is host staging through torch's gloo backend: each
collective copies its inputs to the host once, runs there, and copies its outputs back once. The CPU plugin
cannot run collectives across processes, so this is its transport; GPU and TPU plugins take it too until the
collective-program transport lands (``transport()`` says which one runs).
"""

import torch
import torch.distributed as dist

from . import _C

BACKEND = "tpu_dist"
__all__ = ["BACKEND", "transport", "metrics"]


def transport() -> str:
    """The transport tpu_dist uses in this process: 'host' (device to host, gloo, host to device)."""
    return "host"


def metrics() -> dict:
    """Collectives run through tpu_dist in this process and the bytes staged each way."""
    _C._init_distributed()
    return {"transport": transport(), **_C._distributed._counters()}


def _create_backend(opts, pg_options):
    """The creator torch calls (extended API) for each group that has "tpu" in its backends."""
    from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo

    _C._init_distributed()
    ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
    host = ProcessGroupGloo(PrefixStore("tpu_dist/host/", opts.store), opts.group_rank, opts.group_size, opts.timeout)
    return _C._distributed.TpuBackend(opts.store, opts.group_rank, opts.group_size, opts.timeout, opts.group_id or "",
                                      ranks, host)


def _register():
    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    # devices must be a list: torch 2.13 iterates a string's characters.
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["tpu"])
    dist.Backend.default_device_backend_map["tpu"] = BACKEND
