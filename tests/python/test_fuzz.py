"""The differential fuzzer's fixed budget (python/torch_pjrt/fuzz.py): 2,000 random programs with views,
in-place ops and out= on "tpu" and on the CPU leave the same tensors (values, shapes, strides, aliasing,
version counters). A failure prints the minimal program as a runnable snippet."""

import pytest
import torch

from torch_pjrt import fuzz

CASES = 2000
SEED = 20261203


def test_fixed_budget_has_no_mismatch(fallback_policy):
    fallback_policy("error")
    stats, snip, diffs = fuzz.run(CASES, SEED)
    print(stats)
    assert snip is None, "\n".join(diffs) + "\n\n" + snip
    assert stats["programs"] >= CASES
    assert stats["bad_value_ops"] >= 50, stats  # op_bad_value: out-of-range indices, invalid probabilities


BAD_VALUES = [  # op_bad_value's lines: a bad index in eager, in a compiled call, a failed write; then sync points
    "t0 = make((4, 3,), torch.float32, 1, dev)",
    "t1 = make((1, 3,), torch.float32, 2, dev)",
    "t0.index_copy_(0, index([4], dev), t1)  # checked: t0",
    "sync(dev)",
    "compiled(lambda a: a.index_select(1, index([0, -1], dev)), t0)",
    "sync(dev)",
    "compiled(lambda a, b: a.index_add_(0, index([-5], dev), b), t0, t1)  # checked: t0",
    "sync(dev)",
    "torch.multinomial(torch.tensor([0.2, float('nan'), 0.3], device=dev), 2, True)",
    "sync(dev)",
    "t2 = t0.take(index([11, -12], dev))",
]


def test_bad_values_raise_at_the_sync_as_the_cpu_raises_at_the_op():
    cpu = fuzz.run_lines(BAD_VALUES, "cpu")
    assert [(line, kind) for line, kind, _ in cpu.errors] == [
        (2, "IndexError"), (4, "RuntimeError"), (6, "RuntimeError"), (8, "RuntimeError")], cpu.errors
    tpu = fuzz.run_lines(BAD_VALUES, "tpu")
    assert [(line, kind) for line, kind, _ in tpu.errors] == [
        (line, kind) for line, kind, _ in cpu.errors], tpu.errors  # raised at the sync, counted at the op
    assert fuzz.compare(cpu, tpu, 1.0) == []
    assert torch.equal(tpu.ns["t0"].cpu(), cpu.ns["t0"])  # the failed writes wrote nothing


