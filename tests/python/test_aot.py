"""Deviceless compiles (TORCH_PJRT_AOT_TARGETS, torch_pjrt.aot): a run on the CPU plugin also compiles
every program for an H100 and a TPU v6e, through the CUDA plugin and libtpu with neither device here.
Each case runs in a child process (the targets are read when the device starts) and checks its results
against the CPU there; the parent checks the report: what compiled, what failed, the exit status."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import torch_pjrt

_C = torch_pjrt._C
TARGETS = "h100,tpu-v6e"

pytestmark = pytest.mark.skipif(
    not (_C._find_plugin("cuda") and _C._find_plugin("tpu")),
    reason="needs jax-cuda13-pjrt, nvidia-cuda-nvcc, nvidia-nvvm and libtpu (scripts/setup.sh installs them)",
)

# Ops whose CPU programs call torch-pjrt's host kernels (a float32 product, softmax, cumsum, a grouped
# product), a compiled training step and a fused-eager stream, each against the CPU.
WORKLOAD = textwrap.dedent("""
    import json, sys, torch, torch_pjrt
    torch.manual_seed(0)
    def close(got, want, **tol):
        torch.testing.assert_close(got.cpu(), want, **tol)
    x, w = torch.randn(64, 128), torch.randn(128, 96)
    close(torch.softmax(x.to("tpu") @ w.to("tpu"), -1).cumsum(-1), torch.softmax(x @ w, -1).cumsum(-1),
          rtol=1e-4, atol=1e-4)
    a, b = torch.randn(14, 16).bfloat16(), torch.randn(4, 16, 8).bfloat16()
    offs = torch.tensor([3, 3, 10, 12], dtype=torch.int32)
    close(torch._grouped_mm(a.to("tpu"), b.to("tpu"), offs=offs.to("tpu"))[:12],
          torch._grouped_mm(a, b, offs=offs)[:12], atol=2e-2, rtol=2e-2)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    inp = torch.randn(16, 32)
    want = model(inp).square().mean()
    want.backward()
    grad = model[0].weight.grad.clone()
    model.zero_grad()
    m = model.to("tpu")
    step = torch.compile(lambda t: m(t).square().mean(), backend="tpu")
    loss = step(inp.to("tpu"))
    loss.backward()
    close(loss, want, rtol=1e-5, atol=1e-5)
    close(m[0].weight.grad, grad, rtol=1e-4, atol=1e-5)
    with torch_pjrt.fused():
        y = (x.to("tpu") * 2 + 1).relu().sum(0)
    close(y, (x * 2 + 1).relu().sum(0), rtol=1e-5, atol=1e-5)
    report = torch_pjrt.aot.report()
    report["device_compiles"] = torch_pjrt.metrics()["compiles"]
    print("REPORT " + json.dumps(report))
