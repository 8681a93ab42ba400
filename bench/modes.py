"""Steps per second of one model and input under each execution mode, side by side in one run:
strict eager on "tpu", fused eager on "tpu" (torch_pjrt.set_eager_mode("fused")), torch.compile(backend="tpu")
on "tpu", torch CPU eager and torch.compile(inductor) on the CPU, and for the tiny Llama the same model
written in JAX and jax.jit-ed (bench/jax_llama.py, CPU backend; skipped with a note when jax is not
importable). Workloads: a training step (forward, backward, AdamW) of an MLP, of the small transformer
encoder of tests/python/test_training.py and of the tiny Llama of tests/python/hf_tiny.py; an inference
step of the first two; a static-cache decode step of the tiny Llama at batch 1 and 8. Then cold start:
process start to the tiny Llama's first logits on "tpu", with an empty and with a warm on-disk program
cache.

    python bench/modes.py [--steps 30] [--rounds 3] [--only llama]

The modes are measured in rounds: each round builds and warms every mode's step afresh and times one sample
of it, in turn, and a mode's rate is its median over the rounds (its rounds' rates follow in brackets). The
machines we share drift by 10-30% over minutes; in rounds, a slow stretch lowers one sample of each mode it
falls on instead of every sample of one mode, which would move that mode's ratios alone.
"""

import argparse
import copy
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
from test_training import MLP, SmallTransformer, data  # noqa: E402

import torch_pjrt  # noqa: E402


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


def eager_mode(mode):
    """The tpu eager mode a benchmark mode runs under (fused eager: "fused"; every other: strict)."""
    torch_pjrt.set_eager_mode("fused" if mode == "fused" else "strict")


MIN_SAMPLE_S = 0.25


def steps_per_s(step, x, y, steps, sync, samples=3):
    def done(out):
        if hasattr(out, "block_until_ready"):
            out.block_until_ready()
        else:
            out.detach().cpu()
        sync()

    # the garbage of the modes measured before this one (models, caches, graphs in reference cycles) is
    # collected now, not by a collection inside this mode's timed samples
    gc.collect()
    for _ in range(2):  # warm up: compiles, and fused eager's streams of a whole sample (compile, first run)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = step(x, y)
        done(out)
    # a sample lasts at least MIN_SAMPLE_S: a fast step (a decode step of 0.1-0.2 ms) timed over a few
    # milliseconds weighs the final drain and the machine's noise more than the steps
    steps = max(steps, int(MIN_SAMPLE_S * steps / (time.perf_counter() - t0)))
    rates = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(steps):
            out = step(x, y)
        done(out)
        rates.append(steps / (time.perf_counter() - t0))
    return statistics.median(rates)


def in_rounds(candidates, steps, rounds):
    """{label: [rate of each round]} of candidates (label, device, mode, make), make() giving (step, x, y):
    each round builds, warms up and times every candidate once, in order."""
    rates = {label: [] for label, _, _, _ in candidates}
    for _ in range(rounds):
        for label, device, mode, make in candidates:
            torch._dynamo.reset()
            sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
            eager_mode(mode)
            try:
                step, x, y = make()
                rates[label].append(steps_per_s(step, x, y, steps, sync, samples=1))
            finally:
                eager_mode("strict")
    return rates


def compiled(model, mode):
    if mode == "compile-tpu":
        return torch.compile(model, backend="tpu")
    if mode == "inductor":
        return torch.compile(model, backend="inductor")
    return model


