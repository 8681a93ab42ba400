"""Mixture of experts on "tpu": integer histc, aten::_grouped_mm (every layout, forward and backward),
torch.ops.torch_pjrt.ragged_dot (reference, gradients, edge cases, torch.compile tracing) and the
Transformers experts implementations (eager, grouped_mm, batched_mm, ragged_dot) on tiny Qwen3-MoE
and Mixtral models, all against the CPU, with no CPU fallback (conftest sets the policy to error)."""

import copy
import os

import pytest
import torch

import torch_pjrt
import torch_pjrt.moe  # noqa: F401  (defines torch.ops.torch_pjrt.ragged_dot)
from compare import check

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def ref_ragged_dot(x, w, sizes):
    """The loop a ragged dot stands for, in plain differentiable torch ops; rows past the groups are 0."""
    rows, start = [], 0
    for g, n in enumerate(sizes.tolist()):
        rows.append(x[start : start + n] @ w[g])
        start += n
    rows.append(x[start:] @ torch.zeros_like(w[0]))
    return torch.cat(rows)


# ------------------------------------------------------------------------------------------------ histc
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_integer(dtype):
    x = torch.tensor([0, 3, 5, 7, 7, 2, 9, 1, 0, 12], dtype=dtype)
    for bins, lo, hi in [(8, 0, 7), (3, 0, 10), (5, 2, 9), (4, 0, 0), (2, 5, 5)]:
        got = torch.histc(x.to("tpu"), bins=bins, min=lo, max=hi).cpu()
        # torch's CUDA kernel (the CPU has no integer histc): int64 arithmetic, the top edge in the last bin
        v = x.long()
        if lo == hi:
            lo, hi = int(v.min()), int(v.max())
            if lo == hi:
                lo, hi = lo - 1, hi + 1
        inside = (v >= lo) & (v <= hi)
        b = ((v[inside] - lo) * bins).div(hi - lo, rounding_mode="trunc").clamp(max=bins - 1)
        want = torch.bincount(b, minlength=bins).to(dtype)
        assert got.dtype == dtype
        torch.testing.assert_close(got, want, msg=f"bins={bins} min={lo} max={hi}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_histc_float(dtype):
    x = torch.randn(300).to(dtype)
    for bins, lo, hi in [(10, -1.0, 1.0), (7, 0.0, 0.0), (4, 0.5, 0.5)]:
        check(lambda t: torch.histc(t, bins=bins, min=lo, max=hi), x)


# ------------------------------------------------------------------------------------------- _grouped_mm
def offsets(sizes):
    return torch.tensor(sizes, dtype=torch.int32).cumsum(0, dtype=torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_mm_2d_3d(dtype):
    # an empty group, a large group, and two rows past the last offset
    x, w = torch.randn(14, 16).to(dtype), torch.randn(4, 16, 8).to(dtype)
    offs = offsets([3, 0, 7, 2])
    got = torch._grouped_mm(x.to("tpu"), w.to("tpu"), offs=offs.to("tpu")).cpu()
    want = torch._grouped_mm(x, w, offs=offs)
    tol = {} if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got[:12], want[:12], **tol)
    assert (got[12:] == 0).all()  # the CPU leaves these rows unwritten
    # the weight as a transposed view (what Transformers passes)
    wt = torch.randn(4, 8, 16).to(dtype)
    check(lambda a, b, o: torch._grouped_mm(a, b.transpose(1, 2), offs=o)[:12], x, wt, offs, **tol)


def test_grouped_mm_other_layouts():
    a, b = torch.randn(8, 12), torch.randn(12, 16)
    check(lambda a, b, o: torch._grouped_mm(a, b, offs=o), a, b, offsets([5, 0, 7]))  # 2D x 2D
    a3, b2 = torch.randn(3, 8, 12), torch.randn(12, 16)
    check(lambda a, b, o: torch._grouped_mm(a, b, offs=o), a3, b2, offsets([4, 4, 8]))  # 3D x 2D
    check(lambda a, b: torch._grouped_mm(a, b), a3, torch.randn(3, 12, 4))  # 3D x 3D


def test_grouped_mm_backward():
    x, w, offs = torch.randn(12, 16), torch.randn(3, 16, 8), offsets([4, 0, 8])

    def f(x, w, o):
        x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = torch._grouped_mm(x, w, offs=o)
        y.backward(torch.ones_like(y))
        return y, x.grad, w.grad

    check(f, x, w, offs)


def test_grouped_mm_bad_input():
    x, w = torch.randn(4, 8, device="tpu"), torch.randn(2, 8, 4, device="tpu")
    with pytest.raises(RuntimeError, match="int32"):
        torch._grouped_mm(x, w, offs=torch.tensor([2, 4], device="tpu"))
    with pytest.raises(RuntimeError, match="contraction dimension"):
        torch._grouped_mm(x, torch.randn(2, 4, 4, device="tpu"), offs=torch.tensor([2, 4], dtype=torch.int32, device="tpu"))
    with pytest.raises(RuntimeError, match="Have to provide offsets"):
        torch._grouped_mm(x, w)


# -------------------------------------------------------------------------------------------- ragged_dot
@pytest.mark.parametrize(
    "sizes",
    [[3, 0, 5, 2], [0, 0, 0, 0], [10, 0, 0, 0], [0, 0, 0, 7], [1, 1, 1, 1]],
    ids=["mixed", "all_empty", "one_group", "last_only", "short"],
)
@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_ragged_dot_matches_loop_with_gradients(sizes, device):
    # M = 10 rows; sizes summing to less than M leave zero rows at the end
    x, w = torch.randn(10, 16), torch.randn(4, 16, 8)
    gs = torch.tensor(sizes, dtype=torch.int32)
    dy = torch.randn(10, 8)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    want = ref_ragged_dot(xr, wr, gs)
    want.backward(dy)
    xd, wd = x.to(device).requires_grad_(), w.to(device).requires_grad_()
    got = torch.ops.torch_pjrt.ragged_dot(xd, wd, gs.to(device))
    got.backward(dy.to(device))
    assert got.device.type == device
    torch.testing.assert_close(got.cpu(), want.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), xr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wd.grad.cpu(), wr.grad, atol=1e-5, rtol=1e-5)


