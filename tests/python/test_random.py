"""Random ops on "tpu": reproducibility under seeds and generator states, and distributions.

The device generator is not CPU's (bitwise equality with CPU is not expected), so distributions are
compared with CPU samples of the same size and parameters: sample means and standard deviations must
agree within 6 standard errors of their difference, bounds must hold exactly. Seeds are fixed, so every
test is deterministic; the bounds make them independent of the particular seed.
"""

import math

import pytest
import torch
import torch.nn.functional as F

N = 200_000
DEV = "tpu"


def assert_same_distribution(got, expected, mean=None, std=None, k=6.0, check_std=True):
    """Sample mean and std of `got` (tpu) agree with `expected` (CPU) within k standard errors.

    check_std=False for 0/1 samples, whose std is a function of the mean (and whose std's first-order
    standard error vanishes at p = 1/2).
    """
    g = got.detach().double().cpu().flatten()
    e = expected.detach().double().flatten()
    n, m = g.numel(), e.numel()
    s = e.std().item()
    if s == 0:
        assert g.std().item() == 0
        assert g.mean().item() == e.mean().item()
        return
    # difference of two independent sample means
    se_mean = s * math.sqrt(1 / n + 1 / m)
    assert abs(g.mean().item() - e.mean().item()) <= k * se_mean, (g.mean().item(), e.mean().item(), se_mean)
    if not check_std:
        return
    # difference of two sample stds: se(s) ~ sqrt((mu4 - s^4) / (4 s^2 n)), mu4 estimated from the CPU sample
    mu4 = ((e - e.mean()) ** 4).mean().item()
    unit = math.sqrt(max(mu4 - s**4, 0.0) / (4 * s * s))
    assert abs(g.std().item() - s) <= k * unit * math.sqrt(1 / n + 1 / m), (g.std().item(), s)
    if mean is not None:  # both also agree with the known parameters
        assert abs(g.mean().item() - mean) <= k * s / math.sqrt(n), (g.mean().item(), mean)
    if std is not None:
        assert abs(g.std().item() - std) <= k * unit / math.sqrt(n), (g.std().item(), std)


def cpu_gen(seed=1234):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------- reproducibility