def test_bad_values_without_device_checks_are_mismatches():
    """The comparison can fail: with the checks off, "tpu" raises nothing where the CPU raises."""
    import subprocess
    import sys
    code = ("import torch_pjrt.fuzz as f\n"
            f"print(len(f.differences({BAD_VALUES!r})))\n")
    env = dict(__import__("os").environ, TORCH_PJRT_DEVICE_CHECKS="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) >= 1, r.stdout


def test_replay_reports_a_difference():
    """The checker itself: a program whose "tpu" run is tampered with must be reported."""
    lines = ["t0 = make((2, 3,), torch.float32, 1, dev)", "t1 = t0[:, 1:]", "t1.add_(1)"]
    cpu = fuzz.run_lines(lines, "cpu")
    tpu = fuzz.run_lines(lines, "tpu")
    assert fuzz.compare(cpu, tpu, 1.0) == []
    tpu.ns["t0"].view(-1)[0] += 1  # values
    tpu.ns["t1"]._version  # noqa: B018
    d = fuzz.compare(cpu, tpu, 1.0)
    assert any(x.startswith("t0") for x in d), d  # its version and values changed
    tpu2 = fuzz.run_lines(lines[:2] + ["t1 = t1.clone()"], "tpu")  # aliasing and versions
    assert fuzz.compare(fuzz.run_lines(lines[:2] + ["t1 = t1.detach()"], "cpu"), tpu2, 1.0)


def test_snippet_is_runnable():
    lines = ["t0 = make((3,), torch.int64, 2, dev)", "t1 = t0.expand(2, 3)", "t2 = t1.sum(0)"]
    src = fuzz.snippet(lines)
    exec(compile(src, "<snippet>", "exec"), {"__name__": "snippet"})  # agrees: prints, raises nothing
    assert torch.equal(fuzz.run_lines(lines, "tpu").ns["t2"].cpu(), fuzz.run_lines(lines, "cpu").ns["t2"])


def test_found_optional_dim_none_and_minus_one_differ():
    """Found by the fixed budget: argmin(dim=-1) and argmin() (dim=None) shared a cached program."""
    x = torch.tensor([[1.0], [float("nan")], [0.0], [2.0]], dtype=torch.bfloat16)
    t = x.to("tpu")
    for args in [(-1,), (), (0,), (None,), (-1, True), (None, True)]:
        got, want = t.argmin(*args), x.argmin(*args)
        assert got.shape == want.shape and torch.equal(got.cpu(), want), args


def test_found_resized_out_takes_the_results_layout():
    """Found by the fixed budget: an out= tensor resized by the op is laid out as the CPU lays it out."""
    for dev in ("cpu", "tpu"):
        x = torch.arange(6).reshape(2, 3).to(dev).t()
        out = torch.empty(0, dtype=torch.int64, device=dev)
        torch.add(x, 2, out=out)
        if dev == "cpu":
            want = (out.stride(), out.clone())
    assert out.stride() == want[0] and torch.equal(out.cpu(), want[1])


def test_found_half_precision_times_one_element_operand_rounds_once():
    """Found by a long run (seed 7): the CPU's mul, div and floor division of f16/bf16 read a one-element
    second operand (0-d tensor, Python number, tensor of one element) at its own precision and round once;
    "tpu" rounded that operand to bf16 first (1.8516 * 4.1332 gave 7.625, the CPU 7.6562)."""
    fuzz.replay("""
t0 = make((1,), torch.bfloat16, 50, dev, special=True)
t1 = make((), torch.float32, 28, dev)
t2 = torch.mul(t0, t1)
""", quiet=True)
    x = (torch.randn(64, generator=torch.Generator().manual_seed(0)) * 40)
    ops = [torch.mul, torch.div, torch.floor_divide, lambda a, b: torch.div(a, b, rounding_mode="trunc"),
           lambda a, b: a.clone().mul_(b), lambda a, b: b * a, torch.add, torch.remainder]
    for dt in (torch.bfloat16, torch.float16):
        xs = x.to(dt)
        for other in (torch.tensor(4.1332), torch.tensor([257]), 4.1332, 257, torch.tensor(4.1332, dtype=torch.float64)):
            o = other.to("tpu") if isinstance(other, torch.Tensor) else other
            for f in ops:
                want, got = f(xs, other), f(xs.to("tpu"), o)
                assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (dt, other, f)


def _same_floats(got, want, rtol=0):
    """Equal dtypes, values within rtol (NaN equal to NaN, infinities exact), and the sign of every value,
    zeros included."""
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=rtol, atol=0, equal_nan=True)
    assert torch.equal(got.cpu().signbit() & ~want.isnan(), want.signbit() & ~want.isnan())


SPECIAL = [float("inf"), float("nan"), -0.0, 2.0, float("-inf"), 4.0, -1.0, 0.0]


def test_found_float_times_bool_keeps_nan_and_signed_zero():
    """Found by a long run: XLA rewrites x * convert(mask) to select(mask, x, 0), so inf * False gave 0 and
    -1 * False 0.0 where the CPU gives NaN and -0.0."""
    x, m = torch.tensor(SPECIAL), torch.tensor([False, True, False, True, True, False, True, False])
    for f in [lambda a, b: a * b, lambda a, b: b * a, lambda a, b: a.clone().mul_(b), lambda a, b: a.bfloat16() * b,
              lambda a, b: a * b[0], lambda a, b: b[2] * a.bfloat16(), lambda a, b: a * False]:
        _same_floats(f(x.to("tpu"), m.to("tpu")), f(x, m))


def test_found_pow_half_is_sqrt_as_on_the_cpu():
    """Found by a long run: the CPU's pow(Tensor, Scalar) of f32/f64/bf16 takes sqrt, rsqrt and reciprocal
    for the exponents 0.5, -0.5 and -1 (pow(-inf, 0.5) is NaN, pow(-0.0, 0.5) -0.0), f16 keeps C's pow."""
    x = torch.tensor(SPECIAL)
    x = torch.cat([x, torch.randn(64, generator=torch.Generator().manual_seed(0)) * 5])
    for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for e in (0.5, -0.5, -1, -1.0, 2, 3, -2, 0, 1, True, 0.25, -1.25):
            # XLA's sqrt and pow are within an ulp of the CPU's (the fuzzer marks them inexact), its
            # products (2, 3, -2: rounded as the CPU rounds them) and 1 / x exact
            rtol = 0 if e in (2, 3, -2, -1, 0, 1) else 1.6e-2 if dt in (torch.bfloat16, torch.float16) else 1e-6
            _same_floats(torch.pow(x.to(dt).to("tpu"), e), torch.pow(x.to(dt), e), rtol)
            _same_floats(x.to(dt).to("tpu").pow_(e), x.to(dt).pow_(e), rtol)


