"""One decode step of a Qwen3-MoE-shaped sparse MoE block (router + experts) on "tpu", with each
Transformers experts implementation (eager: the per-expert loop; batched_mm; grouped_mm) and ours
(ragged_dot), side by side in one run; the same block on torch CPU for reference; and the memory
bandwidth floor: the bytes of expert weights the step must read (the distinct experts its tokens are
routed to) over the machine's copy bandwidth, measured in the same run.

Defaults: 128 experts, top-8, hidden 1024, expert intermediate 384 (half the widths of Qwen3-30B-A3B),
batches 1, 4, 16, 64, float32 and bfloat16. Timings are medians of per-step wall times after warm-up
(the same routing every step, so eager's data-dependent shapes are all compiled). A shared machine is
noisy: compare ratios within one run.

    python bench/moe_decode.py [--dtypes float32,bfloat16] [--batches 1,4,16,64] [--steps 5]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import torch_pjrt  # noqa: E402
import torch_pjrt.moe  # noqa: E402, F401
from transformers import Qwen3MoeConfig  # noqa: E402
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock  # noqa: E402

IMPLS = ["eager", "batched_mm", "grouped_mm", "ragged_dot"]


def step_ms(fn, steps, sync):
    samples = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = fn()  # kept alive: torch.tpu.synchronize() waits for the last op's result while it exists
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
        del out
    return statistics.median(samples)


def copy_bandwidth(nbytes=512 << 20, repeats=5):
    """Bytes moved (read + written) per second by a large host copy: the machine's memory bandwidth."""
    src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return 2 * nbytes / best


def device_bandwidth(nbytes=1 << 30, repeats=5):
    """Bytes read + written per second by an elementwise op on "tpu": the device's memory bandwidth
    (off the CPU plugin, where the weights live in device memory)."""
    x = torch.ones(nbytes // 4, device="tpu")

    def neg():
        y = x.neg()  # kept alive until the device is done with it
        torch.tpu.synchronize()
        return y

    neg()
    return 2 * nbytes / min(_timed(neg) for _ in range(repeats))


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--batches", default="1,4,16,64")
    p.add_argument("--experts", type=int, default=128)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=384)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--no-cpu", action="store_true", help="skip the torch CPU reference")
    args = p.parse_args()
    impls = args.impls.split(",")

    cfg = Qwen3MoeConfig(hidden_size=args.hidden, moe_intermediate_size=args.intermediate,
                         num_experts=args.experts, num_experts_per_tok=args.top_k, norm_topk_prob=True)
    platform = torch.tpu.get_device_properties().platform
    if platform == "cpu":
        bw, what = copy_bandwidth(), "host copy"
    else:
        bw, what = device_bandwidth(), f"{platform} device, elementwise"
    print(f"{args.experts} experts, top-{args.top_k}, hidden {args.hidden}, expert intermediate {args.intermediate}; "
          f"{torch.tpu.get_device_name()} ({platform}); bandwidth {bw / 1e9:.1f} GB/s ({what}, read + write); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    per_expert = 3 * args.hidden * args.intermediate  # gate, up and down projections

    for dtype in [getattr(torch, d) for d in args.dtypes.split(",")]:
        torch.manual_seed(0)
        block = Qwen3MoeSparseMoeBlock(cfg).to(dtype)
        with torch.no_grad():
            for prm in block.parameters():
                prm.normal_(0, 0.02)
        dev = Qwen3MoeSparseMoeBlock(cfg).to(dtype)
        dev.load_state_dict(block.state_dict())
        dev = dev.to("tpu").eval()
        block.eval()
        esize = torch.empty((), dtype=dtype).element_size()
        print(f"\n{dtype}: expert weights {args.experts * per_expert * esize / 1e6:.0f} MB")
        hdr = "batch  experts  floor ms | " + " ".join(f"{i:>11}" for i in impls)
        hdr += " |  cpu eager  cpu grouped | " + " ".join(f"{'x/' + i:>9}" for i in impls if i != "ragged_dot")
        hdr += "  ours/floor"
        print(hdr)
        for batch in [int(b) for b in args.batches.split(",")]:
            x = torch.randn(batch, 1, args.hidden, generator=torch.Generator().manual_seed(batch)).to(dtype)
            xd = x.to("tpu")
            with torch.no_grad():
                _, _, chosen = block.gate(x.view(-1, args.hidden))
            hit = chosen.unique().numel()
            floor_ms = hit * per_expert * esize / bw * 1e3
            times = {}
            want = None
            for impl in impls:
                cfg._experts_implementation = impl
                with torch.no_grad():
                    out = dev(xd).cpu()  # compile
                    for _ in range(2):
                        out = dev(xd)
                    torch.tpu.synchronize()
                    out = out.cpu()
                    times[impl] = step_ms(lambda: dev(xd), args.steps, torch.tpu.synchronize)
                if want is None:
                    want = out.float()
                else:  # every implementation computes the same step
                    err = (out.float() - want).abs().max().item()
                    assert err < (1e-3 if dtype == torch.float32 else 5e-2), f"{impl} differs from {impls[0]}: {err}"
            cpu = {}
            if not args.no_cpu:
                for impl in ["eager", "grouped_mm"]:
                    cfg._experts_implementation = impl
                    with torch.no_grad():
                        block(x)
                        cpu[impl] = step_ms(lambda: block(x), args.steps, lambda: None)
            line = f"{batch:5d}  {hit:7d}  {floor_ms:8.2f} | " + " ".join(f"{times[i]:9.2f}ms" for i in impls)
            line += f" | {cpu.get('eager', float('nan')):8.2f}ms {cpu.get('grouped_mm', float('nan')):9.2f}ms | "
            if "ragged_dot" in times:
                ours = times["ragged_dot"]
                line += " ".join(f"{times[i] / ours:8.1f}x" for i in impls if i != "ragged_dot")
                line += f"  {ours / floor_ms:9.1f}x  ({hit * per_expert * esize / ours / 1e6:.0f} GB/s)"
            print(line, flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    print("x/impl: that implementation's step time over ours (ragged_dot), both on tpu; ours/floor: our step "
          "time over the bandwidth floor (and the expert-weight bytes it read per second)")


if __name__ == "__main__":
    main()
