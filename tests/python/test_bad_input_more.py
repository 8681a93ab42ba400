"""Bad input of our own (issue 8): mixed devices, checks the CPU kernels make that torch's meta kernels lack,
unsupported dtypes, absurd sizes, negative strides, freed storages, out-of-range indices.

Each case runs on the CPU and on "tpu" from the same inputs: "tpu" must raise the CPU's exception type,
never crash or hang, leave every input tensor as it was (values and version counter), and keep working.
Cases the CPU accepts are held to the same: "tpu" must give the CPU's result.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_pjrt

F = torch.nn.functional


def inputs(dev):
    g = torch.Generator().manual_seed(0)
    t = {
        "f": torch.randn(3, 4, generator=g),
        "g": torch.randn(4, 3, generator=g),
        "v": torch.randn(4, generator=g),
        "b": torch.tensor([True, False, True, True]),
        "i": torch.tensor([1, 2, 3, 4]),
        "i32": torch.tensor([0, 1, 2], dtype=torch.int32),
        "e": torch.empty(2, 0),
        "img": torch.randn(1, 1, 4, generator=g),
        "p": torch.rand(3, 4, generator=g),
    }
    return {k: v.to(dev) for k, v in t.items()}


CPU = torch.device("cpu")

# name -> fn(t): every case raises on the CPU
CASES = {
    # two devices mixed: the CPU-side tensors come from inputs("cpu") too
    "mixed_add": lambda t, c: t["f"] + c["f"],
    "mixed_add_cpu_first": lambda t, c: c["f"] + t["f"],
    "mixed_mul_": lambda t, c: t["f"].mul_(c["f"]),
    "mixed_cpu_mul_": lambda t, c: c["f"].mul_(t["f"]),
    "mixed_matmul": lambda t, c: t["f"] @ c["g"],
    "mixed_cat": lambda t, c: torch.cat([t["f"], c["f"]]),
    "mixed_index_select": lambda t, c: t["f"].index_select(0, c["i"][:2]),
    "mixed_index_cpu_by_tpu": lambda t, c: c["f"][t["i"][:2]],
    "mixed_where": lambda t, c: torch.where(t["b"], t["v"], c["v"]),
    "mixed_out_cpu": lambda t, c: torch.add(t["f"], t["f"], out=c["f"]),
    "mixed_out_tpu": lambda t, c: torch.add(c["f"], c["f"], out=t["f"]),
    # checks of the CPU kernels that torch's meta kernels lack (csrc/aten/checks.cpp)
    "relu_bool": lambda t, c: torch.relu(t["b"]),
    "relu__bool": lambda t, c: t["b"].relu_(),
    "argmax_bool": lambda t, c: t["b"].argmax(),
    "argmin_bool_dim": lambda t, c: t["b"].argmin(0),
    "argmax_bool_empty": lambda t, c: t["b"][:0].argmax(0),  # the CPU's bool check comes before its empty one
    "pow_int_negative": lambda t, c: t["i"].pow(-1),
    "pow__int_negative": lambda t, c: t["i"].pow_(-2),
    "pow_bool_negative": lambda t, c: t["b"].pow(-1),
    "pow_bool_bool": lambda t, c: t["b"].pow(t["b"]),
    "pow_scalar_bool": lambda t, c: torch.pow(True, t["b"]),
    "sub_bool_number": lambda t, c: t["b"] - 1,
    "sub_number_bool": lambda t, c: 1 - t["b"],
    "sub_float_true": lambda t, c: t["v"] - True,
    "sub__float_bool": lambda t, c: t["v"].sub_(t["b"]),
    "rsub_bool": lambda t, c: torch.rsub(t["v"], t["b"]),
    "add_bool_alpha": lambda t, c: torch.add(t["i"], t["i"], alpha=True),
    "add__bool_float_alpha": lambda t, c: t["b"].add_(t["b"], alpha=2.5),
    "max_dim_empty": lambda t, c: t["e"].max(1),
    "min_dim_empty_neg": lambda t, c: t["e"].min(-1),
    "max_empty": lambda t, c: t["e"].max(),
    "min_empty": lambda t, c: t["e"].min(),
    "threshold_bool": lambda t, c: torch.threshold(t["b"], 0, 0),
    "lerp_int": lambda t, c: torch.lerp(t["i"], t["i"], 0.5),
    "lerp_dtype_first": lambda t, c: torch.lerp(t["b"], t["v"], 0.5),  # the meta check's error comes first
    "addcmul_bool": lambda t, c: torch.addcmul(t["b"], t["b"], t["b"]),
    "mm_dtype_mismatch": lambda t, c: t["f"] @ t["g"].long(),
    "mm_bool": lambda t, c: t["b"][None] @ t["b"][:, None],
    "addmm_dtype_mismatch": lambda t, c: torch.addmm(t["f"][:, :3], t["f"], t["g"].double()),
    "mv_dtype_mismatch": lambda t, c: torch.mv(t["f"], t["b"]),
    "dot_bool": lambda t, c: torch.dot(t["b"], t["b"]),
    "bmm_bool": lambda t, c: torch.bmm(t["b"][None, None], t["b"][None, :, None]),
    "baddbmm_bool": lambda t, c: torch.baddbmm(t["b"][None, None, :1], t["b"][None, None], t["b"][None, :, None]),
    "var_int": lambda t, c: t["i"].var(),
    "std_int_dim": lambda t, c: t["i"].std(0),
    "clamp_bool": lambda t, c: t["b"].clamp(min=True),
    "nll_loss_int32_target": lambda t, c: F.nll_loss(t["f"], t["i32"]),
    "bce_target_dtype": lambda t, c: F.binary_cross_entropy(t["p"], t["p"].double()),
    "conv_bool": lambda t, c: F.conv1d(t["img"].bool(), t["img"][:, :, :2].bool()),
    "interpolate_int": lambda t, c: F.interpolate(t["img"].long(), scale_factor=2, mode="linear"),
    "fill_int_nan": lambda t, c: t["i"].fill_(float("nan")),
    "fill_int32_overflow": lambda t, c: t["i32"].fill_(2**40),
    "fill_half_overflow": lambda t, c: t["v"].half().fill_(1e10),
    "full_int_overflow": lambda t, c: torch.full((2,), 1e30, dtype=torch.int64, device=t["f"].device),
    "full_like_int_nan": lambda t, c: torch.full_like(t["i"], float("nan")),
    "index_fill_int_nan": lambda t, c: t["i"].index_fill(0, t["i"][:1] - 1, float("nan")),
    "uniform_from_above_to": lambda t, c: t["f"].uniform_(2, 1),
    "bernoulli_p_above_one": lambda t, c: t["f"].bernoulli_(2.0),
    # sizes, strides and storages
    "as_strided_negative_stride": lambda t, c: t["f"].as_strided((2, 2), (-1, 1)),
    "as_strided_past_storage": lambda t, c: t["f"].as_strided((20, 20), (1, 1)),
    "as_strided_negative_offset": lambda t, c: t["f"].as_strided((2, 2), (1, 1), -1),
    "set_negative_stride": lambda t, c: torch.empty(0, device=t["f"].device).set_(
        t["f"].untyped_storage(), 2, (5,), (-2,)),
    "resize_negative": lambda t, c: torch.empty(0, device=t["f"].device).resize_(-1),
    "resize_overflow": lambda t, c: torch.empty(0, device=t["f"].device).resize_(2**62),
    "empty_overflow": lambda t, c: torch.empty(2**62, device=t["f"].device),
    "empty_2d_overflow": lambda t, c: torch.empty(2**32, 2**32, device=t["f"].device),
    "new_empty_overflow": lambda t, c: t["f"].new_empty(2**62),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name):
    fn = CASES[name]
    if name.startswith("mixed_"):  # the reference is what any two devices raise (cuda with cpu)
        cpu_err = None
    else:
        with pytest.raises(Exception) as cpu_err:
            fn(inputs("cpu"), inputs("cpu"))
    tpu, other = inputs("tpu"), inputs("cpu")
    before = {k: (v.cpu().clone(), v._version) for k, v in tpu.items()}
    before_other = {k: (v.clone(), v._version) for k, v in other.items()}
    with pytest.raises(Exception) as tpu_err:
        fn(tpu, other)
        torch.tpu.synchronize()
    if name.startswith("mixed_"):
        assert type(tpu_err.value) is RuntimeError and "same device" in str(tpu_err.value), tpu_err.value
    else:
        assert type(tpu_err.value) is type(cpu_err.value), f"cpu: {cpu_err.value!r}\ntpu: {tpu_err.value!r}"
    for k, v in tpu.items():
        assert v._version == before[k][1], f"{k} was modified"
        assert torch.equal(v.cpu(), before[k][0]), f"{k} changed"
    for k, v in other.items():
        assert v._version == before_other[k][1] and torch.equal(v, before_other[k][0]), f"cpu {k} changed"
    torch.testing.assert_close((tpu["f"] * 2).cpu(), before["f"][0] * 2)  # the device keeps working


def test_checked_messages_name_the_op():
    t = inputs("tpu")
    for fn, words in [(lambda: torch.relu(t["b"]), "relu"), (lambda: t["b"].argmax(), "argmax"),
                      (lambda: t["e"].max(1), "max()"), (lambda: torch.dot(t["b"], t["b"]), '"dot"'),
                      (lambda: t["i"].var(), "std and var"), (lambda: t["b"] - 1, "Subtraction"),
                      (lambda: t["f"].uniform_(2, 1), "uniform_")]:
        with pytest.raises(Exception, match=None) as e:
            fn()
        assert words in str(e.value), e.value


def test_accepted_by_both_devices():
    """Near misses of the checks above that the CPU accepts: "tpu" must too, with the CPU's result."""
    cases = [
        lambda t: t["b"].clamp(0, 1),            # a bool tensor clamped by numbers computes in int64
        lambda t: t["i"].pow(torch.tensor([-1, 2, 0, 1], device=t["i"].device)),  # a tensor exponent
        lambda t: t["b"].pow(2),
        lambda t: torch.add(t["b"], t["b"], alpha=True),
        lambda t: t["e"].max(0)[0],              # a non-empty reduction dim of an empty tensor
        lambda t: torch.zeros(2, dtype=torch.uint8, device=t["f"].device).fill_(-1),  # wraps, as on the CPU
        lambda t: F.interpolate((t["img"].abs() * 10).to(torch.uint8), scale_factor=2, mode="nearest"),
        lambda t: torch.histc(t["v"].half().float()),
        lambda t: torch.lerp(t["v"], t["v"] * 2, 0.25),
        lambda t: t["i"] - 1,
    ]
    cpu, tpu = inputs("cpu"), inputs("tpu")
    for fn in cases:
        torch.testing.assert_close(fn(tpu).cpu(), fn(cpu))


