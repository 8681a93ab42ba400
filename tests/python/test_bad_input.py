"""Bad input raises what the CPU raises, before any device work, and leaves every tensor as it was."""

import pytest
import torch


def inputs(dev):
    g = torch.Generator().manual_seed(0)
    t = {
        "a": torch.randn(3, 4, generator=g),
        "b": torch.randn(4, 5, generator=g),
        "c": torch.randn(5, 3, generator=g),
        "i": torch.arange(6).reshape(2, 3),
        "v": torch.randn(7, generator=g),
        "m": torch.tensor([True, False, True]),
        "img": torch.randn(2, 3, 8, 8, generator=g),
        "w": torch.randn(4, 5, 3, 3, generator=g),
        "logits": torch.randn(4, 6, generator=g),
        "target": torch.tensor([1, 0, 5, 2]),
    }
    return {k: v.to(dev) for k, v in t.items()}


CASES = {
    "add_shape_mismatch": lambda t: t["a"] + t["b"],
    "mm_inner_dim": lambda t: t["a"] @ t["c"],
    "mm_1d": lambda t: torch.mm(t["v"], t["a"]),
    "cat_dim_mismatch": lambda t: torch.cat([t["a"], t["b"]], 0),
    "cat_dim_out_of_range": lambda t: torch.cat([t["a"], t["a"]], 3),
    "sum_bad_dim": lambda t: t["a"].sum(5),
    "inplace_int_add_float": lambda t: t["i"].add_(0.5),
    "inplace_broadcast_to_smaller": lambda t: t["v"][:4].add_(t["a"]),
    "view_bad_shape": lambda t: t["a"].view(5, 3),
    "view_non_viewable": lambda t: t["a"].t().view(12),
    "expand_bad": lambda t: t["a"].expand(2, 4),
    "where_cond_not_bool": lambda t: torch.where(t["a"], t["a"], t["a"]),
    "masked_fill_mask_shape": lambda t: t["a"].masked_fill_(t["m"], 1.0),
    "index_select_float_index": lambda t: t["a"].index_select(0, t["v"]),
    "gather_index_rank": lambda t: torch.gather(t["a"], 1, t["target"]),
    "conv_channel_mismatch": lambda t: torch.nn.functional.conv2d(t["img"], t["w"]),
    "cross_entropy_target_shape": lambda t: torch.nn.functional.cross_entropy(t["logits"], t["i"]),
    "reshape_bad_numel": lambda t: t["a"].reshape(7, -1),
    "transpose_bad_dim": lambda t: t["a"].transpose(0, 2),
    "out_dtype_cannot_cast": lambda t: torch.add(t["a"], t["a"], out=t["i"][:, :2].reshape(3, 2).long()[:0]),
    "matmul_batched_mismatch": lambda t: torch.bmm(t["img"][0], t["w"][0]),
    "unsupported_dtype": lambda t: t["a"].to(torch.float8_e4m3fn) + 1,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name):
    fn = CASES[name]
    cpu = inputs("cpu")
    with pytest.raises(Exception) as cpu_err:
        fn(cpu)
    tpu = inputs("tpu")
    before = {k: v.cpu().clone() for k, v in tpu.items()}
    versions = {k: v._version for k, v in tpu.items()}
    with pytest.raises(Exception) as tpu_err:
        fn(tpu)
    if name == "unsupported_dtype":
        # float8 exists on the CPU (it fails later, at add); on tpu the conversion itself refuses, with a
        # TypeError naming the dtype
        assert "Float8" in str(tpu_err.value) or "float8" in str(tpu_err.value)
    else:
        assert type(tpu_err.value) is type(cpu_err.value), f"cpu: {cpu_err.value!r}\ntpu: {tpu_err.value!r}"
    for k, v in tpu.items():
        assert v._version == versions[k], f"{k} was modified"
        assert torch.equal(v.cpu(), before[k]), f"{k} changed"
    # the device keeps working
    torch.testing.assert_close((tpu["a"] * 2).cpu(), cpu["a"] * 2)


def test_device_mismatch_names_devices():
    a = torch.ones(3, 4, device="tpu")
    with pytest.raises(RuntimeError, match="same device"):
        a + torch.ones(3, 4)
    torch.testing.assert_close(a.cpu(), torch.ones(3, 4))


def test_at_least_fifteen_cases():
    assert len(CASES) >= 15