SAMPLERS = {
    "rand": lambda: torch.rand(1000, device=DEV),
    "randn": lambda: torch.randn(1000, device=DEV),
    "randint": lambda: torch.randint(-7, 100, (1000,), device=DEV),
    "randint_high": lambda: torch.randint(1 << 40, (1000,), device=DEV),
    "normal_tensor": lambda: torch.normal(torch.zeros(1000, device=DEV), 2.0),
    "normal_float": lambda: torch.normal(1.0, 3.0, (1000,), device=DEV),
    "uniform_": lambda: torch.empty(1000, device=DEV).uniform_(-2, 5),
    "normal_": lambda: torch.empty(1000, device=DEV).normal_(3, 0.5),
    "random_": lambda: torch.empty(1000, dtype=torch.int64, device=DEV).random_(),
    "random_to": lambda: torch.empty(1000, device=DEV).random_(10),
    "random_from": lambda: torch.empty(1000, dtype=torch.int32, device=DEV).random_(-5, 5),
    "bernoulli": lambda: torch.bernoulli(torch.full((1000,), 0.3, device=DEV)),
    "bernoulli_p": lambda: torch.empty(1000, device=DEV).bernoulli_(0.7),
    "exponential_": lambda: torch.empty(1000, device=DEV).exponential_(2.0),
    "dropout": lambda: F.dropout(torch.ones(1000, device=DEV), 0.4, training=True),
    "randperm": lambda: torch.randperm(1000, device=DEV),
    "rand_bf16": lambda: torch.rand(1000, device=DEV, dtype=torch.bfloat16),
    "randn_f64": lambda: torch.randn(1000, device=DEV, dtype=torch.float64),
    "rand_like": lambda: torch.rand_like(torch.zeros(1000, device=DEV)),
    "randn_like": lambda: torch.randn_like(torch.zeros(1000, device=DEV)),
    "randint_like": lambda: torch.randint_like(torch.zeros(1000, device=DEV), 3, 50),
    "multinomial": lambda: torch.multinomial(torch.ones(4, 300, device=DEV), 100, replacement=True),
    "multinomial_no_replacement": lambda: torch.multinomial(torch.ones(4, 300, device=DEV), 100),
    "dropout2d": lambda: F.dropout2d(torch.ones(50, 40, 2, 2, device=DEV), 0.5, training=True),
    "alpha_dropout": lambda: F.alpha_dropout(torch.ones(1000, device=DEV), 0.5, training=True),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_seed_reproduces_and_calls_differ(name):
    fn = SAMPLERS[name]
    torch.manual_seed(123)
    a = fn().cpu()
    b = fn().cpu()
    torch.manual_seed(123)
    a2 = fn().cpu()
    b2 = fn().cpu()
    assert torch.equal(a, a2) and torch.equal(b, b2)  # the same seed gives the same numbers
    assert not torch.equal(a, b)  # successive calls give new numbers
    torch.manual_seed(124)
    assert not torch.equal(fn().cpu(), a)  # another seed gives other numbers


@pytest.mark.parametrize("name", ["rand", "randn", "randint", "bernoulli_p", "dropout", "randperm"])
def test_rng_state_round_trip(name):
    fn = SAMPLERS[name]
    torch.manual_seed(5)
    fn()
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = fn().cpu()
    b = fn().cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(fn().cpu(), a)
    assert torch.equal(fn().cpu(), b)


def test_explicit_generator():
    g = torch.Generator(device=DEV)
    g.manual_seed(99)
    a = torch.rand(500, device=DEV, generator=g).cpu()
    x = torch.empty(500, device=DEV).normal_(generator=g).cpu()
    g.manual_seed(99)
    torch.rand(3, device=DEV)  # the default generator does not disturb g
    assert torch.equal(torch.rand(500, device=DEV, generator=g).cpu(), a)
    assert torch.equal(torch.empty(500, device=DEV).normal_(generator=g).cpu(), x)


def test_in_place_on_views():
    torch.manual_seed(0)
    x = torch.zeros(4, 6, device=DEV)
    x[:, 1::2].uniform_(5, 6)  # only the view changes
    x.t()[0].normal_()
    c = x.cpu()
    assert torch.all(c[:, 2::2] == 0)
    assert torch.all((c[:, 3::2] >= 5) & (c[:, 3::2] < 6))
    assert torch.all(c[:, 0] != 0)


# -------------------------------------------------------------------------------- distributions


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("low,high", [(0.0, 1.0), (-3.0, 5.0), (1.0, 2.0)])
def test_uniform(low, high, dtype):
    torch.manual_seed(0)
    x = torch.empty(N, device=DEV, dtype=dtype).uniform_(low, high).cpu()
    e = torch.empty(N, dtype=dtype).uniform_(low, high, generator=cpu_gen())
    assert x.dtype == dtype
    assert x.min().item() >= low
    assert x.max().item() < high  # rounding to a half type never reaches the upper bound
    span = high - low
    assert x.min().item() - low < 0.01 * span and high - x.max().item() < 0.01 * span
    assert_same_distribution(x, e, mean=(low + high) / 2)
    if dtype in (torch.float32, torch.float64):  # (half types are too coarse for equal-width bins)
        # flat: each tenth of the range holds a tenth of the samples
        counts = torch.histc(x.double(), bins=10, min=low, max=high)
        assert torch.all((counts - N / 10).abs() <= 6 * math.sqrt(N / 10 * 0.9)), counts


def test_rand_is_uniform_and_fine_grained():
    torch.manual_seed(1)
    x = torch.rand(N, device=DEV).cpu()
    e = torch.rand(N, generator=cpu_gen())
    assert 0 <= x.min().item() and x.max().item() < 1
    assert_same_distribution(x, e, mean=0.5, std=math.sqrt(1 / 12))
    # 23 random bits: about N^2 / 2^24 repeats are expected among N draws (birthday bound)
    assert x.unique().numel() > N - 3 * N * N / 2**24
    # consecutive calls are uncorrelated
    y = torch.rand(N, device=DEV).cpu()
    corr = torch.corrcoef(torch.stack([x, y]))[0, 1].item()
    assert abs(corr) < 6 / math.sqrt(N)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("mean,std", [(0.0, 1.0), (3.0, 0.5), (-2.0, 4.0)])
def test_normal(mean, std, dtype):
    torch.manual_seed(2)
    x = torch.empty(N, device=DEV, dtype=dtype).normal_(mean, std).cpu()
    e = torch.empty(N, dtype=dtype).normal_(mean, std, generator=cpu_gen())
    assert x.dtype == dtype and torch.isfinite(x).all()
    assert_same_distribution(x, e, mean=mean)
    # tails: the fraction beyond 2 sigma matches CPU's
    tail = lambda t: ((t.double() - mean).abs() > 2 * std).double().mean().item()  # noqa: E731
    p = 0.0455
    assert abs(tail(x) - tail(e)) <= 6 * math.sqrt(2 * p * (1 - p) / N)


def test_randn_and_normal_overloads():
    torch.manual_seed(3)
    assert_same_distribution(torch.randn(N, device=DEV), torch.randn(N, generator=cpu_gen()), mean=0.0)
    assert_same_distribution(torch.normal(2.0, 3.0, (N,), device=DEV), torch.normal(2.0, 3.0, (N,), generator=cpu_gen()))
    # tensor mean and/or std: standardize per element
    mean = torch.linspace(-5, 5, N)
    std = torch.linspace(0.5, 2, N)
    for got in [torch.normal(mean.to(DEV), std.to(DEV)), torch.normal(mean.to(DEV), 1.5), torch.normal(0.5, std.to(DEV))]:
        assert got.shape == (N,) and got.device.type == DEV
    z1 = (torch.normal(mean.to(DEV), std.to(DEV)).cpu() - mean) / std
    z2 = (torch.normal(mean.to(DEV), 1.5).cpu() - mean) / 1.5
    z3 = (torch.normal(0.5, std.to(DEV)).cpu() - 0.5) / std
    ref = torch.randn(N, generator=cpu_gen())
    for z in (z1, z2, z3):
        assert_same_distribution(z, ref, mean=0.0)
    # broadcasting mean against std
    got = torch.normal(torch.zeros(3, 1, device=DEV), torch.ones(1, 4, device=DEV))
    assert got.shape == (3, 4)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8, torch.float32])
