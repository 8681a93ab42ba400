"""Special functions (Bessel and Airy functions, orthogonal polynomials, the incomplete gamma functions)
and the rows added with them (logcumsumexp, hash_tensor, remainder with a scalar self): results on "tpu"
against PyTorch on the CPU, on the same inputs, including the special values torch's kernels single out
(0, infinities, NaN, endpoints of the polynomials' intervals) and large arguments, where torch's float
kernels round the phase of their asymptotic forms."""

import pytest
import torch

from functools import partial

from compare import check as check_exact

# NaN where the CPU gives NaN
check = partial(check_exact, equal_nan=True)

NAN, INF = float("nan"), float("inf")

# special values, the branch boundaries of the expansions, large arguments, and a random spread
_POINTS = [-1e20, -4988429.2, -13437.7, -501.0, -9.7, -5.0, -2.09, -1.0, -1e-5, -0.0, 0.0, 1e-30, 1e-5, 0.3,
           1.0, 2.0, 2.09, 5.0, 11.9, 12.1, 20.0, 501.0, 13437.7, 4988429.2, 1e20, INF, -INF, NAN]


def _xs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.tensor(_POINTS), torch.rand(64, generator=g) * 30 - 15]).to(dtype)


UNARY = ["airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0",
         "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0",
         "scaled_modified_bessel_k1", "spherical_bessel_j0"]


@pytest.mark.parametrize("name", UNARY)
def test_bessel_airy(name):
    f = getattr(torch.special, name)
    check(f, _xs())
    check(f, torch.arange(-6, 7))  # integers promote to float32


@pytest.mark.parametrize("name", ["bessel_j0", "bessel_y1", "airy_ai", "modified_bessel_k1"])
def test_bessel_float64(name):
    # the CPU's double kernels are accurate to about 1e-7 here (ours to 1e-12): compare at that level
    check(getattr(torch.special, name), _xs(torch.float64), rtol=1e-6, atol=1e-6)


POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
         "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
         "laguerre_polynomial_l", "legendre_polynomial_p"]


@pytest.mark.parametrize("name", POLYS)
def test_polynomials(name):
    f = getattr(torch.special, name)
    g = torch.Generator().manual_seed(1)
    # endpoints (x = +-1, 0, 1/2 for the shifted kinds), NaN and infinite degrees, degrees past the
    # trigonometric thresholds and past Hermite's limit
    x = torch.tensor([1.0, -1.0, 0.0, 0.5, 1.0, -1.0, 0.0, 0.3, 2.0, 1.5, -3.0, 0.7, 0.2, 1.0, 0.4, 0.6])
    n = torch.tensor([3.0, 4.0, 5.0, 9.0, 10.0, 11.0, 12.0, NAN, INF, -2.0, 6.0, 7.0, 8.0, 0.0, 1.0, 200.0])
    check(f, x, n)
    xr, nr = torch.rand(200, generator=g) * 4 - 2, torch.randint(-2, 10, (200,), generator=g).float()
    check(f, xr, nr)
    check(f, xr, 5)  # n as a Python number
    check(f, torch.arange(-3, 3), torch.arange(0, 6))
    out = torch.empty(200, device="tpu")
    f(xr.to("tpu"), nr.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), f(xr, nr), equal_nan=True)


@pytest.mark.parametrize("op", [torch.igamma, torch.igammac])
def test_incomplete_gamma(op):
    g = torch.Generator().manual_seed(2)
    a = torch.cat([torch.rand(100, generator=g) * 20, torch.tensor([1e20, 13437.7, 4988429.2, 1e5, 0.0, 0.0, -1.0,
                                                                    INF, INF, NAN, 2.0, 0.5])])
    x = torch.cat([torch.rand(100, generator=g) * 20, torch.tensor([1e20, 13437.7, 4988429.2, 1e5 + 300, 1.0, 0.0,
                                                                    1.0, 2.0, NAN, INF, 0.0, 3.0])])
    check(op, a, x)
    grid = torch.tensor([1e-3, 0.5, 3.0, 100.0, 1001.2, 9000.0, 5e4])
    aa, xx = torch.meshgrid(grid, grid, indexing="ij")
    check(op, aa.reshape(-1), xx.reshape(-1))
    check(op, a.double(), x.double())


