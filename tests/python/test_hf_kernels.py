"""Hugging Face Kernels on "tpu": a kernel repository written by the test on local disk, with a "tpu" build
variant whose layers are an RMSNorm made with torch_pjrt.jax_op and MoE experts through our ragged dot,
replaces those layers of a tiny Llama and a tiny Qwen3-MoE (Transformers' set_use_kernels and
from_pretrained(use_kernels=True)); logits and greedy tokens against the same models on the CPU."""

import json
import os

import pytest
import torch

from compare import assert_same
from hf_tiny import load, save_model

pytest.importorskip("jax")
kernels = pytest.importorskip("kernels")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

_LAYERS = '''
import jax
import jax.numpy as jnp
import torch

import torch_pjrt
from torch_pjrt.moe import ragged_dot_experts_forward

CALLS = {"RMSNorm": 0, "RaggedExperts": 0}


@torch_pjrt.jax_op(name="kernel_rms_norm")
def rms_norm(x, weight, eps):
    xf = x.astype(jnp.float32)
    normed = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return weight * normed.astype(x.dtype)


class RMSNorm(torch.nn.Module):
    """Transformers' RMSNorm forward as one JAX-written program (self is the model's own norm module)."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        CALLS["RMSNorm"] += 1
        return rms_norm(hidden_states, self.weight, float(self.variance_epsilon))


class RaggedExperts(torch.nn.Module):
    """The MoE experts through torch.ops.torch_pjrt.ragged_dot: sorted tokens, two ragged dots."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
        CALLS["RaggedExperts"] += 1
        return ragged_dot_experts_forward(self, hidden_states, top_k_index, top_k_weights)
'''


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernels") / "tpu-layers"
    variant = root / "build" / "torch-tpu"
    variant.mkdir(parents=True)
    (variant / "metadata.json").write_text(json.dumps({
        "id": "tpu_layers", "name": "tpu-layers", "version": 1, "license": "Apache-2.0", "python-depends": [],
        "backend": {"type": "tpu"}}))
    (variant / "__init__.py").write_text("from . import layers\n")
    (variant / "layers.py").write_text(_LAYERS)
    return root


@pytest.fixture(scope="module")
def experts_kernelizable():
    """Transformers 5.24 names no hub layer for the MoE experts: give Qwen3MoeExperts one (kernels'
    documented way), for this module's tests only."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

    had = "kernel_layer_name" in Qwen3MoeExperts.__dict__
    old = Qwen3MoeExperts.__dict__.get("kernel_layer_name")
    kernels.replace_kernel_forward_from_hub(Qwen3MoeExperts, "Qwen3MoeExperts")
    yield
    if had:
        Qwen3MoeExperts.kernel_layer_name = old
    else:
        del Qwen3MoeExperts.kernel_layer_name


def _calls(module, layer):
    fn = module.forward
    assert getattr(fn, "__func__", None) is not None and fn.__func__.__qualname__ == f"{layer}.forward", (
        f"{type(module).__name__} was not kernelized: its forward is {fn}")
    return fn.__func__.__globals__["CALLS"]


def _same_as_cpu(name, path, model):
    cpu = load(name, path)
    ids = torch.randint(3, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = cpu(ids).logits
        got = model(ids.to("tpu")).logits
    assert_same(got, expected, atol=1e-4, rtol=1e-4)
    prompt = ids[:1]
    want = cpu.generate(prompt, max_new_tokens=8, do_sample=False)
    have = model.generate(prompt.to("tpu"), max_new_tokens=8, do_sample=False)
    assert have.cpu().tolist() == want.tolist()


def test_llama_set_use_kernels(repo, tmp_path):
    from transformers import KernelConfig

    path = save_model("llama", tmp_path / "llama")
    model = load("llama", path, device_map="tpu")
    model.set_use_kernels(True, KernelConfig({"RMSNorm": f"{repo}:RMSNorm"}, use_local_kernel=True))
    calls = _calls(model.model.norm, "RMSNorm")
    before = calls["RMSNorm"]
    _same_as_cpu("llama", path, model)
    assert calls["RMSNorm"] > before  # the kernel ran (5 norms per forward)


def test_llama_from_pretrained_use_kernels(repo, tmp_path, monkeypatch):
    from transformers import KernelConfig

    monkeypatch.setenv("LOCAL_KERNELS", f"my-org/tpu-layers={repo}")  # the hub id served from local disk
    path = save_model("llama", tmp_path / "llama")
    model = load("llama", path, device_map="tpu", use_kernels=True,
                 kernel_config=KernelConfig({"RMSNorm": "my-org/tpu-layers:RMSNorm"}))
    calls = _calls(model.model.layers[0].input_layernorm, "RMSNorm")
    before = calls["RMSNorm"]
    _same_as_cpu("llama", path, model)
    assert calls["RMSNorm"] > before


def test_qwen3_moe_experts_and_norms(repo, tmp_path, experts_kernelizable):
    from transformers import KernelConfig

    path = save_model("qwen3_moe", tmp_path / "qwen3_moe")
    model = load("qwen3_moe", path, device_map="tpu")
    model.set_use_kernels(True, KernelConfig({"RMSNorm": f"{repo}:RMSNorm", "Qwen3MoeExperts": f"{repo}:RaggedExperts"},
                                             use_local_kernel=True))
    calls = _calls(model.model.layers[0].mlp.experts, "RaggedExperts")
    _calls(model.model.norm, "RMSNorm")
    before = dict(calls)
    _same_as_cpu("qwen3_moe", path, model)
    assert calls["RaggedExperts"] > before["RaggedExperts"] and calls["RMSNorm"] > before["RMSNorm"]


def test_qwen3_moe_from_pretrained_use_kernels(repo, tmp_path, monkeypatch, experts_kernelizable):
    from transformers import KernelConfig

    monkeypatch.setenv("LOCAL_KERNELS", f"my-org/tpu-layers={repo}")
    path = save_model("qwen3_moe", tmp_path / "qwen3_moe")
    model = load("qwen3_moe", path, device_map="tpu", use_kernels=True,
                 kernel_config=KernelConfig({"Qwen3MoeExperts": "my-org/tpu-layers:RaggedExperts"}))
    calls = _calls(model.model.layers[1].mlp.experts, "RaggedExperts")
    before = calls["RaggedExperts"]
    _same_as_cpu("qwen3_moe", path, model)
    assert calls["RaggedExperts"] > before
