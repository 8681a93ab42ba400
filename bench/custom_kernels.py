"""Custom kernels on "tpu" (torch_pjrt.jax_op): a JAX-written fused RMSNorm + matmul against the same
computation as separate eager ops on "tpu" and as one torch.compile(backend="tpu") graph, and a jax_op's host
cost per call against a cached eager op's. Modes run in interleaved rounds in one process (shared, noisy
machines): read the ratios, not the absolute times.

    python bench/custom_kernels.py [--rounds 5] [--tokens 64] [--hidden 512] [--calls 2000]
"""

import argparse
import statistics
import time

import torch

import torch_pjrt
from torch_pjrt import pallas_examples as pe


def per_call_us(fn, calls):
    """Mean wall time per call over `calls` calls, the device drained before and after, in microseconds."""
    torch.tpu.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.tpu.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def torch_rms_matmul(x, w_norm, w, eps=1e-6):
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return ((normed * w_norm).to(x.dtype) @ w).to(x.dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.tokens, args.hidden)
    w_norm, w = torch.randn(args.hidden), torch.randn(args.hidden, args.hidden) / args.hidden**0.5
    xt, wnt, wt = x.to("tpu"), w_norm.to("tpu"), w.to("tpu")
    compiled = torch.compile(torch_rms_matmul, backend="tpu", fullgraph=True)
    expected = torch_rms_matmul(x, w_norm, w)
    fused_calls = max(args.calls // 10, 50)
    modes = {
        "jax_op (one JAX function)": lambda: pe.rms_norm_matmul(xt, wnt, wt),
        "eager ops on tpu": lambda: torch_rms_matmul(xt, wnt, wt),
        "torch.compile(backend='tpu')": lambda: compiled(xt, wnt, wt),
        "torch CPU eager": lambda: torch_rms_matmul(x, w_norm, w),
    }
    for name, fn in modes.items():  # warm up and check each against the CPU
        torch.testing.assert_close(fn().cpu(), expected, atol=1e-4, rtol=1e-4, msg=name)
    one = torch.ones(16)
    one_t = one.to("tpu")
    add_one = torch_pjrt.jax_op(lambda a: a + 1, name="bench_add_one")
    overhead = {
        "jax_op x + 1 [16]": lambda: add_one(one_t),
        "eager op x + 1 [16] (cached)": lambda: one_t + 1,
    }
    for fn in overhead.values():
        fn()
    times = {k: [] for k in list(modes) + list(overhead)}
    for _ in range(args.rounds):
        for name, fn in modes.items():
            times[name].append(per_call_us(fn, fused_calls))
        for name, fn in overhead.items():
            times[name].append(per_call_us(fn, args.calls))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"RMSNorm + matmul, x[{args.tokens}, {args.hidden}] @ w[{args.hidden}, {args.hidden}], float32; "
          f"medians of {args.rounds} interleaved rounds of {fused_calls} calls")
    base = med["eager ops on tpu"]
    for name in modes:
        print(f"  {name:32s} {med[name]:9.1f} us/call   {base / med[name]:5.2f}x eager ops on tpu")
    print(f"host cost per call, medians of {args.rounds} rounds of {args.calls} calls")
    ref = med["eager op x + 1 [16] (cached)"]
    for name in overhead:
        print(f"  {name:32s} {med[name]:9.1f} us/call   {med[name] / ref:5.2f}x a cached eager op")


if __name__ == "__main__":
    main()
