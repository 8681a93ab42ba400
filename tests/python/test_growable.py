"""Growable storages (DESIGN.md, "growing shapes"): a small torch.cat result lives in a flat buffer with
room to spare, and reads of such a storage take their offset and strides at run time. A tensor grown by
one step at a time (generate's input_ids and attention mask) then reuses the same programs until its
capacity doubles. Everything a user sees must stay exactly the CPU's: values, shapes, strides, storage
sizes, aliasing and version counters."""

import pytest
import torch

import torch_pjrt
from test_view_semantics import run  # a case on one device: (results, None) or (None, the exception)


def misses():
    return torch_pjrt.metrics()["cache_misses"]


def grow(dev, steps, start=(2, 5), dtype=torch.int64):
    g = torch.Generator().manual_seed(3)
    t = torch.randint(0, 100, start, generator=g).to(dtype).to(dev)
    out = []
    for _ in range(steps):
        nxt = torch.randint(0, 100, (start[0], 1), generator=g).to(dtype).to(dev)
        t = torch.cat([t, nxt], dim=-1)
        out.append((t, t[:, -1].clone(), t[:, -1:] + 1, torch.isin(t[:, -1], torch.tensor([7]).to(dev))))
    return out


def test_growing_tensor_matches_cpu_and_reuses_programs(fallback_policy):
    fallback_policy("error")
    want = grow("cpu", 50)
    grow("tpu", 3)  # warm-up: the first programs of this capacity
    counts = []
    got = []
    before = misses()
    for step in grow("tpu", 50):
        got.append(step)
    # per step: compare every tensor, and count programs built (by replaying with counters)
    for (t, last, plus, eos), (wt, wlast, wplus, weos) in zip(got, want):
        for g, w in ((t, wt), (last, wlast), (plus, wplus), (eos, weos)):
            assert g.shape == w.shape and g.dtype == w.dtype and g.stride() == w.stride()
            assert torch.equal(g.cpu(), w)
        assert t.untyped_storage().nbytes() == wt.untyped_storage().nbytes()
    total = misses() - before
    # 2 x 5 + 50 x 2 = 110 elements: capacities 64 then 128, so at most the programs of two capacities
    # (cat, clone, add, isin), never one per step
    assert total <= 2 * 8, total
    counts = []
    t = got[-1][0]
    for _ in range(5):
        m = misses()
        t = torch.cat([t, t[:, -1:]], dim=-1)
        t[:, -1].clone()
        counts.append(misses() - m)
    assert counts[1:] == [0] * 4, counts


def _cases():
    def cat(dev, *shapes, dtype=torch.float32, dim=-1):
        parts = [torch.arange(1, 1 + torch.Size(s).numel(), dtype=torch.float64).reshape(s).to(dtype).to(dev)
                 for s in shapes]
        return torch.cat(parts, dim=dim)

    def transposed_read(dev):
        x = cat(dev, (3, 2), (3, 1))
        return [x, x.t() + 1, x.t().contiguous(), x.t().clone(), x[:, ::2] * 2]

    def in_place_whole_and_partial(dev):
        x = cat(dev, (2, 3), (2, 2))
        y = cat(dev, (4,), (3,), dim=0)
        v = x[:, 1:3]
        v.add_(10)
        y.mul_(2)
        return [x, v, y]

    def write_then_grow(dev):
        x = cat(dev, (2, 3), (2, 1), dtype=torch.int64)
        x[:, 0] = 7
        y = torch.cat([x, x[:, :1]], dim=1)
        return [x, y, y[:, -2:].sum(1)]

    def dtype_and_conj_views(dev):
        x = cat(dev, (2, 2), (2, 2), dtype=torch.int32)
        c = torch.cat([torch.ones(2, dtype=torch.complex64).to(dev), torch.tensor([1j, 2 + 1j]).to(dev)])
        return [x.view(torch.float32).view(torch.int32) + 0, x.view(torch.int16), c.conj() * 1, c.conj().imag]

    def expand_and_as_strided(dev):
        x = cat(dev, (1, 3), (1, 2))
        e = x.expand(4, 5)
        a = x.as_strided((2, 2), (1, 2), 1)
        return [e + 0, e.clone(), a + 0, a.t() * 1]

    def resize_and_set(dev):
        x = cat(dev, (3,), (2,), dim=0)
        s = x.untyped_storage()
        x.resize_(8)
        x[5:] = 1
        y = torch.empty(0, device=dev)
        y.set_(s)
        return [x, y[:5]]

    def grow_each_dim(dev):
        a = cat(dev, (2, 3, 2), (2, 1, 2), dim=1)
        b = cat(dev, (1, 3, 2), (2, 3, 2), dim=0)
        return [a, b, torch.cat([a, a], 2), a.permute(2, 0, 1) + 0, b.sum(0)]

    def mixed_inputs(dev):
        big = torch.arange(70000, dtype=torch.float32).to(dev)  # past the growable size: the row's own path
        small = cat(dev, (3,), (4,), dim=0)
        return [torch.cat([small, small * 2]), torch.cat([big[:5], small]), torch.cat([small.double(), small.double()]),
                torch.cat([big, big])[-3:]]

    def bool_and_half(dev):
        m = cat(dev, (2, 2), (2, 1), dtype=torch.bool)
        h = cat(dev, (2, 2), (2, 1), dtype=torch.float16)
        return [m, m[:, -1] & m[:, 0], h[:, -2:] * 2, torch.where(m, h, -h)]

    def channels_last_and_strided_inputs(dev):
        a = cat(dev, (1, 2, 3, 3), (1, 1, 3, 3), dim=1)
        cl = a.contiguous(memory_format=torch.channels_last)
        y = torch.cat([cl, cl], dim=1)  # the CPU keeps channels-last: not a growable result
        z = torch.cat([a[:, :, ::2], a[:, :, 1:2]], dim=2)  # strided inputs, row-major result
        return [y, z, z.sum((2, 3))]

    def versions_and_aliases(dev):
        x = cat(dev, (2, 2), (2, 1))
        v = x[0]
        v.add_(1)
        x.add_(1)
        return [x, v, torch.tensor([x._version, v._version])]

    return {k: v for k, v in locals().items() if callable(v) and k != "cat"}


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name):
    expected, cpu_error = run(CASES[name], "cpu")
    got, tpu_error = run(CASES[name], "tpu")
    if cpu_error is not None:
        assert tpu_error is not None and type(tpu_error) is type(cpu_error), (cpu_error, tpu_error)
        return
    assert tpu_error is None, f"tpu raised {tpu_error!r}"
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert g.stride() == e.stride(), f"strides {g.stride()} vs {e.stride()}"
        assert g.untyped_storage().nbytes() == e.untyped_storage().nbytes()
        torch.testing.assert_close(g.cpu(), e, equal_nan=True)