@pytest.mark.parametrize("low,high", [(0, 10), (-50, 50), (3, 4)])
def test_randint(low, high, dtype):
    if dtype == torch.uint8 and low < 0:
        pytest.skip("uint8 has no negative values")
    torch.manual_seed(4)
    x = torch.randint(low, high, (N,), device=DEV, dtype=dtype).cpu()
    e = torch.randint(low, high, (N,), dtype=dtype, generator=cpu_gen())
    assert x.dtype == dtype
    assert x.min().item() == low and x.max().item() == high - 1  # every value appears at these sizes
    assert_same_distribution(x, e, mean=(low + high - 1) / 2)
    k = high - low
    counts = torch.bincount((x.long() - low), minlength=k).double()
    p = 1 / k
    assert torch.all((counts - N * p).abs() <= 6 * math.sqrt(N * p * (1 - p)) + 1e-9), counts


def test_randint_large_range():
    torch.manual_seed(5)
    hi = 1 << 50
    x = torch.randint(hi, (N,), device=DEV).cpu()
    e = torch.randint(hi, (N,), generator=cpu_gen())
    assert x.min().item() >= 0 and x.max().item() < hi
    assert_same_distribution(x, e)


@pytest.mark.parametrize("dtype,top", [(torch.int64, 2**63 - 1), (torch.int32, 2**31 - 1), (torch.int16, 2**15 - 1),
                                       (torch.uint8, 255), (torch.float32, 2**24), (torch.float64, 2**53),
                                       (torch.bfloat16, 2**8), (torch.float16, 2**11), (torch.bool, 1)])
def test_random_full_range(dtype, top):
    torch.manual_seed(6)
    x = torch.empty(N, dtype=dtype, device=DEV).random_().cpu()
    e = torch.empty(N, dtype=dtype).random_(generator=cpu_gen())
    xs = x.double() if dtype != torch.int64 else x
    assert xs.min().item() >= 0 and xs.max().item() <= top
    if dtype.is_floating_point:
        assert torch.equal(x, x.round())  # integers
    if dtype != torch.int64:  # int64's full range overflows a double's exact moments; bounds suffice
        assert_same_distribution(x.double() / top, e.double() / top, mean=0.5, check_std=dtype != torch.bool)


