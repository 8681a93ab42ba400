"""Per-device estimates from deviceless compiles (docs/aot.md): what a step would take on devices that are
not here. Each workload runs on this machine's device with TORCH_PJRT_AOT_TARGETS set, so every program it
runs is also compiled for each target; the step's programs are counted (launches per step), and each
target's time per step is summed over them from XLA's cost analysis of that target's executable:

- roofline: per program max(flops / peak, bytes accessed / memory bandwidth), times its launches per step.
  GPUs: the peak float32 rate and the bandwidth come from the target spec the CUDA plugin embeds (cores x
  FP32 units per core x clock x 2, `memory_bandwidth`); the CUDA plugin gives no cost analysis without a
  device, so a GPU's flops and bytes are those XLA counts for the same program text on the TPU target
  (properties of the program, with the TPU's fusion). TPUs: their own analysis, and published peaks.
- xla: the sum of XLA's own `optimal_seconds` (its performance model of the target), where the plugin
  reports it (libtpu).

Then tokens (or images) per second per target, and with --price the cost per million tokens. --check
compares the method with a device that ran: the same workloads on this machine's CPU plugin with
TORCH_PJRT_HOST_KERNELS=0 (so that XLA:CPU analyses every program: host kernels have no cost model),
its roofline from a peak and a bandwidth measured here, against the step's measured time.

    python bench/estimate.py [--targets h100,b200,tpu-v6e] [--steps 10] [--only train,decode,flux]
                             [--price h100=3.0,b200=6.0,tpu-v6e=2.7] [--check]
Estimates of launch-bound steps (the tiny models' hundreds of small programs) are floors: the roofline
counts no launch or host time.
"""

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--targets", default="h100,b200,tpu-v6e")
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--only", default="train,decode,flux")
ap.add_argument("--price", default="", help="dollars per device hour: h100=3.0,...")
ap.add_argument("--check", action="store_true", help="also the CPU plugin's roofline against its measured step")
ap.add_argument("--cpu-roofline", action="store_true", help=argparse.SUPPRESS)  # the --check child
args = ap.parse_args()

targets = args.targets.split(",")
if "tpu-v6e" not in targets:
    targets.append("tpu-v6e")  # the cost analysis the GPU estimates borrow
os.environ["TORCH_PJRT_AOT_TARGETS"] = ",".join(targets)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import torch  # noqa: E402

import torch_pjrt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
sys.path.insert(0, os.path.dirname(__file__))

# TPU peaks (published: Cloud TPU system architecture pages), bf16 dense and HBM bandwidth. Float32 products
# at full precision take 6 bfloat16 passes on the MXU.
TPU = {"tpu-v4": (275e12, 1.2e12), "tpu-v5e": (197e12, 0.819e12), "tpu-v5p": (459e12, 2.765e12),
       "tpu-v6e": (918e12, 1.64e12), "tpu-v7x": (2307e12, 7.37e12)}


def peaks(target):
    """(float32 flops/s, bytes/s) of a target."""
    kind, device = torch_pjrt.aot.targets()[target]
    if kind == "tpu":
        bf16, bw = TPU[target]
        return bf16 / 6, bw
    spec = torch_pjrt._C._gpu_target_spec(device)

    def field(name):
        return float(re.search(rf"\b{name}: ([0-9.e+]+)", spec).group(1))

    return field("core_count") * field("fpus_per_core") * field("clock_rate_ghz") * 1e9 * 2, field("memory_bandwidth")


def launches():  # by position: the list only grows, and two programs may share a name
    return [p[1] for p in torch_pjrt._C._aot_programs(False)]


def measure(step, steps):
    """(seconds per step, {program: launches per step}, [(program, device cost, target costs)])."""
    for _ in range(3):
        step()
    torch.tpu.synchronize()
    torch_pjrt.aot.report(wait=True)
    before = launches()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.tpu.synchronize()
    seconds = (time.perf_counter() - t0) / steps
    torch_pjrt.aot.report(wait=True)
    programs = torch_pjrt._C._aot_programs(args.cpu_roofline)
    per_step = [(p[1] - (before[i] if i < len(before) else 0)) / steps for i, p in enumerate(programs)]
    return seconds, per_step, [(p[0], p[2], p[3]) for p in programs]


def roofline(cost, peak_flops, bw):
    """None where there is no analysis (a failed compile) or XLA could not count (-1); XLA leaves out
    properties that are zero."""
    if not cost:
        return None
    flops, nbytes = cost.get("flops", 0.0), cost.get("bytes accessed", 0.0)
    if flops < 0 or nbytes < 0:
        return None
    return max(flops / peak_flops, nbytes / bw)


def estimate(per_step, programs, target):
    """(roofline s, xla s or None, programs without an analysis) per step on `target`."""
    peak, bw = peaks(target)
    roof, xla, missing = 0.0, 0.0, 0
    for i, (name, _, costs) in enumerate(programs):
        n = per_step[i]
        if not n:
            continue
        own = costs.get(target, {})
        cost = own if own and own.get("flops", 0) >= 0 else costs.get("tpu-v6e", {})
        r = roofline(cost, peak, bw)
        if r is None:
            missing += 1
            continue
        roof += n * r
        # XLA's model of the target, where it has one for every program of the step (it gives a negative
        # time for programs it does not model)
        xla = xla + n * own.get("optimal_seconds", 0.0) if xla is not None and own.get("optimal_seconds", 0.0) >= 0 else None
    return roof, xla, missing


