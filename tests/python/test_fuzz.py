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