def test_ragged_dot_bfloat16():
    x, w, gs = torch.randn(9, 32), torch.randn(3, 32, 16), torch.tensor([2, 4, 3], dtype=torch.int32)
    want = ref_ragged_dot(x, w, gs)  # float32
    got = torch.ops.torch_pjrt.ragged_dot(x.bfloat16().to("tpu"), w.bfloat16().to("tpu"), gs.to("tpu"))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float().cpu(), ref_ragged_dot(x.bfloat16().float(), w.bfloat16().float(), gs),
                               atol=3e-2, rtol=1e-2)
    assert (got.float().cpu() - want).abs().max() < 0.5


def ragged_dot_vs_loop(dtype, nt, rows, sizes, **tol):
    """ragged_dot on "tpu" with x[rows, 32], w[G, 32, 16] (given as a transposed view of [G, 16, 32] if
    `nt`): forward and both gradients against the reference loop on the CPU on the same (rounded) inputs,
    computed in float32 and rounded once, as the device does. -> (x, w, group sizes, w on tpu)."""
    gs = torch.tensor(sizes, dtype=torch.int32)
    x = torch.randn(rows, 32).to(dtype)
    groups = len(sizes)
    w = torch.randn(groups, 16, 32).to(dtype).transpose(1, 2) if nt else torch.randn(groups, 32, 16).to(dtype)
    dy = torch.randn(rows, 16).to(dtype)
    xr, wr = x.float().clone().requires_grad_(), w.float().clone().requires_grad_()
    want = ref_ragged_dot(xr, wr, gs)
    want.backward(dy.float())
    wd = (w.transpose(1, 2).contiguous().to("tpu").transpose(1, 2) if nt else w.to("tpu")).requires_grad_()
    xd = x.to("tpu").requires_grad_()
    got = torch.ops.torch_pjrt.ragged_dot(xd, wd, gs.to("tpu"))
    got.backward(dy.to("tpu"))
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu(), want.detach().to(dtype), **tol)
    torch.testing.assert_close(xd.grad.cpu(), xr.grad.to(dtype), **tol)
    torch.testing.assert_close(wd.grad.cpu(), wr.grad.to(dtype), **tol)
    assert (got.cpu()[int(gs.sum()):] == 0).all()
    return x, w, gs, wd


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("nt", [False, True], ids=["kn", "nk_view"])
@pytest.mark.parametrize(
    "rows,sizes",
    [
        # a group of two tiles, empty groups, 4 rows past the groups, 3 idle slots (nk_view: the dense pass
        # first, then the 9th row of group 1 in a slot)
        (20, [0, 9, 0, 2, 0, 5]),
        (3, [0, 0, 1, 0, 0, 2, 0, 0]),  # fewer rows than groups: 3 slots for 8 groups
        (6, [0, 0, 0, 0]),  # no rows in any group
    ],
    ids=["tiles", "few_rows", "empty"],
)
def test_ragged_dot_half_precision_slots(dtype, nt, rows, sizes):
    # half-precision weights take the unrolled slot path (float32 weights a device loop)
    x, w, gs, wd = ragged_dot_vs_loop(dtype, nt, rows, sizes)
    if dtype == torch.bfloat16:  # torch's own CPU kernel, where it has one (bfloat16 only)
        offs, used = gs.cumsum(0, dtype=torch.int32), int(gs.sum())
        mine = torch._grouped_mm(x.to("tpu"), wd.detach(), offs=offs.to("tpu")).cpu()
        torch.testing.assert_close(mine[:used], torch._grouped_mm(x, w, offs=offs)[:used])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nt", [False, True], ids=["kn", "nk_view"])
