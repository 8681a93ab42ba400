"""The workload of scripts/lsan.sh (LeakSanitizer): bench/leak_run.py's encoder training and tiny-Llama
decode, then a few paths the leak run does not take: ops that fail (bad input, poisoned results), the CPU
fallback, growable concatenations, storage resizes, views, threads. Everything is dropped before exit, so
what LSan reports at exit is memory nothing points to any more.
"""

import argparse
import gc
import os
import sys
import threading
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "bench"))

import torch  # noqa: E402

import leak_run  # noqa: E402
import torch_pjrt  # noqa: E402


def extra_ops():
    dev = "tpu"
    x = torch.randn(8, 16, device=dev)
    for _ in range(3):
        (x @ x.t()).relu_().sum().item()
        y = x.t().contiguous()[2:5].mul(2)
        y.add_(1)
        torch.cat([y, y], 0).cpu()
    ids = torch.tensor([[1, 2, 3]], device=dev)
    for i in range(40):  # growable cat, as generate's input_ids
        ids = torch.cat([ids, torch.tensor([[i]], device=dev)], 1)
    ids.cpu()
    for bad in (lambda: x @ torch.ones(3, 3, device=dev), lambda: x.view(5, 7), lambda: torch.ones(2, device=dev) + x):
        try:
            bad()
        except (RuntimeError, IndexError):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.linalg.eigvals(torch.randn(4, 4, device=dev)).cpu()  # the CPU fallback
    t = torch.arange(16.0, device=dev)
    v = t[4:]
    t.untyped_storage().resize_(8 * 4)
    try:
        (v + 1).cpu()
    except RuntimeError:
        pass
    t.untyped_storage().resize_(32 * 4)
    (t * 2).cpu()

    def worker(k):
        a = torch.full((32,), float(k), device=dev)
        for _ in range(20):
            a = a * 1.5 + 1
        a.cpu()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", type=int, default=200)
    p.add_argument("--decode", type=int, default=50)
    args = p.parse_args()
    if args.train:
        leak_run.train_encoder(args.train, warmup=5)
    if args.decode:
        leak_run.decode_llama(args.decode, warmup=4)
    extra_ops()
    gc.collect()
    torch.tpu.synchronize()
    print("metrics at exit:", {k: v for k, v in torch_pjrt.metrics().items() if k.startswith("live")})


if __name__ == "__main__":
    main()