def test_random_to_and_from():
    torch.manual_seed(7)
    x = torch.empty(N, device=DEV).random_(7).cpu()
    assert x.min().item() == 0 and x.max().item() == 6
    assert_same_distribution(x, torch.empty(N).random_(7, generator=cpu_gen()), mean=3.0)
    y = torch.empty(N, dtype=torch.int64, device=DEV).random_(-3, 9).cpu()
    assert y.min().item() == -3 and y.max().item() == 8
    assert_same_distribution(y, torch.empty(N, dtype=torch.int64).random_(-3, 9, generator=cpu_gen()), mean=2.5)
    # `to` omitted: up to the type's maximum
    z = torch.empty(N, dtype=torch.int16, device=DEV).random_(-100, None).cpu()
    assert z.min().item() >= -100 and z.max().item() <= 32767
    assert_same_distribution(z, torch.empty(N, dtype=torch.int16).random_(-100, None, generator=cpu_gen()))


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.93, 1.0])
def test_bernoulli(p):
    torch.manual_seed(8)
    x = torch.empty(N, device=DEV).bernoulli_(p).cpu()
    e = torch.empty(N).bernoulli_(p, generator=cpu_gen())
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert_same_distribution(x, e, mean=p, check_std=False)
    probs = torch.full((N,), p, dtype=torch.float64)
    y = torch.bernoulli(probs.to(DEV)).cpu()
    assert y.dtype == torch.float64
    assert_same_distribution(y, torch.bernoulli(probs, generator=cpu_gen()), mean=p, check_std=False)


def test_bernoulli_tensor_probabilities():
    torch.manual_seed(9)
    probs = torch.rand(N, generator=cpu_gen(1))
    x = torch.bernoulli(probs.to(DEV)).cpu()
    e = torch.bernoulli(probs, generator=cpu_gen())
    assert_same_distribution(x, e, check_std=False)
    # per-probability calibration: P(x = 1 | p in bin) ~ mean p of the bin
    for lo in (0.0, 0.25, 0.5, 0.75):
        sel = (probs >= lo) & (probs < lo + 0.25)
        q = probs[sel].double().mean().item()
        assert abs(x[sel].double().mean().item() - q) <= 6 * math.sqrt(q * (1 - q) / sel.sum().item())
    b = torch.empty(N, dtype=torch.int64, device=DEV).bernoulli_(probs.to(DEV)).cpu()
    assert_same_distribution(b, e, check_std=False)


@pytest.mark.parametrize("lambd", [1.0, 0.25, 4.0])
def test_exponential(lambd):
    torch.manual_seed(10)
    x = torch.empty(N, device=DEV).exponential_(lambd).cpu()
    e = torch.empty(N).exponential_(lambd, generator=cpu_gen())
    assert x.min().item() >= 0 and torch.isfinite(x).all()
    assert_same_distribution(x, e, mean=1 / lambd)


