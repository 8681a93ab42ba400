"""Hugging Face throughput on "tpu" against torch CPU eager, side by side in one run.

1. Greedy decode with a static cache (cache_implementation="static", eager: disable_compile=True) of a
   tiny Llama at batch 1 and batch 8, and of a Llama of width 1024 (intermediate 2816, 4 layers) at batch
   8: generated tokens per second (all rows), after a warm-up generate that compiles every program, so the
   timed runs measure steady-state execution.
2. A MiniLM-sized encoder forward (BERT, hidden 384, 6 layers, 12 heads, sequence 128, batch 8; random
   weights): sequences per second.

Every tpu result is checked against the CPU's (tokens equal, hidden states within 1e-4).
Usage: python bench/hf_decode.py [--tokens 32] [--repeats 3]
"""

import argparse
import os
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; tpu = "
          f"{torch.tpu.get_device_name()} ({torch_pjrt.plugin_info()['platform']})")
    print(f"{'workload':<44} {'cpu':>12} {'tpu':>12} {'tpu/cpu':>8}")
    for batch in (1, 8):
        r = decode(batch, args.tokens, args.repeats)
        print(f"{f'tiny Llama static-cache greedy decode, batch {batch}':<44} {r['cpu'][0]:9.1f} t/s "
              f"{r['tpu'][0]:9.1f} t/s {r['tpu'][0] / r['cpu'][0]:8.2f}   (tpu compiles incl. warm-up: {r['tpu'][2]})")
    r = decode(8, args.tokens, args.repeats, hidden=1024, intermediate=2816, heads=16)
    print(f"{'Llama of width 1024 (4 layers), batch 8':<44} {r['cpu'][0]:9.1f} t/s "
          f"{r['tpu'][0]:9.1f} t/s {r['tpu'][0] / r['cpu'][0]:8.2f}   (tpu compiles incl. warm-up: {r['tpu'][2]})")
    r = encoder(8, 128, args.repeats)
    print(f"{'MiniLM-sized encoder forward, 8 x 128':<44} {r['cpu'][0]:9.1f} s/s {r['tpu'][0]:9.1f} s/s "
          f"{r['tpu'][0] / r['cpu'][0]:8.2f}")


if __name__ == "__main__":
    main()
