// Bessel and Airy functions of torch.special: bessel_j0/j1, bessel_y0/y1, modified_bessel_k0/k1 (and
// their exp(x)-scaled forms), airy_ai and spherical_bessel_j0. Each is computed in double from its own
// convergent or asymptotic expansion (errors below 1e-9, so float results are correctly rounded or
// nearly), with torch's CPU special cases (NaN at infinities where torch gives NaN, -inf at 0 for Y, ...).
// Where torch's float kernels evaluate an oscillating asymptotic form, the phase (x - pi/4, and Airy's
// 2/3 |x|^3/2 + pi/4) is rounded to the input's precision first exactly as they round it: for large x that
// rounding, not the expansion, decides the result.
#include <cmath>
#include <vector>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;
constexpr ElementType kF64 = ElementType::kF64;
constexpr double kEuler = 0.57721566490153286061;

Value c64(Builder& b, double v, const Value& like_) { return b.constant(v, Type{kF64, like_.dims()}); }

// The power series of J_nu (sign -1) or I_nu (sign +1), nu = 0 or 1, at x (f64) with its companion sum
// for Y_nu / K_nu: sum_k w_k term_k with w_k = H_k (nu = 0) or psi(k + 1) + psi(k + 2) (nu = 1).
struct Series {
  Value main, weighted;
};
Series power_series(Builder& b, Value x, int nu, double sign) {
  Value h = mul(b, x, c64(b, 0.5, x));
  Value h2 = mul(b, mul(b, h, h), c64(b, sign, x));
  Value term = nu == 0 ? c64(b, 1, x) : h;
  Value main = term;
  double hk = 0, hk1 = 1;  // H_k and H_{k+1}
  Value weighted = nu == 0 ? c64(b, 0, x) : mul(b, term, c64(b, 1 - 2 * kEuler, x));
  for (int k = 1; k < 45; ++k) {
    term = mul(b, term, div(b, h2, c64(b, static_cast<double>(k) * (k + nu), x)));
    main = add(b, main, term);
    hk += 1.0 / k;
    hk1 += 1.0 / (k + 1);
    double w = nu == 0 ? hk : hk + hk1 - 2 * kEuler;
    weighted = add(b, weighted, mul(b, term, c64(b, w, x)));
  }
  return {main, weighted};
}

// a_k(nu) = (4nu^2 - 1^2)(4nu^2 - 3^2)...(4nu^2 - (2k-1)^2) / (k! 8^k), Hankel's coefficients.
std::vector<double> hankel_coefficients(double nu, int count) {
  std::vector<double> a{1.0};
  for (int k = 1; k < count; ++k) a.push_back(a.back() * (4 * nu * nu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k));
  return a;
}

// Hankel's P and Q of order nu at x >= 12 (f64): J = sqrt(2/(pi x)) (P cos chi - Q sin chi), Y likewise.
std::pair<Value, Value> hankel_pq(Builder& b, Value x, int nu) {
  std::vector<double> a = hankel_coefficients(nu, 26);
  Value inv = div(b, c64(b, 1, x), x), pw = c64(b, 1, x);
  Value p = c64(b, 0, x), q = c64(b, 0, x);
  for (int k = 0; k < 26; ++k) {
    double s = (k / 2) % 2 ? -a[k] : a[k];
    if (k % 2 == 0) p = add(b, p, mul(b, pw, c64(b, s, x)));
    else q = add(b, q, mul(b, pw, c64(b, s, x)));
    pw = mul(b, pw, inv);
  }
  return {p, q};
}

// exp(x) K_nu(x) for x >= 2 (f64): the trapezoidal rule on int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt
// (step 0.2, exact to rounding for an integrand analytic in a strip) up to 12, Hankel's expansion beyond.
Value k_scaled_large(Builder& b, Value x, double nu) {
  Value xt = b.binary("minimum", x, c64(b, 12, x));
  Value trap = c64(b, 0, x);
  for (int j = 0; j <= 30; ++j) {
    double t = 0.2 * j, sh = std::sinh(t / 2);
    double w = (j == 0 ? 0.5 : 1.0) * 0.2 * std::cosh(nu * t);
    trap = add(b, trap, mul(b, b.unary("exponential", mul(b, xt, c64(b, -2 * sh * sh, x))), c64(b, w, x)));
  }
  Value xa = b.binary("maximum", x, c64(b, 12, x));
  std::vector<double> a = hankel_coefficients(nu, 24);
  Value inv = div(b, c64(b, 1, x), xa), pw = c64(b, 1, x), s = c64(b, 0, x);
  for (double ak : a) {
    s = add(b, s, mul(b, pw, c64(b, ak, x)));
    pw = mul(b, pw, inv);
  }
  Value asym = mul(b, b.unary("sqrt", div(b, c64(b, M_PI / 2, x), xa)), s);
  return b.select(b.compare(Cmp::LE, x, c64(b, 12, x)), trap, asym);
}

