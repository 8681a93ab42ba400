"""Diffusers pipelines on "tpu", each against the same pipeline on the CPU with the same seed (max abs diff
1e-4, no CPU fallback): DDPM and DDIM (UNet2D), Flux and Stable Diffusion 3, all tiny and built offline by
torch_pjrt.tiny_pipelines. Latents from a CPU generator and from a torch.Generator("tpu"); strict and fused
eager; torch.compile of the denoiser and Flux's compile_repeated_blocks; model CPU offload and group offload;
a 20-step schedule that compiles no new program after its second step; Diffusers' DIFFUSERS_TEST_DEVICE_SPEC
test hooks."""

import importlib
import json
import os
import subprocess
import sys
import textwrap

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import torch_pjrt  # noqa: E402

pytest.importorskip("diffusers")
pytest.importorskip("transformers")
from torch_pjrt import tiny_pipelines  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")

PIPELINES = ["ddpm", "ddim", "flux", "sd3"]
DENOISER = {"ddpm": "unet", "ddim": "unet", "flux": "transformer", "sd3": "transformer"}
# the modules whose randn_tensor draws a pipeline's noise (initial latents, and DDPM's / DDIM's step noise)
NOISE_MODULES = {
    "ddpm": ["diffusers.pipelines.ddpm.pipeline_ddpm", "diffusers.schedulers.scheduling_ddpm"],
    "ddim": ["diffusers.pipelines.ddim.pipeline_ddim", "diffusers.schedulers.scheduling_ddim"],
    "flux": ["diffusers.pipelines.flux.pipeline_flux"],
    "sd3": ["diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3"],
}


def _build(name):
    return getattr(tiny_pipelines, name)()


def _run(pipe, name, steps=3, **kw):
    if name in ("ddpm", "ddim"):
        return pipe(batch_size=1, num_inference_steps=steps, output_type="np", **kw).images
    return pipe("a cat", height=16, width=16, num_inference_steps=steps, max_sequence_length=16, output_type="np",
                **kw).images


def _seeded_run(pipe, name, steps=3, seed=0, **kw):
    return _run(pipe, name, steps, generator=torch.Generator().manual_seed(seed), **kw)


def _assert_matches(got, expected):
    assert got.shape == expected.shape
    # most pixels inside (0, 1): the clamp to [0, 1] hides few differences
    assert ((expected > 0) & (expected < 1)).mean() > 0.5
    diff = float(np.abs(got - expected).max())
    assert diff <= 1e-4, f"max abs diff {diff:.3g}"


class _OnTpu:
    """The block ran programs on "tpu" and fell back to the CPU for no op."""

    def __enter__(self):
        m = torch_pjrt.metrics()
        self.fallbacks, self.executions = m["fallback_total"], m["executions"]

    def __exit__(self, *exc):
        if exc[0] is None:
            m = torch_pjrt.metrics()
            assert m["fallback_total"] == self.fallbacks, m["fallbacks"]
            assert m["executions"] > self.executions


@pytest.fixture(scope="module")
def cpu_pipes():
    return {name: _build(name) for name in PIPELINES}


@pytest.fixture(scope="module")
def tpu_pipes():
    return {name: _build(name).to("tpu") for name in PIPELINES}


@pytest.fixture(scope="module")
def reference(cpu_pipes):
    """The CPU pipeline's image for (name, steps, seed), computed once."""
    done = {}

    def get(name, steps=3, seed=0):
        if (name, steps, seed) not in done:
            done[name, steps, seed] = _seeded_run(cpu_pipes[name], name, steps, seed)
        return done[name, steps, seed]

    return get


@pytest.fixture
def fused_eager():
    old = torch_pjrt.get_eager_mode()
    torch_pjrt.set_eager_mode("fused")
    yield
    torch_pjrt.set_eager_mode(old)


