"""Host time per call of a cached tiny op on "tpu" against torch CPU eager, the host time per op that fused
eager's recording costs, and the first-call compile time of a new op signature. Ratios are measured side by side in one run (shared, noisy machines).

    TORCH_PJRT_CACHE_DIR= python bench/overhead.py      # empty: no disk cache, so compiles are real

When JAX is importable (it is not a dependency: `pip install jax`, or PYTHONPATH to a folder holding it),
the same add of two 1-element arrays through a `jax.jit`-ed function on JAX's CPU backend is measured in the
same interleaved rounds: the reference a cached eager op on "tpu" should not exceed.
"""

import argparse
import contextlib
import os
import statistics
import time

os.environ.setdefault("TORCH_PJRT_CACHE_DIR", "")  # measure real compiles unless told otherwise

import torch  # noqa: E402

import torch_pjrt  # noqa: E402


def per_call_us(fn, calls: int, repeats: int = 5) -> float:
    """Median over repeats of the mean host time per call, in microseconds."""
    fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def _jax_add():
    """A jitted add of two 1-element arrays on JAX's CPU backend, warmed up; None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    x, y = jnp.ones(1), jnp.ones(1)
    f = jax.jit(lambda p, q: p + q)
    f(x, y).block_until_ready()
    return lambda: f(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--new-signatures", type=int, default=10)
    args = parser.parse_args()

    a_cpu, b_cpu = torch.ones(1), torch.ones(1)
    a, b = a_cpu.to("tpu"), b_cpu.to("tpu")
    torch.add(a, b).cpu()  # compile once

    jax_add = _jax_add()

    # interleave them so that machine noise hits all alike
    tpu_us, cpu_us, jax_us = [], [], []
    for _ in range(3):
        tpu_us.append(per_call_us(lambda: torch.add(a, b), args.calls))
        torch.tpu.synchronize()
        cpu_us.append(per_call_us(lambda: torch.add(a_cpu, b_cpu), args.calls))
        if jax_add:
            jax_us.append(per_call_us(jax_add, args.calls))
    tpu, cpu = statistics.median(tpu_us), statistics.median(cpu_us)
    print(f"cached tiny op (add of two 1-element tensors, {args.calls} calls):")
    print(f"  tpu  {tpu:7.2f} us/call")
    print(f"  cpu  {cpu:7.2f} us/call   (torch CPU eager)")
    print(f"  ratio tpu/cpu = {tpu / cpu:.1f}x; target <= 15 us/call: {'met' if tpu <= 15 else 'NOT met'}")
    if jax_add:
        jax = statistics.median(jax_us)
        print(f"  jax  {jax:7.2f} us/call   (jax.jit dispatch, CPU backend)")
        print(f"  ratio tpu/jax = {tpu / jax:.2f}x; goal <= 1: {'met' if tpu <= jax else 'NOT met'}")
    else:
        print("  jax  not importable: no jax.jit dispatch reference in this run")

    # Fused eager's recording: the host time per recorded op of a chain of adds (each recorded, none run; the
    # stream of 201 ops runs at the end of each chain, outside the timed part), side by side with torch CPU
    # eager running the same chain. The difference is what recording costs beyond an op's dispatch.
    def chain(x0, other, n=200):
        x = x0 * 1.0  # a first op that does not repeat, so the chain is one stream
        for _ in range(n):
            x = torch.add(x, other)
        return x

    def recorded_us(x0, other, fused):
        samples = []
        for _ in range(5):
            with torch_pjrt.fused() if fused else contextlib.nullcontext():
                t0 = time.perf_counter()
                for _ in range(20):
                    y = chain(x0, other)
                samples.append((time.perf_counter() - t0) / (20 * 201) * 1e6)
                y.cpu()
        return statistics.median(samples)

    a64, b64 = torch.randn(1, 64), torch.randn(1, 64)
    ta64, tb64 = a64.to("tpu"), b64.to("tpu")
    recorded_us(ta64, tb64, True)  # compile the stream
    fused_us, cpu_chain_us = [], []
    for _ in range(3):
        fused_us.append(recorded_us(ta64, tb64, True))
        cpu_chain_us.append(recorded_us(a64, b64, False))
    f, c = statistics.median(fused_us), statistics.median(cpu_chain_us)
    print("fused eager recording (a chain of 200 adds of [1, 64] tensors):")
    print(f"  tpu fused  {f:7.2f} us/op recorded")
    print(f"  cpu        {c:7.2f} us/op   (torch CPU eager, the same chain run)")
    print(f"  recording beyond torch's dispatch and CPU kernel: {f - c:5.2f} us/op; goal <= 2: "
          f"{'met' if f - c <= 2 else 'NOT met'}")

    # First call of new signatures: a fresh shape compiles a new program.
    firsts, warms = [], []
    before = torch_pjrt.metrics()
    for i in range(args.new_signatures):
        x = torch.ones(3 + i, device="tpu")
        t0 = time.perf_counter()
        y = x * x
        torch.tpu.synchronize()
        firsts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        y = x * x
        torch.tpu.synchronize()
        warms.append(time.perf_counter() - t0)
    after = torch_pjrt.metrics()
    compiles = after["compiles"] - before["compiles"]
    print(f"first call of a new op signature ({args.new_signatures} shapes of mul):")
    print(f"  first call {statistics.median(firsts) * 1e3:7.2f} ms (median), cached call "
          f"{statistics.median(warms) * 1e3:7.3f} ms; {compiles} plugin compiles, "
          f"{(after['compile_seconds'] - before['compile_seconds']) / max(compiles, 1) * 1e3:.1f} ms each")
    del y


if __name__ == "__main__":
    main()