// The argument as f64 (input f32 or f64; integers arrive promoted), and its type for the result.
Value input(Ctx& c, const char* op) {
  ElementType t = c.out_type();
  if (t != ElementType::kF32 && t != kF64) throw hlo::Error(std::string(op) + ": float32 and float64 only");
  return operand(c, 0);
}

// fl(x - shift) in x's precision, then f64: the phase as torch's kernel rounds it.
Value rounded_phase(Builder& b, Value x, double shift) { return b.convert(sub(b, x, like(b, shift, x)), kF64); }

// J_nu (first kind, nu = 0 or 1): series up to |x| = 12, Hankel beyond; even (nu = 0) or odd (nu = 1).
Value bessel_j(Ctx& c, int nu) {
  Builder& b = c.b;
  Value xin = input(c, nu ? "bessel_j1" : "bessel_j0");
  Value axin = b.unary("abs", xin);
  Value ax = b.convert(axin, kF64);
  Value series = power_series(b, ax, nu, -1).main;
  Value xa = b.binary("maximum", ax, c64(b, 12, ax));
  auto [p, q] = hankel_pq(b, xa, nu);
  Value chi = b.select(b.compare(Cmp::GT, axin, like(b, 12, axin)), axin, like(b, 12, axin));
  chi = rounded_phase(b, chi, nu ? 3 * M_PI_4 : M_PI_4);
  Value asym = mul(b, b.unary("sqrt", div(b, c64(b, 2 / M_PI, xa), xa)),
                   sub(b, mul(b, p, b.unary("cosine", chi)), mul(b, q, b.unary("sine", chi))));
  Value r = b.select(b.compare(Cmp::LE, ax, c64(b, 12, ax)), series, asym);
  if (nu == 1) r = b.select(b.compare(Cmp::LT, xin, like(b, 0, xin)), b.unary("negate", r), r);
  r = b.select(is_inf(b, ax), c64(b, NAN, r), r);
  r = b.select(isnan(b, ax), c64(b, NAN, r), r);
  return b.convert(r, c.out_type());
}

// Y_nu (second kind): series with log terms up to 12, Hankel beyond; -inf at 0, NaN below 0 and at inf.
Value bessel_y(Ctx& c, int nu) {
  Builder& b = c.b;
  Value xin = input(c, nu ? "bessel_y1" : "bessel_y0");
  Value x = b.convert(xin, kF64);
  Value xs = b.select(b.compare(Cmp::GT, x, c64(b, 0, x)), x, c64(b, 1, x));  // keeps log finite off-branch
  Series s = power_series(b, xs, nu, -1);
  Value lh = b.unary("log", mul(b, xs, c64(b, 0.5, xs)));
  Value series;
  if (nu == 0) {
    series = mul(b, c64(b, 2 / M_PI, x), sub(b, mul(b, add(b, lh, c64(b, kEuler, x)), s.main), s.weighted));
  } else {
    series = sub(b, mul(b, c64(b, 2 / M_PI, x), mul(b, lh, s.main)), div(b, c64(b, 2 / M_PI, x), xs));
    series = sub(b, series, mul(b, s.weighted, c64(b, 1 / M_PI, x)));
  }
  Value xa = b.binary("maximum", x, c64(b, 12, x));
  auto [p, q] = hankel_pq(b, xa, nu);
  Value chi = b.select(b.compare(Cmp::GT, xin, like(b, 12, xin)), xin, like(b, 12, xin));
  chi = rounded_phase(b, chi, nu ? 3 * M_PI_4 : M_PI_4);
  Value asym = mul(b, b.unary("sqrt", div(b, c64(b, 2 / M_PI, xa), xa)),
                   add(b, mul(b, p, b.unary("sine", chi)), mul(b, q, b.unary("cosine", chi))));
  Value r = b.select(b.compare(Cmp::LE, x, c64(b, 12, x)), series, asym);
  r = b.select(b.compare(Cmp::EQ, x, c64(b, 0, x)), c64(b, -INFINITY, x), r);
  r = b.select(orv(b, b.compare(Cmp::LT, x, c64(b, 0, x)), is_inf(b, x)), c64(b, NAN, x), r);
  r = b.select(isnan(b, x), x, r);
  return b.convert(r, c.out_type());
}