def llama_train_fn(model, device, mode):
    model = copy.deepcopy(model).to(device).train()
    fwd = compiled(model, mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # compiled modes compile the optimizer's step too, as jax.jit does the whole step
    opt_step = compiled(opt.step, mode)

    def step(x, y):
        loss = fwd(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt_step()
        return loss

    return step


def llama_decode_fn(model, device, mode, batch):
    from transformers import StaticCache

    model = copy.deepcopy(model).to(device)
    cache = StaticCache(config=model.config, max_cache_len=256)

    def next_token(tok, pos):  # the step jax.jit compiles: the forward and the greedy pick
        logits = model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits
        return logits[:, -1:].argmax(-1)

    def start_at(pos):  # Transformers' StaticCache writes at its own counter, not at cache_position
        for layer in cache.layers:
            layer.cumulative_length.fill_(pos)

    fwd = compiled(next_token, mode)
    state = {"tok": torch.randint(3, 256, (batch, 1)).to(device), "pos": 16}
    start_at(16)

    def step(x, y):
        pos = torch.tensor([state["pos"]], device=device)
        with torch.no_grad():
            state["tok"] = fwd(state["tok"], pos)
        state["pos"] = 16 + (state["pos"] - 15) % 200  # positions 16..215 of the 256, over and over
        if state["pos"] == 16:
            start_at(16)
        return state["tok"]

    return step


def jax_llama_fns(model):
    """(train step, decode step factory) of the same model in JAX, or None when jax is not importable."""
    try:
        import jax  # noqa: F401
        import jax.numpy as jnp

        sys.path.insert(0, os.path.dirname(__file__))
        import jax_llama
    except ImportError:
        return None
    c = jax_llama.Config(model.config)

    def train():
        params = jax_llama.params_from_torch(model)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        state = [params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params), 0]
        fn = jax_llama.make_train_step(c)

        def step(x, y):
            state[0], state[1], state[2], state[3], loss = fn(*state, jnp.asarray(x.numpy()))
            return loss

        return step

    def decode(batch):
        params = jax_llama.params_from_torch(model)
        fn = jax_llama.make_decode_step(c)
        state = {"cache": jax_llama.empty_cache(c, batch, 256), "tok": jnp.asarray(
            torch.randint(3, 256, (batch,)).numpy()), "pos": 16}

        def step(x, y):
            state["cache"], state["tok"] = fn(params, state["cache"], state["tok"], jnp.int32(state["pos"]))
            state["pos"] = 16 + (state["pos"] - 15) % 200
            return state["tok"]

        return step

    return train, decode, jax_llama.check(model, torch.randint(3, 256, (2, 12)))


def report(title, rates):
    """rates: {label: [rate of each round]}; ratios are of the medians."""
    median = {label: statistics.median(r) for label, r in rates.items()}
    base = median["strict eager tpu"]
    print(f"{title}:")
    for label, r in rates.items():
        each = ", ".join(f"{v:.1f}" for v in r)
        print(f"  {label:18s} {median[label]:9.1f} steps/s   {median[label] / base:6.2f}x strict eager   [{each}]",
              flush=True)


def llama_benchmarks(steps, modes, rounds):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
    from hf_tiny import make_model

    model = make_model("llama")
    jax_fns = jax_llama_fns(model)
    if jax_fns is None:
        print("(jax is not importable: no jax.jit reference)")
    else:
        print(f"(the JAX model's logits differ from the torch model's by at most {jax_fns[2]:.1e})")
    ids = torch.randint(3, 256, (8, 32), generator=torch.Generator().manual_seed(0))
    candidates = [(label, device, mode, lambda device=device, mode=mode: (
        llama_train_fn(model, device, mode), ids.to(device), None)) for label, device, mode in modes]
    if jax_fns:
        candidates.append(("jax.jit CPU", "cpu", "jax", lambda: (jax_fns[0](), ids, None)))
    report("tiny llama train step (batch 8 x 32 tokens)", in_rounds(candidates, steps, rounds))
    for batch in (1, 8):
        candidates = [(label, device, mode, lambda device=device, mode=mode: (
            llama_decode_fn(model, device, mode, batch), None, None)) for label, device, mode in modes]
        if jax_fns:
            candidates.append(("jax.jit CPU", "cpu", "jax", lambda: (jax_fns[1](batch), None, None)))
        report(f"tiny llama static-cache decode step, batch {batch}", in_rounds(candidates, steps, rounds))


COLD = """
import sys, time, torch, torch_pjrt
sys.path.insert(0, {tests!r})
from hf_tiny import make_model
model = make_model("llama").to("tpu")
ids = torch.randint(3, 256, (1, 12))
t0 = time.perf_counter()
with torch.no_grad():
    model(ids.to("tpu")).logits.cpu()
print(time.perf_counter() - t0)
"""


def cold_start():
    """Process start to the first logits, and the part of it from the model on "tpu" to its first logits
    (the rest is importing torch and Transformers and building the model, the same with any cache)."""
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python")
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TORCH_PJRT_CACHE_DIR=d)
        total, first = [], []
        for _ in range(2):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", COLD.format(tests=tests)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            total.append(time.perf_counter() - t0)
            first.append(float(out.strip().splitlines()[-1]))
    print("cold start of the tiny Llama on tpu (empty on-disk program cache, then warm):")
    print(f"  process start to first logits  {total[0]:6.2f} s  {total[1]:6.2f} s  {total[0] / total[1]:5.2f}x faster warm")
    print(f"  first forward (model on tpu)   {first[0]:6.2f} s  {first[1]:6.2f} s  {first[0] / first[1]:5.2f}x faster warm")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30,
                        help="steps per timed sample at least (3 samples, median; more steps where a sample would "
                        f"last under {MIN_SAMPLE_S} s: programs run asynchronously, so a short sample weighs the "
                        "final drain more)")
    parser.add_argument("--cpu-threads", type=int, default=1,
                        help="torch CPU threads (1: on a shared machine, spinning OpenMP workers distort CPU eager)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of every mode in turn; a mode's rate is its median over them")
    parser.add_argument("--only", choices=["mlp", "transformer", "llama", "cold"], default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.cpu_threads)
    modes = [("strict eager tpu", "tpu", "eager"), ("fused eager tpu", "tpu", "fused"),
             ("compile(tpu)", "tpu", "compile-tpu"),
             ("torch CPU eager", "cpu", "eager"), ("inductor CPU", "cpu", "inductor")]
    if args.only in (None, "llama"):
        llama_benchmarks(args.steps, modes, args.rounds)
    if args.only in (None, "cold"):
        cold_start()
    for name, factory, kind in (("mlp", MLP, "mlp"), ("transformer", SmallTransformer, "transformer")):
        if args.only not in (None, name):
            continue
        torch.manual_seed(0)
        model = factory()
        x, y = data(kind, 1)[0]
        for what, make in (("train step", train_step_fn), ("inference", infer_step_fn)):
            candidates = [(label, device, mode, lambda device=device, mode=mode: (
                make(model, device, mode), x.to(device), y.to(device))) for label, device, mode in modes]
            report(f"{name} {what}", in_rounds(candidates, args.steps, args.rounds))


if __name__ == "__main__":
    main()