def test_invalid_device_index():
    n = torch.tpu.device_count()
    with pytest.raises(RuntimeError, match=f"invalid device index {n}"):
        torch.ones(2, device=f"tpu:{n}")
    with pytest.raises(RuntimeError, match=f"invalid device index {n}"):
        torch.ones(2).to(f"tpu:{n}")


def test_two_devices_mixed():
    """tpu:0 with tpu:1 (the CPU plugin with two devices, in a subprocess): raises like cuda:0 with cuda:1."""
    code = textwrap.dedent("""
        import torch, torch_pjrt
        a, b = torch.ones(3, device="tpu:0"), torch.ones(3, device="tpu:1")
        for name, fn in [("add", lambda: a + b), ("mul_", lambda: a.mul_(b)), ("cat", lambda: torch.cat([a, b])),
                         ("out", lambda: torch.add(a, a, out=b)), ("index_select",
                          lambda: a.index_select(0, torch.zeros(1, dtype=torch.long, device="tpu:1")))]:
            try:
                fn()
                print(name, "no error")
            except RuntimeError as e:
                print(name, "RuntimeError", "same device" in str(e))
        print("values", a.cpu().tolist(), b.cpu().tolist(), a._version, b._version)
        print("copy", b.copy_(a * 2).cpu().tolist(), (a.to("tpu:1") + b).device)
        """)
    env = dict(os.environ, TORCH_PJRT_CPU_DEVICES="2", TORCH_PJRT_FALLBACK="error",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    for name in ("add", "mul_", "cat", "out", "index_select"):
        assert f"{name} RuntimeError True" in lines, out.stdout
    assert "values [1.0, 1.0, 1.0] [1.0, 1.0, 1.0] 0 0" in lines, out.stdout
    assert "copy [2.0, 2.0, 2.0] tpu:1" in lines, out.stdout


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                                   torch.float8_e5m2fnuz, torch.float8_e8m0fnu, torch.bits8])
def test_unsupported_dtype(dtype):
    x = torch.zeros(3)
    before = x.clone()
    for fn in (lambda: x.to(dtype).to("tpu"), lambda: torch.empty(3, dtype=dtype, device="tpu"),
               lambda: x.to("tpu").to(dtype)):
        with pytest.raises((TypeError, NotImplementedError)) as e:
            fn()
        assert str(dtype).split(".")[-1].replace("_", "").lower()[:6] in str(e.value).replace("_", "").lower() \
            or "copy" in str(e.value), e.value
    assert torch.equal(x, before)