// K_nu (modified, second kind), optionally times exp(x): series with log terms up to 2, then
// k_scaled_large; inf at 0, NaN below 0, 0 at inf.
Value bessel_k(Ctx& c, int nu, bool scaled) {
  Builder& b = c.b;
  Value x = b.convert(input(c, "modified_bessel_k"), kF64);
  Value xs = b.select(b.compare(Cmp::GT, x, c64(b, 0, x)), b.binary("minimum", x, c64(b, 2, x)), c64(b, 1, x));
  Series s = power_series(b, xs, nu, 1);
  Value lh = b.unary("log", mul(b, xs, c64(b, 0.5, xs)));
  Value series;
  if (nu == 0) {
    series = sub(b, s.weighted, mul(b, add(b, lh, c64(b, kEuler, x)), s.main));
  } else {
    series = add(b, div(b, c64(b, 1, x), xs), mul(b, lh, s.main));
    series = sub(b, series, mul(b, s.weighted, c64(b, 0.5, x)));
  }
  Value xl = b.binary("maximum", x, c64(b, 2, x));
  Value large = k_scaled_large(b, xl, nu);
  if (scaled) series = mul(b, series, b.unary("exponential", xs));
  else large = mul(b, large, b.unary("exponential", b.unary("negate", xl)));
  Value r = b.select(b.compare(Cmp::LE, x, c64(b, 2, x)), series, large);
  r = b.select(b.compare(Cmp::EQ, x, c64(b, 0, x)), c64(b, INFINITY, x), r);
  r = b.select(b.compare(Cmp::EQ, x, c64(b, INFINITY, x)), c64(b, 0, x), r);
  r = b.select(b.compare(Cmp::LT, x, c64(b, 0, x)), c64(b, NAN, x), r);
  r = b.select(isnan(b, x), x, r);
  return b.convert(r, c.out_type());
}

