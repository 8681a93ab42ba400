"""Steps per second of one model and input under each execution mode, side by side in one run:
strict eager on "tpu", fused eager on "tpu" (torch_pjrt.set_eager_mode("fused")), torch.compile(backend="tpu")
on "tpu", torch CPU eager and torch.compile(inductor) on the CPU, and for the tiny Llama the same model
written in JAX and jax.jit-ed (bench/jax_llama.py, CPU backend; skipped with a note when jax is not
importable). Workloads: a training step (forward, backward, AdamW) of an MLP, of the small transformer
encoder of tests/python/test_training.py and of the tiny Llama of tests/python/hf_tiny.py; an inference
step of the first two; a static-cache decode step of the tiny Llama at batch 1 and 8. Then cold start:
process start to the tiny Llama's first logits on "tpu", with an empty and with a warm on-disk program
cache. Then varying length: the tiny Llama's forward (batch 1, no grad) over 32 prompts of seeded random
lengths in 1..512, and separately over 16 lengths in 65..128, with torch.compile(dynamic=True) for the
compiled modes: per mode, the programs compiled over the whole sequence (tpu modes), the most programs any
one op compiled (and the top 3 ops), the seconds of the first pass (compiles included) and the mean ms per
call of a second pass over the same lengths (warm); and the programs one length (100) compiles alone, so
that "16 lengths compile at most twice what one length does" can be read off. Every mode runs each
sequence in a fresh process with TORCH_PJRT_CACHE_DIR="" (no program from the on-disk cache or from
another mode).

    python bench/modes.py [--steps 30] [--rounds 3] [--only llama|cold|mlp|transformer|varying] [--lengths 32]

The modes are measured in rounds: each round builds and warms every mode's step afresh and times one sample
of it, in turn, and a mode's rate is its median over the rounds (its rounds' rates follow in brackets). The
machines we share drift by 10-30% over minutes; in rounds, a slow stretch lowers one sample of each mode it
falls on instead of every sample of one mode, which would move that mode's ratios alone.
"""

import argparse
import copy
import gc
import json
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


def compiled(model, mode, dynamic=None):
    if mode == "compile-tpu":
        return torch.compile(model, backend="tpu", dynamic=dynamic)
    if mode == "inductor":
        return torch.compile(model, backend="inductor", dynamic=dynamic)
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