@pytest.mark.parametrize(
    "rows,sizes",
    [
        # rows >= 2 x groups: the dense pass (nt weights) with 8-row slots; group 0 overflows by 3 rows into
        # the loop, empty groups, 2 rows past the groups
        (24, [11, 0, 0, 5, 1, 0, 3, 2]),
        (24, [0, 0, 24, 0, 0, 0, 0, 0]),  # every row in one group: 16 rows past its slots
        (24, [3, 3, 3, 3, 3, 3, 3, 3]),  # even routing: no overflow
        # groups <= rows < 2 x groups: the dense pass for bfloat16 only (4-row slots, both groups
        # overflow), the loop for float32
        (12, [0, 5, 0, 0, 6, 0, 0, 0]),
        (8, [0, 0, 0, 0, 0, 0, 0, 8]),  # the last group only
        (6, [1, 0, 2, 0, 0, 0, 3, 0]),  # rows < groups: the loop (slots) only
    ],
    ids=["overflow", "one_group", "even", "between", "last_only", "few_rows"],
)
def test_ragged_dot_dense_pass(dtype, nt, rows, sizes):
    # the dense pass (one batched dot over every group's first rows) and the loop for the rows past them,
    # on both sides of the threshold (the gradient dx runs the other weight layout)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else {}
    x, w, gs, _ = ragged_dot_vs_loop(dtype, nt, rows, sizes, **tol)
    if dtype == torch.float32:  # torch's own CPU kernel on the same inputs
        offs = gs.cumsum(0, dtype=torch.int32)
        check(lambda a, b, o: torch._grouped_mm(a, b, offs=o)[: int(gs.sum())], x, w, offs)


def test_ragged_dot_dense_pass_nonfinite():
    # a slot past a group's end computes on another row: an inf there must not reach any result
    x = torch.randn(16, 8)
    x[5] = float("inf")
    x[9] = float("nan")
    w = torch.randn(4, 6, 8).transpose(1, 2)
    gs = torch.tensor([5, 1, 3, 5], dtype=torch.int32)
    check(lambda a, b, o: torch._grouped_mm(a, b, offs=o)[:14], x, w, gs.cumsum(0, dtype=torch.int32), equal_nan=True)