""")


def run(tmp_path, env_extra, code=WORKLOAD):
    env = dict(os.environ, TORCH_PJRT_AOT_TARGETS=TARGETS, TORCH_PJRT_CACHE_DIR=str(tmp_path / "cache"),
               TF_CPP_MIN_LOG_LEVEL="1")
    env.pop("TORCH_PJRT_AOT_FAILURES", None)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)


def report_of(out):
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT "):])


def test_every_program_compiles_for_an_h100_and_a_tpu_without_them(tmp_path):
    out = run(tmp_path, {})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    r = report_of(out)
    assert r["failures"] == []
    for name, platform in (("h100", "cuda"), ("tpu-v6e", "tpu")):
        t = r["targets"][name]
        assert t["platform"] == platform and t["pending"] == 0 and t["failures"] == 0
        # every program the device compiled (eager ops, fused streams, the graphs, internal programs)
        assert t["compiles"] == r["device_compiles"] >= 6, (t, r["device_compiles"])
    assert "torch_pjrt AOT h100 (NVIDIA H100 80GB HBM3):" in out.stderr

    # A second run finds every executable in the program cache's folder, one per target and program.
    again = run(tmp_path, {})
    assert again.returncode == 0, again.stderr[-3000:]
    r2 = report_of(again)
    for name in ("h100", "tpu-v6e"):
        assert r2["targets"][name]["compiles"] == 0
        assert r2["targets"][name]["cached"] == r["targets"][name]["compiles"]
    folders = sorted(p.name.split("-")[0] for p in (tmp_path / "cache" / "aot").iterdir())
    assert folders == ["h100", "tpu"]


def test_the_cpu_programs_as_they_are_fail_on_the_targets_and_the_run_exits_1(tmp_path):
    # The CPU plugin's programs call host kernels, which the other plugins do not have: what the per-target
    # lowering avoids. Failures name the op and its shapes and the target's error, and set the exit status.
    # strict eager, so that the failures name single ops (fused eager would name its streams)
    out = run(tmp_path, {"TORCH_PJRT_AOT_LOWERING": "device", "TORCH_PJRT_EAGER": "strict"})
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    r = report_of(out)
    failed = {(target, program.split("(")[0]) for target, program, _ in r["failures"]}
    for op in ("aten::mm", "aten::_softmax", "aten::cumsum"):
        assert ("h100", op) in failed, sorted(failed)
    errors = " ".join(e for _, _, e in r["failures"])
    assert "torch_pjrt_matmul" in errors and "PJRT_Compile" in errors
    assert "torch_pjrt AOT failure on h100: aten::mm(" in out.stderr


def test_unknown_target_is_a_clear_error(tmp_path):
    code = "import torch, torch_pjrt\ntorch.ones(2, device='tpu')\n"
    out = run(tmp_path, {"TORCH_PJRT_AOT_TARGETS": "h100,h999"}, code)
    assert out.returncode != 0
    assert "unknown target 'h999'" in out.stderr and "tpu-v6e" in out.stderr


def test_targets_are_listed():
    t = torch_pjrt.aot.targets()
    assert t["h100"] == ("cuda", "NVIDIA H100 80GB HBM3") and t["b200"][0] == "cuda"
    assert t["tpu-v6e"] == ("tpu", "v6e:1x1")
    out = subprocess.run([sys.executable, "-m", "torch_pjrt", "info"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "h100" in out.stdout and "plugin installed" in out.stdout


# Pallas kernels and a plain JAX function (torch_pjrt.jax_op) on the CPU plugin: JAX lowers each also for
# the targets' platforms, so libtpu compiles the kernels as Mosaic for the TPU v6e. For the H100 JAX lowers
# them to Triton, whose bytecode from JAX 0.10.2 (the newest for Python 3.11) the CUDA plugin 0.12 does not
# parse: those failures are reported, naming the op and Triton.
PALLAS = textwrap.dedent("""
    import json, torch, torch_pjrt
    import jax.numpy as jnp
    from torch_pjrt import pallas_examples as pe
    torch.manual_seed(0)
    a, b = torch.randn(64, 32), torch.randn(32, 256)
    torch.testing.assert_close(pe.matmul(a.to("tpu"), b.to("tpu")).cpu(), a @ b, atol=1e-4, rtol=1e-4)
    s = torch.randn(16, 256)
    torch.testing.assert_close(pe.softmax(s.to("tpu")).cpu(), torch.softmax(s, -1))
    double = torch_pjrt.jax_op(lambda x: jnp.tanh(x) * 2, name="tanh2")
    torch.testing.assert_close(double(a.to("tpu")).cpu(), torch.tanh(a) * 2)
    for op in (pe.matmul, pe.softmax):
        (lowered,) = op._lowered.values()
        print("MOSAIC", "tpu_custom_call" in lowered.by_plugin["tpu"], "tpu_custom_call" in lowered.functions)
    report = torch_pjrt.aot.report()
    print("REPORT " + json.dumps(report))
""")


def test_jax_ops_compile_for_the_targets_as_jax_lowers_them_there(tmp_path):
    out = run(tmp_path, {"TORCH_PJRT_EAGER": "strict", "TORCH_PJRT_JAX_CACHE": "0"}, PALLAS)
    assert out.stdout.count("MOSAIC True False") == 2, out.stdout[-3000:] + out.stderr[-3000:]  # Mosaic for the TPU; interpreted here
    r = report_of(out)
    assert out.returncode == (1 if r["failures"] else 0), out.stderr[-3000:]
    tpu, gpu = r["targets"]["tpu-v6e"], r["targets"]["h100"]
    assert tpu["failures"] == 0 and tpu["compiles"] >= 3, tpu
    assert gpu["compiles"] >= 3, gpu  # the plain JAX function compiled for the H100
    for target, program, error in r["failures"]:
        assert target == "h100" and program.startswith("jax_op_pallas_") and "Triton" in error, (program, error[:300])
