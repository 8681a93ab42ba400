"""Eager op speed on "tpu" against torch CPU eager, one op at a time, side by side in one run: the ops a
transformer or CNN forward spends its time in, at the sizes of a small model's prefill (1024 tokens of
width 1024, a 32000-token vocabulary, 16 heads of 512 x 64, a 64-channel 56 x 56 image). Each timing is the
median of per-call wall times after warm-up, the "tpu" one including torch.tpu.synchronize() (one program
and its wait per call: a lower bound on what the op adds to a model, which does not wait per op). A shared
machine is noisy: compare the ratios within one run.

    python bench/ops.py [--dtype float32|bfloat16] [--only linear,softmax,...] [--repeats 10]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import torch_pjrt  # noqa: F401


def median_ms(fn, sync, repeats):
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
        del out
    return statistics.median(samples)


def inputs(dtype):
    g = torch.Generator().manual_seed(0)
    T, H, V = 1024, 1024, 32000
    t = dict(x=torch.randn(T, H, generator=g), w=torch.randn(H, H, generator=g), w4=torch.randn(4 * H, H, generator=g),
             b=torch.randn(H, generator=g), logits=torch.randn(64, V, generator=g),
             q=torch.randn(1, 16, 512, 64, generator=g), ids=torch.randint(0, V, (T,), generator=g),
             emb=torch.randn(V, H, generator=g), img=torch.randn(8, 64, 56, 56, generator=g),
             cw=torch.randn(64, 64, 3, 3, generator=g), mask=torch.rand(T, H, generator=g) > 0.5)
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in t.items()}


OPS = {
    "linear": lambda c: F.linear(c["x"], c["w"], c["b"]),
    "linear 4x wide": lambda c: F.linear(c["x"], c["w4"]),
    "matmul": lambda c: c["x"] @ c["w"],
    "softmax": lambda c: c["x"].softmax(-1),
    "log_softmax (vocab)": lambda c: F.log_softmax(c["logits"], -1),
    "cross_entropy (vocab)": lambda c: F.cross_entropy(c["logits"], c["ids"][:64]),
    "layer_norm": lambda c: F.layer_norm(c["x"], (c["x"].shape[-1],), c["b"], c["b"]),
    "rms_norm (HF)": lambda c: c["x"] * torch.rsqrt(c["x"].pow(2).mean(-1, keepdim=True) + 1e-6) * c["b"],
    "gelu": lambda c: F.gelu(c["x"]),
    "gelu tanh": lambda c: F.gelu(c["x"], approximate="tanh"),
    "silu": lambda c: F.silu(c["x"]),
    "add": lambda c: c["x"] + c["x"],
    "mul broadcast": lambda c: c["x"] * c["b"],
    "embedding": lambda c: F.embedding(c["ids"], c["emb"]),
    "cat": lambda c: torch.cat([c["x"], c["x"]], -1),
    "t().contiguous()": lambda c: c["x"].t().contiguous(),
    "topk 50 (vocab)": lambda c: c["logits"].topk(50, -1),
    "sort (vocab)": lambda c: c["logits"].sort(-1),
    "cumsum": lambda c: c["x"].cumsum(-1),
    "argmax (vocab)": lambda c: c["logits"].argmax(-1),
    "amax": lambda c: c["x"].amax(-1),
    "where": lambda c: torch.where(c["mask"], c["x"], 0.0),
    "sdpa causal": lambda c: F.scaled_dot_product_attention(c["q"], c["q"], c["q"], is_causal=True),
    "q @ k^T": lambda c: c["q"] @ c["q"].transpose(-1, -2),
    "conv2d 3x3": lambda c: F.conv2d(c["img"], c["cw"], padding=1),
    "max_pool2d": lambda c: F.max_pool2d(c["img"], 2),
    "batch_norm": lambda c: F.batch_norm(c["img"], None, None, training=True),
    "sum": lambda c: c["x"].sum(),
    "mean(-1)": lambda c: c["x"].mean(-1),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="float32")
    p.add_argument("--only", default=None, help="comma-separated op names")
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    dtype = getattr(torch, args.dtype)
    cpu = inputs(dtype)
    tpu = {k: v.to("tpu") for k, v in cpu.items()}
    names = args.only.split(",") if args.only else list(OPS)
    print(f"{args.dtype}; ms per call (median of {args.repeats}); tpu: {torch.tpu.get_device_name()}")
    print(f"{'op':<24}{'torch CPU':>10}{'tpu':>10}{'tpu/CPU':>9}")
    for name in names:
        f = OPS[name]
        c = median_ms(lambda: f(cpu), lambda: None, args.repeats)
        t = median_ms(lambda: f(tpu), torch.tpu.synchronize, args.repeats)
        print(f"{name:<24}{c:10.3f}{t:10.3f}{t / c:8.1f}x", flush=True)


if __name__ == "__main__":
    main()
