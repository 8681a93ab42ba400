"""torch.distributed on "tpu": the c10d backend "tpu_dist" (docs/distributed.md).

Registered when torch_pjrt loads, as the default backend of the "tpu" device, so that under torchrun
``init_process_group()``, ``init_process_group("tpu_dist")`` and ``init_process_group("cpu:gloo,tpu:tpu_dist")``
all work, and DDP, FSDP2, DTensor and the functional collectives run on "tpu" tensors.

The backend is C++ (csrc/distributed/), with two transports, chosen per group: programs (collectives as
StableHLO programs over the devices of this process's PJRT client, where every rank of the group drives one
of them) and host staging through torch's gloo backend (each collective copies its inputs to the host once,
runs there, and copies its outputs back once), for ranks in several processes, which the CPU plugin cannot
connect. ``transport()`` says which one a group runs.
"""

import functools
import os

import torch
import torch.distributed as dist

from . import _C

BACKEND = "tpu_dist"
__all__ = ["BACKEND", "transport", "transport_reason", "metrics"]


_transports = {}  # group name -> the transport its backend took in this process


def transport(group=None) -> str:
    """The transport of `group`'s tpu_dist backend in this process (default: the default group's):
    'programs' (collectives as programs over this client's devices) or 'host' (device to host, gloo, host
    to device). Before any group exists: what a group of several processes takes. See :func:`transport_reason`."""
    if group is None and dist.is_initialized():
        group = dist.group.WORLD
    if group is not None and not isinstance(group, str):
        group = dist.distributed_c10d._get_process_group_name(group)
    return _transports.get(group, "host")


def transport_reason() -> str:
    """Why a group of ranks in several processes takes the host transport with the loaded plugin."""
    kind = _C._plugin_info().get("kind")
    if kind == "cpu":
        return ("the CPU plugin cannot run collectives across processes: it ignores the key-value store callbacks; "
                "ranks that are threads of one process use programs over its TORCH_PJRT_CPU_DEVICES devices")
    return "a PJRT client spanning processes (node_id, num_nodes, a key-value store) is not created yet"


def metrics() -> dict:
    """The default group's transport, the collectives run through tpu_dist in this process (of which the
    program transport ran ``program_collectives``) and the bytes the host transport staged each way."""
    _C._init_distributed()
    return {"transport": transport(), **_C._distributed._counters()}


def _group_devices(opts):
    """The client's device of every rank of the group when every rank drives a device of this process's
    client (ranks that are threads of one process), else [] (the host transport).
    TORCH_PJRT_DIST_TRANSPORT=host forces the host transport."""
    if opts.group_size < 2 or os.environ.get("TORCH_PJRT_DIST_TRANSPORT", "auto") == "host":
        return []
    store, me = opts.store, f"{os.getpid()}:{torch.tpu.current_device()}"
    store.set(f"tpu_dist/where/{opts.group_rank}", me)
    keys = [f"tpu_dist/where/{r}" for r in range(opts.group_size)]
    store.wait(keys, opts.timeout)
    where = [store.get(k).decode() for k in keys]
    pids = {w.split(":")[0] for w in where}
    devices = [int(w.split(":")[1]) for w in where]
    return devices if pids == {str(os.getpid())} and len(set(devices)) == len(devices) else []


def _create_backend(opts, pg_options):
    """The creator torch calls (extended API) for each group that has "tpu" in its backends."""
    from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo

    _C._init_distributed()
    ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
    host = ProcessGroupGloo(PrefixStore("tpu_dist/host/", opts.store), opts.group_rank, opts.group_size, opts.timeout)
    backend = _C._distributed.TpuBackend(opts.store, opts.group_rank, opts.group_size, opts.timeout,
                                         opts.group_id or "", ranks, host, _group_devices(opts))
    _transports[opts.group_id or ""] = backend.transport
    return backend


def _set_default_backend_type(helper):
    """torch 2.13 leaves a group made from a backend string like "cpu:gloo,tpu:tpu_dist" without a default
    backend type (it compares its plugins' upper-case names with the string's lower-case ones), so
    ``pg._get_backend_name()`` says "undefined" and destroying the group warns "No backend of type 0 found".
    The default becomes tpu_dist's type, as NCCL's is for "cpu:gloo,cuda:nccl". A no-op where torch sets it."""

    @functools.wraps(helper)
    def new_process_group_helper(*args, **kwargs):
        pg, store = helper(*args, **kwargs)
        backend = kwargs.get("backend", args[3] if len(args) > 3 else None)
        backends = [part.split(":")[-1] for part in str(backend).split(",")]  # "cpu:gloo,tpu:tpu_dist"
        if isinstance(pg, dist.ProcessGroup) and BACKEND in backends and pg._get_backend_name() == "undefined":
            pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        return pg, store

    new_process_group_helper.__torch_pjrt__ = True
    return new_process_group_helper


def _register():
    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    # devices must be a list: torch 2.13 iterates a string's characters.
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["tpu"])
    dist.Backend.default_device_backend_map["tpu"] = BACKEND
    c10d = dist.distributed_c10d
    if not getattr(c10d._new_process_group_helper, "__torch_pjrt__", False):
        c10d._new_process_group_helper = _set_default_backend_type(c10d._new_process_group_helper)