def failure(e):
    """A mode's row when it raised: the error's first line, not the whole run's end."""
    return {"error": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"}


def varying_run(device, mode, lengths, threads):
    """In a fresh process (see varying_length): the tiny Llama's forward over lengths, twice; returns a dict
    for JSON: programs compiled in the first pass and its top ops, its seconds, and the warm pass's."""
    from hf_tiny import make_model

    torch.set_num_threads(threads)
    eager_mode(mode)
    model = make_model("llama").to(device)
    fwd = compiled(model, mode, dynamic=True)
    inputs = [torch.randint(3, 256, (1, n), generator=torch.Generator().manual_seed(n)).to(device) for n in lengths]
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    sync()

    def one_pass():
        t0 = time.perf_counter()
        for x in inputs:
            with torch.no_grad():
                fwd(input_ids=x).logits.cpu()
        sync()
        return time.perf_counter() - t0

    gc.collect()
    torch_pjrt.reset_metrics()
    before = torch_pjrt.metrics()["compiles"]
    first = one_pass()
    after = torch_pjrt.metrics()["compiles"]
    top = [(op, r["programs"]) for op, r in list(torch_pjrt.compile_report().items())[:3]]
    warm = one_pass()
    return {"compiles": after - before, "top": top, "first_s": first, "warm_ms": 1e3 * warm / len(lengths),
            "warm_compiles": torch_pjrt.metrics()["compiles"] - after}


def varying_length(modes, n_lengths, threads, rounds):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TORCH_PJRT_CACHE_DIR="")

    def run(device, mode, lengths):
        code = (f"import sys, json; sys.path.insert(0, {here!r}); from modes import varying_run, failure\n"
                f"try:\n    r = varying_run({device!r}, {mode!r}, {lengths!r}, {threads})\n"
                f"except Exception as e:\n    r = failure(e)\nprint(json.dumps(r))")
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            return {"error": f"exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:200]}"}
        return json.loads(p.stdout.strip().splitlines()[-1])

    single = 100
    sequences = [
        (f"{n_lengths} random lengths in 1..512",
         torch.randint(1, 513, (n_lengths,), generator=torch.Generator().manual_seed(0)).tolist()),
        (f"{max(1, n_lengths // 2)} random lengths in 65..128",
         torch.randint(65, 129, (max(1, n_lengths // 2),), generator=torch.Generator().manual_seed(1)).tolist()),
        (f"length {single} alone", [single]),
    ]
    results = {(title, label): [] for title, _ in sequences for label, _, _ in modes}
    for _ in range(rounds):
        for title, lengths in sequences:
            for label, device, mode in modes:
                if title == sequences[2][0] and device != "tpu":
                    continue  # one length: only its programs are read, and only tpu modes count programs
                results[(title, label)].append(run(device, mode, lengths))
    alone = {label: results[(sequences[2][0], label)][0].get("compiles") for label, device, _ in modes
             if device == "tpu"}
    print(f"varying length: tiny Llama forward, batch 1, no grad (compiled modes dynamic=True; a fresh process per "
          f"mode and sequence, TORCH_PJRT_CACHE_DIR=\"\"; {rounds} round(s), medians):")
    print(f"  length {single} alone compiles: " + ", ".join(f"{label} {'(failed)' if n is None else n}"
                                                          for label, n in alone.items()))
    for title, lengths in sequences[:2]:
        print(f"  {title}: {lengths}")
        ok = {key: [r for r in rs if "error" not in r] for key, rs in results.items() if key[0] == title}
        strict = ok[(title, "strict eager tpu")] or [{"warm_ms": float("nan")}]
        base = statistics.median(r["warm_ms"] for r in strict)
        print(f"    {'':18} {'programs':>8} {'x alone':>7} {'max/op':>6} {'first pass':>10} "
              f"{'warm ms/call':>12} {'vs strict':>9}")
        for label, device, _ in modes:
            rs = ok[(title, label)]
            if not rs:
                print(f"    {label:18} failed: {results[(title, label)][0]['error']}", flush=True)
                continue
            first = statistics.median(r["first_s"] for r in rs)
            warm = statistics.median(r["warm_ms"] for r in rs)
            tpu = device == "tpu"
            programs = statistics.median(r["compiles"] for r in rs)
            times = f"{programs / alone[label]:.1f}x" if tpu and alone[label] else "-"
            programs = f"{programs:g}" if tpu else "-"
            top = rs[0]["top"]
            most = str(top[0][1]) if tpu and top else "-"
            rounds_s = ", ".join(f"{r['first_s']:.1f}/{r['warm_ms']:.1f}" for r in rs)
            print(f"    {label:18} {programs:>8} {times:>7} {most:>6} {first:9.2f}s {warm:12.2f} "
                  f"{base / warm:8.2f}x   [{rounds_s}]", flush=True)
            if tpu:
                print("      top ops: " + ", ".join(f"{op} {n}" for op, n in top)
                      + (f"; the warm pass compiled {rs[0]['warm_compiles']} more" if rs[0]["warm_compiles"] else ""))


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
    parser.add_argument("--only", choices=["mlp", "transformer", "llama", "cold", "varying"], default=None)
    parser.add_argument("--lengths", type=int, default=32,
                        help="varying length: this many random lengths in 1..512, and half as many in 65..128")
    args = parser.parse_args()
    torch.set_num_threads(args.cpu_threads)
    modes = [("strict eager tpu", "tpu", "eager"), ("fused eager tpu", "tpu", "fused"),
             ("compile(tpu)", "tpu", "compile-tpu"),
             ("torch CPU eager", "cpu", "eager"), ("inductor CPU", "cpu", "inductor")]
    if args.only in (None, "llama"):
        llama_benchmarks(args.steps, modes, args.rounds)
    if args.only in (None, "cold"):
        cold_start()
    if args.only in (None, "varying"):
        varying_length(modes, args.lengths, args.cpu_threads, args.rounds)
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
