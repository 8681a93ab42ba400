"""What device-side checks cost (issue #36): steps per second of the tiny Llama with checks on (the default)
and off (TORCH_PJRT_DEVICE_CHECKS=0), side by side in one run.

Workloads (bench/modes.py's): the static-cache decode step at batch 1 and 8 (embedding, the cache's
index_copy_, the greedy pick; a sync per step) and the training step (forward, backward, AdamW), in strict
eager, fused eager and torch.compile(backend="tpu"). The setting is read at start, so each measurement runs in
a fresh process; the rounds alternate on / off, and a rate is the median over its rounds.

    python bench/device_checks.py [--steps 30] [--rounds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, torch
sys.path.insert(0, {here!r})
sys.path.insert(0, os.path.join({here!r}, "..", "tests", "python"))
import torch_pjrt
import modes
from hf_tiny import make_model
torch.manual_seed(0)
model = make_model("llama")
ids = torch.randint(3, 256, (8, 32), generator=torch.Generator().manual_seed(0)).to("tpu")
out = {{}}
for mode in ("eager", "fused", "compile-tpu"):
    modes.eager_mode(mode)
    try:
        for batch in (1, 8):
            torch._dynamo.reset()
            step = modes.llama_decode_fn(model, "tpu", mode, batch)
            out[f"decode b{{batch}} {{mode}}"] = modes.steps_per_s(step, None, None, {steps}, torch.tpu.synchronize, 1)
        torch._dynamo.reset()
        step = modes.llama_train_fn(model, "tpu", mode)
        out[f"train {{mode}}"] = modes.steps_per_s(step, ids, None, {steps}, torch.tpu.synchronize, 1)
    finally:
        modes.eager_mode("strict")
out["checks read"] = torch_pjrt.metrics()["device_checks"]["read"]
print(json.dumps(out))
"""


def run(checks, steps):
    env = dict(os.environ, TORCH_PJRT_DEVICE_CHECKS="1" if checks else "0", TORCH_PJRT_CACHE_DIR="")
    p = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, steps=steps)], env=env, capture_output=True,
                       text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rates = {True: [], False: []}
    for _ in range(args.rounds):
        for checks in (True, False):
            rates[checks].append(run(checks, args.steps))
    print(f"{'workload':28s} {'checks on':>12s} {'checks off':>12s} {'on / off':>9s}")
    for key in rates[True][0]:
        if key == "checks read":
            continue
        on = statistics.median(r[key] for r in rates[True])
        off = statistics.median(r[key] for r in rates[False])
        rounds = " ".join(f"{a[key] / b[key]:.2f}" for a, b in zip(rates[True], rates[False]))
        print(f"{key:28s} {on:10.1f}/s {off:10.1f}/s {on / off:8.3f}x   (per round: {rounds})")
    print("codes read per run with checks on:", [r["checks read"] for r in rates[True]],
          "off:", [r["checks read"] for r in rates[False]])


if __name__ == "__main__":
    main()
