"""Native coverage over PyTorch's OpInfo database: every op runs its sample inputs on CPU and on "tpu"
with the CPU fallback turned into an error, and each op is classified:

  native    every sample ran natively and matched the CPU
  mismatch  ran natively but some sample differed from the CPU
  fallback  some sample needed an op without a lowering (named in the report)
  error     the tpu run raised where the CPU did not

    python tools/coverage.py [--samples 4] [--dtype float32] [--only add,mul] [--json out.json]
"""

import argparse
import collections
import json
import os
import sys
import time
import traceback

os.environ["TORCH_PJRT_FALLBACK"] = "error"

import torch  # noqa: E402

import torch_pjrt  # noqa: E402,F401


def to(x, dev):
    if isinstance(x, torch.Tensor):
        return x.detach().to(dev)
    if isinstance(x, (list, tuple)):
        return type(x)(to(e, dev) for e in x)
    if isinstance(x, dict):
        return {k: to(v, dev) for k, v in x.items()}
    return x


def same(got, exp):
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return False
        torch.testing.assert_close(got.cpu(), exp, equal_nan=True, check_device=False)
        return True
    if isinstance(exp, (list, tuple)):
        return len(got) == len(exp) and all(same(g, e) for g, e in zip(got, exp))
    return got == exp or (exp != exp and got != got)


def classify(op, dtype, samples):
    try:
        inputs = list(op.sample_inputs("cpu", dtype))[:samples]
    except Exception:
        return "skip", "no samples"
    if not inputs:
        return "skip", "no samples"
    for s in inputs:
        try:
            exp = op(s.input, *s.args, **s.kwargs)
        except Exception:
            continue  # the CPU rejects it too
        try:
            got = op(to(s.input, "tpu"), *to(s.args, "tpu"), **to(s.kwargs, "tpu"))
        except NotImplementedError as e:
            msg = str(e)
            name = msg.split("operator '")[1].split("'")[0] if "operator '" in msg else msg[:80]
            return "fallback", name
        except Exception as e:
            return "error", f"{type(e).__name__}: {str(e)[:120]}"
        try:
            if not same(got, exp):
                return "mismatch", "different result structure"
        except AssertionError as e:
            return "mismatch", str(e).splitlines()[0][:120]
        except Exception as e:
            return "error", f"{type(e).__name__}: {str(e)[:120]}"
    return "native", ""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--only", default="")
    p.add_argument("--json", default="")
    args = p.parse_args()
    from torch.testing._internal.common_methods_invocations import op_db

    dtype = getattr(torch, args.dtype)
    only = set(filter(None, args.only.split(",")))
    results = {}
    missing = collections.Counter()
    t0 = time.time()
    for op in op_db:
        key = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if only and op.name not in only and key not in only:
            continue
        if dtype not in op.supported_dtypes("cpu"):
            continue
        try:
            status, detail = classify(op, dtype, args.samples)
        except Exception:
            status, detail = "error", traceback.format_exc().splitlines()[-1][:120]
        results[key] = (status, detail)
        if status == "fallback":
            missing[detail] += 1
        print(f"{status:9} {key:40} {detail}", flush=True)
    counts = collections.Counter(s for s, _ in results.values())
    tested = sum(v for k, v in counts.items() if k != "skip")
    print(f"\n{len(results)} ops ({args.dtype}, up to {args.samples} samples each) in {time.time() - t0:.0f}s")
    for k in ("native", "mismatch", "fallback", "error", "skip"):
        print(f"  {k:9} {counts.get(k, 0)}")
    if tested:
        print(f"native and matching: {counts.get('native', 0)}/{tested} = {100 * counts.get('native', 0) / tested:.1f}%")
    print("most wanted lowerings:", ", ".join(f"{k} ({v})" for k, v in missing.most_common(25)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
