"""Hugging Face Transformers models on "tpu", each checked against the same model on the CPU: tiny random
models saved to safetensors, loaded with ``from_pretrained(path, device_map="tpu")`` and with ``.to("tpu")``.
Float32 logits, greedy ``generate`` tokens, bfloat16 logits, and zero CPU fallbacks in both dtypes."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_pjrt  # noqa: E402

pytest.importorskip("transformers")
from torch_pjrt.hf import BucketedCache  # noqa: E402
from hf_tiny import ENCODERS, MODELS, load, save_model  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")

SEQ = 12
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> folder with config.json and model.safetensors (made once per model)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = save_model(name, tmp_path_factory.mktemp(name))
        return cache[name]

    return get


def _inputs(batch=2, seq=SEQ, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 256, (batch, seq), generator=g)  # no pad/bos/eos inside the prompt
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # the second row is left-padded
    ids[1, :3] = 0
    return ids, mask


def _out(name, model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    return out.last_hidden_state if name in ENCODERS else out.logits


class _Fallbacks:
    """Counts CPU fallbacks of a block (policy 'silent' inside it, so every op that falls back is counted
    and named instead of stopping at the first)."""

    def __init__(self):
        self.counts = {}

    def __enter__(self):
        self._policy = torch_pjrt.get_fallback_policy()
        torch_pjrt.set_fallback_policy("silent")
        self._start = dict(torch_pjrt.metrics()["fallbacks"])
        return self

    def __exit__(self, *exc):
        end = torch_pjrt.metrics()["fallbacks"]
        torch_pjrt.set_fallback_policy(self._policy)
        self.counts = {op: n - self._start.get(op, 0) for op, n in end.items() if n != self._start.get(op, 0)}


@pytest.mark.parametrize("name", MODELS)
def test_float32_device_map(name, saved):
    """from_pretrained(device_map="tpu"): weights land on tpu, logits match CPU, greedy tokens match exactly."""
    path = saved(name)
    cpu = load(name, path)
    with _Fallbacks() as fb:
        tpu = load(name, path, device_map="tpu")
        assert {p.device.type for p in tpu.parameters()} == {"tpu"}
        ids, mask = _inputs()
        got = _out(name, tpu, ids.to("tpu"), mask.to("tpu")).cpu()
        want = _out(name, cpu, ids, mask)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
        if name not in ENCODERS:
            # the CPU runs the default DynamicCache; the device runs torch_pjrt's BucketedCache (same results,
            # far fewer compiles; the default cache on "tpu" is tested in test_hf_generate.py)
            kw = dict(max_new_tokens=NEW_TOKENS, do_sample=False, disable_compile=True)
            want_tokens = cpu.generate(ids, attention_mask=mask, **kw)
            got_tokens = tpu.generate(ids.to("tpu"), attention_mask=mask.to("tpu"),
                                      cache=BucketedCache(tpu.config), **kw).cpu()
            assert want_tokens.shape == (2, SEQ + NEW_TOKENS)  # no row stopped early at eos
            assert torch.equal(got_tokens, want_tokens)
    print(f"\n{name} float32 fallbacks: {fb.counts}")
    assert fb.counts == {}, f"{name}: ops fell back to the CPU in float32: {fb.counts}"


@pytest.mark.parametrize("name", MODELS)
def test_float32_to_device(name, saved):
    """A CPU-loaded model moved with .to("tpu") gives the CPU's logits."""
    cpu = load(name, saved(name))
    ids, mask = _inputs(seed=2)
    want = _out(name, cpu, ids, mask)
    with _Fallbacks() as fb:
        tpu = cpu.to("tpu")
        got = _out(name, tpu, ids.to("tpu"), mask.to("tpu")).cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    assert fb.counts == {}, f"{name}: ops fell back to the CPU: {fb.counts}"


@pytest.mark.parametrize("name", MODELS)
def test_bfloat16(name, saved):
    """bfloat16 weights and activations. The device must be as accurate as the CPU's own bfloat16 run:
    both are compared with the float32 CPU result, and the device's worst error may be at most twice the
    CPU's plus 2**-8 (one bfloat16 rounding of a value near 1). The two bfloat16 runs round at different
    points (XLA keeps fused elementwise chains and matmul/reduction accumulators in float32 and rounds
    once; the CPU rounds after every op), so they are not compared bit for bit; they must still agree
    within rtol 1.6e-2 (torch's bfloat16 default) plus that same absolute margin."""
    path = saved(name)
    ids, mask = _inputs(seed=3)
    ref = _out(name, load(name, path), ids, mask)
    cpu = _out(name, load(name, path, dtype=torch.bfloat16), ids, mask).float()
    with _Fallbacks() as fb:
        tpu_model = load(name, path, dtype=torch.bfloat16, device_map="tpu")
        assert {p.dtype for p in tpu_model.parameters()} == {torch.bfloat16}
        tpu = _out(name, tpu_model, ids.to("tpu"), mask.to("tpu")).cpu().float()
    err_cpu = (cpu - ref).abs().max().item()
    err_tpu = (tpu - ref).abs().max().item()
    print(f"\n{name} bfloat16: max |err| vs float32: cpu {err_cpu:.3e}, tpu {err_tpu:.3e}; fallbacks {fb.counts}")
    assert err_tpu <= 2 * err_cpu + 2**-8, (err_tpu, err_cpu)
    torch.testing.assert_close(tpu, cpu, rtol=1.6e-2, atol=2 * err_cpu + 2**-8)
    assert fb.counts == {}, f"{name}: ops fell back to the CPU in bfloat16: {fb.counts}"


def test_sampling_reproducible(saved):
    """do_sample with a fixed seed gives the same tokens twice on tpu (the device's own random stream)."""
    tpu = load("llama", saved("llama"), device_map="tpu")
    ids, mask = _inputs()
    kw = dict(max_new_tokens=8, do_sample=True, top_k=20, temperature=0.9, disable_compile=True)
    runs = []
    for _ in range(2):
        torch.manual_seed(1234)
        runs.append(tpu.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), **kw).cpu())
    assert torch.equal(runs[0], runs[1])
    torch.manual_seed(4321)
    other = tpu.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), **kw).cpu()
    assert not torch.equal(other, runs[0])  # the seed does steer it
