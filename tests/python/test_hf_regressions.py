"""Regressions found running Transformers models on "tpu" as a user would (issue 11), each compared with
the CPU. Tiny random-weight models built here; nothing is downloaded."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

BERT = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32)


def bert_config(**kw):
    return transformers.BertConfig(**BERT, **kw)


# ------------------------------------------------------------------- tied parameters and checkpointing
def test_to_tpu_keeps_tied_parameters():
    # Module._apply swaps each parameter's data in place only when torch._has_compatible_shallow_copy_type
    # says so; c10's default said no for PrivateUse1, so .to("tpu") made a new Parameter per module and
    # untied the MLM head's bias (and decoder weight) from the parameters they share.
    assert torch._has_compatible_shallow_copy_type(torch.zeros(1), torch.zeros(1, device="tpu"))
    assert torch._has_compatible_shallow_copy_type(torch.zeros(1, device="tpu"), torch.zeros(1))
    model = transformers.BertForMaskedLM(bert_config())
    head = model.cls.predictions
    bias, embedding = head.bias, model.bert.embeddings.word_embeddings.weight
    model.to("tpu")
    assert head.decoder.bias is head.bias is bias
    assert head.decoder.weight is model.bert.embeddings.word_embeddings.weight is embedding
    assert bias.device.type == "tpu"
    lin = torch.nn.Linear(3, 2)
    lin.to("tpu").to("cpu")
    assert lin.weight.device.type == "cpu"


@pytest.mark.parametrize("reentrant, input_grads", [(True, False), (False, False), (True, True), (False, True)])
def test_bert_mlm_gradient_checkpointing_grads_match_cpu(reentrant, input_grads):
    cfg = bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    state = transformers.BertForMaskedLM(cfg).state_dict()
    ids = torch.randint(0, cfg.vocab_size, (2, 8))

    def train_step(device):
        model = transformers.BertForMaskedLM(cfg)
        model.load_state_dict(state)
        model.to(device).train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        if input_grads:
            model.enable_input_require_grads()
        out = model(input_ids=ids.to(device), labels=ids.to(device))
        assert out.loss.requires_grad
        out.loss.backward()
        grads = {n: None if p.grad is None else p.grad.cpu() for n, p in model.named_parameters()}
        return out.loss.detach().cpu(), grads

    loss_cpu, grads_cpu = train_step("cpu")
    loss_tpu, grads_tpu = train_step("tpu")
    torch.testing.assert_close(loss_tpu, loss_cpu, rtol=1e-5, atol=1e-5)
    assert grads_tpu.keys() == grads_cpu.keys()
    assert grads_cpu["cls.predictions.bias"] is not None
    for name, g in grads_cpu.items():
        assert (g is None) == (grads_tpu[name] is None), f"{name}: a gradient on one device only"
        if g is not None:
            torch.testing.assert_close(grads_tpu[name], g, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_checkpoint_recompute_replays_tpu_dropout():
    # torch.utils.checkpoint saves and restores the "tpu" generator (torch.tpu.get/set_rng_state) around
    # the recompute, so gradients with dropout equal those of the plain run with the same seed.
    cfg = bert_config(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    torch.manual_seed(0)
    state = transformers.BertForMaskedLM(cfg).state_dict()
    ids = torch.randint(0, cfg.vocab_size, (2, 8), device="tpu")

    def grads(checkpointing):
        model = transformers.BertForMaskedLM(cfg)
        model.load_state_dict(state)
        model.to("tpu").train()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        torch.manual_seed(1)
        model(input_ids=ids, labels=ids).loss.backward()
        return {n: p.grad.cpu() for n, p in model.named_parameters()}

    plain, checkpointed = grads(False), grads(True)
    for name, g in plain.items():
        torch.testing.assert_close(checkpointed[name], g, rtol=0, atol=0, msg=lambda m: f"{name}: {m}")


# ------------------------------------------------------------------------------- device_map offload
@pytest.fixture(scope="module")
def bert_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert")
    torch.manual_seed(0)
    transformers.BertModel(bert_config()).save_pretrained(path)
    ids = torch.randint(0, BERT["vocab_size"], (2, 8))
    with torch.no_grad():
        expected = transformers.BertModel.from_pretrained(path).eval()(input_ids=ids).last_hidden_state
    return path, ids, expected


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(device_map={"embeddings": "tpu", "encoder": "cpu", "pooler": "cpu"}),
        dict(device_map={"embeddings": "cpu", "encoder": "tpu", "pooler": "tpu"}),
        dict(device_map="auto", max_memory={0: 60_000, "cpu": 10**9}),
        dict(device_map={"embeddings": "tpu", "encoder": "disk", "pooler": "cpu"}),  # read back via safetensors
    ],
    ids=["tpu-cpu", "cpu-tpu", "auto", "disk"],
)
def test_bert_device_map_offload_matches_cpu(bert_checkpoint, tmp_path, kwargs):
    path, ids, expected = bert_checkpoint
    model = transformers.BertModel.from_pretrained(path, offload_folder=str(tmp_path), **kwargs).eval()
    placed = set(model.hf_device_map.values())
    assert placed & {"cpu", "disk"} and placed - {"cpu", "disk"}, model.hf_device_map
    with torch.no_grad():
        got = model(input_ids=ids.to("tpu")).last_hidden_state
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_single_device_map_places_like_cpu(bert_checkpoint):
    # A device_map that puts everything on one device dispatches nothing and sets no hf_device_map,
    # on the CPU as on any accelerator (Transformers' behaviour, not a "tpu" gap).
    path, ids, expected = bert_checkpoint
    for device in ("cpu", "tpu"):
        model = transformers.BertModel.from_pretrained(path, device_map=device).eval()
        assert not hasattr(model, "hf_device_map")
        assert model.device.type == device
        with torch.no_grad():
            got = model(input_ids=ids.to(device)).last_hidden_state
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["Bert", "Roberta"])
def test_budgeted_device_map_places_as_on_any_accelerator(tmp_path, name):
    # Transformers' test_cpu_offload form: device_map="auto" with {0: a share of the model, "cpu": twice it}.
    # For these tiny encoders at 50% and 70% every module lands on the CPU, so there is no hf_device_map: the
    # placement Transformers and Accelerate compute for any accelerator, with no device at all (the meta
    # model below), not a "tpu" gap (issue 36). Each budget places the same on "tpu" and loads its values.
    from accelerate import init_empty_weights
    from accelerate.utils import compute_module_sizes
    from transformers.integrations.accelerate import _get_device_map

    config = getattr(transformers, f"{name}Config")(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=4, intermediate_size=37,
                                                    max_position_embeddings=512, type_vocab_size=16)
    cls = getattr(transformers, f"{name}Model")
    torch.manual_seed(0)
    cls(config).save_pretrained(tmp_path)
    with init_empty_weights():
        meta = cls(config)
    size = compute_module_sizes(meta)[""]
    ids = torch.randint(3, 99, (2, 8))
    expected = cls.from_pretrained(tmp_path).eval()(input_ids=ids).last_hidden_state
    split_somewhere = False
    for share in (0.5, 0.7, 0.9):
        budget = {0: int(share * size), "cpu": size * 2}
        want = dict(_get_device_map(meta, "auto", dict(budget), None))
        model = cls.from_pretrained(tmp_path, device_map="auto", max_memory=dict(budget)).eval()
        got = getattr(model, "hf_device_map", None)
        if want == {"": "cpu"}:
            assert got is None and model.device.type == "cpu", (share, got)
        else:
            assert got == want, (share, got, want)
            split_somewhere = True
        with torch.no_grad():
            out = model(input_ids=ids.to(model.device)).last_hidden_state
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert split_somewhere  # at 90% the embeddings go to tpu:0 and the rest to the CPU
