"""No surprise compiles: a view's storage offset is a run-time input, so `t[i]`, `x.narrow(d, i, n)`, a column
`x[:, j]` or a write through `buf[i]` is one program for every position, in strict eager, fused eager and for
torch.compile's graph inputs; and every new program says why it was built (TORCH_PJRT_LOG_COMPILES,
torch_pjrt.compile_report()). Each result is compared with the CPU on the same inputs."""
import os
import subprocess
import sys

import pytest
import torch

import torch_pjrt


@pytest.fixture(params=["strict", "fused"])
def mode(request):
    old = torch_pjrt.get_eager_mode()
    torch_pjrt.set_eager_mode(request.param)
    yield request.param
    torch_pjrt.set_eager_mode(old)


def new_programs(fn):
    """Runs fn() to a sync point; returns (its result, cache entries built, programs compiled or loaded)."""
    torch_pjrt.flush()
    before = torch_pjrt.metrics()
    out = fn()
    torch_pjrt.flush()
    torch.tpu.synchronize()
    after = torch_pjrt.metrics()
    programs = (after["compiles"] + after["disk_cache_hits"]) - (before["compiles"] + before["disk_cache_hits"])
    return out, after["cache_misses"] - before["cache_misses"], programs


def each_position_once(positions, step):
    """step(p) for the first position (warm-up), then for the others: asserts they build nothing. Each step
    ends at a flush, as a step ending in a sync point would (fused eager: a stream per step; a stream of
    several steps is a program of its own)."""
    def run(p):
        step(p)
        torch_pjrt.flush()

    run(positions[0])
    _, entries, programs = new_programs(lambda: [run(p) for p in positions[1:]])
    assert (entries, programs) == (0, 0), f"{entries} cache entries and {programs} programs after the first position"


def test_select_at_every_index_is_one_program(mode):
    cpu = torch.linspace(-3, 5, 38)
    t = cpu.to("tpu")
    got = {}
    each_position_once(list(range(38)), lambda i: got.__setitem__(i, (t[i] * 2 + 1).cpu()))
    for i in range(38):
        torch.testing.assert_close(got[i], cpu[i] * 2 + 1, rtol=0, atol=0)


def test_item_of_a_view_is_one_program(mode):
    cpu = torch.randn(3, 41)
    t = cpu.to("tpu")
    got = {}
    each_position_once([(i, j) for i in range(3) for j in range(0, 41, 5)],
                       lambda p: got.__setitem__(p, t[p[0], p[1]].item()))
    for (i, j), v in got.items():
        assert v == cpu[i, j].item()


def test_narrow_columns_and_blocks(mode):
    cpu = torch.randn(9, 13)
    x = cpu.to("tpu")
    got = {}

    def step(p):
        i, j = p
        got[p] = (x.narrow(1, j, 4).sum(0), x[:, j] * 3, x[i:i + 2, j:j + 3].exp(), x[i].cumsum(0))

    positions = [(i, j) for i in range(7) for j in range(9)]
    each_position_once(positions, step)
    for (i, j), (a, b, c, d) in got.items():
        torch.testing.assert_close(a.cpu(), cpu.narrow(1, j, 4).sum(0))
        torch.testing.assert_close(b.cpu(), cpu[:, j] * 3)
        torch.testing.assert_close(c.cpu(), cpu[i:i + 2, j:j + 3].exp())
        torch.testing.assert_close(d.cpu(), cpu[i].cumsum(0))


def test_writes_through_views_at_every_offset(mode):
    ref = torch.zeros(6, 10)
    buf = ref.to("tpu")
    src_cpu = torch.randn(10)
    src = src_cpu.to("tpu")

    def step(i):
        buf[i].copy_(src * i)  # a row, contiguous
        buf[:, i].add_(1.5)  # a column, strided
        buf[i % 4:i % 4 + 2, 3:7].mul_(0.5)  # a block
        ref[i].copy_(src_cpu * i)
        ref[:, i].add_(1.5)
        ref[i % 4:i % 4 + 2, 3:7].mul_(0.5)

    each_position_once(list(range(6)), step)
    torch.testing.assert_close(buf.cpu(), ref)


def test_reads_and_writes_of_one_storage_at_two_offsets(mode):
    ref = torch.arange(40.0)
    x = ref.to("tpu")

    def step(i):
        x[i:i + 3].add_(x[i + 20:i + 23])
        ref[i:i + 3].add_(ref[i + 20:i + 23])

    each_position_once(list(range(0, 17, 2)), step)
    torch.testing.assert_close(x.cpu(), ref)


