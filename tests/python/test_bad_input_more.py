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


def test_out_of_range_indices_raise_at_the_sync():
    """Index values are checked on the device (tests/python/test_device_checks.py has every op): each bad
    call raises at the next sync point, with the CPU's exception type. Never a crash; the inputs are left as
    they were."""
    x = torch.arange(12.0).reshape(3, 4)
    t = x.to("tpu")
    bad = torch.tensor([0, 5], device="tpu")
    calls = [
        (IndexError, lambda: t.index_select(0, bad)), (IndexError, lambda: t[bad]),
        (IndexError, lambda: F.embedding(bad, t)),
        (RuntimeError, lambda: t.gather(1, torch.tensor([[0], [9], [1]], device="tpu"))),
        (IndexError, lambda: t.take(torch.tensor([50], device="tpu"))),
        (RuntimeError, lambda: t.clone().scatter_(1, torch.tensor([[0], [9], [1]], device="tpu"), -1.0)),
        (IndexError, lambda: t.index_put_((torch.tensor([5], device="tpu"),), torch.tensor(-1.0, device="tpu"))),
    ]
    for err, call in calls:
        call()
        with pytest.raises(err):
            torch.tpu.synchronize()
    assert torch.equal(t.cpu(), x) and t._version == 1  # index_put_ bumped it, and wrote nothing


def test_case_count():
    assert len(CASES) >= 60, len(CASES)


# ----------------------------------------------------------- views reaching past a storage shrunk through an alias

# Each program runs after PAST_SETUP: `t` is torch.arange(8.0), `v = t[2:]`, `u` a strided view set_ over t's
# storage (its elements 3, 5, 7); then t's storage shrinks to 4 elements, so v and u (and t) reach past its end.
PAST_SETUP = ("t = torch.arange(8.0, device=d); v = t[2:]; "
              "u = torch.empty(0, device=d).set_(t.untyped_storage(), 3, (3,), (2,))")
PAST_SHRINK = "t.untyped_storage().resize_(16)"
# name -> (program, the op "tpu" names); the writes come last (the CPU writes freed memory there)
PAST_STORAGE = {
    "add": ("v + 1", "aten::add.Tensor"),
    "sum": ("v.sum()", "aten::sum"),
    "whole": ("t * 2", "aten::mul.Tensor"),
    "strided": ("u + 1", "aten::add.Tensor"),
    "matmul": ("v.view(2, 3) @ torch.ones(3, 2, device=d)", "aten::mm"),
    "cat": ("torch.cat([v, v])", "aten::cat"),
    "index": ("v[torch.tensor([0, 5], device=d)]", "aten::index.Tensor"),
    "where": ("torch.where(v > 0, v, 0.0)", "aten::gt.Scalar"),
    "clone": ("v.clone()", "aten::clone"),
    "w_mul_": ("v.mul_(2)", "aten::mul_.Tensor"),
    "w_add_out": ("torch.add(torch.ones(6, device=d), 1, out=v)", "aten::add.out"),
}