def test_other_distributions():
    torch.manual_seed(11)
    x = torch.empty(N, device=DEV).log_normal_(0.5, 0.3).cpu()
    assert_same_distribution(x.log(), torch.empty(N).log_normal_(0.5, 0.3, generator=cpu_gen()).log(), mean=0.5)
    g = torch.empty(N, device=DEV).geometric_(0.2).cpu()
    assert g.min().item() >= 1 and torch.equal(g, g.round())
    assert_same_distribution(g, torch.empty(N).geometric_(0.2, generator=cpu_gen()), mean=5.0)
    c = torch.empty(N, device=DEV).cauchy_(1.0, 2.0).cpu()
    # Cauchy has no moments: compare the quartiles (median 1, quartiles 1 -+ 2)
    q = torch.quantile(c[:100_000].double(), torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    ref = torch.tensor([-1.0, 1.0, 3.0], dtype=torch.float64)
    # se of a sample quantile: sqrt(p(1-p)/n) / density at it
    dens = torch.tensor([1 / (4 * math.pi), 1 / (2 * math.pi), 1 / (4 * math.pi)], dtype=torch.float64)
    se = torch.sqrt(torch.tensor([0.1875, 0.25, 0.1875], dtype=torch.float64) / 100_000) / dens
    assert torch.all((q - ref).abs() <= 6 * se), q


def test_randperm():
    torch.manual_seed(12)
    for n in (1, 5, 1000):
        p = torch.randperm(n, device=DEV)
        assert p.dtype == torch.int64 and p.device.type == DEV
        assert torch.equal(p.cpu().sort().values, torch.arange(n))
    p32 = torch.randperm(100, device=DEV, dtype=torch.int32).cpu()
    assert p32.dtype == torch.int32 and torch.equal(p32.sort().values, torch.arange(100, dtype=torch.int32))
    assert torch.randperm(0, device=DEV).numel() == 0
    # positions are uniform: the value at position 0 over many permutations of 10
    firsts = torch.stack([torch.randperm(10, device=DEV)[0] for _ in range(400)]).cpu()
    counts = torch.bincount(firsts, minlength=10).double()
    assert torch.all((counts - 40).abs() <= 6 * math.sqrt(40 * 0.9)), counts


# ------------------------------------------------------------------------------------------ dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_native_dropout_mask_and_scale(p):
    torch.manual_seed(13)
    x = torch.randn(N, generator=cpu_gen(2))
    out, mask = torch.ops.aten.native_dropout(x.to(DEV), p, True)
    out2, mask2 = torch.ops.aten.native_dropout(x.to(DEV), p, True)
    out, mask, mask2 = out.cpu(), mask.cpu(), mask2.cpu()
    assert mask.dtype == torch.bool and out.dtype == x.dtype
    assert not torch.equal(mask, mask2)  # a new mask every step
    kept = mask.double().mean().item()
    assert abs(kept - (1 - p)) <= 6 * math.sqrt(p * (1 - p) / N)
    torch.testing.assert_close(out, x * mask * (1 / (1 - p)))
    # the backward multiplies by the same mask and scale
    g = torch.randn(N, generator=cpu_gen(3))
    gx = torch.ops.aten.native_dropout_backward(g.to(DEV), mask.to(DEV), 1 / (1 - p)).cpu()
    torch.testing.assert_close(gx, torch.ops.aten.native_dropout_backward(g, mask, 1 / (1 - p)))


def test_dropout_module_train_eval_and_grad():
    torch.manual_seed(14)
    p = 0.3
    drop = torch.nn.Dropout(p)
    x = (torch.rand(4000, generator=cpu_gen(4)) + 0.5).to(DEV).requires_grad_(True)  # no zeros
    y = drop(x)
    g = torch.randn(4000, generator=cpu_gen(5)).to(DEV)
    y.backward(g)
    kept = (y.detach() != 0).cpu()
    torch.testing.assert_close(y.detach().cpu(), x.detach().cpu() * kept / (1 - p))
    torch.testing.assert_close(x.grad.cpu(), g.cpu() * kept / (1 - p))  # the same mask in the backward
    assert abs(kept.double().mean().item() - (1 - p)) <= 6 * math.sqrt(p * (1 - p) / 4000)
    y2 = drop(x)
    assert not torch.equal((y2.detach() != 0).cpu(), kept)
    drop.eval()
    torch.testing.assert_close(drop(x).detach().cpu(), x.detach().cpu())  # identity in eval mode
    out, mask = torch.ops.aten.native_dropout(x.detach(), p, False)
    assert torch.all(mask.cpu()) and torch.equal(out.cpu(), x.detach().cpu())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dropout_dtypes_and_extremes(dtype):
    torch.manual_seed(15)
    x = torch.randn(10_000, generator=cpu_gen(6)).to(dtype)
    out, mask = torch.ops.aten.native_dropout(x.to(DEV), 0.25, True)
    out, mask = out.cpu(), mask.cpu()
    assert out.dtype == dtype
    torch.testing.assert_close(out, torch.ops.aten.native_dropout_backward(x, mask, 1 / 0.75))
    assert torch.equal(F.dropout(x.to(DEV), 0.0, training=True).cpu(), x)
    assert torch.all(F.dropout(x.to(DEV), 1.0, training=True).cpu() == 0)


def test_random_ops_run_natively():
    import torch_pjrt

    before = torch_pjrt.metrics()["fallback_total"]
    torch.rand(3, device=DEV).sum().item()
    torch.randn(3, device=DEV).sum().item()
    torch.randint(5, (3,), device=DEV).sum().item()
    torch.randperm(4, device=DEV).sum().item()
    F.dropout(torch.ones(8, device=DEV), 0.5, training=True).sum().item()
    assert torch_pjrt.metrics()["fallback_total"] == before


# ----------------------------------------------------------------------------- the *_like samplers


def test_like_samplers():
    torch.manual_seed(16)
    base = torch.zeros(N, device=DEV, dtype=torch.float64)
    x = torch.rand_like(base).cpu()
    assert x.dtype == torch.float64 and 0 <= x.min().item() and x.max().item() < 1
    assert_same_distribution(x, torch.rand(N, dtype=torch.float64, generator=cpu_gen()), mean=0.5, std=math.sqrt(1 / 12))
    z = torch.randn_like(base).cpu()
    assert_same_distribution(z, torch.randn(N, dtype=torch.float64, generator=cpu_gen()), mean=0.0, std=1.0)
    k = torch.randint_like(base, -4, 9).cpu()
    assert k.dtype == torch.float64 and k.min().item() == -4 and k.max().item() == 8 and torch.equal(k, k.round())
    assert_same_distribution(k, torch.randint(-4, 9, (N,), generator=cpu_gen()).double(), mean=2.0)


# ------------------------------------------------------------------------------------ multinomial


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_frequencies(replacement):
    torch.manual_seed(17)
    probs = torch.tensor([0.1, 0.0, 0.4, 0.2, 0.3], dtype=torch.float32)
    weights = probs * 7  # unnormalized weights are normalized
    rows = 20_000
    draws = torch.multinomial(weights.expand(rows, 5).contiguous().to(DEV), 1 if not replacement else 10,
                              replacement=replacement).cpu()
    assert draws.dtype == torch.int64 and draws.shape == (rows, 1 if not replacement else 10)
    assert not (draws == 1).any()  # probability 0 is never drawn
    counts = torch.bincount(draws.flatten(), minlength=5).double()
    n = draws.numel()
    for i, p in enumerate(probs.tolist()):
        assert abs(counts[i].item() - n * p) <= 6 * math.sqrt(n * p * (1 - p)) + 1e-9, counts


def test_multinomial_without_replacement_distinct():
    torch.manual_seed(18)
    w = torch.rand(64, 50, generator=cpu_gen(7)) + 0.01
    d = torch.multinomial(w.to(DEV), 50).cpu()  # a full permutation per row
    assert torch.equal(d.sort(dim=1).values, torch.arange(50).expand(64, 50))
    one = torch.multinomial(torch.tensor([0.0, 0.0, 3.0], device=DEV), 1).cpu()
    assert one.tolist() == [2]
    # first draws without replacement follow the weights; the second avoid the first
    w2 = torch.tensor([0.6, 0.3, 0.1])
    d2 = torch.multinomial(w2.expand(30_000, 3).contiguous().to(DEV), 2).cpu()
    assert torch.all(d2[:, 0] != d2[:, 1])
    first = torch.bincount(d2[:, 0], minlength=3).double() / 30_000
    assert torch.all((first - w2.double()).abs() <= 6 * torch.sqrt(w2.double() * (1 - w2.double()) / 30_000))
    # P(second = 1 | first = 0) = 0.3 / 0.4
    sel = d2[:, 0] == 0
    q = (d2[sel, 1] == 1).double().mean().item()
    assert abs(q - 0.75) <= 6 * math.sqrt(0.75 * 0.25 / sel.sum().item())


# --------------------------------------------------------------------------- feature / alpha dropout


def test_feature_dropout_zeroes_whole_channels():
    torch.manual_seed(19)
    p = 0.4
    x = torch.ones(400, 50, 3, 3, device=DEV)
    y = F.dropout2d(x, p, training=True).cpu()
    per_channel = y.flatten(2)
    kept = per_channel[:, :, 0] != 0
    assert torch.all((per_channel == per_channel[:, :, :1]).all(dim=2))  # a channel is kept or zeroed whole
    torch.testing.assert_close(per_channel[kept], torch.full_like(per_channel[kept], 1 / (1 - p)))
    frac = kept.double().mean().item()
    assert abs(frac - (1 - p)) <= 6 * math.sqrt(p * (1 - p) / kept.numel())


def test_alpha_dropout_keeps_mean_and_variance():
    torch.manual_seed(20)
    x = torch.randn(N, generator=cpu_gen(8))
    y = F.alpha_dropout(x.to(DEV), 0.3, training=True).cpu()
    e = F.alpha_dropout(x, 0.3, training=True)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert_same_distribution(y, e, mean=0.0, std=1.0)
    assert torch.equal(F.alpha_dropout(x.to(DEV), 0.3, training=False).cpu(), x)