// Airy Ai: the Maclaurin series Ai(0) f(x) + Ai'(0) g(x) on [-9.65, 2.09]; above, sqrt(x/3)/pi K_1/3(z)
// with z = 2/3 x^3/2 (0 past 103.892 as torch); below, the oscillating expansion
// (sin(t) P(z) - cos(t) Q(z)) / (sqrt(pi) |x|^1/4) with t = z + pi/4 rounded as torch rounds it.
Value airy_ai(Ctx& c) {
  Builder& b = c.b;
  Value xin = input(c, "airy_ai");
  Value x = b.convert(xin, kF64);
  const double ai0 = 1 / (std::pow(3.0, 2.0 / 3) * std::tgamma(2.0 / 3));
  const double dai0 = -1 / (std::pow(3.0, 1.0 / 3) * std::tgamma(1.0 / 3));
  // Maclaurin on the clamped argument
  Value xm = b.clamp(c64(b, -9.65, x), x, c64(b, 2.09, x));
  Value x3 = mul(b, mul(b, xm, xm), xm);
  Value f = c64(b, 1, x), g = xm, tf = f, tg = g;
  for (int k = 1; k < 40; ++k) {
    tf = mul(b, tf, div(b, x3, c64(b, (3.0 * k - 1) * (3.0 * k), x)));
    tg = mul(b, tg, div(b, x3, c64(b, (3.0 * k) * (3.0 * k + 1), x)));
    f = add(b, f, tf);
    g = add(b, g, tg);
  }
  Value mac = add(b, mul(b, f, c64(b, ai0, x)), mul(b, g, c64(b, dai0, x)));
  // positive side
  Value xp = b.binary("maximum", x, c64(b, 2.09, x));
  Value zp = mul(b, c64(b, 2.0 / 3, x), mul(b, xp, b.unary("sqrt", xp)));
  Value pos = mul(b, k_scaled_large(b, zp, 1.0 / 3), b.unary("exponential", b.unary("negate", zp)));
  pos = mul(b, pos, mul(b, b.unary("sqrt", div(b, xp, c64(b, 3, x))), c64(b, 1 / M_PI, x)));
  // negative side: u_k = (6k-5)(6k-3)(6k-1) / ((2k-1) 216 k) u_{k-1}
  Value xn_in = b.select(b.compare(Cmp::LT, xin, like(b, -9.65, xin)), xin, like(b, -9.65, xin));
  Value xn = b.convert(xn_in, kF64);
  Value an = b.unary("negate", xn);
  Value zn = mul(b, c64(b, 2.0 / 3, x), mul(b, an, b.unary("sqrt", an)));
  Value inv = div(b, c64(b, 1, x), zn), pw = c64(b, 1, x), p = c64(b, 0, x), q = c64(b, 0, x);
  double u = 1;
  for (int k = 0; k < 30; ++k) {
    if (k > 0) u *= (6.0 * k - 5) * (6.0 * k - 3) * (6.0 * k - 1) / ((2.0 * k - 1) * 216.0 * k);
    double s = (k / 2) % 2 ? -u : u;
    if (k % 2 == 0) p = add(b, p, mul(b, pw, c64(b, s, x)));
    else q = add(b, q, mul(b, pw, c64(b, s, x)));
    pw = mul(b, pw, inv);
  }
  // t = -2 x sqrt(-x) / 3 + pi/4 rounded to the input's precision after every operation: in double, each
  // result rounded to float for float inputs (exact: double has more than twice float's precision, and
  // XLA:CPU's float sqrt is not correctly rounded)
  const bool f32 = xin.elem() != kF64;
  auto rnd = [&](Value v) { return f32 ? b.convert(b.convert(v, ElementType::kF32), kF64) : v; };
  Value t = mul(b, c64(b, -2, xn), xn);
  t = rnd(mul(b, t, rnd(b.unary("sqrt", an))));
  t = rnd(div(b, t, c64(b, 3, t)));
  t = rnd(add(b, t, c64(b, f32 ? static_cast<float>(M_PI) / 4 : M_PI / 4, t)));
  Value neg = sub(b, mul(b, b.unary("sine", t), p), mul(b, b.unary("cosine", t), q));
  neg = div(b, neg, mul(b, c64(b, std::sqrt(M_PI), x), b.unary("sqrt", b.unary("sqrt", an))));
  Value r = b.select(b.compare(Cmp::GT, x, c64(b, 2.09, x)), pos, mac);
  r = b.select(b.compare(Cmp::LT, x, c64(b, -9.65, x)), neg, r);
  r = b.select(b.compare(Cmp::GT, x, c64(b, 103.892, x)), c64(b, 0, x), r);
  r = b.select(orv(b, is_inf(b, x), isnan(b, x)), c64(b, NAN, x), r);
  return b.convert(r, c.out_type());
}

// spherical j0 = sin(x) / x; its Taylor polynomial below 1/2; 0 at the infinities.
Value spherical_j0(Ctx& c) {
  Builder& b = c.b;
  Value x = b.convert(input(c, "spherical_bessel_j0"), kF64);
  Value x2 = mul(b, x, x);
  Value poly = c64(b, 0, x);
  double fact = 1;
  std::vector<double> coef;
  for (int k = 0; k < 8; ++k) {
    coef.push_back((k % 2 ? -1.0 : 1.0) / fact);
    fact *= (2.0 * k + 2) * (2.0 * k + 3);
  }
  for (int k = 7; k >= 0; --k) poly = add(b, mul(b, poly, x2), c64(b, coef[k], x));
  Value r = div(b, b.unary("sine", x), x);
  r = b.select(b.compare(Cmp::LT, b.unary("abs", x), c64(b, 0.5, x)), poly, r);
  r = b.select(is_inf(b, x), c64(b, 0, x), r);
  return b.convert(r, c.out_type());
}

#define UNARY(name, expr) {{"special_" name, "special_" name ".out"}, [](Ctx& c) { return one(expr); }}

const Rows rows = {
    UNARY("bessel_j0", bessel_j(c, 0)),
    UNARY("bessel_j1", bessel_j(c, 1)),
    UNARY("bessel_y0", bessel_y(c, 0)),
    UNARY("bessel_y1", bessel_y(c, 1)),
    UNARY("modified_bessel_k0", bessel_k(c, 0, false)),
    UNARY("modified_bessel_k1", bessel_k(c, 1, false)),
    UNARY("scaled_modified_bessel_k0", bessel_k(c, 0, true)),
    UNARY("scaled_modified_bessel_k1", bessel_k(c, 1, true)),
    UNARY("airy_ai", airy_ai(c)),
    UNARY("spherical_bessel_j0", spherical_j0(c)),
};

}  // namespace
}  // namespace lowering
