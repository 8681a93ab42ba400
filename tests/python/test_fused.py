"""Fused eager (torch_pjrt.fused(), TORCH_PJRT_EAGER=fused): table-row ops are recorded, and the stream runs
as one program at a sync point (.item(), .cpu(), printing, a data-dependent op, synchronize, leaving the
mode). Everything is compared with PyTorch on CPU on the same inputs."""

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from test_training import MLP, SmallCNN, SmallTransformer, data, train

import torch_pjrt


@pytest.fixture(autouse=True)
def fused_mode():
    with torch_pjrt.fused():
        yield


def _uploaded(*shape):
    """A CPU tensor and its copy on "tpu", nothing pending."""
    x = torch.randn(*shape)
    t = x.to("tpu")
    torch.tpu.synchronize()
    return x, t


def _stats():
    pending, streams = torch.ops.tpu_fused.stats()
    return pending, streams


def test_mode_api():
    assert torch_pjrt.get_eager_mode() == "fused"
    with pytest.raises(ValueError, match="strict.*fused"):
        torch_pjrt.set_eager_mode("lazy")
    torch_pjrt.set_eager_mode("strict")
    try:
        assert torch_pjrt.get_eager_mode() == "strict"
        x = torch.ones(3, device="tpu") + 1  # runs at once: nothing pending
        assert _stats()[0] == 0
        assert x.cpu().tolist() == [2.0, 2.0, 2.0]
    finally:
        torch_pjrt.set_eager_mode("fused")


@pytest.mark.parametrize("kind,factory", [("mlp", MLP), ("cnn", SmallCNN), ("transformer", SmallTransformer)])
def test_fused_training_matches_cpu(kind, factory):
    torch.manual_seed(0)
    model, batches = factory(), data(kind, 20)
    streams, fallbacks = _stats()[1], torch_pjrt.metrics()["fallback_total"]
    (tpu_losses, tpu_grads), (cpu_losses, cpu_grads) = (train(copy.deepcopy(model), batches, d) for d in ("tpu", "cpu"))
    assert torch_pjrt.metrics()["fallback_total"] == fallbacks
    assert _stats()[1] > streams  # the steps ran as fused streams
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=0)
    for name, g in cpu_grads.items():
        torch.testing.assert_close(tpu_grads[name], g, rtol=1e-4, atol=1e-4, msg=f"gradient of {name}")