def test_views_past_a_shrunk_storage_cpu_reference():
    """What the CPU does with the same programs (in a subprocess: its writes corrupt the heap): it raises
    nothing, reading and writing freed memory. So "tpu" raises a RuntimeError of its own that names the op,
    the view's sizes and strides and its dtype (test_views_past_a_shrunk_storage)."""
    code = "import torch\nd = 'cpu'\n"
    for name, (prog, _) in PAST_STORAGE.items():
        code += (f"{PAST_SETUP}; {PAST_SHRINK}\ntry:\n    {prog}\n    print('{name} ok', flush=True)\n"
                 f"except Exception as e:\n    print('{name} raised', type(e).__name__, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = out.stdout.splitlines()
    assert not [x for x in lines if "raised" in x], out.stdout  # if the CPU ever raises, "tpu" must match it
    assert "add ok" in lines and "strided ok" in lines and "index ok" in lines, out.stdout + out.stderr


@pytest.mark.parametrize("name", sorted(PAST_STORAGE))
def test_views_past_a_shrunk_storage(name):
    prog, op = PAST_STORAGE[name]
    env = {"torch": torch, "d": "tpu"}
    exec(PAST_SETUP, env)
    eval(prog, env)  # in bounds first: a program for this geometry is cached, the check still runs
    exec(PAST_SETUP, env)
    exec(PAST_SHRINK, env)
    t, v = env["t"], env["v"]
    before = (t[:4].cpu().clone(), t._version, v._version)
    with pytest.raises(RuntimeError) as e:
        eval(prog, env)
        torch.tpu.synchronize()
    msg = str(e.value)
    assert msg.startswith(op + ":") and "sizes [" in msg and "Float" in msg and "which has 16" in msg, msg
    assert torch.equal(t[:4].cpu(), before[0]) and (t._version, v._version) == before[1:]
    t.untyped_storage().resize_(32)  # given its bytes back, the view reads again
    assert (v + 1).cpu().shape == (6,)


# ------------------------------------------------------------------ writes into self-overlapping (stride-0) views

# Programs writing into `x = base.expand(3, 4)`, base = torch.zeros(4): each element of base is x's element
# in three places. name -> program; on the CPU, TensorIterator ops refuse ("unsupported operation: more than
# one element of the written-to tensor refers to a single memory location"); fill_ with a number and zero_
# write one value everywhere and accept (fill_ with a tensor refuses).
OVERLAP_WRITES = {
    "add_": "x.add_(1)",
    "mul_": "x.mul_(2)",
    "exp_": "x.exp_()",
    "clamp_": "x.clamp_(min=1.0)",
    "relu_": "x.relu_()",
    "uniform_": "x.uniform_()",
    "bernoulli_": "x.bernoulli_(0.5)",
    "copy_": "x.copy_(torch.ones(3, 4, device=d))",
    "copy_broadcast": "x.copy_(torch.ones(4, device=d))",
    "lerp_": "x.lerp_(torch.ones(3, 4, device=d), 0.5)",
    "addcmul_": "x.addcmul_(torch.ones(3, 4, device=d), torch.ones(3, 4, device=d))",
    "index_add_": "x.index_add_(0, torch.tensor([0], device=d), torch.ones(1, 4, device=d))",
    "index_copy_": "x.index_copy_(0, torch.tensor([0], device=d), torch.ones(1, 4, device=d))",
    "scatter_": "x.scatter_(0, torch.zeros(1, 4, dtype=torch.long, device=d), torch.ones(1, 4, device=d))",
    "masked_scatter_": "x.masked_scatter_(torch.ones(3, 4, dtype=torch.bool, device=d), torch.ones(12, device=d))",
    "addmm_": "x.addmm_(torch.ones(3, 2, device=d), torch.ones(2, 4, device=d))",
    "transposed_add_": "x.t().add_(1)",
    "add_out": "torch.add(torch.ones(3, 4, device=d), 1, out=x)",
    "abs_out": "torch.abs(torch.ones(3, 4, device=d), out=x)",
    "mm_out": "torch.mm(torch.ones(3, 2, device=d), torch.ones(2, 4, device=d), out=x)",
    "cumsum_out": "torch.cumsum(torch.ones(3, 4, device=d), 1, out=x)",
    "cat_out": "torch.cat([torch.ones(1, 4, device=d)] * 3, out=x)",
    "sort_out": "torch.sort(torch.ones(3, 4, device=d), out=(x, torch.empty(3, 4, dtype=torch.long, device=d)))",
    # accepted by the CPU
    "fill_": "x.fill_(2.0)",
    "fill_tensor": "x.fill_(torch.tensor(3.0, device=d))",
    "zero_": "x.zero_()",
    "index_select_out_resized": "torch.index_select(torch.ones(4, 3, device=d), 1, torch.tensor([0], device=d), out=x)",
}


def _overlap_run(prog, d):
    env = {"torch": torch, "d": d}
    exec("base = torch.zeros(4, device=d) + 1; x = base.expand(3, 4)", env)
    base = env["base"]
    v0 = base._version
    try:
        eval(prog, env)
        err = None
    except Exception as e:  # noqa: BLE001 - compared with the CPU's below
        err = e
    return err, base.cpu(), base._version - v0


@pytest.mark.parametrize("name", sorted(OVERLAP_WRITES))
def test_writes_into_self_overlapping_views(name):
    cpu_err, cpu_base, cpu_bumps = _overlap_run(OVERLAP_WRITES[name], "cpu")
    tpu_err, tpu_base, tpu_bumps = _overlap_run(OVERLAP_WRITES[name], "tpu")
    assert type(tpu_err) is type(cpu_err), f"cpu: {cpu_err!r}\ntpu: {tpu_err!r}"
    if cpu_err is not None:
        assert "single memory location" in str(cpu_err) and "single memory location" in str(tpu_err)
        assert torch.equal(tpu_base, torch.ones(4)) and tpu_bumps == 0  # nothing written
    else:
        assert torch.equal(tpu_base, cpu_base) and tpu_bumps == cpu_bumps


@pytest.mark.parametrize("prog", [
    "x.masked_fill_(torch.ones(3, 4, dtype=torch.bool, device=d), 1.0)",
    "x.index_put_((torch.tensor([0, 1], device=d),), torch.ones(4, device=d))",
    "x.index_fill_(1, torch.tensor([0], device=d), 5.0)",
    "x.tril_()",
    "torch.sum(torch.ones(3, 4, 4, device=d), 0, out=x)",
])
def test_writes_into_self_overlapping_views_stricter(prog):
    """Known difference: the CPU accepts these (masked_fill_ and index_put_ warn that writing expanded
    tensors is deprecated) and writes each element once per place it appears, in its loop's order. On
    "tpu" the places of one element are written by one scatter in no defined order, so these raise the
    CPU's internal-overlap RuntimeError instead, and write nothing. sum(out=) resizes x (to a new
    contiguous layout) before the CPU's check; "tpu" checks out= tensors before any resize, as the CPU's
    other kernels do (index_select(out=): index_select_out_resized above)."""
    cpu_err, _, cpu_bumps = _overlap_run(prog, "cpu")
    assert cpu_err is None and cpu_bumps == 1
    tpu_err, tpu_base, tpu_bumps = _overlap_run(prog, "tpu")
    assert type(tpu_err) is RuntimeError and "single memory location" in str(tpu_err), tpu_err
    assert torch.equal(tpu_base, torch.ones(4)) and tpu_bumps == 0


# ------------------------------------------------------------------------ out of memory inside an async program

@pytest.mark.parametrize("prog", ["huge.clone()", "huge.contiguous()", "huge * 2"])
def test_out_of_memory_in_a_program_leaves_earlier_tensors(prog, strict_eager):
    """A result too big for the device fails inside PJRT's execution, after the op returned: the next sync
    point raises torch.OutOfMemoryError naming the op; earlier tensors, and ops on them issued after the
    failure, are intact (the CPU would have raised at the op: there the program stops, here at the sync)."""
    keep = torch.arange(6.0, device="tpu")
    w = keep.clone().add_(1)
    huge = torch.ones(1, device="tpu").expand(2**36)
    y = eval(prog, {"huge": huge})
    keep.mul_(2)
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # reported once
    assert torch.equal(keep.cpu(), torch.arange(6.0) * 2) and keep._version == 1
    assert torch.equal(w.cpu(), torch.arange(6.0) + 1) and w._version == 1
    with pytest.raises(torch.OutOfMemoryError):  # the failed result reports it when read
        y[:3].cpu()
    torch.testing.assert_close((keep + 1).cpu(), torch.arange(6.0) * 2 + 1)
