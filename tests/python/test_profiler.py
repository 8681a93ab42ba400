"""torch.profiler on "tpu" (issue #37 item 4): each op's device time through PyTorch's PrivateUse1 profiler hooks
(torch.autograd.profiler.profile(use_device="tpu")), program compiles and sync points as spans of their own (also
under torch.profiler.profile), and export_chrome_trace writing them."""

import json

import pytest
import torch

import torch_pjrt

SHAPES = iter(range(40, 400))  # a fresh matmul shape per use: its program compiles inside the profiler


def _matmul_inputs():
    n = next(SHAPES)
    return torch.randn(n, 24).to("tpu"), torch.randn(24, n + 3).to("tpu"), n


def _names(prof):
    return {e.key for e in prof.key_averages()}


def test_device_time_of_a_matmul_and_the_spans(strict_eager, tmp_path):
    a, b = torch.randn(256, 256).to("tpu"), torch.randn(256, 256).to("tpu")
    (a @ b).cpu()  # compiled before: the profiled mm below is a launch and its device work
    x, y, n = _matmul_inputs()
    with torch.autograd.profiler.profile(use_device="tpu") as prof:
        c = a @ b
        d = x @ y
        got = d.cpu()
        torch.tpu.synchronize()
    torch.testing.assert_close(got, x.cpu() @ y.cpu(), rtol=1e-4, atol=1e-4)
    assert c.shape == (256, 256)
    events = {e.key: e for e in prof.key_averages()}
    mm = events["aten::mm"]
    assert mm.count >= 2 and mm.device_time_total > 0 and mm.self_device_time_total > 0, mm
    compile_name = f"tpu.compile aten::mm(self: f32[{n}, 24], mat2: f32[24, {n + 3}])"
    assert compile_name in events, sorted(events)
    assert events[compile_name].count == 1
    assert "tpu.sync_point copy to the host" in events and "tpu.synchronize" in events
    assert "Self TPU" in prof.key_averages().table()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    traced = {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}
    assert {"aten::mm", compile_name, "tpu.synchronize", "tpu.sync_point copy to the host"} <= traced


def test_torch_profiler_shows_compiles_and_sync_points(tmp_path):
    x, y, n = _matmul_inputs()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
    with torch.profiler.profile(activities=activities) as prof:
        (x @ y).cpu()
        torch.tpu.synchronize()
    names = _names(prof)
    assert any(k.startswith("tpu.compile") for k in names), sorted(names)
    assert "tpu.synchronize" in names and "tpu.sync_point copy to the host" in names
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    traced = {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}
    assert "tpu.synchronize" in traced and any(str(k).startswith("tpu.compile") for k in traced)


def test_a_compiled_graph_compile_is_a_span():
    x, y, n = _matmul_inputs()

    @torch.compile(backend="tpu")
    def f(p, q):
        return torch.relu(p @ q) + 1

    with torch.autograd.profiler.profile(use_device="tpu") as prof:
        got = f(x, y).cpu()
    torch.testing.assert_close(got, torch.relu(x.cpu() @ y.cpu()) + 1, rtol=1e-4, atol=1e-4)
    assert any(k.startswith("tpu.compile") for k in _names(prof)), sorted(_names(prof))


@pytest.mark.parametrize("mode", ["fused"])
def test_fused_stream_compile_is_a_span(mode):
    x, y, _ = _matmul_inputs()
    old = torch_pjrt.get_eager_mode()
    torch_pjrt.set_eager_mode(mode)
    try:
        with torch.autograd.profiler.profile(use_device="tpu") as prof:
            z = (x @ y).relu() * 3
            z.cpu()
    finally:
        torch_pjrt.set_eager_mode(old)
    assert any(k.startswith("tpu.compile fused_eager") for k in _names(prof)), sorted(_names(prof))