def test_steady_state_compiles_nothing():
    torch.manual_seed(0)
    model = MLP()
    cpu_model = copy.deepcopy(model)
    tmodel = model.to("tpu")
    opt = torch.optim.AdamW(tmodel.parameters(), lr=1e-3, weight_decay=0.01)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3, weight_decay=0.01)
    batches = data("mlp", 20)
    misses = []
    streams = []
    for x, y in batches:
        misses.append(torch_pjrt.metrics()["cache_misses"])
        streams.append(_stats()[1])
        loss = nn.functional.cross_entropy(tmodel(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        got = loss.item()
        cpu_loss = nn.functional.cross_entropy(cpu_model(x), y)
        cpu_opt.zero_grad()
        cpu_loss.backward()
        cpu_opt.step()
        assert got == pytest.approx(cpu_loss.item(), rel=1e-4)
    # steps 3..20: no program built, neither per op nor per stream
    assert misses[2:] == [misses[2]] * 18, misses
    # and each step is few streams (the uploads of x and y and the loss.item() are the sync points)
    per_step = [b - a for a, b in zip(streams[2:], streams[3:])]
    assert max(per_step) <= 2, per_step


def test_chain_is_one_program():
    x, t = _uploaded(64, 32)
    before = torch_pjrt.metrics()["executions"]
    y = t.exp()
    for i in range(10):
        y = (y * 1.5 + i).sin()
    z = y.sum(1)
    assert _stats()[0] == 32  # exp, then mul, add, sin per step, and the sum
    got = z.cpu()
    assert torch_pjrt.metrics()["executions"] - before == 1
    want = x.exp()
    for i in range(10):
        want = (want * 1.5 + i).sin()
    torch.testing.assert_close(got, want.sum(1), rtol=1e-5, atol=1e-5)


def test_recorded_ops_compile_only_their_stream():
    # a recorded op is lowered into its stream's program and never compiled by itself; the same op run
    # eagerly later (strict eager) compiles its own program then, and both match the CPU
    x, t = _uploaded(7, 53)
    torch_pjrt.reset_metrics()
    got = (t.cos() * 2.5 + t.exp()).sum(0).cpu()
    report = torch_pjrt.compile_report()
    assert set(report) == {"fused eager stream"}, report
    assert report["fused eager stream"]["programs"] == 1
    torch.testing.assert_close(got, (x.cos() * 2.5 + x.exp()).sum(0), rtol=1e-5, atol=1e-5)
    torch_pjrt.set_eager_mode("strict")
    try:
        torch_pjrt.reset_metrics()
        got = (t.cos() * 2.5 + t.exp()).sum(0).cpu()
        report = torch_pjrt.compile_report()
    finally:
        torch_pjrt.set_eager_mode("fused")
    assert {"aten::cos", "aten::mul.Tensor", "aten::exp", "aten::add.Tensor", "aten::sum.dim_IntList"} <= set(report)
    assert "fused eager stream" not in report
    torch.testing.assert_close(got, (x.cos() * 2.5 + x.exp()).sum(0), rtol=1e-5, atol=1e-5)


def test_sync_points():
    x = torch.randn(5, 6)
    t = x.to("tpu")
    a = t * 2 - 1
    assert _stats()[0] > 0
    assert (a.sum()).item() == pytest.approx((x * 2 - 1).sum().item(), rel=1e-5)  # item
    assert _stats()[0] == 0
    b = t.exp()
    torch.testing.assert_close(b.cpu(), x.exp())  # cpu
    c = t.relu() + 0.5
    assert str(c) == str(torch.nn.functional.relu(x) + 0.5).replace(")", ", device='tpu:0')", 1)  # print
    d = t - t.mean()
    assert torch.equal(d.gt(0).nonzero().cpu(), (x - x.mean()).gt(0).nonzero())  # data-dependent
    e = t.abs()
    torch.tpu.synchronize()
    assert _stats()[0] == 0
    torch.testing.assert_close(e.cpu(), x.abs())


def test_inplace_on_views_and_aliasing():
    x = torch.randn(6, 8)
    t = x.to("tpu")
    tv = t[1:5, ::2]  # a strided view
    tv.mul_(3)
    t.t()[2].add_(10)  # a column through a transposed view
    w = t.view(48)
    w[::7] = -1.0
    u = t + 0  # reads after the writes
    cv = x[1:5, ::2]
    cv.mul_(3)
    x.t()[2].add_(10)
    x.view(48)[::7] = -1.0
    torch.testing.assert_close(u.cpu(), x)
    torch.testing.assert_close(tv.cpu(), cv)
    torch.testing.assert_close(t.cpu(), x)


def test_out_and_inplace_into_fresh_and_aliased_storages():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    ta, tb = a.to("tpu"), b.to("tpu")
    out = torch.empty(4, 4, device="tpu")  # never written: no buffer
    torch.add(ta, tb, out=out)
    ta.add_(ta)  # reads and writes one storage
    tb.copy_(ta[0].expand(4, 4))
    torch.testing.assert_close(out.cpu(), a + b)
    torch.testing.assert_close(ta.cpu(), a + a)
    torch.testing.assert_close(tb.cpu(), (a + a)[0].expand(4, 4))


def test_freed_temporaries_are_no_outputs():
    x, t = _uploaded(32, 32)
    base = torch_pjrt.metrics()["live_buffers"]
    y = t.exp()
    z = y * 2
    del y  # freed before the flush: never materialized
    w = z.sum()
    del z
    got = w.item()
    assert torch_pjrt.metrics()["live_buffers"] == base + 1  # only w's value
    assert got == pytest.approx((x.exp() * 2).sum().item(), rel=1e-5)


def test_error_names_the_op():
    a = torch.randn(3, 4, device="tpu")
    b = a * 2
    with pytest.raises(RuntimeError, match="mm|shapes cannot be multiplied"):
        torch.mm(b, torch.randn(5, 6, device="tpu"))  # shape inference raises at the call, not at the flush
    torch.testing.assert_close(b.cpu(), a.cpu() * 2)  # the stream before it is intact


def test_device_failure_names_the_streams_ops():
    """A failure while the stream runs poisons its results; the next read raises it naming the stream's ops."""
    x = torch.ones(1, device="tpu").expand(2**36)  # a float32 result of 256 GiB: more than the device holds
    y = x * 1  # kept alive: an output of the stream
    s = y.sum()
    with pytest.raises(torch.OutOfMemoryError, match=r"fused eager stream of \d+ ops \(.*aten::mul\.Tensor"):
        s.item()
    del y, s
    torch.tpu.synchronize()  # reported once, as in strict eager
    z = torch.arange(6.0).to("tpu") * 2  # the process keeps working
    assert z.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


_FAILED_BUILD_CHILD = """
import os, torch, torch_pjrt
torch_pjrt.set_eager_mode("fused")
x_cpu, e_cpu = torch.randn(5), torch.randn(5)
x, e = x_cpu.to("tpu"), torch.empty(5, device="tpu")
torch.tpu.synchronize()
# no room for any new program: the stream's compile fails (read at the first compile)
os.environ["TORCH_PJRT_MAP_LIMIT"] = str(sum(1 for _ in open("/proc/self/maps")) + 4000)
x.mul_(2)
e.copy_(x)
y = x + 1
try:
    y.cpu()
    raise SystemExit("no error")
except RuntimeError as err:
    assert "vm.max_map_count" in str(err) and "aten::mul_" in str(err), err
# the storages the stream wrote are as they were before it (e was never written); its result reports the error
torch_pjrt.set_eager_mode("strict")
assert torch.equal(x.cpu(), x_cpu), (x.cpu(), x_cpu)
try:
    y.cpu()
    raise SystemExit("no error from the failed stream's result")
except RuntimeError as err:
    assert "vm.max_map_count" in str(err), err
print("OK")
"""


def test_a_stream_that_fails_to_compile_leaves_written_tensors_as_they_were():
    env = dict(os.environ, TORCH_PJRT_CACHE_DIR="")
    r = subprocess.run([sys.executable, "-c", _FAILED_BUILD_CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout + r.stderr


def test_long_streams_are_cut():
    """A loop without sync points runs in streams that repeat (cut where the stream's first op comes round
    again), so it compiles a bounded number of programs."""
    t = torch.zeros(4, device="tpu")
    torch.tpu.synchronize()
    misses = torch_pjrt.metrics()["cache_misses"]
    for _ in range(2500):
        t = t + 1
    assert 0 < _stats()[0] < 2000
    assert t.cpu().tolist() == [2500.0] * 4
    assert torch_pjrt.metrics()["cache_misses"] - misses <= 3


def test_tiny_llama_static_cache_greedy_decode_matches_cpu():
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from hf_tiny import make_model

    cpu = make_model("llama")
    tpu = make_model("llama").to("tpu")
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, 256, (2, 10), generator=g)
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, cache_implementation="static",
              disable_compile=True, attention_mask=torch.ones_like(ids))
    want = cpu.generate(ids, **kw)
    streams = _stats()[1]
    kw["attention_mask"] = kw["attention_mask"].to("tpu")
    got = tpu.generate(ids.to("tpu"), **kw)
    assert torch.equal(got.cpu(), want)
    assert _stats()[1] > streams


def test_random_ops_draw_as_in_strict_eager():
    """Random ops take the generator's state when recorded, so a seed gives the numbers strict eager gives."""
    x = torch.randn(64, 64)
    t = x.to("tpu")

    def draws():
        torch.manual_seed(3)
        a = torch.rand(16, device="tpu")
        d = nn.functional.dropout(t * 2, 0.5, training=True)
        b = torch.randn(8, device="tpu") + a[:8]
        q = t[:8].reshape(1, 2, 4, 64)
        o = nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5)  # draws inside its row
        return a.cpu(), d.cpu(), b.cpu(), o.cpu()

    fused = draws()
    torch_pjrt.set_eager_mode("strict")
    try:
        strict = draws()
    finally:
        torch_pjrt.set_eager_mode("fused")
    for f, s in zip(fused, strict):
        assert torch.equal(f, s)
    d = fused[1]
    kept = d != 0
    assert 0.3 < kept.float().mean().item() < 0.7
    torch.testing.assert_close(d[kept], (x * 2)[kept] / 0.5)


def test_exit_while_a_stream_runs_is_clean():
    # The interpreter exits while the dispatch thread still runs a stream and frees what it recorded; that
    # clean-up can release tensors Python objects hold (the GIL), and a thread taking the GIL during
    # finalization used to abort the process ("terminate called without an active exception") in about a
    # third of such exits. torch_pjrt drains the dispatch thread at exit, before finalization.
    import subprocess
    import sys

    code = ("import torch, torch_pjrt\n"
            "torch_pjrt.set_eager_mode('fused')\n"
            "x = torch.randn(512, 512, device='tpu')\n"
            "for i in range(100):\n"
            "    x = (x @ x).tanh() * (torch.tensor(0.5) if i % 2 else 0.5)\n"
            "torch_pjrt.flush()\n")
    for _ in range(4):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