def test_found_bool_divided_by_zero_is_nan():
    """Found by a long run (seed 9): XLA rewrites convert(mask) / y to select(mask, 1 / y, 0), so
    div(False, 0) gave 0 where the CPU gives NaN; floor division by zero gives the IEEE quotient."""
    fuzz.replay("""
t6 = make((2, 1, 4,), torch.bool, 31, dev)
t7 = torch.div(t6, 0)  # inexact: t7
""", quiet=True)
    m, x = torch.tensor([True, False, True, False, False, True]), torch.tensor(SPECIAL[:6])
    for f in [lambda b, y: torch.div(b, y), lambda b, y: torch.div(y, b), lambda b, y: b / y.bfloat16(),
              torch.floor_divide, lambda b, y: torch.floor_divide(y, b), lambda b, y: torch.fmod(y, b),
              lambda b, y: torch.atan2(b, y), lambda b, y: torch.pow(y, b)]:
        _same_floats(f(m.to("tpu"), x.to("tpu")), f(m, x))


def test_found_lerp_takes_the_cpus_two_formulas():
    """lerp is start + w * (end - start) for |w| < 0.5 and end - (end - start) * (1 - w) otherwise (in f32
    for bf16): lerp(inf, 0, 0.5) is inf on the CPU, "tpu" gave NaN."""
    s, e = torch.tensor(SPECIAL), torch.tensor([0.0, 1.0, 2.0, float("inf"), 3.0, -1.0, 0.5, -0.0])
    for dt in (torch.float32, torch.bfloat16):
        for w in (0.25, 0.5, 1.0, -0.75, 2.0):
            _same_floats(torch.lerp(s.to(dt).to("tpu"), e.to(dt).to("tpu"), w), torch.lerp(s.to(dt), e.to(dt), w))
        wt = torch.tensor([0.25, 0.5, 1.0, -0.75, 2.0, 0.1, 0.9, 0.49]).to(dt)
        _same_floats(torch.lerp(s.to(dt).to("tpu"), e.to(dt).to("tpu"), wt.to("tpu")), torch.lerp(s.to(dt), e.to(dt), wt))


def test_found_integer_pow_uses_every_exponent_bit():
    """Found by the conformance check of the rows the long runs touched (pow, int64 sample 15): XLA's integer
    power reads only the exponent's lowest 6 bits (3 ** 64 gave 1); the CPU wraps like repeated squaring."""
    b = torch.tensor([3, 3, 3, -3, 5, 7, 2, 3, 1, -1, -1, 2, 0, 0])
    e = torch.tensor([63, 64, 65, 100, 1000, 2**40, 70, 2**62, -5, -3, -4, -1, 0, -2])
    for dt in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        bb, ee = b.to(dt), (e.abs() if dt == torch.uint8 else e).to(dt)
        assert torch.equal(torch.pow(bb.to("tpu"), ee.to("tpu")).cpu(), torch.pow(bb, ee)), dt
        for s in (2, 3, 7, 64, 100):
            assert torch.equal(torch.pow(bb.to("tpu"), s).cpu(), torch.pow(bb, s)), (dt, s)
            assert torch.equal(torch.pow(s, ee.to("tpu")).cpu(), torch.pow(s, ee)), (dt, s)


def test_half_precision_add_with_alpha_rounds_once():
    """The CPU's add/sub/rsub of f16/bf16 round alpha to the result type and compute x + alpha * y in f32,
    rounding once; "tpu" rounded the product first (bf16 a - b * 0.1 differed in a quarter of the elements)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, generator=g) * 4, torch.randn(512, generator=g) * 4
    ops = [lambda x, y: torch.sub(x, y, alpha=0.1), lambda x, y: torch.add(x, y, alpha=3),
           lambda x, y: torch.rsub(x, y, alpha=0.3), lambda x, y: torch.rsub(x, 0.7, alpha=0.3),
           lambda x, y: x.clone().add_(y, alpha=-0.01), lambda x, y: torch.add(x, 0.3, alpha=0.7)]
    for dt in (torch.bfloat16, torch.float16):
        x, y = a.to(dt), b.to(dt)
        for f in ops:
            assert torch.equal(f(x.to("tpu"), y.to("tpu")).cpu(), f(x, y))


def test_found_clone_memory_format_is_part_of_the_program_key(fallback_policy):
    # found by a CI run of the budget: clone(contiguous_format) and clone(preserve_format) of the same
    # geometry shared one cached program, so the second took the first's result strides
    fallback_policy("error")
    fuzz.replay("""
t1 = make((3, 4,), torch.float32, 0, dev, special=True)
t1.t_()
t2 = t1.clone(memory_format=torch.contiguous_format)
t3 = t1.clone(memory_format=torch.preserve_format)
t4 = t1.clone()
""")