def workloads():
    from hf_tiny import make_model

    only = args.only.split(",")
    model = make_model("llama")
    if "train" in only:
        from modes import llama_train_fn

        ids = torch.randint(3, 256, (8, 32), generator=torch.Generator().manual_seed(0)).to("tpu")
        train = llama_train_fn(model, "tpu", "compile-tpu")
        yield "tiny llama train step (8 x 32 tokens)", lambda: train(ids, None), 8 * 32, "tokens"
    if "decode" in only:
        from modes import llama_decode_fn

        for batch in (1, 8):
            decode = llama_decode_fn(model, "tpu", "compile-tpu", batch)
            yield f"tiny llama decode step (batch {batch})", lambda d=decode: d(None, None), batch, "tokens"
    if "flux" in only:
        from torch_pjrt import tiny_pipelines

        pipe = tiny_pipelines.flux().to("tpu")
        pipe.transformer.compile()

        def image():
            pipe(prompt="a red cat", height=32, width=32, guidance_scale=3.5, max_sequence_length=16,
                 num_inference_steps=3, generator=torch.Generator().manual_seed(0), output_type="pt")

        yield "tiny flux image (32x32, 3 steps, compiled transformer)", image, 1, "images"


def cpu_peaks():
    """This machine's float32 product rate and memory bandwidth on the CPU plugin, measured."""
    a = torch.randn(1024, 1024, device="tpu")
    x = torch.randn(64 << 20 >> 2, device="tpu")
    rates = []
    for fn, amount in ((lambda: a @ a, 2 * 1024 ** 3), (lambda: x.sum(), x.numel() * 4)):
        fn()
        torch.tpu.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        torch.tpu.synchronize()
        rates.append(amount * 5 / (time.perf_counter() - t0))
    return rates


def main():
    prices = dict((k, float(v)) for k, v in (p.split("=") for p in args.price.split(",") if p))
    shown = [t for t in args.targets.split(",")]
    results = []
    if args.cpu_roofline:
        peak, bw = cpu_peaks()
    for title, step, units, unit in workloads():
        seconds, per_step, programs = measure(step, args.steps)
        row = {"workload": title, "measured_s": seconds, "units": units, "unit": unit,
               "programs_per_step": sum(1 for v in per_step if v)}
        if args.cpu_roofline:
            roof = 0.0
            for i, (name, device_cost, _) in enumerate(programs):
                if per_step[i] and device_cost:
                    r = roofline(device_cost, peak, bw)
                    roof += per_step[i] * (r or 0.0)
            row["cpu_roofline_s"] = roof
            row["cpu_peaks"] = [peak, bw]
        else:
            for t in shown:
                roof, xla, missing = estimate(per_step, programs, t)
                row[t] = {"roofline_s": roof, "xla_s": xla, "unanalysed": missing}
        results.append(row)
    if args.cpu_roofline:
        print("JSON " + json.dumps(results))
        return
    failures = torch_pjrt.aot.report()["failures"]
    print(f"estimates per step ({args.steps} steps measured on {torch.tpu.get_device_name()}; "
          f"{len(failures)} deviceless compile failures)")
    for r in results:
        print(f"\n{r['workload']}: {r['programs_per_step']:.0f} programs a step, here {r['measured_s'] * 1e3:.2f} ms")
        for t in shown:
            e = r[t]
            rate = r["units"] / e["roofline_s"] if e["roofline_s"] else float("inf")
            line = f"  {t:8} roofline {e['roofline_s'] * 1e6:9.1f} us"
            line += f"   xla {e['xla_s'] * 1e6:9.1f} us" if e["xla_s"] else "   xla        n/a"
            line += f"   {rate:12,.0f} {r['unit']}/s"
            if t in prices and r["unit"] == "tokens":
                line += f"   ${prices[t] / 3600 / rate * 1e6:.4f} per million tokens"
            if e["unanalysed"]:
                line += f"   ({e['unanalysed']} programs without an analysis)"
            print(line)
    if args.check:
        env = dict(os.environ, TORCH_PJRT_HOST_KERNELS="0")
        cmd = [sys.executable, __file__, "--cpu-roofline", "--steps", str(args.steps), "--only", args.only,
               "--targets", "tpu-v6e"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("JSON ")]
        if not lines:
            print(out.stdout[-2000:], out.stderr[-2000:])
            return
        print("\ncheck: the CPU plugin (host kernels off, so that XLA analyses every program), roofline from "
              "this machine's measured peaks against the measured step")
        for r in json.loads(lines[0][5:]):
            peak, bw = r["cpu_peaks"]
            print(f"  {r['workload']}: roofline {r['cpu_roofline_s'] * 1e3:.3f} ms, measured "
                  f"{r['measured_s'] * 1e3:.3f} ms ({r['measured_s'] / r['cpu_roofline_s']:.1f}x the roofline; "
                  f"peaks {peak / 1e9:.0f} GFLOP/s, {bw / 1e9:.1f} GB/s)")


main()
