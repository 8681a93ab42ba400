"""torch.distributed on "tpu": the c10d backend "tpu_dist" (docs/distributed.md).

Registered when torch_pjrt loads, as the default backend of the "tpu" device, so that under torchrun
``init_process_group()``, ``init_process_group("tpu_dist")`` and ``init_process_group("cpu:gloo,tpu:tpu_dist")``
all work, and DDP, FSDP2, DTensor and the functional collectives run on "tpu" tensors.

The backend is C++ (csrc/distributed/). Its transport is host staging through torch's gloo backend: each
collective copies its inputs to the host once, runs there, and copies its outputs back once. The CPU plugin
cannot run collectives across processes, so this is its transport; GPU and TPU plugins take it too until the
collective-program transport lands (``transport()`` says which one runs).
"""

import functools

import torch.distributed as dist

from . import _C

BACKEND = "tpu_dist"
__all__ = ["BACKEND", "transport", "metrics"]


def transport() -> str:
    """The transport tpu_dist uses with this process's PJRT client: 'host' (device to host, gloo, host to
    device). See :func:`transport_reason` for why."""
    return "host"


def transport_reason() -> str:
    """Why :func:`transport` is what it is for the loaded plugin."""
    kind = _C._plugin_info().get("kind")
    if kind == "cpu":
        return "the CPU plugin cannot run collectives across processes: it ignores the key-value store callbacks"
    return "collective programs over the plugin's own interconnect are not implemented yet"


def metrics() -> dict:
    """The transport, the collectives run through tpu_dist in this process and the bytes staged each way."""
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