def test_complex128_is_supported():
    x = torch.tensor([1 + 2j, -3j], dtype=torch.complex128)
    torch.testing.assert_close((x.to("tpu") * 2).cpu(), x * 2)


def test_allocation_beyond_device_memory():
    keep = torch.arange(4.0, device="tpu")
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        torch.empty(2**40, device="tpu")
    torch.testing.assert_close((keep + 1).cpu(), torch.arange(4.0) + 1)


def test_freed_storage_is_refused():
    """A view whose storage was shrunk or freed through another alias addresses nothing: the CPU reads freed
    memory (or crashes); "tpu" raises where the view is read by a copy or by the CPU fallback."""
    a = torch.arange(12.0, device="tpu").reshape(3, 4)
    b = a.view(-1)
    a.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="needs 48 bytes of its storage, which has 0"):
        b.cpu()
    with pytest.raises(RuntimeError, match="needs 48 bytes"):
        torch.ones(12, device="tpu").copy_(b)
    a.untyped_storage().resize_(48)  # given its bytes back, the view reads again
    assert b.cpu().shape == (12,)


def test_resize_to_zero_then_read():
    a = torch.arange(6.0, device="tpu")
    a.resize_(0)
    assert a.sum().item() == 0 and a.cpu().shape == (0,)


def test_out_of_range_indices_documented():
    """README "Known differences": index values are not range-checked on the device (a check would need a
    sync). What happens instead, exactly: gathers clamp an index into range, scatters drop the write.
    Never a crash; the inputs are left as they were."""
    x = torch.arange(12.0).reshape(3, 4)
    t = x.to("tpu")
    bad = torch.tensor([0, 5], device="tpu")
    assert t.index_select(0, bad).cpu().tolist() == [x[0].tolist(), x[2].tolist()]
    assert t[bad].cpu().tolist() == [x[0].tolist(), x[2].tolist()]
    assert F.embedding(bad, t).cpu().tolist() == [x[0].tolist(), x[2].tolist()]
    assert t.gather(1, torch.tensor([[0], [9], [1]], device="tpu")).cpu().flatten().tolist() == [0.0, 7.0, 9.0]
    assert t.take(torch.tensor([50], device="tpu")).cpu().tolist() == [11.0]
    s = t.clone().scatter_(1, torch.tensor([[0], [9], [1]], device="tpu"), -1.0).cpu()
    expect = x.clone()
    expect[0, 0] = expect[2, 1] = -1.0
    assert torch.equal(s, expect)
    p = t.clone().index_put_((torch.tensor([5], device="tpu"),), torch.tensor(-1.0, device="tpu"))
    assert torch.equal(p.cpu(), x)
    assert torch.equal(t.cpu(), x) and t._version == 0


def test_case_count():
    assert len(CASES) >= 60, len(CASES)
