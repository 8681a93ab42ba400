"""Steps per second of one model and input under each execution mode, side by side in one run:
strict eager on "tpu", torch.compile(backend="tpu") on "tpu", torch CPU eager and torch.compile(inductor)
on the CPU. Workloads: a training step (forward, backward, AdamW) of an MLP and of the small transformer
encoder of tests/python/test_training.py, and an inference step.

    python bench/modes.py [--steps 30]

Not yet here (issue 7 item 4): fused eager (not built yet), the tiny-Llama training and decode steps, the
JAX/jax.jit reference (jax is not installed) and the cold-start measurement.
"""

import argparse
import copy
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from test_training import MLP, SmallTransformer, data  # noqa: E402

import torch_pjrt  # noqa: E402, F401


def train_step_fn(model, device, mode):
    model = copy.deepcopy(model).to(device)
    fwd = model
    if mode == "compile-tpu":
        fwd = torch.compile(model, backend="tpu")
    elif mode == "inductor":
        fwd = torch.compile(model, backend="inductor")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x, y):
        loss = nn.functional.cross_entropy(fwd(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def infer_step_fn(model, device, mode):
    # train mode (both models have no dropout): eval mode would send the encoder down PyTorch's fused
    # fast path (aten::_transformer_encoder_layer_fwd), which has no lowering row yet
    model = copy.deepcopy(model).to(device)
    fwd = model
    if mode == "compile-tpu":
        fwd = torch.compile(model, backend="tpu")
    elif mode == "inductor":
        fwd = torch.compile(model, backend="inductor")

    def step(x, y):
        with torch.no_grad():
            return fwd(x)

    return step


def steps_per_s(step, x, y, steps, sync):
    for _ in range(3):  # warm up: compiles
        step(x, y)
    sync()
    samples = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            out = step(x, y)
        out.detach().cpu()
        sync()
        samples.append(steps / (time.perf_counter() - t0))
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cpu-threads", type=int, default=1,
                        help="torch CPU threads (1: on a shared machine, spinning OpenMP workers distort CPU eager)")
    args = parser.parse_args()
    torch.set_num_threads(args.cpu_threads)
    modes = [("strict eager tpu", "tpu", "eager"), ("compile(tpu)", "tpu", "compile-tpu"),
             ("torch CPU eager", "cpu", "eager"), ("inductor CPU", "cpu", "inductor")]
    for name, factory, kind in (("mlp", MLP, "mlp"), ("transformer", SmallTransformer, "transformer")):
        torch.manual_seed(0)
        model = factory()
        x, y = data(kind, 1)[0]
        for what, make in (("train step", train_step_fn), ("inference", infer_step_fn)):
            rates = {}
            for label, device, mode in modes:
                sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
                torch._dynamo.reset()
                rates[label] = steps_per_s(make(model, device, mode), x.to(device), y.to(device), args.steps, sync)
            base = rates["strict eager tpu"]
            print(f"{name} {what}:")
            for label, r in rates.items():
                print(f"  {label:18s} {r:9.1f} steps/s   {r / base:6.2f}x strict eager")


if __name__ == "__main__":
    main()