def test_views_of_an_unwritten_storage():
    # a storage never written reads as zeros wherever a view of it starts
    x = torch.zeros(12, device="tpu")  # a written storage: the reference
    e = torch.empty(12, device="tpu")
    e.zero_()
    for i in range(0, 9, 3):
        e[i:i + 2].fill_(float(i + 1))
        x[i:i + 2].fill_(float(i + 1))
    torch.testing.assert_close(e.cpu(), x.cpu())


def test_compiled_graph_inputs_at_offsets():
    torch._dynamo.reset()
    cpu = torch.randn(20, 6)
    t = cpu.to("tpu")
    f = torch.compile(lambda a, b: (a * 2 + b).sum(), backend="tpu")
    got = {}
    each_position_once(list(range(1, 14)), lambda i: got.__setitem__(i, f(t[i], t[i:i + 6, i % 6]).cpu()))
    for i, v in got.items():
        torch.testing.assert_close(v, (cpu[i] * 2 + cpu[i:i + 6, i % 6]).sum())
    torch._dynamo.reset()


def test_compile_reasons_name_what_changed(capfd, strict_eager):  # one program per op: strict eager's
    old = torch_pjrt.set_log_compiles(True)
    try:
        torch_pjrt.reset_metrics()
        a = torch.randn(3, 77)
        b = torch.randn(3, 78)
        got = [(a.to("tpu") * 1.25).cpu(), (b.to("tpu") * 1.25).cpu(), (a.to("tpu").t() * 1.25).cpu(),
               (a.double().to("tpu") * 1.25).cpu()]
        torch.tpu.synchronize()
    finally:
        torch_pjrt.set_log_compiles(old)
    for g, x in zip(got, [a, b, a.t(), a.double()]):
        torch.testing.assert_close(g, x * 1.25)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("tpu: new program: aten::mul.Tensor(self: ")]
    # each new program of the op, and why: the first, a new shape, a new stride, a new dtype (against the
    # nearest earlier program: each differs from one of the others in exactly that)
    assert any("self: f32[3, 78]" in line and "new shape: self shape [3, 78] (was [3, 77])" in line for line in lines), err
    assert any("self: f32[77, 3] strides [1, 77]" in line and "self strides [1, 77] (was contiguous)" in line
               for line in lines), err
    assert any("self: f64[3, 77]" in line and "new dtype: self dtype f64 (was f32)" in line for line in lines), err
    report = torch_pjrt.compile_report()
    mul = report["aten::mul.Tensor"]
    assert mul["programs"] == len(mul["reasons"]) >= 3
    assert any("new shape: self shape [3, 78] (was [3, 77])" in r for r in mul["reasons"])
    # a program counts once: running them again builds nothing and reports nothing new
    torch_pjrt.reset_metrics()
    (b.to("tpu") * 1.25).cpu()
    assert "aten::mul.Tensor" not in torch_pjrt.compile_report()


def test_compile_reasons_of_a_new_argument_and_an_offset(strict_eager):
    torch_pjrt.reset_metrics()
    x = torch.randn(5, 31).to("tpu")
    x.sum(dim=1).cpu()
    x.sum(dim=0).cpu()
    reasons = torch_pjrt.compile_report()["aten::sum.dim_IntList"]["reasons"]
    assert any("new argument: dim [0] (was [1])" in r for r in reasons), reasons
    # a view at a new offset is no new program; a view of the whole storage against part of one is
    torch_pjrt.reset_metrics()
    (x[1] * 3).cpu()
    (x[2] * 3).cpu()
    (x.flatten()[:31] * 3).cpu()
    mul = torch_pjrt.compile_report().get("aten::mul.Tensor", {"reasons": []})["reasons"]
    assert len([r for r in mul if "self: f32[31]" in r]) <= 1, mul


def test_log_compiles_setting_prints_each_program():
    code = ("import torch, torch_pjrt\n"
            "x = torch.arange(6.0, device='tpu').reshape(2, 3)\n"
            "print((x * 2 + 1).sum().item())\n")
    env = dict(os.environ, TORCH_PJRT_LOG_COMPILES="1", TORCH_PJRT_CACHE_DIR="", TORCH_PJRT_EAGER="strict")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert float(p.stdout.strip().splitlines()[-1]) == float((torch.arange(6.0) * 2 + 1).sum())
    lines = [line for line in p.stderr.splitlines() if line.startswith("tpu: new program: ")]
    assert any(line.startswith("tpu: new program: aten::mul.Tensor(self: f32[2, 3], other: 2)") and
               "compiled in" in line and line.endswith("first program of aten::mul.Tensor") for line in lines), p.stderr
    assert any(line.startswith("tpu: new program: aten::sum(") for line in lines), p.stderr
    env["TORCH_PJRT_LOG_COMPILES"] = "0"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "tpu: new program" not in p.stderr, p.stderr