@pytest.fixture
def dynamo():
    """A fresh Dynamo state and counters for one test, and none left for the next."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield torch._dynamo.utils.counters
    torch._dynamo.reset()


def _assert_compiled(counters):
    assert counters["stats"]["unique_graphs"] >= 1, "nothing was compiled"
    assert not counters["graph_break"], dict(counters["graph_break"])


@pytest.mark.parametrize("name", PIPELINES)
def test_pipeline_matches_cpu(name, tpu_pipes, reference):
    pipe = tpu_pipes[name]
    assert pipe.device.type == "tpu" and pipe._execution_device.type == "tpu"
    with _OnTpu():
        got = _seeded_run(pipe, name)
    _assert_matches(got, reference(name))


@pytest.mark.parametrize("name", PIPELINES)
def test_tpu_generator_latents(name, tpu_pipes, cpu_pipes, monkeypatch):
    """The tpu pipeline draws its noise with a torch.Generator("tpu"); the CPU pipeline gets the same numbers:
    Flux's and SD3's initial latents through ``latents=``; DDPM and DDIM (no latents argument; DDIM with
    eta=1 so its scheduler draws too) by replaying every recorded draw in order in place of randn_tensor."""
    from diffusers.utils.torch_utils import randn_tensor

    pipe = tpu_pipes[name]
    drawn, latents = [], []

    def recording_randn(*args, **kw):
        drawn.append(randn_tensor(*args, **kw))
        return drawn[-1]

    for module in NOISE_MODULES[name]:
        monkeypatch.setattr(importlib.import_module(module), "randn_tensor", recording_randn)
    if name in ("flux", "sd3"):
        prepare = pipe.prepare_latents

        def recording_prepare(*args, **kw):
            out = prepare(*args, **kw)
            latents.append((out[0] if isinstance(out, tuple) else out).cpu())  # Flux: (packed latents, ids)
            return out

        monkeypatch.setattr(pipe, "prepare_latents", recording_prepare)
    kw = {"eta": 1.0} if name == "ddim" else {}
    with _OnTpu():
        got = _run(pipe, name, generator=torch.Generator("tpu").manual_seed(7), **kw)
    monkeypatch.undo()

    # the image or latents, then the step noise of DDPM (none at its last step) and DDIM
    assert len(drawn) == {"ddpm": 3, "ddim": 4}.get(name, 1)
    assert all(d.device.type == "tpu" for d in drawn)
    # they are the tpu generator's stream: a fresh one with the same seed draws them again
    g = torch.Generator("tpu").manual_seed(7)
    for d in drawn:
        assert torch.equal(torch.randn(d.shape, generator=g, device="tpu").cpu(), d.cpu())
    if name in ("flux", "sd3"):
        assert len(latents) == 1
        expected = _run(cpu_pipes[name], name, latents=latents[0])
    else:
        queue = [d.cpu() for d in drawn]

        def replay(shape, generator=None, device=None, dtype=None, layout=None):
            assert tuple(queue[0].shape) == tuple(shape)
            return queue.pop(0).to(device or "cpu", dtype)

        for module in NOISE_MODULES[name]:
            monkeypatch.setattr(importlib.import_module(module), "randn_tensor", replay)
        expected = _run(cpu_pipes[name], name, **kw)
        assert not queue
    _assert_matches(got, expected)


@pytest.mark.parametrize("name", PIPELINES)
def test_fused_eager(name, tpu_pipes, reference, fused_eager):
    with _OnTpu():
        got = _seeded_run(tpu_pipes[name], name)
    _assert_matches(got, reference(name))


@pytest.mark.parametrize("name, how", [("ddpm", "compile"), ("flux", "compile"), ("flux", "repeated_blocks"),
                                       ("sd3", "compile")])
def test_compiled_denoiser(name, how, reference, dynamo):
    """Plain torch.compile (Inductor by default) of the UNet / transformer: torch_pjrt routes graphs whose
    inputs are on "tpu" to its backend. Flux also with compile_repeated_blocks(fullgraph=True)."""
    pipe = _build(name).to("tpu")
    denoiser = getattr(pipe, DENOISER[name])
    if how == "compile":
        denoiser.compile()
    else:
        denoiser.compile_repeated_blocks(fullgraph=True)
    with _OnTpu():
        got = _seeded_run(pipe, name)
    _assert_compiled(dynamo)
    _assert_matches(got, reference(name))


@pytest.mark.parametrize("name", ["ddpm", "flux", "sd3"])
def test_model_cpu_offload(name, reference):
    pipe = _build(name)
    pipe.enable_model_cpu_offload(device="tpu")
    assert pipe._execution_device.type == "tpu"
    assert getattr(pipe, DENOISER[name]).device.type == "cpu"
    with _OnTpu():
        got = _seeded_run(pipe, name)
    _assert_matches(got, reference(name))


@pytest.mark.parametrize("name", ["flux", "sd3"])
@pytest.mark.parametrize("offload", [dict(offload_type="leaf_level", use_stream=True),
                                     dict(offload_type="block_level", num_blocks_per_group=1),
                                     dict(offload_type="block_level", num_blocks_per_group=1, use_stream=True)],
                         ids=["leaf_stream", "block", "block_stream"])
def test_group_offload(name, offload, reference):
    pipe = _build(name)
    pipe.enable_group_offload(onload_device=torch.device("tpu"), offload_device=torch.device("cpu"), **offload)
    assert pipe._execution_device.type == "tpu"
    with _OnTpu():
        got = _seeded_run(pipe, name)
    _assert_matches(got, reference(name))


def _programs():
    """(cache misses, compiles) so far, once the pending fused stream (if any) has run."""
    torch_pjrt.flush()
    m = torch_pjrt.metrics()
    return m["cache_misses"], m["compiles"]


def twenty_steps(name, mode, out):
    """Runs in a fresh process (see the test below): the 20-step call, the program counters at the end of
    every step as JSON on stdout, the image into the file ``out``."""
    pipe = _build(name).to("tpu")
    if mode == "compiled":
        getattr(pipe, DENOISER[name]).compile()
    at_step, kw = [], {}
    if name == "flux":
        def callback(pipe, i, t, tensors):
            at_step.append(_programs())
            return {}

        kw["callback_on_step_end"] = callback
    else:  # DDIMPipeline takes no callback: count after each scheduler step
        step = pipe.scheduler.step

        def counted_step(*args, **kwargs):
            result = step(*args, **kwargs)
            at_step.append(_programs())
            return result

        pipe.scheduler.step = counted_step
    before = torch_pjrt.metrics()
    np.save(out, _seeded_run(pipe, name, steps=20, **kw))
    after, stats = torch_pjrt.metrics(), torch._dynamo.utils.counters
    print(json.dumps(dict(at_step=at_step, fallbacks=after["fallback_total"] - before["fallback_total"],
                          executions=after["executions"] - before["executions"],
                          graphs=stats["stats"]["unique_graphs"], graph_breaks=sum(stats["graph_break"].values()))))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", ["ddim", "flux"])
def test_twenty_steps_compile_nothing_new_after_step_two(name, mode, reference, tmp_path):
    """A denoising step is the same program whichever step it is: after the first two steps of a 20-step
    schedule no op builds a new program (nothing compiled, nothing taken from the disk cache), eagerly (in
    the TORCH_PJRT_EAGER mode) and with the denoiser compiled. The counters are read at the end of every step,
    the fused stream run there. A fresh process: programs that other tests built would hide a new one."""
    out = tmp_path / "image.npy"
    code = f"import test_diffusers as t; t.twenty_steps({name!r}, {mode!r}, {str(out)!r})"
    r = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.abspath(__file__)),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(got["at_step"]) == 20 and got["fallbacks"] == 0 and got["executions"] > 0
    new = [(m - m0, c - c0) for (m0, c0), (m, c) in zip(got["at_step"], got["at_step"][1:])]
    assert all(d == (0, 0) for d in new[1:]), (
        "new (cache misses, compiles) at steps 1..19: " + ", ".join(f"{i + 1}:{d}" for i, d in enumerate(new)))
    if mode == "compiled":
        assert got["graphs"] >= 1 and got["graph_breaks"] == 0, got
    _assert_matches(np.load(out), reference(name, steps=20))


SPEC_CHECK = textwrap.dedent("""
    import torch
    from diffusers.utils import testing_utils as tu

    assert tu.torch_device == "tpu", tu.torch_device
    assert tu.BACKEND_DEVICE_COUNT["tpu"] is torch.tpu.device_count
    assert tu.BACKEND_MANUAL_SEED["tpu"] is torch.tpu.manual_seed
    assert tu.BACKEND_EMPTY_CACHE["tpu"] is torch.tpu.empty_cache
    assert tu.BACKEND_MAX_MEMORY_ALLOCATED["tpu"] is torch.tpu.max_memory_allocated
    assert tu.BACKEND_RESET_PEAK_MEMORY_STATS["tpu"] is torch.tpu.reset_peak_memory_stats
    n = torch.tpu.device_count()
    assert n >= 1
    # the module's own helpers (through diffusers.utils.torch_utils) and its BACKEND_* tables, as the
    # upstream test suite's testing_utils dispatches them
    assert tu.backend_device_count("tpu") == n
    assert tu._device_agnostic_dispatch("tpu", tu.BACKEND_DEVICE_COUNT) == n
    tu.backend_empty_cache("tpu")
    tu._device_agnostic_dispatch("tpu", tu.BACKEND_EMPTY_CACHE)
    tu.backend_manual_seed("tpu", 3)
    a = torch.randn(8, device="tpu").cpu()
    tu._device_agnostic_dispatch("tpu", tu.BACKEND_MANUAL_SEED, 3)
    b = torch.randn(8, device="tpu").cpu()
    tu.backend_manual_seed("tpu", 4)
    c = torch.randn(8, device="tpu").cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert tu.backend_supports_training("tpu")
    tu._device_agnostic_dispatch("tpu", tu.BACKEND_RESET_PEAK_MEMORY_STATS)
    x = torch.ones(1024, device="tpu")
    torch.tpu.synchronize()
    assert tu._device_agnostic_dispatch("tpu", tu.BACKEND_MAX_MEMORY_ALLOCATED) >= x.nbytes
    print("spec ok")
""")


def test_diffusers_test_device_spec(tmp_path):
    """DIFFUSERS_TEST_DEVICE_SPEC with the spec file torch_pjrt writes (a bare module name importable from
    the current folder): Diffusers' test utilities then target "tpu"."""
    from torch_pjrt.transformers_spec import write_stub

    spec = os.path.basename(write_stub(str(tmp_path)))
    env = dict(os.environ, DIFFUSERS_TEST_DEVICE_SPEC=spec)
    env.pop("DIFFUSERS_TEST_DEVICE", None)
    r = subprocess.run([sys.executable, "-c", SPEC_CHECK], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "spec ok" in r.stdout, r.stdout + r.stderr