# ------------------------------------------------------------------------ the host kernel (XLA:CPU)
def test_host_kernels_registered():
    # XLA:CPU plugins with an FFI extension take torch-pjrt's host kernels (grouped rows as a custom call)
    info = torch_pjrt.plugin_info()
    if info["platform"] != "cpu":
        pytest.skip("host kernels are for XLA:CPU")
    assert info["host_kernels"] is True, info.get("host_kernels_reason")


def host_kernel_vs_cpu(dtype, nt, rows, k, n, sizes):
    """_grouped_mm on "tpu" against the loop it stands for on the CPU, on the same (rounded) inputs.
    float32: sums of products round differently in any order, so the result must be as near the float64
    result as the CPU's float32 loop is (within 2x, the same as the CPU's own spread) and within the
    CPU's float32 tolerance scaled by sqrt(K). Half precision: computed in float32 and rounded once, as the
    kernel does, within the dtype's tolerance and the float32 sums' absolute one. Rows past the groups are
    zero."""
    gs = torch.tensor(sizes, dtype=torch.int32)
    x = torch.randn(rows, k).to(dtype)
    w = torch.randn(len(sizes), n, k).to(dtype).transpose(1, 2) if nt else torch.randn(len(sizes), k, n).to(dtype)
    wd = w.transpose(1, 2).contiguous().to("tpu").transpose(1, 2) if nt else w.to("tpu")
    got = torch._grouped_mm(x.to("tpu"), wd, offs=gs.cumsum(0, dtype=torch.int32).to("tpu")).cpu()
    assert got.dtype == dtype
    cpu = ref_ragged_dot(x.float(), w.float(), gs)
    if dtype == torch.float32:
        exact = ref_ragged_dot(x.double(), w.double(), gs)
        ulp = 2.0**-23 * exact.abs().max()  # one rounding of the largest result: the CPU may be exact by luck
        assert (got.double() - exact).abs().max() <= 2 * (cpu.double() - exact).abs().max() + ulp
        torch.testing.assert_close(got, cpu, atol=1e-5 * (k / 16) ** 0.5, rtol=1.3e-6 * (k / 16) ** 0.5)
    else:  # rounded once from float32 sums, whose own rounding (in any order) shows where they cancel
        rtol = 1e-3 if dtype == torch.float16 else 1.6e-2  # the dtype's default
        torch.testing.assert_close(got, cpu.to(dtype), atol=1e-5 * (k / 16) ** 0.5, rtol=rtol)
    assert (got[int(gs.sum()):] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("nt", [False, True], ids=["kn", "nk_view"])
@pytest.mark.parametrize(
    "rows,k,n,sizes",
    [
        # K and N off the vector widths, a group of 9 rows (chunks of 4, 4 and 1), empty groups, 4 rows
        # past the groups
        (20, 37, 45, [0, 9, 0, 2, 5]),
        (1, 64, 48, [0, 1, 0]),  # one row
        (7, 8, 16, [7]),  # one group, exact widths
        (13, 300, 70, [3, 0, 4, 4, 1, 0]),  # column blocks of 16 or more with a partial last one
        (16, 1000, 80, [5, 0, 3, 8]),  # K = 1000: several column blocks per group
    ],
    ids=["ragged", "one_row", "one_group", "blocks", "long"],
)
def test_host_kernel_grouped_rows(dtype, nt, rows, k, n, sizes):
    host_kernel_vs_cpu(dtype, nt, rows, k, n, sizes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "rows,offs",
    [(5, [4, 2, 5]), (24, [5, 3, 22])],  # loop lowering: the device loop (float32), the dense pass (24 rows)
    ids=["few_rows", "dense"],
)
def test_grouped_mm_decreasing_offsets(dtype, rows, offs):
    # offsets that decrease: group 1 is empty and group 2 starts at offs[1], taking back rows of group 0,
    # as torch's CPU kernel writes them (the later group last)
    x = torch.randn(rows, 16).to(dtype)
    w = torch.randn(3, 16, 16).to(dtype).transpose(1, 2)
    offs = torch.tensor(offs, dtype=torch.int32)
    check(lambda a, b, o: torch._grouped_mm(a, b, offs=o)[: int(o[-1])], x, w, offs)


@pytest.mark.parametrize(
    "env,tests",
    [
        # the static-shape loops (dense pass, half-precision slots, the device loop) stay the lowering where
        # the host kernels are not registered
        ({"TORCH_PJRT_RAGGED_DOT": "loop"},
         "dense_pass or half_precision_slots or matches_loop_with_gradients or host_kernel_grouped_rows"
         " or decreasing_offsets"),
        # the kernel's portable loops (CPUs without AVX2/FMA/F16C)
        ({"TORCH_PJRT_KERNEL_ISA": "portable"}, "host_kernel_grouped_rows or dense_pass or decreasing_offsets"),
        # AVX2 where the CPU also has AVX512-BF16 (bfloat16 rows widened instead of pair dot products)
        ({"TORCH_PJRT_KERNEL_ISA": "avx2"}, "host_kernel_grouped_rows or experts_implementations"),
    ],
    ids=["loop_lowering", "portable_kernel", "avx2_kernel"],
)
def test_other_grouped_rows_paths(env, tests):
    """The ragged-dot tests again in a child process, on another implementation of grouped rows."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", __file__,
           "-k", tests]
    out = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "failed" not in out.stdout


def test_ragged_dot_bad_input():
    with pytest.raises(RuntimeError, match="ragged_dot"):
        torch.ops.torch_pjrt.ragged_dot(torch.randn(4, 8), torch.randn(2, 6, 4), torch.tensor([2, 2], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="ragged_dot"):
        torch.ops.torch_pjrt.ragged_dot(torch.randn(4, 8, device="tpu"), torch.randn(2, 8, 4, device="tpu"),
                                        torch.tensor([2.0, 2.0], device="tpu"))


_NATIVE_CHILD = r"""
import torch, torch_pjrt
i32 = lambda *v: torch.tensor(v, dtype=torch.int32)
cases = [(torch.randn(12, 8), torch.randn(3, 8, 4), i32(3, 7, 10)),                    # rows in groups
         (torch.randn(12, 8), torch.randn(3, 4, 8).transpose(1, 2), i32(3, 7, 12)),    # transposed weights
         (torch.randn(4, 12), torch.randn(12, 8), i32(4, 8, 12)),                      # contraction in groups
         (torch.randn(3, 4, 8), torch.randn(8, 12), i32(4, 8, 12))]                    # columns in groups
for x, w, offs in cases:
    try:
        got = torch._grouped_mm(x.to("tpu"), w.to("tpu"), offs.to("tpu")).cpu()
    except RuntimeError as e:
        print("refused", "ragged-dot" in str(e) and "_grouped_mm" in str(e))
        continue
    want = torch._grouped_mm(x, w, offs)
    rows = int(offs[-1]) if x.dim() == 2 and w.dim() == 3 else want.shape[-2]
    print("compiled", torch.allclose(got[..., :rows, :], want[..., :rows, :], atol=1e-5))
"""


def test_native_ragged_dot_is_well_formed():
    """TORCH_PJRT_RAGGED_DOT=native emits chlo.ragged_dot, what the GPU and TPU plugins compile (tested on
    an H200 by scripts/device-check.sh). XLA:CPU parses it and legalizes it to HLO's ragged-dot, then
    refuses to compile that: the refusal (not a parse error) shows the program is well formed, in every
    layout. (The loop lowering would compile and print "compiled"; should a later CPU plugin compile
    chlo.ragged_dot, the child checks its results against the CPU's and this test needs its expectation
    changed.)"""
    import subprocess
    import sys

    env = dict(os.environ, TORCH_PJRT_RAGGED_DOT="native", TORCH_PJRT_FALLBACK="error")
    out = subprocess.run([sys.executable, "-c", _NATIVE_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")[:-1]
    assert lines == ["refused True"] * 4, out.stdout + out.stderr


def test_ragged_dot_traces_under_compile():
    torch._dynamo.reset()
    x, w, gs = torch.randn(6, 8), torch.randn(2, 8, 4), torch.tensor([2, 3], dtype=torch.int32)
    f = torch.compile(lambda x, w, g: torch.ops.torch_pjrt.ragged_dot(x, w, g) * 2, backend="eager", fullgraph=True)
    torch.testing.assert_close(f(x, w, gs), ref_ragged_dot(x, w, gs) * 2)


# ------------------------------------------------------------------------------------ Transformers models
transformers = pytest.importorskip("transformers")

IMPLEMENTATIONS = ["eager", "grouped_mm", "batched_mm", "ragged_dot"]


def tiny_config(kind):
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  num_experts_per_tok=2)
    if kind == "qwen3_moe":
        return transformers.Qwen3MoeConfig(num_experts=8, moe_intermediate_size=32, head_dim=16,
                                           norm_topk_prob=True, **common)
    return transformers.MixtralConfig(num_local_experts=4, **common)


@pytest.fixture(scope="module", params=["qwen3_moe", "mixtral"])
def tiny_model(request):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(request.param), attn_implementation="eager")
    return model.eval()


def test_ragged_dot_is_registered():
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    assert ALL_EXPERTS_FUNCTIONS["ragged_dot"] is torch_pjrt.moe.ragged_dot_experts_forward


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_experts_implementations_match_cpu(tiny_model, dtype):
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(1))
    model = copy.deepcopy(tiny_model).to(dtype)
    model.set_experts_implementation("eager")
    with torch.no_grad():
        want = model(ids).logits.float()
        dev = model.to("tpu")
        for impl in IMPLEMENTATIONS:
            dev.set_experts_implementation(impl)
            got = dev(ids.to("tpu")).logits.float().cpu()
            tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=5e-2, rtol=5e-2)
            torch.testing.assert_close(got, want, **tol, msg=lambda m: f"{impl}: {m}")


def test_greedy_tokens_match_cpu(tiny_model):
    ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(2))
    model = copy.deepcopy(tiny_model)
    model.set_experts_implementation("eager")
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(ids, **kw)
        dev = model.to("tpu")
        for impl in IMPLEMENTATIONS:
            dev.set_experts_implementation(impl)
            got = dev.generate(ids.to("tpu"), **kw).cpu()
            assert torch.equal(got, want), impl


def test_from_pretrained_with_ragged_dot(tmp_path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("qwen3_moe"), attn_implementation="eager")
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, experts_implementation="ragged_dot", attn_implementation="eager")
    assert loaded.config._experts_implementation == "ragged_dot"
    ids = torch.randint(0, 256, (1, 5))
    with torch.no_grad():
        want = model(ids).logits
        torch.testing.assert_close(loaded(ids).logits, want, atol=1e-5, rtol=1e-5)  # the CPU reference
        torch.testing.assert_close(loaded.to("tpu")(ids.to("tpu")).logits.cpu(), want, atol=1e-4, rtol=1e-4)


def test_ragged_dot_experts_training_step():
    """Gradients through the ragged_dot experts (router, x and both expert weights) match the eager loop."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("qwen3_moe"), attn_implementation="eager")
    ids = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(3))
    model.set_experts_implementation("eager")
    model(ids, labels=ids).loss.backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    dev = model.to("tpu")
    dev.set_experts_implementation("ragged_dot")
    dev(ids.to("tpu"), labels=ids.to("tpu")).loss.backward()
    for n, p in dev.named_parameters():
        if n in want:
            torch.testing.assert_close(p.grad.cpu(), want[n], atol=1e-4, rtol=1e-3, msg=lambda m: f"{n}: {m}")


def test_histc_bfloat16_many_inputs():
    """bfloat16 bin indices from the rounded bfloat16 arithmetic (a float32 detour in float-to-int
    conversions let XLA drop the rounding: 135 of 900 histograms differed)."""
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(300, generator=g).to(torch.bfloat16)
        check(lambda t: torch.histc(t, bins=7, min=0.0, max=0.0), x)
