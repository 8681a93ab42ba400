"""Device-side checks (issue #36): an out-of-range index or an invalid value raises, as on CUDA.

The op returns at once; the next sync point (.cpu(), .item(), printing, torch.tpu.synchronize) raises the
exception the CPU raises for the same call (type and words), naming the op. A failed op writes nothing
(stricter than some CPU kernels, which write the entries before the bad one).
Every case runs on the CPU first for the reference error, in strict eager, launch-blocking eager (raised at
the op), fused eager and torch.compile(backend="tpu").
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

X = torch.arange(12.0).view(3, 4)


def _ops():
    """name -> (fn(x, idx) with idx a 1-d int64 index, a bad index, a good one). Ops that wrap negative
    indices (advanced indexing, take / put, index_fill) get a valid negative entry; the others a bad one."""
    ones = torch.ones
    return {
        "index_select": (lambda x, i: x.index_select(0, i), [0, -1], [0, 2]),
        "index": (lambda x, i: x[i], [1, -4], [-3, 2]),
        "gather": (lambda x, i: x.gather(1, i.view(-1, 1).expand(-1, 2)), [0, 1, 4], [3, 1, 0]),
        "take": (lambda x, i: x.take(i), [3, 12], [-12, 11]),
        "embedding": (lambda x, i: F.embedding(i, x), [2, 3], [0, 2]),
        "embedding_bag": (lambda x, i: F.embedding_bag(i, x, torch.tensor([0], device=x.device)), [1, -1], [0, 2]),
        "nll_loss": (lambda x, i: F.nll_loss(x[:2, :3], i), [0, 3], [2, 0]),
        "cross_entropy": (lambda x, i: F.cross_entropy(x[:2], i, ignore_index=-100), [1, 7], [-100, 3]),
        "scatter": (lambda x, i: x.scatter(0, i.view(-1, 1), 7.0), [0, 3], [2, 1]),
        "scatter_add": (lambda x, i: x.scatter_add(0, i.view(-1, 1).expand(-1, 4), x[:2]), [-1, 0], [0, 2]),
        "scatter_reduce": (lambda x, i: x.scatter_reduce(1, i.view(1, -1).expand(3, -1), x[:, :2], "amax"),
                           [0, 4], [3, 2]),
        "index_add": (lambda x, i: x.index_add(0, i, ones(2, 4, device=x.device)), [0, 3], [2, 1]),
        "index_copy": (lambda x, i: x.index_copy(0, i, ones(2, 4, device=x.device)), [-1, 0], [0, 1]),
        "index_fill": (lambda x, i: x.index_fill(1, i, -1.0), [0, -5], [-4, 3]),
        "index_put": (lambda x, i: x.index_put((i,), ones(4, device=x.device)), [1, 3], [-2, 0]),
        "put": (lambda x, i: x.put(i, ones(2, device=x.device)), [0, 12], [-1, 5]),
        "index_reduce": (lambda x, i: x.index_reduce(0, i, ones(2, 4, device=x.device), "amax"), [0, -1], [2, 1]),
    }


OPS = _ops()
# in-place forms: a failed call must leave the tensor as it was
INPLACE = {
    "scatter_": lambda x, i: x.scatter_(0, i.view(-1, 1), 7.0),
    "index_add_": lambda x, i: x.index_add_(0, i, torch.ones(2, 4, device=x.device)),
    "index_copy_": lambda x, i: x.index_copy_(0, i, torch.ones(2, 4, device=x.device)),
    "index_fill_": lambda x, i: x.index_fill_(0, i, -1.0),
    "index_put_": lambda x, i: x.index_put_((i,), torch.ones(4, device=x.device)),
    "index_put_accumulate": lambda x, i: x.index_put_((i,), torch.ones(4, device=x.device), accumulate=True),
    "setitem": lambda x, i: x.__setitem__(i, 5.0),
    "put_": lambda x, i: x.put_(i, torch.ones(2, device=x.device)),
    "masked_scatter_": lambda x, i: x.masked_scatter_(x > 2, torch.ones(i.numel(), device=x.device)),
}


def _cpu_error(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


def _same_error(cpu_err, tpu_err, op):
    assert type(tpu_err) is type(cpu_err), f"cpu {cpu_err!r}\ntpu {tpu_err!r}"
    first = str(cpu_err).split("\n")[0]
    assert first in str(tpu_err), f"cpu {cpu_err!r}\ntpu {tpu_err!r}"
    assert op in str(tpu_err), tpu_err


@pytest.fixture(autouse=True)
def _clean():
    torch.tpu.synchronize()  # nothing of an earlier test pending
    yield
    try:
        torch.tpu.synchronize()
    finally:
        torch_pjrt.set_eager_mode("strict")


@pytest.mark.parametrize("name", sorted(OPS))
def test_strict_raises_at_the_sync(name):
    fn, bad, good = OPS[name]
    x = X.clone()
    cpu_err = _cpu_error(fn, x, torch.tensor(bad))
    xt = x.to("tpu")
    out = fn(xt, torch.tensor(bad, device="tpu"))  # returns: the check is read at the next sync point
    if torch_pjrt.get_eager_mode() == "strict":  # (fused eager: the op runs with its stream, at the sync)
        assert torch_pjrt.metrics()["device_checks"]["pending"] >= 1
    with pytest.raises(Exception) as info:
        out.cpu()
    _same_error(cpu_err, info.value, "nll_loss" if name == "cross_entropy" else name)  # the op that checks
    # reported once; the device keeps working; valid (negative) indices give the CPU's result
    torch.tpu.synchronize()
    torch.testing.assert_close(fn(xt, torch.tensor(good, device="tpu")).cpu(), fn(x, torch.tensor(good)))
    assert torch.equal(xt.cpu(), x)


@pytest.mark.parametrize("name", sorted(OPS))
def test_launch_blocking_raises_at_the_op(name):
    fn, bad, _ = OPS[name]
    cpu_err = _cpu_error(fn, X.clone(), torch.tensor(bad))
    xt = X.to("tpu")
    idx = torch.tensor(bad, device="tpu")
    old = torch.tpu.eager_mode()
    torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
    try:
        with pytest.raises(Exception) as info:
            fn(xt, idx)
    finally:
        torch.tpu.set_eager_mode(old)
    assert type(info.value) is type(cpu_err), info.value
    assert str(cpu_err).split("\n")[0] in str(info.value)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_failed_write_changes_nothing(name):
    fn = INPLACE[name]
    # put_ addresses the flattened tensor; masked_scatter_: too few source elements
    bad = {"put_": [0, 12], "masked_scatter_": [0, 1]}.get(name, [0, 7])
    x = X.clone()
    cpu_err = _cpu_error(fn, x, torch.tensor(bad))
    x = X.clone()  # (some CPU kernels write the entries before the bad one, then raise)
    xt = X.to("tpu")
    alias = xt.view(-1)
    fn(xt, torch.tensor(bad, device="tpu"))
    with pytest.raises(Exception) as info:
        torch.tpu.synchronize()
    assert type(info.value) is type(cpu_err), info.value
    assert str(cpu_err).split("\n")[0] in str(info.value)
    assert torch.equal(xt.cpu(), X) and torch.equal(alias.cpu(), X.view(-1))
    # and with valid indices the write happens as on the CPU
    good = [0, 2] if name != "masked_scatter_" else list(range(9))
    fn(x, torch.tensor(good))
    fn(xt, torch.tensor(good, device="tpu"))
    assert torch.equal(xt.cpu(), x)


def test_multinomial_values():
    cases = [  # (probabilities, samples, replacement)
        ([0.5, -0.1, 0.6], 1, False), ([0.5, float("nan"), 0.5], 2, False), ([0.0, 0.0, 0.0], 1, True),
        ([0.2, -0.5, 0.3], 2, True), ([0.2, float("inf"), 0.3], 2, True), ([[0.1, 0.9], [0.0, 0.0]], 1, False),
    ]
    for probs, n, repl in cases:
        p = torch.tensor(probs)
        cpu_err = _cpu_error(torch.multinomial, p, n, repl)
        out = torch.multinomial(p.to("tpu"), n, repl)
        with pytest.raises(Exception) as info:
            out.tolist()
        _same_error(cpu_err, info.value, "multinomial")
    torch.manual_seed(0)
    ok = torch.multinomial(torch.tensor([0.0, 1.0, 0.0], device="tpu"), 4, True)
    assert ok.tolist() == [1, 1, 1, 1]


def test_first_failure_is_reported_and_later_ones_are_dropped():
    xt = X.to("tpu")
    a = xt.index_select(0, torch.tensor([7], device="tpu"))
    b = xt.gather(0, torch.tensor([[9, 0, 0, 0]], device="tpu"))
    with pytest.raises(IndexError, match="index out of range in self"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # both were read at that sync point: nothing left to raise
    assert torch_pjrt.metrics()["device_checks"]["pending"] == 0
    del a, b


def test_fused_eager_raises_at_the_sync_naming_the_op():
    torch_pjrt.set_eager_mode("fused")
    xt = X.to("tpu")
    y = (xt * 2).index_select(0, torch.tensor([1, 3], device="tpu")) + 1
    z = xt.sum()
    with pytest.raises(IndexError) as info:
        y.cpu()
    assert "index out of range in self" in str(info.value) and "aten::index_select" in str(info.value)
    assert z.item() == X.sum().item()  # the stream's other results are right
    kv = torch.zeros(4, 2, device="tpu")
    kv.index_copy_(0, torch.tensor([5], device="tpu"), torch.ones(1, 2, device="tpu"))
    with pytest.raises(IndexError, match="index_copy_\\(\\): index 5 is out of bounds for dimension 0 with size 4"):
        kv.cpu()
    assert kv.cpu().count_nonzero().item() == 0
    kv.index_copy_(0, torch.tensor([3], device="tpu"), torch.ones(1, 2, device="tpu"))
    assert kv.cpu()[3].tolist() == [1.0, 1.0]


def test_compiled_graph_raises_at_the_sync_naming_the_op():
    @torch.compile(backend="tpu", fullgraph=True)
    def step(cache, pos, new, ids, table):
        cache.index_copy_(0, pos, new)
        return F.embedding(ids, table).sum(-1) + cache.sum()

    cache, table = torch.zeros(4, 3, device="tpu"), torch.randn(5, 3)
    tt = table.to("tpu")
    new = torch.ones(1, 3, device="tpu")
    out = step(cache, torch.tensor([1], device="tpu"), new, torch.tensor([0, 4], device="tpu"), tt)
    torch.testing.assert_close(out.cpu(), F.embedding(torch.tensor([0, 4]), table).sum(-1) + 3)
    out = step(cache, torch.tensor([2], device="tpu"), new, torch.tensor([0, 5], device="tpu"), tt)
    with pytest.raises(IndexError) as info:
        out.cpu()
    assert "index out of range in self" in str(info.value) and "aten::embedding" in str(info.value)
    out = step(cache, torch.tensor([4], device="tpu"), new, torch.tensor([0, 1], device="tpu"), tt)
    with pytest.raises(IndexError, match="index_copy_\\(\\): index 4 is out of bounds for dimension 0 with size 4"):
        out.cpu()
    assert cache.cpu().sum(-1).tolist() == [0.0, 3.0, 3.0, 0.0]  # the failed write changed nothing


def test_static_cache_written_past_its_end_raises():
    transformers = pytest.importorskip("transformers")
    from transformers import LlamaConfig, StaticCache

    cfg = LlamaConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=2, num_hidden_layers=1,
                      intermediate_size=32, vocab_size=32)
    k = torch.randn(1, 2, 1, 8)
    results = {}
    for device in ("cpu", "tpu"):  # five one-token updates of a four-token cache
        cache = StaticCache(config=cfg, max_cache_len=4)
        kd = k.to(device)
        err = None
        try:
            for step in range(5):
                cache.update(kd + step, kd, 0)
            cache.layers[0].keys.cpu()
        except Exception as e:  # noqa: BLE001
            err = e
        results[device] = (err, cache.layers[0].keys.cpu())
    cpu_err, cpu_keys = results["cpu"]
    tpu_err, tpu_keys = results["tpu"]
    assert cpu_err is not None
    assert type(tpu_err) is type(cpu_err), tpu_err
    assert torch.equal(tpu_keys, cpu_keys)


def test_pending_codes_are_bounded_and_an_early_failure_still_raises():
    xt = X.to("tpu")
    xt.index_select(0, torch.tensor([3], device="tpu"))
    good = torch.tensor([1], device="tpu")
    for _ in range(600):
        xt.index_select(0, good)
    assert torch_pjrt.metrics()["device_checks"]["pending"] <= 512
    with pytest.raises(IndexError, match="index out of range in self"):
        torch.tpu.synchronize()


def test_checks_off():
    code = ("import torch, torch_pjrt\n"
            "x = torch.arange(6.0, device='tpu')\n"
            "print(x.index_select(0, torch.tensor([7], device='tpu')).cpu().tolist())\n"
            "print(torch_pjrt.metrics()['device_checks']['enabled'])\n")
    env = dict(os.environ, TORCH_PJRT_DEVICE_CHECKS="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert lines[-1] == "False"
    assert torch_pjrt.metrics()["device_checks"]["enabled"]
