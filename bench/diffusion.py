"""Seconds per denoising step of Diffusers pipelines, each mode side by side in one run: "tpu" strict eager,
fused eager and compiled (`denoiser.compile()`, which torch_pjrt routes to backend "tpu"), against torch CPU
eager and torch.compile(inductor) on the CPU. Pipelines (torch_pjrt.tiny_pipelines, seeded random weights):
the tiny Flux at 32x32 and a UNet2D of a few million parameters at 64x64 with DDIM. Then the first pipeline
call in a fresh process, with an empty and with a warm on-disk program cache.

    python bench/diffusion.py [--rounds 3] [--only flux|unet] [--no-cold]

A step's time is the difference between a call of `--long` steps and one of `--short` steps, divided by the
difference, so the text encoders, the VAE and the call's set-up cancel out. The modes are measured in rounds
(each round times every mode once, in turn; a mode's figure is its median, its rounds follow in brackets):
the shared machines drift by 10-30% over minutes, and rounds spread a slow stretch over every mode.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import torch_pjrt  # noqa: E402
from torch_pjrt import tiny_pipelines  # noqa: E402

MODES = ["tpu strict", "tpu fused", "tpu compiled", "cpu eager", "cpu inductor"]

PIPELINES = {
    # name: (builder, call arguments, the denoiser's attribute)
    "flux": (lambda: tiny_pipelines.flux(),
             dict(prompt="a red cat", height=32, width=32, guidance_scale=3.5, max_sequence_length=16),
             "transformer"),
    "unet": (lambda: tiny_pipelines.ddim(size=64, channels=(64, 128)), dict(batch_size=1), "unet"),
}


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def prepare(name, mode):
    build, kwargs, denoiser = PIPELINES[name]
    pipe = build()
    device = mode.split()[0]
    pipe.to(device)
    if mode in ("tpu compiled", "cpu inductor"):
        getattr(pipe, denoiser).compile()  # inductor; torch_pjrt routes a graph on tpu tensors to backend "tpu"

    def call(steps):
        old = torch_pjrt.get_eager_mode()
        torch_pjrt.set_eager_mode("fused" if mode == "tpu fused" else "strict")
        try:
            generator = torch.Generator().manual_seed(0)
            t0 = time.perf_counter()
            out = pipe(num_inference_steps=steps, generator=generator, output_type="np", **kwargs)
            sync(device)
            return time.perf_counter() - t0, out.images
        finally:
            torch_pjrt.set_eager_mode(old)

    return call


def per_step(call, short, long):
    t_short, _ = call(short)
    t_long, _ = call(long)
    return (t_long - t_short) / (long - short)


def bench(name, rounds, short, long):
    calls = {}
    for mode in MODES:
        calls[mode] = prepare(name, mode)
        for steps in (short, long):  # warm: compiles, autotuning, the schedules' programs
            calls[mode](steps)
    samples = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            samples[mode].append(per_step(calls[mode], short, long))
    # the images agree (the same CPU generator's latents everywhere)
    ref = calls["cpu eager"](short)[1]
    worst = max(float(abs(calls[m](short)[1] - ref).max()) for m in MODES if m != "cpu eager")
    base = statistics.median(samples["cpu eager"])
    print(f"\n== {name}: seconds per denoising step (median of {rounds} rounds); images vs cpu eager: "
          f"max abs diff {worst:.1e} ==")
    for mode in MODES:
        med = statistics.median(samples[mode])
        rounds_text = ", ".join(f"{s * 1e3:.1f}" for s in samples[mode])
        print(f"  {mode:<14} {med * 1e3:8.2f} ms   {base / med:5.2f}x cpu eager   [{rounds_text}] ms")
    inductor = statistics.median(samples["cpu inductor"])
    print(f"  tpu compiled vs cpu inductor: {inductor / statistics.median(samples['tpu compiled']):.2f}x")


COLD = """
import time, torch, torch_pjrt
from torch_pjrt import tiny_pipelines
t0 = time.perf_counter()
pipe = tiny_pipelines.{builder}.to("tpu")
out = pipe(num_inference_steps=2, generator=torch.Generator().manual_seed(0), output_type="np", **{kwargs!r})
torch.tpu.synchronize()
m = torch_pjrt.metrics()
print("COLD", time.perf_counter() - t0, m["compiles"], m["disk_cache_hits"], m["compile_seconds"])
"""

COLD_BUILDERS = {"flux": ("flux()", PIPELINES["flux"][1]),
                 "unet": ("ddim(size=64, channels=(64, 128))", PIPELINES["unet"][1])}


def cold_start(names):
    print("\n== first pipeline call in a fresh process (build, move to tpu, 2 steps) ==")
    for name in names:
        builder, kwargs = COLD_BUILDERS[name]
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCH_PJRT_CACHE_DIR=cache)
            for label in ("empty cache", "warm cache"):
                out = subprocess.run([sys.executable, "-c", COLD.format(builder=builder, kwargs=kwargs)], env=env,
                                     check=True, capture_output=True, text=True)
                line = [x for x in out.stdout.splitlines() if x.startswith("COLD ")][-1].split()
                seconds, compiles, disk, compile_s = float(line[1]), int(line[2]), int(line[3]), float(line[4])
                print(f"  {name:<5} {label:<12} {seconds:6.2f} s   compiled {compiles:4d} ({compile_s:.2f} s)   "
                      f"from disk {disk:4d}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--short", type=int, default=2)
    p.add_argument("--long", type=int, default=10)
    p.add_argument("--only", choices=list(PIPELINES))
    p.add_argument("--no-cold", action="store_true")
    a = p.parse_args()
    names = [a.only] if a.only else list(PIPELINES)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; device: {torch.tpu.get_device_name()}")
    for name in names:
        bench(name, a.rounds, a.short, a.long)
    if not a.no_cold:
        cold_start(names)


if __name__ == "__main__":
    main()