def test_logcumsumexp():
    x = torch.tensor([[-INF, 1.0, INF, NAN, 2.0], [-INF, -INF, 3.0, INF, INF]])
    check(lambda t: torch.logcumsumexp(t, 1), x)
    check(lambda t: torch.logcumsumexp(t, 0), torch.randn(7, 9))
    check(lambda t: torch.logcumsumexp(t, -1), torch.randn(3, 5).to(torch.bfloat16))


def test_hash_tensor():
    check(torch.hash_tensor, torch.tensor([1.0, 2.0, -0.0, 3.5]))
    check(lambda t: torch.hash_tensor(t, dim=1, keepdim=True), torch.randint(-100, 100, (4, 5)))
    check(torch.hash_tensor, torch.tensor([True, True, False]))


def test_remainder_scalar_self():
    check(lambda d: torch.remainder(3.5, d), torch.tensor([2.0, -2.0, 1.5, -0.7, 0.0]))
    check(lambda d: torch.remainder(7, d), torch.tensor([2, -3, 5]))


def test_digamma_zero_and_sgn_nan():
    x = torch.tensor([0.0, -0.0, 0.5, -1.5, 3.0, NAN])
    check(torch.digamma, x)
    check(lambda t: torch.polygamma(0, t), x)
    check(torch.sgn, x)


def test_zeta_in_double_as_the_cpu(fallback_policy):
    """torch's CPU kernel evaluates zeta in double for float inputs: large exponents whose float
    Euler-Maclaurin factors overflow still give the CPU's 0, not NaN."""
    fallback_policy("error")
    x = torch.tensor([501.0, 501, 1001.2, 30, 40, 2.5, 7])
    q = torch.tensor([501.0, 1001.2, 501, 2, 3.5, 0.75, 12])
    check(torch.special.zeta, x, q)
    check(lambda t: torch.polygamma(4, t), torch.linspace(0.1, 20, 50))


def test_erfinv_tails_and_erfcx_negative(fallback_policy):
    """erfinv near +-1 (in double: XLA's float32 erf_inv was 1e-5 off there) and erfcx of negative x (the
    CPU's float kernel: exp of x*x rounded to float magnifies that rounding; "tpu" follows it)."""
    fallback_policy("error")
    p = torch.cat([torch.linspace(-1, 1, 2001), 1 - torch.logspace(-7, -1, 50), -1 + torch.logspace(-7, -1, 50)])
    check_exact(torch.erfinv, p)
    x = torch.cat([torch.linspace(-27, 30, 5001), torch.tensor([-6.1, -6.0999, float("nan"), float("inf"), -float("inf")])])
    check_exact(torch.special.erfcx, x, equal_nan=True)


def test_bessel_i_float_overflow_as_the_cpu(fallback_policy):
    """i0/i1 of float32 past ln(FLT_MAX): the CPU's kernel overflows exp(|x|) there (inf, where the value
    itself would fit up to about 91.9), infinite x give NaN; torch.signal.windows.kaiser with a large beta
    divides those (inf / inf)."""
    fallback_policy("error")
    x = torch.tensor([88.0, 88.72, 88.7228317, 88.7229, 89.0, 91.0, 92.0, -89.0, -91.0, float("inf"), -float("inf")])
    check_exact(torch.i0, x, equal_nan=True)
    check_exact(torch.special.i1, x, equal_nan=True)
    want = torch.signal.windows.kaiser(256, sym=False, beta=100.0)
    got = torch.signal.windows.kaiser(256, sym=False, beta=100.0, device="tpu")
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


HALF_MATH = [torch.exp, torch.expm1, torch.log, torch.log1p, torch.log2, torch.log10, torch.exp2, torch.sqrt,
             torch.sin, torch.cos, torch.tan, torch.tanh, torch.sinh, torch.cosh, torch.asinh,
             torch.acosh, torch.atan, torch.erf, torch.erfc, torch.sigmoid]  # lgamma, digamma, rsqrt: other float32 algorithms


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", HALF_MATH, ids=lambda f: f.__name__)
def test_half_math_rounds_once_as_the_cpu(fn, dtype):
    """The CPU computes half-precision math in float32 and rounds once; so does "tpu", bit for bit (XLA's
    own float16 log2, expm1, acosh, sigmoid were an ulp or more off in about 0.1% of the elements)."""
    x = torch.rand(300, 200, generator=torch.Generator().manual_seed(5)) * 6 + 1.0
    x = x.to(dtype)
    assert torch.equal(fn(x.to("tpu")).cpu(), fn(x))
