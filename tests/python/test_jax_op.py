"""torch_pjrt.jax_op: JAX functions and Pallas kernels as PyTorch ops on "tpu" (python/torch_pjrt/jax_ops.py),
each result against the same computation in PyTorch on the CPU, with no CPU fallback (conftest)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_pjrt
from compare import assert_same

jax = pytest.importorskip("jax")
jnp = jax.numpy


def torch_rms(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@torch_pjrt.jax_op
def rms(x, w, eps=1e-6):
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps) * w).astype(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_matches_cpu_with_static_arguments(dtype):
    torch.manual_seed(0)
    x, w = torch.randn(4, 6, 16, dtype=dtype), torch.randn(16, dtype=dtype)
    tol = {} if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
    for eps in (1e-5, 0.5):  # a keyword argument is static: a program per value
        assert_same(rms(x.to("tpu"), w.to("tpu"), eps=eps), torch_rms(x, w, eps), **tol)
    # a view at an offset and a transposed input are read as their values
    big = torch.randn(16, 10)
    got = rms(big.to("tpu").t()[1:5], torch.ones(16, device="tpu"), eps=1e-5)
    assert_same(got, torch_rms(big.t()[1:5], torch.ones(16), 1e-5))


def test_several_outputs_of_several_dtypes():
    @torch_pjrt.jax_op
    def stats(a, b, scale):
        return a * b * scale, jnp.argmax(a, axis=-1), (a > b)

    a, b = torch.randn(3, 7), torch.randn(3, 7)
    got = stats(a.to("tpu"), b.to("tpu"), 2.0)
    assert isinstance(got, tuple) and len(got) == 3
    assert_same(list(got), [a * b * 2.0, torch.argmax(a, -1).int(), a > b])


def test_int64_inputs_lower_with_64_bit_types():
    @torch_pjrt.jax_op
    def take_rows(x, idx):
        return jnp.take(x, idx, axis=0), idx * 3_000_000_000

    x, idx = torch.randn(10, 4), torch.tensor([9, 0, 3, 3])
    got = take_rows(x.to("tpu"), idx.to("tpu"))
    assert_same(list(got), [x[idx], idx * 3_000_000_000])


def test_in_place_through_input_output_aliases():
    @torch_pjrt.jax_op(input_output_aliases={0: 0})
    def scale_(x, s, factor):
        return x * s * factor, jnp.sum(s)

    x, s = torch.randn(5, 3), torch.randn(5, 3)
    xt = x.to("tpu")
    view = xt[1:]  # a view of the updated tensor sees the update
    out, total = scale_(xt, s.to("tpu"), 0.5)
    assert out is xt
    assert_same(xt, x * s * 0.5)
    assert_same(view, (x * s * 0.5)[1:])
    assert_same(total, s.sum())


def test_autograd_through_jax_vjp():
    @torch_pjrt.jax_op
    def gather_scale(x, idx, w):
        return jnp.take(x, idx, axis=0) * w

    torch.manual_seed(1)
    x, w, idx = torch.randn(6, 4), torch.randn(4), torch.tensor([5, 1, 1, 0])
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    (xc[idx] * wc).pow(2).sum().backward()
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    gather_scale(xt, idx.to("tpu"), wt).pow(2).sum().backward()
    assert_same([xt.grad, wt.grad], [xc.grad, wc.grad])

    # and through the RMSNorm, with an output left unused (its cotangent is zero)
    @torch_pjrt.jax_op
    def rms_and_mean(x, w):
        return rms.fn(x, w, 1e-5), jnp.mean(x)

    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch_rms(xc, wc, 1e-5).sum().backward()
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    rms_and_mean(xt, wt)[0].sum().backward()
    assert_same([xt.grad, wt.grad], [xc.grad, wc.grad], atol=1e-5, rtol=1e-5)


def test_compiled_graph_calls_the_function_inside_its_program():
    def f(x, w):
        return torch.relu(rms(x * 2, w, eps=1e-5)) + 1

    torch.manual_seed(2)
    x, w = torch.randn(4, 16), torch.randn(16)
    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    xt, wt = x.to("tpu"), w.to("tpu")
    assert_same(compiled(xt, wt), torch.relu(torch_rms(x * 2, w, 1e-5)) + 1)
    torch.tpu.synchronize()
    before = torch_pjrt.metrics()["executions"]
    assert_same(compiled(xt, wt), torch.relu(torch_rms(x * 2, w, 1e-5)) + 1)
    assert torch_pjrt.metrics()["executions"] - before == 1  # one program: the graph with the call inside


def test_compiled_training_step_matches_cpu():
    torch.manual_seed(3)
    lin = torch.nn.Linear(16, 16)
    norm_w = torch.randn(16)
    x = torch.randn(8, 16)

    def step(lin, norm_w, x, fn):
        opt = torch.optim.SGD(list(lin.parameters()) + [norm_w], lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            fn(lin, norm_w, x).pow(2).mean().backward()
            opt.step()
        return lin.weight.detach(), norm_w.detach()

    def cpu_loss(lin, norm_w, x):
        return torch_rms(lin(x), norm_w, 1e-5)

    def tpu_loss(lin, norm_w, x):
        return rms(lin(x), norm_w, eps=1e-5)

    expected = step(lin, norm_w.clone().requires_grad_(), x, cpu_loss)
    torch.manual_seed(3)
    lin_t = torch.nn.Linear(16, 16).to("tpu")
    got = step(lin_t, norm_w.to("tpu").requires_grad_(), x.to("tpu"), torch.compile(tpu_loss, backend="tpu"))
    assert_same(list(got), list(expected), atol=1e-5, rtol=1e-5)


def test_pallas_tiled_matmul_and_fused_softmax():
    from torch_pjrt import pallas_examples as pe

    torch.manual_seed(4)
    a, b = torch.randn(64, 48), torch.randn(48, 96)
    assert_same(pe.matmul(a.to("tpu"), b.to("tpu")), a @ b, atol=1e-4, rtol=1e-4)
    assert_same(pe.matmul(a.to("tpu"), b.to("tpu"), 16, 32), a @ b, atol=1e-4, rtol=1e-4)
    x = torch.randn(32, 40) * 4
    assert_same(pe.softmax(x.to("tpu")), torch.softmax(x, -1))
    xb = x.bfloat16()
    assert_same(pe.softmax(xb.to("tpu"), 4), torch.softmax(xb.float(), -1).bfloat16(), atol=1e-2, rtol=1e-2)
    assert torch.tpu.pallas.interpret_by_default()  # the CPU plugin runs Pallas in interpret mode
    with pytest.raises(ValueError, match="multiples of the blocks"):
        pe.matmul(a[:50].to("tpu"), b.to("tpu"))


def test_pallas_without_interpret_mode_names_the_op():
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    op = torch_pjrt.jax_op(lambda x: pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x),
                           name="double", interpret=False)
    with pytest.raises(ValueError, match=r"jax_op torch_pjrt_jax::double\(float32\[8, 128\]\).*cpu"):
        op(torch.ones(8, 128, device="tpu"))
    ok = torch_pjrt.jax_op(op.fn, name="double", interpret=True)  # the same function, interpreted
    assert_same(ok(torch.ones(8, 128, device="tpu")), torch.full((8, 128), 2.0))


def test_torchtpu_names():
    def relu(x):
        return jnp.maximum(x, 0)

    for op in (torch.tpu.pallas.jax_op("relu_tpu::relu", relu), torch.tpu.pallas.custom_jax_kernel(relu, name="r")):
        x = torch.randn(10)
        assert_same(op(x.to("tpu")), torch.relu(x))
    assert torch.tpu.pallas.jax_op("relu_tpu::relu", relu).name.startswith("torch_pjrt_jax::relu_tpu_relu")


def test_bad_calls_raise_clear_errors():
    x = torch.randn(4)
    xt = x.to("tpu")
    with pytest.raises(RuntimeError, match="jax_op torch_pjrt_jax::rms: runs on tpu tensors; got tensors on cpu"):
        rms(x, x)
    with pytest.raises(TypeError, match="must be hashable"):
        rms(x.to("tpu"), x.to("tpu"), eps=[1e-5])
    with pytest.raises(TypeError, match="passed by keyword"):
        rms(x.to("tpu"), w=x.to("tpu"))
    with pytest.raises(TypeError, match=r"rms\(float32\[4\], float32\[5\]\): JAX could not lower"):
        rms(xt, torch.ones(5, device="tpu"))
    with pytest.raises(TypeError, match="passed by keyword"):
        rms(xt, w=xt)
    assert_same(xt, x)  # the failed calls left their input as it was


def _child(code, cache, extra_env=None):
    env = dict(os.environ, TORCH_PJRT_CACHE_DIR=str(cache), **(extra_env or {}))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=os.path.dirname(os.path.abspath(__file__)))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


_CHILD = """
    import torch, torch_pjrt
    from torch_pjrt import pallas_examples as pe
    torch.manual_seed(0)
    a, b = torch.randn(32, 16), torch.randn(16, 32)
    got = pe.matmul(a.to("tpu"), b.to("tpu")).cpu()
    torch.testing.assert_close(got, a @ b, atol=1e-4, rtol=1e-4)
    m = torch_pjrt.metrics()
    print("stats", m["jax_ops"]["lowered"], m["jax_ops"]["from_disk"], m["compiles"])
"""


def test_a_second_process_neither_traces_nor_compiles(tmp_path):
    first = _child(_CHILD, tmp_path).split()
    second = _child(_CHILD, tmp_path).split()
    assert first[first.index("stats") + 1:][:2] == ["1", "0"]  # traced by JAX once
    assert second[second.index("stats") + 1:] == ["0", "1", "0"]  # read from disk, no program compiled


def test_without_jax_the_decorator_names_the_package(tmp_path):
    code = """
        import sys
        sys.modules["jax"] = None  # JAX not installed
        import torch, torch_pjrt  # importing torch_pjrt needs no JAX
        try:
            torch_pjrt.jax_op(lambda x: x + 1)
        except ImportError as e:
            print("error:", e)
    """
    out = _child(code, tmp_path, {"TORCH_PJRT_JAX_CACHE": "0"})
    assert "error: torch_pjrt.jax_op needs JAX" in out and "pip install jax==" in out
