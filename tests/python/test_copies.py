"""Moving data between CPU and "tpu" and within "tpu": round trips of every dtype and shape (bit exact),
extreme values, non-contiguous sources and views, dtype conversions, copy_ into views and with
broadcasting, .item(), torch.save / torch.load, state dicts, set_ and resize_.

Every expected value is what PyTorch on CPU gives for the same inputs.
"""

import io
import math

import pytest
import torch

DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
]
SHAPES = [(), (0,), (5,), (3, 4), (2, 0, 3), (2, 3, 4)]


def make(shape, dtype, seed=0):
    """Random CPU data of `dtype` spread over the type's range."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype) * 100
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
    info = torch.iinfo(dtype)
    lo, hi = (info.min, info.max) if dtype != torch.int64 else (-(2**62), 2**62)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def extremes(dtype):
    """Edge values of `dtype` on CPU: NaN, infinities, signed zeros, limits, subnormals."""
    if dtype == torch.bool:
        return torch.tensor([True, False, True])
    if dtype.is_complex:
        f = torch.finfo(dtype)
        vals = [complex(math.nan, 1.0), complex(math.inf, -math.inf), complex(-0.0, 0.0),
                complex(f.max, f.min), complex(f.tiny, -f.tiny / 2), complex(1.5, -2.25)]
        return torch.tensor(vals, dtype=dtype)
    if dtype.is_floating_point:
        f = torch.finfo(dtype)
        vals = [math.nan, math.inf, -math.inf, -0.0, 0.0, f.max, f.min, f.tiny, -f.tiny,
                f.tiny / 2, f.eps, 1.0, -1.0]
        return torch.tensor(vals, dtype=dtype)
    i = torch.iinfo(dtype)
    vals = [i.min, i.max, 0, 1, i.max - 1, i.min + 1] + ([-1] if i.min < 0 else [])
    return torch.tensor(vals, dtype=dtype)


def bits(t):
    """The bit pattern of a tensor, so that NaN and -0.0 compare exactly."""
    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    if t.dtype.is_floating_point:
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def assert_bits_equal(got, expected):
    assert got.device.type == "cpu"
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert torch.equal(bits(got.contiguous()), bits(expected.contiguous())), (got, expected)


def same_scalar(a, b):
    if isinstance(b, complex):
        return isinstance(a, complex) and same_scalar(a.real, b.real) and same_scalar(a.imag, b.imag)
    if isinstance(b, float):
        if math.isnan(b):
            return isinstance(a, float) and math.isnan(a)
        return isinstance(a, float) and a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip(dtype, shape):
    x = make(shape, dtype)
    t = x.to("tpu")
    assert t.device.type == "tpu"
    assert t.dtype == dtype and t.shape == x.shape
    y = t.cpu()
    assert y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_extremes(dtype):
    x = extremes(dtype)
    assert_bits_equal(x.to("tpu").cpu(), x)
    # A second hop on the device (tpu -> tpu clone) keeps the bits too.
    assert_bits_equal(x.to("tpu").clone().cpu(), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_extremes_are_real_values_on_device(dtype):
    """The device holds the values, not only their bytes: classification ops agree with CPU."""
    x = extremes(dtype)
    t = x.to("tpu")
    assert torch.equal(torch.isnan(t).cpu(), torch.isnan(x))
    assert torch.equal(torch.isinf(t).cpu(), torch.isinf(x))
    keep = ~((x != 0) & (x.abs() < torch.finfo(dtype).tiny))  # subnormals: test_subnormals_on_device
    assert torch.equal((t > 0).cpu()[keep], (x > 0)[keep])
    assert torch.equal((t < 0).cpu()[keep], (x < 0)[keep])
    assert torch.equal((t == 0).cpu()[keep], (x == 0)[keep])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_subnormals_round_trip(dtype):
    """Subnormal values copy to the device and back bit for bit. (Arithmetic on them is another matter:
    XLA flushes subnormals to zero in computations, as TPUs do; README, "Known differences".)"""
    tiny = torch.finfo(dtype).tiny
    x = torch.tensor([tiny / 2, -tiny / 4, tiny / 8], dtype=dtype)
    assert bool((x != 0).all())
    t = x.to("tpu")
    assert_bits_equal(t.cpu(), x)
    assert_bits_equal(t[1:].cpu(), x[1:])


NONCONTIGUOUS_SOURCES = {
    "transposed": lambda b: b.t(),
    "strided_slice": lambda b: b[::2, 1::3],
    "offset_slice": lambda b: b[1:, 2:],
    "expanded": lambda b: b[0].expand(3, 6),
    "expanded_column": lambda b: b[:, :1].expand(4, 5),
    "permuted_3d": lambda b: b.reshape(2, 3, 4).permute(2, 0, 1),
    "strided_transposed": lambda b: b.t()[::2, ::3],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool], ids=str)
@pytest.mark.parametrize("kind", list(NONCONTIGUOUS_SOURCES))
def test_noncontiguous_cpu_source(kind, dtype):
    base = make((4, 6), dtype, seed=3)
    src = NONCONTIGUOUS_SOURCES[kind](base)
    assert not src.is_contiguous()
    t = src.to("tpu")
    assert t.shape == src.shape and t.dtype == dtype
    assert torch.equal(t.cpu(), src)
    # A tpu tensor's own op sees the same values as CPU does.
    assert torch.equal(t.flatten().cpu(), src.flatten())


TPU_VIEWS = {
    "transpose": lambda a: a.t(),
    "slice_step": lambda a: a[::2, 1::2],
    "narrow": lambda a: a.narrow(1, 2, 3),
    "select": lambda a: a.select(0, 2),
    "select_column": lambda a: a[:, 3],
    "expand": lambda a: a[1:2].expand(3, 6),
    "diagonal": lambda a: a.diagonal(),
    "diagonal_offset": lambda a: a.diagonal(offset=1),
    "nested": lambda a: a[1:].t()[::2],
    "unsqueeze_expand": lambda a: a[:, 0].unsqueeze(1).expand(4, 5),
}


@pytest.mark.parametrize("kind", list(TPU_VIEWS))
def test_tpu_view_to_cpu(kind):
    fn = TPU_VIEWS[kind]
    base = make((4, 6), torch.float32, seed=4)
    t = base.to("tpu")
    v = fn(t)
    expected = fn(base)
    assert v.device.type == "tpu"
    assert v._base is t
    assert v.shape == expected.shape and v.stride() == expected.stride()
    assert v.storage_offset() == expected.storage_offset()
    assert torch.equal(v.cpu(), expected)
    assert torch.equal(v.to("cpu"), expected)
    assert torch.equal(torch.empty_like(expected).copy_(v), expected)
    # The view follows its base.
    t.mul_(2)
    assert torch.equal(v.cpu(), fn(base * 2))


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16,
                                   torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128])
def test_large_transposed_views_materialize_exactly(dtype):
    """Matrix transposes of 64K elements and more, copied out (on the CPU plugin clone and copy_ of such a
    view go through the transpose host kernel for elements of 2, 4 or 8 bytes, XLA's transpose for others),
    copied to the CPU, read by ops, batched, at sizes that are no multiple of the kernel's tiles."""
    base = make((3, 300, 257), dtype, seed=21)
    t = base.to("tpu")
    for fn in (lambda a: a[0].t().contiguous(), lambda a: a.transpose(1, 2).contiguous(), lambda a: a[1].t(),
               lambda a: torch.empty(257, 300, dtype=a.dtype, device=a.device).copy_(a[2].t()),
               lambda a: a.transpose(-1, -2)[:, 5:200], lambda a: torch.cat([a[2].t(), a[0].t()])):
        got, want = fn(t), fn(base)
        assert got.shape == want.shape and torch.equal(got.cpu(), want)
    if dtype not in (torch.bool, torch.uint8):
        assert torch.equal((t[0].t() * 2).cpu(), base[0].t() * 2)


# ---------------------------------------------------------------------------------- dtype conversions

CONVERSIONS = {
    "f32_to_f16": (lambda: torch.tensor([0.1, -2.5e-5, 65519.0, 70000.0, -1e-8, 3.14159]), torch.float16),
    "f32_to_bf16": (lambda: make((5, 3), torch.float32, seed=5), torch.bfloat16),
    "f64_to_f32": (lambda: make((7,), torch.float64, seed=6) / 3, torch.float32),
    "f16_to_f32": (lambda: make((6,), torch.float16, seed=7), torch.float32),
    "bf16_to_f64": (lambda: make((6,), torch.bfloat16, seed=8), torch.float64),
    "f16_to_bf16": (lambda: make((6,), torch.float16, seed=9), torch.bfloat16),
    "i64_to_f32": (lambda: torch.tensor([2**40 + 1, -(2**31) - 3, 16777217, 7, 0]), torch.float32),
    "i32_to_f64": (lambda: make((5,), torch.int32, seed=10), torch.float64),
    "i8_to_f16": (lambda: make((5,), torch.int8, seed=11), torch.float16),
    "u8_to_f32": (lambda: make((5,), torch.uint8, seed=12), torch.float32),
    "f32_to_i32_trunc": (lambda: torch.tensor([-2.7, -0.5, 0.5, 2.7, 100.9, -100.9, 0.0]), torch.int32),
    "f64_to_i64_trunc": (lambda: torch.tensor([-3.99, 3.99, 1e15 + 0.5, -1e15 - 0.5], dtype=torch.float64),
                         torch.int64),
    "f32_to_i8_trunc": (lambda: torch.tensor([-127.9, 126.7, -0.9, 0.9]), torch.int8),
    "f16_to_i16_trunc": (lambda: torch.tensor([-300.5, 300.5, 1.5], dtype=torch.float16), torch.int16),
    "f32_to_u8_trunc": (lambda: torch.tensor([0.0, 0.9, 254.9, 128.5]), torch.uint8),
    "i64_to_i8_wrap": (lambda: torch.tensor([300, -129, 127, -128, 256]), torch.int8),
    "u8_to_i8": (lambda: torch.tensor([0, 127, 128, 200, 255], dtype=torch.uint8), torch.int8),
    "i32_to_i64": (lambda: make((5,), torch.int32, seed=13), torch.int64),
    "f32_to_bool": (lambda: torch.tensor([0.0, -0.0, 0.1, math.nan, math.inf, -1.0]), torch.bool),
    "i64_to_bool": (lambda: torch.tensor([0, 1, -3, 2**40]), torch.bool),
    "bool_to_f32": (lambda: torch.tensor([True, False, True]), torch.float32),
    "bool_to_i64": (lambda: torch.tensor([True, False, True]), torch.int64),
    "bool_to_u8": (lambda: torch.tensor([True, False]), torch.uint8),
    "f32_to_c64": (lambda: make((4,), torch.float32, seed=14), torch.complex64),
    "f32_to_f16_nan_inf": (lambda: torch.tensor([math.nan, math.inf, -math.inf, -0.0]), torch.float16),
}


@pytest.mark.parametrize("where", ["on_device", "during_copy"])
@pytest.mark.parametrize("kind", list(CONVERSIONS))
def test_dtype_conversion(kind, where):
    make_src, dst = CONVERSIONS[kind]
    x = make_src()
    expected = x.to(dst)
    if where == "on_device":
        got = x.to("tpu").to(dst)
    else:
        got = x.to("tpu", dst)
    assert got.device.type == "tpu" and got.dtype == dst
    assert_bits_equal(got.cpu(), expected)


def test_dtype_conversion_back_to_cpu():
    x = make((3, 4), torch.float32, seed=15)
    t = x.to("tpu")
    assert_bits_equal(t.to("cpu", torch.bfloat16), x.to(torch.bfloat16))
    assert_bits_equal(t.to("cpu", torch.int32), x.to(torch.int32))


# --------------------------------------------------------------------------------------------- copy_

COPY_INTO_VIEW = {
    "rows": (lambda d: d[1:3], (2, 4)),
    "column": (lambda d: d[:, 1], (5,)),
    "strided": (lambda d: d[::2, ::3], (3, 2)),
    "transposed": (lambda d: d.t()[1:3], (2, 5)),
    "broadcast_row": (lambda d: d[1:4], (4,)),
    "select": (lambda d: d[4], (4,)),
    "whole": (lambda d: d, (5, 4)),
}


@pytest.mark.parametrize("src_dtype", [torch.float32, torch.int64, torch.float64], ids=str)
@pytest.mark.parametrize("kind", list(COPY_INTO_VIEW))
def test_copy_cpu_into_tpu_view(kind, src_dtype):
    view, src_shape = COPY_INTO_VIEW[kind]
    expected = make((5, 4), torch.float32, seed=16)
    dst = expected.to("tpu")
    src = make(src_shape, src_dtype, seed=17)
    r = view(dst).copy_(src)
    view(expected).copy_(src)
    assert r.device.type == "tpu"
    assert torch.equal(dst.cpu(), expected)


def test_copy_noncontiguous_cpu_into_tpu_view():
    expected = make((6, 5), torch.float32, seed=18)
    dst = expected.to("tpu")
    src = make((3, 4), torch.float32, seed=19).t()  # (4, 3), transposed
    dst[1:5, ::2].copy_(src)
    expected[1:5, ::2].copy_(src)
    assert torch.equal(dst.cpu(), expected)


TPU_TO_TPU = {
    "row": ((4,), lambda d: d),
    "column": ((3, 1), lambda d: d),
    "scalar": ((), lambda d: d),
    "same_shape": ((3, 4), lambda d: d),
    "into_view": ((2,), lambda d: d[:, ::2]),
    "into_transposed_view": ((3,), lambda d: d.t()),
}


@pytest.mark.parametrize("src_dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool], ids=str)
@pytest.mark.parametrize("kind", list(TPU_TO_TPU))
def test_copy_tpu_to_tpu_broadcast(kind, src_dtype):
    src_shape, view = TPU_TO_TPU[kind]
    expected = make((3, 4), torch.float32, seed=20)
    dst = expected.to("tpu")
    src_cpu = make(src_shape, src_dtype, seed=21)
    src = src_cpu.to("tpu")
    view(dst).copy_(src)
    view(expected).copy_(src_cpu)
    assert torch.equal(dst.cpu(), expected)
    assert torch.equal(src.cpu(), src_cpu)  # the source is untouched


def test_copy_tpu_into_cpu_view():
    x = make((3, 4), torch.float32, seed=22)
    t = x.to("tpu")
    expected = torch.zeros(4, 6)
    got = torch.zeros(4, 6)
    got[1:, ::2].copy_(t.t()[1:])
    expected[1:, ::2].copy_(x.t()[1:])
    assert torch.equal(got, expected)


# ---------------------------------------------------------------------------------------------- item

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_item(dtype):
    for seed in range(3):
        x = make((), dtype, seed=seed)
        assert same_scalar(x.to("tpu").item(), x.item())
    ext = extremes(dtype)
    t = ext.to("tpu")
    for i in range(ext.numel()):
        assert same_scalar(t[i].item(), ext[i].item()), (i, t[i].item(), ext[i].item())
    one = make((1, 1), dtype, seed=5)
    assert same_scalar(one.to("tpu").item(), one.item())


# --------------------------------------------------------------------------------------- save / load

def _saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def _tensors():
    base = make((4, 5), torch.float32, seed=23)
    return {
        "base": base,
        "ints": make((3,), torch.int64, seed=24),
        "half": make((2, 2), torch.bfloat16, seed=25),
        "flags": make((6,), torch.bool, seed=26),
        "scalar": make((), torch.float64, seed=27),
    }


def _tpu_dict(cpu):
    d = {k: v.to("tpu") for k, v in cpu.items()}
    d["rows"] = d["base"][1:3]  # views share the storage of "base"
    d["cols_t"] = d["base"].t()[::2]
    return d


def _cpu_views(cpu):
    d = dict(cpu)
    d["rows"] = cpu["base"][1:3]
    d["cols_t"] = cpu["base"].t()[::2]
    return d


def test_save_load_keeps_tpu():
    cpu = _tensors()
    tpu = _tpu_dict(cpu)
    expected = _cpu_views(cpu)
    loaded = torch.load(_saved(tpu))
    assert set(loaded) == set(expected)
    for k, e in expected.items():
        got = loaded[k]
        assert got.device == torch.device("tpu:0"), k
        assert got.dtype == e.dtype and got.shape == e.shape, k
        assert got.stride() == e.stride() and got.storage_offset() == e.storage_offset(), k
        assert torch.equal(got.cpu(), e), k
    # The views still share the loaded base's storage.
    loaded["base"].add_(1)
    base = cpu["base"] + 1
    assert torch.equal(loaded["rows"].cpu(), base[1:3])
    assert torch.equal(loaded["cols_t"].cpu(), base.t()[::2])
    # Saving did not change the originals.
    assert torch.equal(tpu["base"].cpu(), cpu["base"])


def test_save_load_map_location_cpu():
    cpu = _tensors()
    tpu = _tpu_dict(cpu)
    expected = _cpu_views(cpu)
    loaded = torch.load(_saved(tpu), map_location="cpu")
    for k, e in expected.items():
        got = loaded[k]
        assert got.device.type == "cpu", k
        assert got.dtype == e.dtype and got.stride() == e.stride(), k
        assert torch.equal(got, e), k
    assert loaded["rows"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()


def _model():
    return torch.nn.Sequential(
        torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
    )


def test_load_cpu_state_dict_into_tpu_model():
    torch.manual_seed(1)
    cpu_model = _model()
    with torch.no_grad():  # non-default LayerNorm parameters, so that loading them matters
        cpu_model[1].weight.uniform_(0.5, 1.5)
        cpu_model[1].bias.uniform_(-0.5, 0.5)
    tpu_model = _model().to("tpu")
    result = tpu_model.load_state_dict(cpu_model.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    for (k, p), (_, q) in zip(tpu_model.state_dict().items(), cpu_model.state_dict().items()):
        assert p.device.type == "tpu", k
        assert torch.equal(p.cpu(), q), k
    x = make((5, 6), torch.float32, seed=28)
    with torch.no_grad():
        got = tpu_model(x.to("tpu"))
        expected = cpu_model(x)
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("map_location", [None, "cpu"])
def test_tpu_state_dict_into_cpu_model(map_location):
    torch.manual_seed(2)
    reference = _model()
    tpu_model = _model().to("tpu")
    tpu_model.load_state_dict(reference.state_dict())
    state = torch.load(_saved(tpu_model.state_dict()), map_location=map_location)
    expected_device = "tpu" if map_location is None else "cpu"
    assert all(v.device.type == expected_device for v in state.values())
    cpu_model = _model()
    cpu_model.load_state_dict(state)
    for k, v in cpu_model.state_dict().items():
        assert v.device.type == "cpu"
        assert torch.equal(v, reference.state_dict()[k]), k
    x = make((5, 6), torch.float32, seed=29)
    with torch.no_grad():
        assert torch.equal(cpu_model(x), reference(x))


# -------------------------------------------------------------------------------------- set_, resize_

@pytest.mark.parametrize("offset,size,stride", [(2, (2, 2), (2, 1)), (0, (3,), (4,)), (1, (2, 3), (1, 2)),
                                                (11, (), ()), (5, (0,), (1,))])
def test_set_storage(offset, size, stride):
    base_cpu = torch.arange(12, dtype=torch.float32)
    base = base_cpu.to("tpu")
    u = torch.empty(0, device="tpu").set_(base.untyped_storage(), offset, size, stride)
    c = torch.empty(0).set_(base_cpu.untyped_storage(), offset, size, stride)
    assert u.device.type == "tpu"
    assert u.shape == c.shape and u.stride() == c.stride() and u.storage_offset() == c.storage_offset()
    assert torch.equal(u.cpu(), c)


def test_set_tensor_aliases():
    base_cpu = make((3, 4), torch.float32, seed=30)
    base = base_cpu.to("tpu")
    u = torch.empty(0, device="tpu")
    u.set_(base)
    assert u.shape == base.shape and u.stride() == base.stride()
    assert torch.equal(u.cpu(), base_cpu)
    u.add_(1)  # writes through the alias
    assert torch.equal(base.cpu(), base_cpu + 1)
    u.set_()
    assert u.shape == (0,) and u.numel() == 0
    assert torch.equal(base.cpu(), base_cpu + 1)


def test_resize():
    cpu = torch.arange(6, dtype=torch.float32)
    t = cpu.to("tpu")
    for shape in [(2, 3), (4,), (3, 2)]:
        t.resize_(shape)
        cpu.resize_(shape)
        assert t.shape == cpu.shape and t.stride() == cpu.stride()
        assert torch.equal(t.cpu(), cpu)
    # Growing keeps the old elements (the rest is undefined).
    t.resize_(10)
    cpu.resize_(10)
    assert t.shape == cpu.shape
    assert torch.equal(t[:6].cpu(), cpu[:6])
    t[6:] = 7.0
    cpu[6:] = 7.0
    assert torch.equal((t * 2).cpu(), cpu * 2)
    t.resize_(0)
    assert t.shape == (0,) and t.cpu().numel() == 0


def test_resize_empty_then_fill():
    t = torch.empty(0, device="tpu", dtype=torch.int32)
    t.resize_(3, 4).fill_(5)
    assert t.shape == (3, 4) and t.stride() == (4, 1)
    assert torch.equal(t.cpu(), torch.full((3, 4), 5, dtype=torch.int32))
    u = torch.empty(0, device="tpu").resize_as_(torch.empty(2, 5))
    assert u.shape == (2, 5) and u.device.type == "tpu"


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_float_to_int_conversions_out_of_range_match_cpu(src, fallback_policy):
    """NaN, infinities and values beyond the target's range convert as torch's CPU kernels do on this
    host (on x86: through int32/int64 with the lowest value for out-of-range, then wrapped)."""
    fallback_policy("error")
    x = torch.tensor([-1e10, -3e9, -2.0**31 - 1000, -70000, -300, -129, -8.5, -1, -0.5, 0.5, 200, 255.9, 256,
                      300, 70000, 3e9, 1e10, 1e20, math.inf, -math.inf, math.nan]).to(src)
    for dt in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool):
        got = x.to("tpu").to(dt).cpu()
        assert torch.equal(got, x.to(dt)), (src, dt, got, x.to(dt))
