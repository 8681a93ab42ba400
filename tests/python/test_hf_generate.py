"""Compiles during generation on "tpu", counted with torch_pjrt.metrics() once per generated token.

Static cache: after the first two decode steps the model's forward compiles nothing new and nothing falls
back. Default dynamic cache against torch_pjrt.hf.BucketedCache: compiles per generated token, with a bound
for the bucketed cache over a 64-token generation. Every run's tokens are checked against the CPU."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_pjrt  # noqa: E402

pytest.importorskip("transformers")
from torch_pjrt.hf import BucketedCache, MetricsRecorder  # noqa: E402
from hf_tiny import make_model  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")


# "New programs" are program-cache misses: programs this process had to compile or load from the on-disk
# cache. Plugin compiles alone would read 0 whenever an earlier process left the programs on disk.
NEW = "cache_misses"


class _ForwardCompiles:
    """New programs (and fallbacks) inside each call of the model's forward."""

    def __init__(self, model):
        self.compiles, self.fallbacks = [], []
        self._handles = [model.register_forward_pre_hook(self._pre), model.register_forward_hook(self._post)]

    def _pre(self, *a):
        self._start = torch_pjrt.metrics()

    def _post(self, *a):
        m = torch_pjrt.metrics()
        self.compiles.append(m[NEW] - self._start[NEW])
        self.fallbacks.append(m["fallback_total"] - self._start["fallback_total"])

    def remove(self):
        for h in self._handles:
            h.remove()


@pytest.fixture(scope="module")
def models():
    cpu = make_model("llama")
    tpu = make_model("llama").to("tpu")
    return cpu, tpu


def _prompt(batch=2, seq=12):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 256, (batch, seq), generator=g)
    return ids, torch.ones_like(ids)


def _generate(model, ids, mask, n, **kw):
    rec = MetricsRecorder()
    hooks = _ForwardCompiles(model) if ids.device.type == "tpu" else None
    out = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         logits_processor=[rec], **kw)
    if hooks:
        hooks.remove()
    return out, rec, hooks


def test_static_cache_compiles_nothing_after_two_decode_steps(models):
    cpu, tpu = models
    ids, mask = _prompt()
    n = 12
    want, _, _ = _generate(cpu, ids, mask, n, cache_implementation="static", disable_compile=True)
    # disable_compile: generate would torch.compile the decode step with backend "tpu" on this device;
    # here the eager path is what is measured
    got, rec, fwd = _generate(tpu, ids.to("tpu"), mask.to("tpu"), n, cache_implementation="static",
                              disable_compile=True)
    assert torch.equal(got.cpu(), want)
    # forward calls: [prefill, decode 1, decode 2, decode 3, ...]
    print(f"\nstatic cache: new programs per forward {fwd.compiles}; per generated token "
          f"(whole generate step) {rec.per_step(NEW)}")
    assert len(fwd.compiles) == n
    assert fwd.compiles[3:] == [0] * (n - 3), fwd.compiles
    assert sum(fwd.fallbacks) == 0 and rec.snapshots[-1]["fallback_total"] == rec.snapshots[0]["fallback_total"]
    # Nor does generate's own bookkeeping around it: input_ids and the attention mask grow by one position
    # per token (torch.cat) into growable storages, and the reads of their last column (the eos check, the
    # next step's inputs) take their offset at run time, so the whole step compiles nothing new.
    steady = rec.per_step(NEW)[3:]
    assert steady == [0] * len(steady), steady


def test_dynamic_and_bucketed_cache_compiles(models):
    cpu, tpu = models
    ids, mask = _prompt()
    # default DynamicCache: every op whose shape depends on the cache length compiles again at every token
    n_dyn = 16
    want, _, _ = _generate(cpu, ids, mask, n_dyn)
    got, rec_dyn, fwd_dyn = _generate(tpu, ids.to("tpu"), mask.to("tpu"), n_dyn)
    assert torch.equal(got.cpu(), want)
    dyn = rec_dyn.per_step(NEW)
    # BucketedCache: 64 tokens; programs change only when a bucket fills (at 64 and 128 positions)
    n = 64
    want, _, _ = _generate(cpu, ids, mask, n)
    got, rec, fwd = _generate(tpu, ids.to("tpu"), mask.to("tpu"), n, cache=BucketedCache(tpu.config, block=64),
                              disable_compile=True)
    assert torch.equal(got.cpu(), want)
    buck = rec.per_step(NEW)
    ops_per_token = (rec.snapshots[-1]["executions"] - rec.snapshots[1]["executions"]) / (len(rec.snapshots) - 2)
    fwd_steady = fwd.compiles[3:]
    print(f"\nops executed per generated token: {ops_per_token:.0f}")
    print(f"dynamic cache, {n_dyn} tokens: new programs per token {dyn} (forward: {fwd_dyn.compiles[1:]})")
    print(f"bucketed cache, {n} tokens: new programs per token {buck} (forward: {fwd.compiles[1:]}); "
          f"total {sum(buck)} vs ops x tokens {ops_per_token * n:.0f}")
    assert sum(fwd.fallbacks) == 0 and sum(fwd_dyn.fallbacks) == 0
    # the forward compiles only when the cache moves to a new bucket: the prompt (12) + 64 tokens cross
    # one boundary (64 -> 128 positions)
    assert sum(1 for c in fwd_steady if c) <= 1, fwd.compiles
    # the dynamic cache compiles in the forward at every step; the bucketed one almost never
    assert all(c > 0 for c in fwd_dyn.compiles[3:]), fwd_dyn.compiles
    # far below ops x tokens; inside the forward, below the dynamic cache's per-token rate (generate's own
    # bookkeeping outside the forward is the same for both caches)
    assert sum(buck) <= ops_per_token * n / 10, (sum(buck), ops_per_token * n)
    assert sum(fwd_steady) / len(fwd_steady) < sum(fwd_dyn.compiles[3:]) / len(fwd_dyn.compiles[3:])
