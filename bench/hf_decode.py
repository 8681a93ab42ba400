"""Hugging Face throughput on "tpu" against torch CPU eager, side by side in one run.

1. Greedy decode with a static cache (cache_implementation="static", eager: disable_compile=True) of a
   tiny Llama at batch 1 and batch 8, and of a Llama of width 1024 (intermediate 2816, 4 layers) at batch
   8: generated tokens per second (all rows), after a warm-up generate that compiles every program, so the
   timed runs measure steady-state execution.
2. A MiniLM-sized encoder forward (BERT, hidden 384, 6 layers, 12 heads, sequence 128, batch 8; random
   weights): sequences per second.

3. Default generate: ``model.generate(ids, max_new_tokens=64, do_sample=False)`` of the tiny Llama of
   tests/python/hf_tiny.py at batch 1 (a 12-token prompt), with the default cache (DynamicCache) and no
   compile, on "tpu" under strict eager and under fused eager, and on the CPU (torch eager); then the same
   with ``cache=torch_pjrt.hf.BucketedCache(model.config), disable_compile=True`` (a candidate for "tpu"'s
   default cache). Per mode: the first call's tokens/s and the programs it compiled, measured in a fresh
   process with TORCH_PJRT_CACHE_DIR="" (nothing from the on-disk program cache, no program of another
   mode), then the warm tokens/s (best of --repeats calls after the first, same process) and the warm
   ratio against torch CPU eager with the default cache. The modes run in rounds (--rounds): each round
   starts every mode's process in turn, and a mode's figures are its medians over the rounds.

Every tpu result is checked against the CPU's (tokens equal, hidden states within 1e-4; the default
generate section prints whether the tokens are equal instead of failing).
Usage: python bench/hf_decode.py [--tokens 32] [--repeats 3] [--only static-decode|encoder|default-generate]
                                 [--generate-tokens 64] [--rounds 1] [--cpu-threads 1]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import torch_pjrt  # noqa: E402


def _timed(fn, device, repeats):
    fn()  # warm-up: compiles
    if device == "tpu":
        torch.tpu.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        if device == "tpu":
            torch.tpu.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best, out


def decode(batch, tokens, repeats, hidden=128, intermediate=256, heads=4):
    import transformers as tf

    cfg = tf.LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=4,
                         num_attention_heads=heads, num_key_value_heads=heads // 2, max_position_embeddings=512,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    cpu = tf.LlamaForCausalLM(cfg).eval()
    tpu = tf.LlamaForCausalLM(cfg).eval()
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    ids = torch.randint(3, 1024, (batch, 16), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, cache_implementation="static",
              disable_compile=True)
    res = {}
    for device, model in (("cpu", cpu), ("tpu", tpu)):
        x, m = ids.to(device), torch.ones_like(ids).to(device)
        before = torch_pjrt.metrics()
        best, out = _timed(lambda: model.generate(x, attention_mask=m, **kw), device, repeats)
        after = torch_pjrt.metrics()
        res[device] = (batch * tokens / best, out.cpu(), after["compiles"] - before["compiles"])
    assert torch.equal(res["cpu"][1], res["tpu"][1]), "tpu tokens differ from the CPU's"
    return res


def encoder(batch, seq, repeats):
    import transformers as tf

    cfg = tf.BertConfig(vocab_size=30522, hidden_size=384, intermediate_size=1536, num_hidden_layers=6,
                        num_attention_heads=12, max_position_embeddings=512)
    torch.manual_seed(0)
    cpu = tf.BertModel(cfg).eval()
    tpu = tf.BertModel(cfg).eval()
    tpu.load_state_dict(cpu.state_dict())
    tpu.to("tpu")
    ids = torch.randint(1000, 30000, (batch, seq), generator=torch.Generator().manual_seed(2))
    res = {}
    for device, model in (("cpu", cpu), ("tpu", tpu)):
        x, m = ids.to(device), torch.ones_like(ids).to(device)

        def fwd():
            with torch.no_grad():
                return model(input_ids=x, attention_mask=m).last_hidden_state

        best, out = _timed(fwd, device, repeats)
        res[device] = (batch / best, out.cpu())
    torch.testing.assert_close(res["tpu"][1], res["cpu"][1], rtol=0, atol=1e-4)
    return res


GENERATE_PROMPT = 12


def default_generate_run(mode, variant, tokens, repeats, threads):
    """In a fresh process (see default_generate): the first and the warm generate of one mode ("strict",
    "fused" or "cpu") and variant ("default" or "bucketed"); returns a dict for JSON."""
    torch.set_num_threads(threads)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
    from hf_tiny import make_model

    device = "cpu" if mode == "cpu" else "tpu"
    if device == "tpu":
        torch_pjrt.set_eager_mode(mode)
    model = make_model("llama").to(device)
    ids = torch.randint(3, 256, (1, GENERATE_PROMPT), generator=torch.Generator().manual_seed(3)).to(device)

    def generate():
        kw = {}
        if variant == "bucketed":
            import torch_pjrt.hf

            kw = dict(cache=torch_pjrt.hf.BucketedCache(model.config), disable_compile=True)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=tokens, do_sample=False, **kw).cpu()
        if device == "tpu":
            torch.tpu.synchronize()
        return out

    before = torch_pjrt.metrics()["compiles"]
    t0 = time.perf_counter()
    out = generate()
    first = time.perf_counter() - t0
    compiles = torch_pjrt.metrics()["compiles"] - before
    warm = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        again = generate()
        warm = min(warm, time.perf_counter() - t0)
    new = out.shape[1] - GENERATE_PROMPT  # generation may stop early at the eos token
    return {"first_s": first, "compiles": compiles, "warm_s": warm, "new_tokens": new,
            "tokens": out[0].tolist(), "stable": torch.equal(out, again)}


def default_generate(tokens, repeats, rounds):
    modes = [("strict eager tpu", "strict"), ("fused eager tpu", "fused"), ("torch CPU eager", "cpu")]
    variants = [("default cache", "default"), ("BucketedCache", "bucketed")]
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TORCH_PJRT_CACHE_DIR="")
    runs = {(m, v): [] for _, m in modes for _, v in variants}
    for _ in range(rounds):
        for _, v in variants:
            for _, m in modes:
                call = f"default_generate_run({m!r}, {v!r}, {tokens}, {repeats}, {torch.get_num_threads()})"
                code = (f"import sys, json; sys.path.insert(0, {here!r}); "
                        f"from hf_decode import default_generate_run; print(json.dumps({call}))")
                p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
                if p.returncode != 0:
                    raise RuntimeError(f"default generate, mode {m}, {v}: exit {p.returncode}\n{p.stderr[-4000:]}")
                runs[(m, v)].append(json.loads(p.stdout.strip().splitlines()[-1]))
    reference = runs[("cpu", "default")][0]
    base = statistics.median(r["new_tokens"] / r["warm_s"] for r in runs[("cpu", "default")])
    print(f"tiny Llama default generate, batch 1, {GENERATE_PROMPT}-token prompt, max_new_tokens={tokens}, "
          f"no compile ({rounds} round(s); first call in a fresh process, TORCH_PJRT_CACHE_DIR=\"\"; "
          f"warm: best of {repeats}):")
    print(f"  {'':34} {'first t/s':>10} {'compiles':>9} {'warm t/s':>10} {'warm/CPU':>9}  tokens")
    for vlabel, v in variants:
        for mlabel, m in modes:
            rs = runs[(m, v)]
            first = statistics.median(r["new_tokens"] / r["first_s"] for r in rs)
            warm = statistics.median(r["new_tokens"] / r["warm_s"] for r in rs)
            compiles = statistics.median(r["compiles"] for r in rs) if m != "cpu" else None
            same = all(r["tokens"] == reference["tokens"] and r["stable"] for r in rs)
            check = "reference" if (m, v) == ("cpu", "default") else ("= CPU" if same else "DIFFER from CPU")
            print(f"  {mlabel + ', ' + vlabel:34} {first:10.1f} {'-' if compiles is None else f'{compiles:g}':>9} "
                  f"{warm:10.1f} {warm / base:8.2f}x  {check} ({rs[0]['new_tokens']} new)", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", choices=["static-decode", "encoder", "default-generate"], default=None,
                   help="run one section alone (default: all)")
    p.add_argument("--generate-tokens", type=int, default=64, help="max_new_tokens of the default generate section")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds of the default generate section's modes (a fresh process each); medians over them")
    p.add_argument("--cpu-threads", type=int, default=1,
                   help="torch CPU threads, here and in the default generate section's processes (1: on a shared "
                   "machine, spinning OpenMP workers distort CPU eager)")
    args = p.parse_args()
    torch.set_num_threads(args.cpu_threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; tpu = "
          f"{torch.tpu.get_device_name()} ({torch_pjrt.plugin_info()['platform']})")
    if args.only in (None, "static-decode", "encoder"):
        print(f"{'workload':<44} {'cpu':>12} {'tpu':>12} {'tpu/cpu':>8}")
    if args.only in (None, "static-decode"):
        for batch in (1, 8):
            r = decode(batch, args.tokens, args.repeats)
            print(f"{f'tiny Llama static-cache greedy decode, batch {batch}':<44} {r['cpu'][0]:9.1f} t/s "
                  f"{r['tpu'][0]:9.1f} t/s {r['tpu'][0] / r['cpu'][0]:8.2f}   "
                  f"(tpu compiles incl. warm-up: {r['tpu'][2]})")
        r = decode(8, args.tokens, args.repeats, hidden=1024, intermediate=2816, heads=16)
        print(f"{'Llama of width 1024 (4 layers), batch 8':<44} {r['cpu'][0]:9.1f} t/s "
              f"{r['tpu'][0]:9.1f} t/s {r['tpu'][0] / r['cpu'][0]:8.2f}   (tpu compiles incl. warm-up: {r['tpu'][2]})")
    if args.only in (None, "encoder"):
        r = encoder(8, 128, args.repeats)
        print(f"{'MiniLM-sized encoder forward, 8 x 128':<44} {r['cpu'][0]:9.1f} s/s {r['tpu'][0]:9.1f} s/s "
              f"{r['tpu'][0] / r['cpu'][0]:8.2f}")
    if args.only in (None, "default-generate"):
        default_generate(args.generate_tokens, args.repeats, args.rounds)


if __name__ == "__main__":
    main()
