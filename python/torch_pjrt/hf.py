"""Hugging Face helpers for the "tpu" device. Imported on demand (``import torch_pjrt.hf``); it needs
``transformers``, which ``import torch_pjrt`` itself never imports.

What works without this module: ``from_pretrained(..., device_map="tpu")``, ``.to("tpu")``, ``generate``,
``Trainer`` (``TrainingArguments`` picks ``tpu:0``), ``transformers.utils.is_torch_tpu_available()``
(Transformers >= 5.2x asks ``torch.accelerator`` for the current accelerator, which is "tpu" while
torch_pjrt is loaded; no module named ``torch_tpu`` is needed or provided).

What this module adds:

* :class:`BucketedCache`: a drop-in for the default ``DynamicCache`` whose key/value buffers grow in
  length buckets (capacity ``block * 2**k``) instead of by one token per step. Every decode step inside a
  bucket has the same shapes, so it reuses the programs already compiled; a 64-token generation compiles a
  few programs per bucket instead of a new program for every shape-dependent op at every token. Padded
  positions are masked exactly as ``StaticCache`` masks them (``get_mask_sizes`` reports the padded
  length). Use: ``model.generate(ids, cache=BucketedCache(model.config), disable_compile=True)``
  (without ``disable_compile`` generate torch.compiles the decode step, as it does for ``StaticCache``).
* :class:`MetricsRecorder`: a ``LogitsProcessor`` that snapshots :func:`torch_pjrt.metrics` once per
  generated token (compiles, cache misses and fallbacks per decode step).
* :func:`compile_progress`: a context manager showing a tqdm bar of programs compiled so far while a
  first run compiles.
"""

from __future__ import annotations

import contextlib
import threading

import torch
from transformers import LogitsProcessor
from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, Cache, CacheLayerMixin
from transformers.configuration_utils import PreTrainedConfig

import torch_pjrt

__all__ = ["BucketedCache", "BucketedLayer", "MetricsRecorder", "compile_progress"]


def bucket_length(n: int, block: int) -> int:
    """The smallest ``block * 2**k`` that holds ``n`` positions."""
    cap = block
    while cap < n:
        cap *= 2
    return cap


class BucketedLayer(CacheLayerMixin):
    """One layer's keys and values in buffers of ``[batch, heads, capacity, head_dim]``, capacity from
    :func:`bucket_length`. New states are written with ``index_copy_`` at run-time positions, so a decode
    step's programs depend on the capacity only, never on the current length."""

    # Fixed-shape buffers: Transformers' mask code must then always build the mask (it may skip it for a
    # one-token query only when the keys hold no padding). This also makes generate() eligible for its
    # auto-compile on "tpu" (backend "tpu"); pass disable_compile=True to stay eager.
    is_compileable = True
    is_croppable = True

    def __init__(self, block: int = 64, is_sliding: bool = False, **kwargs):
        super().__init__()
        self.block = block
        self.is_sliding = is_sliding  # sliding layers keep everything; the sliding mask hides what is out of window
        self.length = 0

    def lazy_initialization(self, key_states, value_states):
        self.device = key_states.device
        self.keys = self._alloc(key_states, 0)
        self.values = self._alloc(value_states, 0)
        self.is_initialized = True

    def _alloc(self, like, cap):
        b, h, _, d = like.shape
        return torch.zeros(b, h, cap, d, dtype=like.dtype, device=like.device)

    def _grow(self, cap):
        old = self.length
        keys, values = self._alloc(self.keys, cap), self._alloc(self.values, cap)
        if old:
            keys[:, :, :old].copy_(self.keys[:, :, :old])
            values[:, :, :old].copy_(self.values[:, :, :old])
        self.keys, self.values = keys, values

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        end = self.length + n
        cap = bucket_length(end, self.block)
        if cap != self.keys.shape[-2]:
            self._grow(cap)
        # positions as a tensor: the start is a run-time scalar, so every step in a bucket reuses one program
        positions = torch.arange(n, device=self.device) + self.length
        self.keys.index_copy_(2, positions, key_states.to(self.keys.dtype))
        self.values.index_copy_(2, positions, value_states.to(self.values.dtype))
        self.length = end
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # called before update: the keys will have the capacity that holds the query too
        return bucket_length(self.length + query_length, self.block), 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.keys = self.values = None
        self.is_initialized = False
        self.length = 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("BucketedLayer.crop takes a negative number of tokens to remove")
        self.length = max(0, self.length + tokens_to_remove)  # stale states are masked, then overwritten

    def reorder_cache(self, beam_idx):
        if self.is_initialized:
            self.keys = self.keys.index_select(0, beam_idx.to(self.device))
            self.values = self.values.index_select(0, beam_idx.to(self.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self.keys = self.keys.repeat_interleave(repeats, dim=0)
            self.values = self.values.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices) -> None:
        if self.is_initialized:
            self.keys = self.keys[indices, ...]
            self.values = self.values[indices, ...]


class BucketedCache(Cache):
    """``DynamicCache`` semantics with bucketed buffer lengths (see :class:`BucketedLayer`). Attention layers
    (full and sliding) get bucketed layers; any other layer type (linear attention, ...) keeps the layer
    ``DynamicCache`` would give it."""

    def __init__(self, config: PreTrainedConfig, block: int = 64):
        from transformers.cache_utils import get_layer_types_and_kwargs

        layer_types, per_layer_kwargs = get_layer_types_and_kwargs(config.get_text_config(decoder=True))
        layers = []
        for kind, kw in zip(layer_types, per_layer_kwargs):
            if kind in ("full_attention", "sliding_attention", "chunked_attention"):
                layers.append(BucketedLayer(block=block, is_sliding=kind != "full_attention"))
            else:
                layers.append(DYNAMIC_LAYER_TYPE_MAPPING[kind](**kw))
        super().__init__(layers=layers)


class MetricsRecorder(LogitsProcessor):
    """Snapshots :func:`torch_pjrt.metrics` at every generated token (pass in ``logits_processor=[...]``).
    ``per_step(key)`` gives the increase of a counter between consecutive tokens."""

    def __init__(self):
        self.snapshots = []

    def __call__(self, input_ids, scores):
        self.snapshots.append(torch_pjrt.metrics())
        return scores

    def per_step(self, key: str) -> list[int]:
        s = self.snapshots
        return [b[key] - a[key] for a, b in zip(s, s[1:])]


@contextlib.contextmanager
def compile_progress(desc: str = "compiling programs", interval: float = 0.2, disable: bool = False):
    """Shows a tqdm bar counting programs compiled (and loaded from the on-disk cache) while the body runs.
    The count is polled from :func:`torch_pjrt.metrics`; nothing is estimated. Yields a dict that holds
    ``compiles`` and ``disk_cache_hits`` for the body once it finishes."""
    from tqdm.auto import tqdm

    start = torch_pjrt.metrics()
    result = {}
    stop = threading.Event()
    bar = tqdm(desc=desc, unit=" programs", disable=disable, leave=True, dynamic_ncols=True)

    def counts():
        m = torch_pjrt.metrics()
        return m["compiles"] - start["compiles"], m["disk_cache_hits"] - start["disk_cache_hits"]

    def poll():
        while not stop.wait(interval):
            c, d = counts()
            bar.n = c + d
            bar.set_postfix_str(f"compiled {c}, from disk {d}", refresh=False)
            bar.refresh()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        c, d = counts()
        bar.n = c + d
        bar.set_postfix_str(f"compiled {c}, from disk {d}", refresh=False)
        bar.close()
        result.update(compiles=c, disk_cache_hits=d)
