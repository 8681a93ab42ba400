"""Transformers and Accelerate integration on "tpu": device detection, TrainingArguments and Trainer,
Accelerate's memory helpers and split device maps, caching_allocator_warmup, generate's auto-compile, and
the TRANSFORMERS_TEST_DEVICE_SPEC file. Numbers are checked against the CPU."""

import importlib.util
import os
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_pjrt  # noqa: E402

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from hf_tiny import load, make_model, save_model  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")


def test_is_torch_tpu_available_without_a_torch_tpu_module():
    """Transformers asks torch.accelerator for the current accelerator; no module named torch_tpu is
    involved (none is installed or aliased by torch_pjrt)."""
    from transformers.utils import is_torch_tpu_available
    from transformers.utils.import_utils import get_current_accelerator

    assert is_torch_tpu_available() and is_torch_tpu_available(check_device=True)
    assert get_current_accelerator().type == "tpu"
    assert "torch_tpu" not in sys.modules and importlib.util.find_spec("torch_tpu") is None


def test_training_arguments_select_tpu(tmp_path):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    assert args.device == torch.device("tpu", 0)
    assert TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True).device.type == "cpu"


class _Data(torch.utils.data.Dataset):
    def __init__(self, n=20, seq=16):
        g = torch.Generator().manual_seed(7)
        self.ids = torch.randint(3, 256, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.ids[i]}


def _train(tmp_path, use_cpu):
    from transformers import Trainer, TrainingArguments

    losses = []

    class Recording(Trainer):
        def training_step(self, *a, **kw):
            loss = super().training_step(*a, **kw)
            losses.append(loss.item())
            return loss

    model = make_model("llama")
    model.train()
    args = TrainingArguments(output_dir=str(tmp_path / ("cpu" if use_cpu else "tpu")), use_cpu=use_cpu,
                             max_steps=5, per_device_train_batch_size=4, learning_rate=1e-3,
                             lr_scheduler_type="linear", warmup_steps=1, weight_decay=0.01, seed=0, data_seed=0,
                             logging_steps=1, report_to=[], save_strategy="no", dataloader_num_workers=0,
                             disable_tqdm=True)
    trainer = Recording(model=model, args=args, train_dataset=_Data())
    trainer.train()
    return losses, trainer.model, args


def test_trainer_five_steps_match_cpu(tmp_path):
    cpu_losses, cpu_model, _ = _train(tmp_path, use_cpu=True)
    before = torch_pjrt.metrics()["fallback_total"]
    tpu_losses, tpu_model, args = _train(tmp_path, use_cpu=False)
    assert args.device.type == "tpu" and next(tpu_model.parameters()).device.type == "tpu"
    print(f"\ntrainer losses cpu {cpu_losses}\n               tpu {tpu_losses}; optimizer {args.optim}")
    assert len(tpu_losses) == len(cpu_losses) == 5
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=0, atol=1e-4)
    for (name, a), b in zip(tpu_model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=0, atol=1e-4, msg=name)
    assert torch_pjrt.metrics()["fallback_total"] == before


