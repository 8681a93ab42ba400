"""Leak run: many training steps of a small transformer encoder and many decode steps of a tiny Llama
with a static KV cache, on "tpu". After warm-up, live device buffers, device bytes and the compile count
must stay where they were, and host RSS within a bound.

    python bench/leak_run.py                      # the long run: 10,000 training / 2,000 decode steps
    python bench/leak_run.py --train 300 --decode 200

tests/python/test_leaks.py runs the short version. Prints one line per run with the figures.
"""

import argparse
import gc
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "tests", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import torch_pjrt  # noqa: E402

RSS_BOUND = 64 << 20  # host memory may grow this much after warm-up (allocator caches, Python objects)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def snapshot():
    gc.collect()
    torch.tpu.synchronize()
    m = torch_pjrt.metrics()
    return {"live_buffers": m["live_buffers"], "live_bytes": m["live_bytes"], "compiles": m["compiles"],
            "disk_cache_hits": m["disk_cache_hits"], "rss": rss_bytes()}


def report(name, steps, base, after, out=sys.stdout):
    grew = after["rss"] - base["rss"]
    print(f"{name}: {steps} steps; live buffers {base['live_buffers']} -> {after['live_buffers']}, "
          f"live bytes {base['live_bytes']} -> {after['live_bytes']}, compiles {base['compiles']} -> "
          f"{after['compiles']} (disk hits {base['disk_cache_hits']} -> {after['disk_cache_hits']}), "
          f"RSS {base['rss'] >> 20} -> {after['rss'] >> 20} MiB ({grew / 2**20:+.1f} MiB)", file=out, flush=True)
    return {"steps": steps, "base": base, "after": after, "rss_growth": grew}


def train_encoder(steps, warmup=20):
    from test_training import SmallTransformer

    torch.manual_seed(0)
    model = SmallTransformer().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 50, (4, 12), generator=g).to("tpu"), torch.randint(0, 5, (4,), generator=g).to("tpu"))
               for _ in range(8)]

    def step(i):
        x, y = batches[i % len(batches)]
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    # warm-up syncs as the measured loop does (fused eager cuts its streams at a sync: the cut streams
    # are programs of their own, compiled once)
    for i in range(warmup):
        loss = step(i)
        if i % 5 == 0:
            loss.item()
    del loss
    base = snapshot()
    first = None
    for i in range(steps):
        loss = step(i)
        if i % 500 == 0:
            v = loss.item()  # a sync now and then, as a training loop logs
            first = v if first is None else first
    last = loss.item()
    del loss
    after = snapshot()
    r = report("encoder training", steps, base, after)
    r["loss_first_last"] = (first, last)
    return r


def decode_llama(steps, warmup=8):
    import transformers as tf
    from hf_tiny import make_model

    model = make_model("llama").to("tpu")
    max_len = steps + warmup + 8
    cache = tf.StaticCache(config=model.config, max_cache_len=max_len)
    tok = torch.tensor([[1, 5, 7, 11]], device="tpu")
    # The position lives on the device and advances in place: torch.arange(pos, pos + 1, device="tpu")
    # per step would compile one program per position (arange's start is baked into its program).
    position = torch.tensor([tok.shape[1]], device="tpu")

    def step(ids, cache_position):
        with torch.no_grad():
            out = model(input_ids=ids, past_key_values=cache, cache_position=cache_position, use_cache=True)
        return out.logits[:, -1:].argmax(-1)

    nxt = step(tok, torch.arange(tok.shape[1], device="tpu"))

    def decode(ids):
        out = step(ids, position)
        position.add_(1)
        return out

    for i in range(warmup):  # syncing as the measured loop does (see train_encoder)
        nxt = decode(nxt)
        if i % 3 == 0:
            nxt.item()
    base = snapshot()
    tokens = []
    for i in range(steps):
        nxt = decode(nxt)
        if i % 250 == 0:
            tokens.append(int(nxt.item()))
    after = snapshot()
    return report("llama decode (static cache)", steps, base, after)


def check(r, rss_bound=RSS_BOUND):
    b, a = r["base"], r["after"]
    problems = []
    for k in ("live_buffers", "live_bytes", "compiles"):
        if a[k] != b[k]:
            problems.append(f"{k}: {b[k]} after warm-up, {a[k]} at the end")
    if a["disk_cache_hits"] != b["disk_cache_hits"]:
        problems.append(f"programs loaded from disk after warm-up: {a['disk_cache_hits'] - b['disk_cache_hits']}")
    if r["rss_growth"] > rss_bound:
        problems.append(f"host RSS grew {r['rss_growth'] >> 20} MiB (bound {rss_bound >> 20} MiB)")
    return problems


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", type=int, default=10_000)
    p.add_argument("--decode", type=int, default=2_000)
    args = p.parse_args(argv)
    torch_pjrt.set_fallback_policy("error")
    problems = []
    if args.train:
        problems += check(train_encoder(args.train))
    if args.decode:
        problems += check(decode_llama(args.decode))
    for x in problems:
        print("LEAK:", x)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