def test_accelerate_memory_helpers_and_split_device_map(tmp_path):
    from accelerate import PartialState
    from accelerate.utils import get_max_memory, infer_auto_device_map

    assert PartialState().device.type == "tpu"
    free, total = torch.tpu.mem_get_info(0)
    mem = get_max_memory()
    assert set(mem) == {0, "cpu"} and 0 < mem[0] <= total
    assert get_max_memory({0: "300KB", "cpu": "1GB"}) == {0: 300 * 1000, "cpu": 10**9}
    model = make_model("llama")  # ~420 KB of float32 weights
    device_map = infer_auto_device_map(model, max_memory={0: "300KB", "cpu": "1GB"})
    assert set(device_map.values()) == {0, "cpu"}, device_map
    assert device_map["model.embed_tokens"] == 0
    # load with that budget: the first modules on tpu:0, the rest on the CPU behind Accelerate's hooks
    path = save_model("llama", tmp_path)
    split = load("llama", path, device_map="auto", max_memory={0: "300KB", "cpu": "1GB"})
    assert set(split.hf_device_map.values()) == {0, "cpu"}, split.hf_device_map
    assert split.model.embed_tokens.weight.device.type == "tpu"
    ids = torch.randint(3, 256, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = split(ids.to("tpu")).logits.cpu()
        want = model(ids).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    # device_map="auto" with no budget puts the whole model on the device
    whole = load("llama", path, device_map="auto")
    assert {p.device.type for p in whole.parameters()} == {"tpu"}


def test_caching_allocator_warmup():
    """Transformers' warm-up does torch.empty(model bytes / 2, float16, device="tpu") and drops it. PJRT
    allocates one buffer per tensor (there is no caching pool to warm), and an empty tensor gets its device
    buffer only when first written, so the warm-up runs, costs nothing and leaves nothing behind. Loading
    afterwards still works."""
    from transformers.modeling_utils import caching_allocator_warmup

    model = make_model("llama")
    torch.tpu.synchronize()
    start = torch.tpu.memory_allocated()
    expanded = {name: torch.device("tpu") for name, _ in model.named_parameters()}  # as from_pretrained makes it
    caching_allocator_warmup(model, expanded, None)
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() <= start + 4096
    moved = model.to("tpu")
    assert torch.tpu.memory_allocated() >= start + sum(p.numel() * 4 for p in moved.parameters())


def test_generate_auto_compile_static_cache():
    """With a static cache, generate on "tpu" torch.compiles the decode step with the Dynamo backend
    "tpu" (modeling_utils._default_compile_config). Its tokens must equal the CPU's."""
    from transformers import GenerationConfig

    cpu = make_model("llama")
    tpu = make_model("llama").to("tpu")
    cfg = tpu._default_compile_config()
    assert cfg.backend == "tpu" and cfg.dynamic is False
    ids = torch.randint(3, 256, (1, 8), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, cache_implementation="static")
    want = cpu.generate(ids, attention_mask=torch.ones_like(ids), disable_compile=True, **kw)
    gen = GenerationConfig(**tpu.generation_config.to_dict())
    assert not gen.disable_compile
    got = tpu.generate(ids.to("tpu"), attention_mask=torch.ones_like(ids).to("tpu"), generation_config=gen, **kw)
    assert torch.equal(got.cpu(), want)
    assert getattr(tpu, "_compiled_call", None) is not None  # the compiled path was taken


def test_transformers_test_device_spec(tmp_path):
    """The spec file loads the way transformers.testing_utils loads it and points its tables at torch.tpu."""
    env = dict(os.environ, TRANSFORMERS_TEST_DEVICE_SPEC="torch_pjrt_spec.py", TRANSFORMERS_TEST_DEVICE="tpu")
    subprocess.run([sys.executable, "-m", "torch_pjrt", "transformers-spec", str(tmp_path)], check=True,
                   capture_output=True)
    assert (tmp_path / "torch_pjrt_spec.py").is_file()
    code = (
        "import torch, transformers.testing_utils as t\n"
        "assert t.torch_device == 'tpu', t.torch_device\n"
        "assert t.BACKEND_MANUAL_SEED['tpu'] is torch.tpu.manual_seed\n"
        "assert t.BACKEND_EMPTY_CACHE['tpu'] is torch.tpu.empty_cache\n"
        "assert t.BACKEND_DEVICE_COUNT['tpu'] is torch.tpu.device_count\n"
        "t.backend_manual_seed('tpu', 0); a = torch.randn(3, device='tpu')\n"
        "t.backend_manual_seed('tpu', 0); assert torch.equal(a.cpu(), torch.randn(3, device='tpu').cpu())\n"
        "t.backend_empty_cache('tpu'); assert t.backend_device_count('tpu') >= 1\n"
        "print('spec ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "spec ok" in out.stdout, out.stderr[-3000:]
