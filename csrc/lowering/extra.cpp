// Odds and ends not covered by the category files: binary special functions (hypot, copysign, nextafter,
// heaviside, logaddexp, xlogy, fmax/fmin, ...), unary ones (sinc, logit, signbit, angle, frexp, entr,
// polygamma, zeta, ...), reductions (nansum, aminmax, norm, trace, median, kthvalue), scans (cummax,
// cummin, logcumsumexp), searches (bucketize, searchsorted, isin), distances (cdist, pdist), cross
// products, renorm and the FFTs. Each follows the formula of torch's CPU kernel (special cases
// included) so results agree to rounding; half-precision inputs compute in float32 as those kernels do.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }

// ------------------------------------------------------------------------------------------ helpers
Value add(Builder& b, Value x, Value y) { return b.binary("add", x, y); }
Value sub(Builder& b, Value x, Value y) { return b.binary("subtract", x, y); }
Value mul(Builder& b, Value x, Value y) { return b.binary("multiply", x, y); }
Value div(Builder& b, Value x, Value y) { return b.binary("divide", x, y); }
Value andv(Builder& b, Value x, Value y) { return b.binary("and", x, y); }
Value orv(Builder& b, Value x, Value y) { return b.binary("or", x, y); }
Value notv(Builder& b, Value x) { return b.unary("not", x); }
Value isnan(Builder& b, Value x) { return b.compare(Cmp::NE, x, x); }
Value k(Builder& b, double v, const Value& like_v) { return b.constant(v, like_v.type); }

Dims iota_dims(int64_t lo, int64_t hi) {
  Dims d;
  for (int64_t i = lo; i < hi; ++i) d.push_back(i);
  return d;
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// The float type a pointwise row computes in: f32 for half types, the output type otherwise.
ElementType compute_type(ElementType t) { return accumulation_type(t); }

// Argument k converted to the compute type of the output and broadcast to the output's shape.
Value up(Ctx& c, size_t k) { return operand(c, k, compute_type(c.out_type()), c.out_dims()); }

// The integer type with the width of float type t (for bit manipulation).
ElementType bits_type(ElementType t) {
  switch (t) {
    case ElementType::kF64: return ElementType::kS64;
    case ElementType::kF32: return ElementType::kS32;
    default: return ElementType::kS16;
  }
}

// The sign bit of x (true for -0.0 and negative NaNs), as std::signbit.
Value signbit(Builder& b, Value x) {
  if (pjrt::is_float(x.elem())) {
    Value bits = b.bitcast_convert(x, Type{bits_type(x.elem()), x.dims()});
    return b.compare(Cmp::LT, bits, b.constant_i(0, bits.type));
  }
  if (pjrt::is_signed_int(x.elem())) return b.compare(Cmp::LT, x, b.constant_i(0, x.type));
  return b.constant(0, Type{ElementType::kPred, x.dims()});
}

Value is_inf(Builder& b, Value x) { return b.compare(Cmp::EQ, b.unary("abs", x), k(b, INFINITY, x)); }
Value is_finite(Builder& b, Value x) { return b.compare(Cmp::LT, b.unary("abs", x), k(b, INFINITY, x)); }

Value lowest(Builder& b, ElementType t) {
  if (pjrt::is_float(t)) return b.scalar(-INFINITY, t);
  if (t == ElementType::kPred) return b.scalar(0, t);
  if (pjrt::is_unsigned_int(t)) return b.scalar_i(0, t);
  int64_t bits = static_cast<int64_t>(pjrt::byte_size(t)) * 8;
  return b.scalar_i(bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1)), t);
}

Value highest(Builder& b, ElementType t) {
  if (pjrt::is_float(t)) return b.scalar(INFINITY, t);
  if (t == ElementType::kPred) return b.scalar(1, t);
  int64_t bits = static_cast<int64_t>(pjrt::byte_size(t)) * 8;
  if (pjrt::is_unsigned_int(t)) return b.scalar_i(bits == 64 ? -1 : (int64_t{1} << bits) - 1, t);
  return b.scalar_i(bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1, t);
}

// A 1-d s64 constant holding `v`.
Value const_i64(Builder& b, const std::vector<int64_t>& v) {
  if (v.empty()) return b.constant_i(0, Type{ElementType::kS64, {0}});
  std::string s = "value = dense<[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]> : tensor<" + std::to_string(v.size()) + "xi64>";
  return b.raw("stablehlo.constant", s, {}, Type{ElementType::kS64, {static_cast<int64_t>(v.size())}});
}

// `v` (whose dims are all of `dims` but those in `reduced`) broadcast to `dims`.
Value bcast_kept(Builder& b, Value v, const Dims& dims, const Dims& reduced) {
  Dims kept;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    bool r = false;
    for (int64_t d : reduced) r |= d == i;
    if (!r) kept.push_back(i);
  }
  return b.broadcast_in_dim(b.reshape(v, [&] {
                              Dims kd;
                              for (int64_t i : kept) kd.push_back(dims[i]);
                              return kd;
                            }()),
                            dims, kept);
}

// x.select(dim, i) keeping the dim (a slice of length 1).
Value slice_at(Builder& b, Value x, int64_t dim, int64_t i, int64_t len = 1) {
  Dims start(x.rank(), 0), limit = x.dims(), strides(x.rank(), 1);
  start[dim] = i;
  limit[dim] = i + len;
  return b.slice(x, start, limit, strides);
}

// ------------------------------------------------------------------------------ binary pointwise ops
// hypot: sqrt(x^2 + y^2) without overflow. Half and single precision compute in double (exact enough to
// round like std::hypot); double scales by the larger magnitude. Infinity wins over NaN, as in C.
Value hypot(Ctx& c) {
  Builder& b = c.b;
  ElementType t = c.out_type();
  if (!pjrt::is_float(t)) throw hlo::Error("hypot: floating-point only");
  Value x = b.unary("abs", operand(c, 0)), y = b.unary("abs", operand(c, 1));
  Value r;
  if (t != ElementType::kF64) {
    Value xd = b.convert(x, ElementType::kF64), yd = b.convert(y, ElementType::kF64);
    r = b.convert(b.unary("sqrt", add(b, mul(b, xd, xd), mul(b, yd, yd))), t);
  } else {
    Value m = b.binary("maximum", x, y), n = b.binary("minimum", x, y);
    Value q = div(b, n, m);
    r = mul(b, m, b.unary("sqrt", add(b, k(b, 1, q), mul(b, q, q))));
    r = b.select(b.compare(Cmp::EQ, m, k(b, 0, m)), k(b, 0, m), r);
  }
  Value inf = orv(b, is_inf(b, x), is_inf(b, y));
  return b.select(inf, k(b, INFINITY, r), r);
}

// nextafter: the next representable value of x toward y (bit arithmetic on the float's integer image).
Value nextafter(Ctx& c) {
  Builder& b = c.b;
  ElementType t = c.out_type();
  if (!pjrt::is_float(t)) throw hlo::Error("nextafter: floating-point only");
  Value x = operand(c, 0), y = operand(c, 1);
  Type it{bits_type(t), x.dims()};
  Value xi = b.bitcast_convert(x, it);
  Value one_i = b.constant_i(1, it);
  Value zero = k(b, 0, x);
  Value toward_up = b.compare(Cmp::EQ, b.compare(Cmp::LT, x, y), b.compare(Cmp::GT, x, zero));
  Value stepped = b.bitcast_convert(b.select(toward_up, add(b, xi, one_i), sub(b, xi, one_i)), x.type);
  Value tiny = b.bitcast_convert(one_i, x.type);
  Value from_zero = b.select(b.compare(Cmp::GT, y, zero), tiny, b.unary("negate", tiny));
  Value r = b.select(b.compare(Cmp::EQ, x, zero), from_zero, stepped);
  r = b.select(b.compare(Cmp::EQ, x, y), y, r);
  return b.select(orv(b, isnan(b, x), isnan(b, y)), add(b, x, y), r);
}

// logaddexp (base e) and logaddexp2: equal infinities return themselves, else max + log1p(exp(-|a-b|)).
Value logaddexp(Ctx& c, bool base2) {
  Builder& b = c.b;
  Value x = up(c, 0), y = up(c, 1);
  Value m = b.binary("maximum", x, y);
  Value d = b.unary("negate", b.unary("abs", sub(b, x, y)));
  Value r;
  if (base2) {
    Value e = b.unary("exponential", mul(b, d, k(b, M_LN2, d)));
    r = add(b, m, mul(b, b.unary("log_plus_one", e), k(b, 1.0 / M_LN2, e)));
  } else {
    r = add(b, m, b.unary("log_plus_one", b.unary("exponential", d)));
  }
  return b.select(andv(b, is_inf(b, x), b.compare(Cmp::EQ, x, y)), x, r);
}

// xlogy / xlog1py: NaN where y is NaN, 0 where x == 0, x * log(y) (log1p(y)) otherwise.
Value xlogy(Ctx& c, bool log1p) {
  Builder& b = c.b;
  Value x = up(c, 0), y = up(c, 1);
  Value r = mul(b, x, b.unary(log1p ? "log_plus_one" : "log", y));
  r = b.select(b.compare(Cmp::EQ, x, k(b, 0, x)), k(b, 0, x), r);
  return b.select(isnan(b, y), k(b, NAN, y), r);
}

Value fmax_fmin(Ctx& c, bool is_max) {
  Builder& b = c.b;
  Value x = operand(c, 0), y = operand(c, 1);
  if (c.out_type() == ElementType::kPred) return is_max ? orv(b, x, y) : andv(b, x, y);
  Value m = b.binary(is_max ? "maximum" : "minimum", x, y);
  if (!pjrt::is_float(x.elem())) return m;
  return b.select(isnan(b, x), y, b.select(isnan(b, y), x, m));
}

Value copysign(Ctx& c) {
  Builder& b = c.b;
  Value x = b.unary("abs", up(c, 0)), y = up(c, 1);
  return b.select(signbit(b, y), b.unary("negate", x), x);
}

Value heaviside(Ctx& c) {
  Builder& b = c.b;
  Value x = operand(c, 0), v = operand(c, 1);
  if (c.out_type() == ElementType::kPred) return b.select(x, b.constant(1, x.type), v);
  Value zero = b.constant(0, x.type);
  Value pos = b.select(b.compare(Cmp::GT, x, zero), b.constant(1, x.type), zero);
  return b.select(b.compare(Cmp::EQ, x, zero), v, pos);
}

Value logical_xor(Ctx& c) {
  Builder& b = c.b;
  Value x = b.broadcast_to(b.convert(c.t(0), ElementType::kPred), c.out_dims());
  Value y = b.broadcast_to(b.convert(c.t(1), ElementType::kPred), c.out_dims());
  return b.binary("xor", x, y);
}

// ------------------------------------------------------------------------------- unary pointwise ops
Value sinc(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 0);
  Value p = mul(b, k(b, M_PI, x), x);
  Value r = div(b, b.unary("sine", p), p);
  return b.select(b.compare(Cmp::EQ, x, k(b, 0, x)), k(b, 1, x), r);
}

// logit(x, eps?) = log(x / (1 - x)) with x clamped to [eps, 1 - eps] when eps is given.
Value logit(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 0);
  if (c.has(1)) {
    Value lo = k(b, c.d(1), x), hi = k(b, 1.0 - c.d(1), x);
    x = b.select(b.compare(Cmp::LT, x, lo), lo, b.select(b.compare(Cmp::GT, x, hi), hi, x));
  }
  return b.unary("log", div(b, x, sub(b, k(b, 1, x), x)));
}

// logit_backward(grad, x, eps?): grad / (x (1 - x)); outside [eps, 1 - eps] 0 (NaN outside [0, 1] without eps).
Value logit_backward(Ctx& c) {
  Builder& b = c.b;
  Value g = up(c, 0), x = up(c, 1);
  Value r = div(b, g, mul(b, x, sub(b, k(b, 1, x), x)));
  double lo = c.has(2) ? c.d(2) : 0, hi = c.has(2) ? 1.0 - c.d(2) : 1;
  Value out = orv(b, b.compare(Cmp::LT, x, k(b, lo, x)), b.compare(Cmp::GT, x, k(b, hi, x)));
  return b.select(out, k(b, c.has(2) ? 0.0 : NAN, x), r);
}

// special_entr: -x log(x) for x > 0, 0 at 0, -inf below, NaN stays.
Value entr(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 0), zero = k(b, 0, x);
  Value r = b.unary("negate", mul(b, x, b.unary("log", x)));
  r = b.select(b.compare(Cmp::EQ, x, zero), zero, r);
  r = b.select(b.compare(Cmp::LT, x, zero), k(b, -INFINITY, x), r);
  return b.select(isnan(b, x), x, r);
}

// angle: atan2(imag, real) for complex; pi for negative reals, 0 otherwise, NaN stays.
Value angle(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (pjrt::is_complex(x.elem())) {
    ElementType part = pjrt::real_type(x.elem());
    return b.binary("atan2", b.unary_to("imag", x, part), b.unary_to("real", x, part));
  }
  Value v = up(c, 0), zero = k(b, 0, v);
  Value r = b.select(b.compare(Cmp::LT, v, zero), k(b, M_PI, v), zero);
  return b.select(isnan(b, v), v, r);
}

// round(x, decimals): nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for negative d.
Value round_decimals(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 0);
  if (!pjrt::is_float(x.elem())) throw hlo::Error("round.decimals: floating-point only");
  int64_t d = c.i(1);
  bool neg = d < 0;
  Value p = b.convert(b.constant(std::pow(10.0, static_cast<double>(neg ? -d : d)), Type{x.elem(), {}}), x.elem());
  p = b.broadcast_to(p, x.dims());
  if (neg) return mul(b, b.unary("round_nearest_even", div(b, x, p)), p);
  return div(b, b.unary("round_nearest_even", mul(b, x, p)), p);
}

// frexp: mantissa in [0.5, 1) and exponent with x = mantissa * 2^exponent, from the float's bits
// (subnormals scaled into the normal range first); zero, infinity and NaN return (x, 0).
V frexp(Ctx& c) {
  Builder& b = c.b;
  Value in = c.t(0);
  if (!pjrt::is_float(in.elem())) throw hlo::Error("frexp: floating-point only");
  const bool dbl = in.elem() == ElementType::kF64;
  Value x = b.convert(in, dbl ? ElementType::kF64 : ElementType::kF32);
  const int mant_bits = dbl ? 52 : 23, exp_mask = dbl ? 0x7ff : 0xff, bias_half = dbl ? 1022 : 126;
  const int scale_bits = dbl ? 54 : 24;
  const double min_normal = dbl ? std::ldexp(1.0, -1022) : std::ldexp(1.0, -126);
  Type it{dbl ? ElementType::kS64 : ElementType::kS32, x.dims()};
  Value ax = b.unary("abs", x);
  Value subnormal = b.compare(Cmp::LT, ax, k(b, min_normal, x));
  Value xs = b.select(subnormal, mul(b, x, k(b, std::ldexp(1.0, scale_bits), x)), x);
  Value bits = b.bitcast_convert(xs, it);
  Value e = b.binary("and", b.binary("shift_right_logical", bits, b.constant_i(mant_bits, it)), b.constant_i(exp_mask, it));
  e = sub(b, e, b.constant_i(bias_half, it));
  e = b.select(subnormal, sub(b, e, b.constant_i(scale_bits, it)), e);
  int64_t clear = ~(static_cast<int64_t>(exp_mask) << mant_bits);
  Value mbits = b.binary("or", b.binary("and", bits, b.constant_i(clear, it)),
                         b.constant_i(static_cast<int64_t>(bias_half) << mant_bits, it));
  Value m = b.bitcast_convert(mbits, x.type);
  Value special = orv(b, b.compare(Cmp::EQ, x, k(b, 0, x)), notv(b, is_finite(b, x)));
  m = b.select(special, x, m);
  e = b.select(special, b.constant_i(0, it), e);
  return V{m, b.convert(e, ElementType::kS32)};
}

// ------------------------------------------------------------------------------------- reductions
// The reduced dims of an `int[1]? dim` argument (all dims when absent or empty).
Dims dims_of(const Ctx& c, size_t k, int64_t rank) { return reduction_dims(c, k, rank); }

Value nansum(Ctx& c) {
  Builder& b = c.b;
  ElementType acc = accumulation_type(c.out_type());
  Value x = b.convert(c.t(0), acc);
  if (pjrt::is_complex(acc)) throw hlo::Error("nansum: complex inputs are not lowered");
  if (pjrt::is_float(acc)) x = b.select(isnan(b, x), k(b, 0, x), x);
  return b.reshape(reduce_sum(b, x, dims_of(c, 1, x.rank())), c.out_dims());
}

V aminmax(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  Dims dims = c.has(1) && x.rank() > 0 ? Dims{wrap_dim(c.i(1), x.rank())} : iota_dims(0, x.rank());
  if (c.has(1) && x.rank() == 0) wrap_dim(c.i(1), 0);
  const bool pred = x.elem() == ElementType::kPred;
  Value mn = reduce(b, x, dims, pred ? "and" : "minimum", highest(b, x.elem()));
  Value mx = reduce(b, x, dims, pred ? "or" : "maximum", lowest(b, x.elem()));
  return V{b.reshape(mn, c.out_dims(0)), b.reshape(mx, c.out_dims(1))};
}

// The p-norm of |x| over dims (x already real, in the accumulation type).
Value pnorm(Builder& b, Value a, const Dims& dims, double p) {
  if (std::isinf(p)) {
    return p > 0 ? reduce(b, a, dims, "maximum", b.scalar(-INFINITY, a.elem()))
                 : reduce(b, a, dims, "minimum", b.scalar(INFINITY, a.elem()));
  }
  if (p == 0) return reduce_sum(b, b.convert(b.compare(Cmp::NE, a, k(b, 0, a)), a.elem()), dims);
  if (p == 1) return reduce_sum(b, a, dims);
  if (p == 2) return b.unary("sqrt", reduce_sum(b, mul(b, a, a), dims));
  Value s = reduce_sum(b, b.binary("power", a, k(b, p, a)), dims);
  return b.binary("power", s, k(b, 1.0 / p, s));
}

// |x| in the real accumulation type of `t`.
Value abs_in(Builder& b, Value x, ElementType t) {
  ElementType acc = accumulation_type(pjrt::real_type(t));
  if (pjrt::is_complex(x.elem())) return b.convert(b.unary_to("abs", x, pjrt::real_type(x.elem())), acc);
  return b.unary("abs", b.convert(x, acc));
}

// norm(self, p?, dim, keepdim, dtype?): p is baked (it decides the program); dims_k == SIZE_MAX: all.
Value norm(Ctx& c, size_t dims_k, size_t dtype_k) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (dtype_k != SIZE_MAX && c.has(dtype_k)) x = b.convert(x, c.arg(dtype_k).scalar_type);
  double p = c.has(1) ? c.arg(1).d : 2.0;
  if (c.has(1) && c.arg(1).scalar_type == ElementType::kC128) throw hlo::Error("norm: complex p");
  if (c.has(1) && c.arg(1).scalar_type != ElementType::kF64) p = static_cast<double>(c.arg(1).i);
  Value a = abs_in(b, x, x.elem());
  Dims dims = dims_k == SIZE_MAX ? iota_dims(0, a.rank()) : dims_of(c, dims_k, a.rank());
  return b.reshape(pnorm(b, a, dims, p), c.out_dims());
}

double baked_double(const Arg& a) {
  if (a.scalar_type == ElementType::kF64) return a.d;
  if (a.scalar_type == ElementType::kC128) throw hlo::Error("complex scalar");
  return static_cast<double>(a.i);
}

// renorm(self, p, dim, maxnorm): each slice along dim scaled by maxnorm / (norm + 1e-7) where its norm
// exceeds maxnorm.
Value renorm(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (!pjrt::is_float(x.elem())) throw hlo::Error("renorm: floating-point only");
  double p = baked_double(c.arg(1)), maxnorm = baked_double(c.arg(3));
  int64_t dim = wrap_dim(c.i(2), x.rank());
  Dims dims;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != dim) dims.push_back(i);
  Value a = abs_in(b, x, x.elem());
  Value n = pnorm(b, a, dims, p);
  Value mn = k(b, maxnorm, n);
  Value f = b.select(b.compare(Cmp::GT, n, mn), div(b, mn, add(b, n, k(b, 1e-7, n))), k(b, 1, n));
  f = b.convert(f, x.elem());
  return mul(b, x, bcast_kept(b, f, x.dims(), dims));
}

Value trace(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() != 2) throw hlo::Error("trace: expected a matrix");
  ElementType acc = accumulation_type(c.out_type());
  Value xv = b.convert(x, acc);
  if (xv.elem() == ElementType::kPred) xv = b.convert(xv, ElementType::kS64);
  Type it{ElementType::kS64, x.dims()};
  Value diag = b.compare(Cmp::EQ, b.iota(it, 0), b.iota(it, 1));
  Value d = b.select(diag, xv, b.constant(0, xv.type));
  return b.reshape(reduce_sum(b, d, {0, 1}), c.out_dims());
}

// linalg_cross(self, other, dim): the cross product of 3-vectors along dim.
Value cross(Ctx& c) {
  Builder& b = c.b;
  Value x = operand(c, 0), y = operand(c, 1);
  int64_t dim = wrap_dim(c.i(2), x.rank());
  if (x.dims()[dim] != 3) throw hlo::Error("cross: dimension must have size 3");
  Value a[3], v[3];
  for (int i = 0; i < 3; ++i) {
    a[i] = slice_at(b, x, dim, i);
    v[i] = slice_at(b, y, dim, i);
  }
  Value r0 = sub(b, mul(b, a[1], v[2]), mul(b, a[2], v[1]));
  Value r1 = sub(b, mul(b, a[2], v[0]), mul(b, a[0], v[2]));
  Value r2 = sub(b, mul(b, a[0], v[1]), mul(b, a[1], v[0]));
  return b.concatenate({r0, r1, r2}, dim);
}

// ------------------------------------------------------------------------------------------- scans
// An inclusive scan of (value, index) pairs along `dim` in log2(n) steps; `combine(earlier, later)`
// must be associative. `init` fills the positions before the first element.
using PairCombine = std::function<std::pair<Value, Value>(Builder&, Value, Value, Value, Value)>;

std::pair<Value, Value> scan_pairs(Builder& b, Value v, Value i, int64_t dim, Value init_v, const PairCombine& f) {
  const int64_t n = v.dims()[dim];
  Dims zeros(v.rank(), 0), step(v.rank(), 1);
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Dims low = zeros, limit = v.dims();
    low[dim] = shift;
    Value pv = b.slice(b.pad(v, init_v, low, zeros, zeros), zeros, limit, step);
    Value pi = b.slice(b.pad(i, b.scalar_i(0, i.elem()), low, zeros, zeros), zeros, limit, step);
    auto r = f(b, pv, pi, v, i);
    v = r.first;
    i = r.second;
  }
  return {v, i};
}

// cummax / cummin: the later element wins ties and NaN, as torch's sequential kernel.
V cum_extremum(Ctx& c, bool is_max) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() == 0) return V{x, b.constant_i(0, c.out(1))};
  int64_t dim = wrap_dim(c.i(1), x.rank());
  if (x.type.numel() == 0) return V{x, b.constant_i(0, c.out(1))};
  Value idx = b.iota(Type{ElementType::kS64, x.dims()}, dim);
  const bool fp = pjrt::is_float(x.elem());
  auto f = [is_max, fp](Builder& bb, Value v1, Value i1, Value v2, Value i2) {
    Value later = bb.compare(is_max ? Cmp::GE : Cmp::LE, v2, v1);
    if (fp) later = orv(bb, isnan(bb, v2), andv(bb, notv(bb, isnan(bb, v1)), later));
    return std::make_pair(bb.select(later, v2, v1), bb.select(later, i2, i1));
  };
  Value init = is_max ? lowest(b, x.elem()) : highest(b, x.elem());
  auto r = scan_pairs(b, x, idx, dim, init, f);
  return V{r.first, r.second};
}

// logcumsumexp: a scan of torch's _log_add_exp_helper.
Value logcumsumexp(Ctx& c) {
  Builder& b = c.b;
  Value x = c.b.convert(c.t(0), compute_type(c.out_type()));
  if (!pjrt::is_float(x.elem())) throw hlo::Error("logcumsumexp: floating-point only");
  if (x.rank() == 0) return x;
  int64_t dim = wrap_dim(c.i(1), x.rank());
  const int64_t n = x.dims()[dim];
  Dims zeros(x.rank(), 0), step(x.rank(), 1);
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Dims low = zeros, limit = x.dims();
    low[dim] = shift;
    Value a = b.slice(b.pad(x, b.scalar(-INFINITY, x.elem()), low, zeros, zeros), zeros, limit, step);
    Value mn = b.binary("minimum", a, x), mx = b.binary("maximum", a, x);
    Value r = add(b, mx, b.unary("log_plus_one", b.unary("exponential", sub(b, mn, mx))));
    Value general = orv(b, b.compare(Cmp::NE, mn, mx), is_finite(b, mn));
    x = b.select(general, r, a);
  }
  return x;
}

// ---------------------------------------------------------------------------- order statistics
// (values, indices) sorted ascending along dim, stably, NaN last.
std::pair<Value, Value> sort_nan_last(Builder& b, Value x, int64_t dim) {
  Value idx = b.iota(Type{ElementType::kS64, x.dims()}, dim);
  const bool fp = pjrt::is_float(x.elem());
  auto r = b.sort({x, idx}, dim, true, [fp](Builder& bb, const V& a) {
    Value before = bb.compare(Cmp::LT, a[0], a[1]);
    if (fp) before = orv(bb, before, andv(bb, notv(bb, isnan(bb, a[0])), isnan(bb, a[1])));
    return V{before};
  });
  return {r[0], r[1]};
}

// The element at position pos (s64, one per row: x's dims without `dim`) along dim.
Value pick(Builder& b, Value x, int64_t dim, Value pos) {
  Value at = b.compare(Cmp::EQ, b.iota(Type{ElementType::kS64, x.dims()}, dim), bcast_kept(b, pos, x.dims(), {dim}));
  const bool idx = pjrt::is_integral(x.elem());
  Value fill = idx ? lowest(b, x.elem()) : b.scalar(-INFINITY, x.elem());
  return reduce(b, b.select(at, x, b.broadcast_to(fill, x.dims())), {dim}, "maximum", fill);
}

V kthvalue(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  int64_t kk = c.i(1);
  if (x.rank() == 0) return V{x, b.constant_i(0, c.out(1))};
  int64_t dim = wrap_dim(c.i(2), x.rank());
  if (kk < 1 || kk > x.dims()[dim]) throw hlo::Error("kthvalue: k out of range");
  auto [v, i] = sort_nan_last(b, x, dim);
  return V{b.reshape(slice_at(b, v, dim, kk - 1), c.out_dims(0)), b.reshape(slice_at(b, i, dim, kk - 1), c.out_dims(1))};
}

// median / nanmedian along dim: the lower median; median returns the first NaN of a row with NaN,
// nanmedian ignores NaN (a row of NaN gives NaN).
V median_dim(Ctx& c, bool ignore_nan, bool with_dim) {
  Builder& b = c.b;
  Value x = c.t(0);
  int64_t dim = 0;
  if (with_dim) {
    if (x.rank() == 0) {
      wrap_dim(c.i(1), 0);
      return V{x, b.constant_i(0, c.out(1))};
    }
    dim = wrap_dim(c.i(1), x.rank());
  } else {
    x = b.reshape(x, {x.type.numel()});
  }
  const int64_t n = x.dims()[dim];
  if (n == 0) throw hlo::Error("median: empty input");
  auto [v, i] = sort_nan_last(b, x, dim);
  Dims rd = x.dims();
  rd.erase(rd.begin() + dim);
  Type rt{ElementType::kS64, rd};
  Value nan_count = pjrt::is_float(x.elem())
                        ? reduce_sum(b, b.convert(isnan(b, x), ElementType::kS64), {dim})
                        : b.constant_i(0, rt);
  Value nn = b.constant_i(n, rt), two = b.constant_i(2, rt), one_ = b.constant_i(1, rt), zero = b.constant_i(0, rt);
  Value pos;
  if (ignore_nan) {
    Value cnt = sub(b, nn, nan_count);
    pos = b.select(b.compare(Cmp::GT, cnt, zero), div(b, sub(b, cnt, one_), two), zero);
  } else {
    pos = b.select(b.compare(Cmp::GT, nan_count, zero), sub(b, nn, nan_count), b.constant_i((n - 1) / 2, rt));
  }
  Value val = pick(b, v, dim, pos);
  if (!with_dim) return V{b.reshape(val, c.out_dims(0))};
  return V{b.reshape(val, c.out_dims(0)), b.reshape(pick(b, i, dim, pos), c.out_dims(1))};
}

// ------------------------------------------------------------------------------------- searching
// Counts, along the last dim of `seq` (1-d, or leading dims matching `v`'s), the boundaries b with
// !(b >= v) (left) or !(b > v) (right): torch's binary search on a sorted sequence.
Value search(Builder& b, Value seq, Value v, bool right, ElementType out) {
  ElementType t = promote_types(seq.elem(), v.elem());
  seq = b.convert(seq, t);
  v = b.convert(v, t);
  const int64_t m = seq.dims().back();
  Dims cd = v.dims();
  cd.push_back(m);
  Value vb = b.broadcast_in_dim(v, cd, iota_dims(0, v.rank()));
  Value sb;
  if (seq.rank() == 1) {
    sb = b.broadcast_in_dim(seq, cd, {v.rank()});
  } else {
    Dims bd = iota_dims(0, seq.rank() - 1);
    bd.push_back(v.rank());
    sb = b.broadcast_in_dim(seq, cd, bd);
  }
  Value hit = notv(b, b.compare(right ? Cmp::GT : Cmp::GE, sb, vb));
  Value n = reduce_sum(b, b.convert(hit, ElementType::kS64), {v.rank()});
  return b.convert(n, out);
}

// Gathers `x` along its last dim at `idx` (same shape): take_along_dim(x, idx, -1).
Value take_last(Builder& b, Value x, Value idx) {
  const int64_t r = x.rank();
  Dims d = idx.dims(), dd = idx.dims();
  dd.push_back(1);
  V parts;
  for (int64_t i = 0; i < r; ++i) {
    Value p = i == r - 1 ? b.convert(idx, ElementType::kS64) : b.iota(Type{ElementType::kS64, d}, i);
    parts.push_back(b.reshape(p, dd));
  }
  hlo::GatherDims g;
  g.collapsed_slice_dims = iota_dims(0, r);
  g.start_index_map = iota_dims(0, r);
  g.index_vector_dim = r;
  return b.gather(x, b.concatenate(parts, r), g, Dims(r, 1), d);
}

// searchsorted(sorted_sequence, self, *, out_int32, right, side, sorter)
Value searchsorted(Ctx& c) {
  Builder& b = c.b;
  Value seq = c.t(0);
  bool right = c.has(3) && c.i(3);
  if (c.has(4)) right = c.arg(4).s == "right";
  if (c.has(5)) seq = take_last(b, seq, c.t(5));
  Value v = c.arg(1).kind == Arg::kTensor ? c.t(1) : operand(c, 1, seq.elem(), {});
  if (seq.dims().back() == 0 || numel(c.out_dims()) == 0) return b.constant_i(0, c.out());
  return b.reshape(search(b, seq, v, right, c.out_type()), c.out_dims());
}

// bucketize(self, boundaries, *, out_int32, right)
Value bucketize(Ctx& c) {
  Builder& b = c.b;
  Value seq = c.t(1);
  Value v = c.arg(0).kind == Arg::kTensor ? c.t(0) : operand(c, 0, seq.elem(), {});
  if (seq.dims().back() == 0 || numel(c.out_dims()) == 0) return b.constant_i(0, c.out());
  return b.reshape(search(b, seq, v, c.has(3) && c.i(3), c.out_type()), c.out_dims());
}

// isin(elements, test_elements, *, assume_unique, invert)
Value isin(Ctx& c) {
  Builder& b = c.b;
  auto as_tensor = [&](size_t kk, ElementType other) {
    return c.arg(kk).kind == Arg::kTensor ? c.t(kk) : operand(c, kk, other, {});
  };
  Value e = c.arg(0).kind == Arg::kTensor ? c.t(0) : Value{};
  Value t = c.arg(1).kind == Arg::kTensor ? c.t(1) : Value{};
  if (!e.valid()) e = as_tensor(0, t.elem());
  if (!t.valid()) t = as_tensor(1, e.elem());
  ElementType ct = promote_types(e.elem(), t.elem());
  e = b.convert(e, ct);
  t = b.reshape(b.convert(t, ct), {t.type.numel()});
  const bool invert = c.has(3) && c.i(3);
  const int64_t m = t.dims()[0];
  if (m == 0 || e.type.numel() == 0) return b.constant(invert ? 1 : 0, Type{ElementType::kPred, c.out_dims()});
  Dims cd = e.dims();
  cd.push_back(m);
  Value eq = b.compare(Cmp::EQ, b.broadcast_in_dim(e, cd, iota_dims(0, e.rank())), b.broadcast_in_dim(t, cd, {e.rank()}));
  Value any = reduce(b, eq, {e.rank()}, "or", b.scalar(0, ElementType::kPred));
  if (invert) any = notv(b, any);
  return b.reshape(any, c.out_dims());
}

// ------------------------------------------------------------------------------------- distances
// _cdist_forward(x1 [.., P, M], x2 [.., R, M], p, compute_mode): p == 2 uses torch's matrix-product
// formula where torch does (compute_mode 1, or 0 with more than 25 rows), else direct differences.
Value cdist(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  if (!pjrt::is_float(t)) throw hlo::Error("cdist: floating-point only");
  Value x1 = b.convert(c.t(0), t), x2 = b.convert(c.t(1), t);
  const Dims& od = c.out_dims();
  const int64_t r = static_cast<int64_t>(od.size());
  const int64_t P = od[r - 2], R = od[r - 1], M = x1.dims().back();
  Dims batch(od.begin(), od.end() - 2);
  Dims d1 = batch, d2 = batch;
  d1.insert(d1.end(), {P, M});
  d2.insert(d2.end(), {R, M});
  x1 = b.broadcast_to(x1, d1);
  x2 = b.broadcast_to(x2, d2);
  if (numel(od) == 0) return b.constant(0, Type{t, od});
  if (M == 0) return b.constant(0, Type{t, od});
  double p = c.d(2);
  int64_t mode = c.has(3) ? c.i(3) : 0;
  Dims bd = iota_dims(0, r - 2);
  if (p == 2 && (mode == 1 || (mode == 0 && (P > 25 || R > 25)))) {
    Value n1 = reduce_sum(b, mul(b, x1, x1), {r - 1}), n2 = reduce_sum(b, mul(b, x2, x2), {r - 1});
    Dims e1 = batch, e2 = batch;
    e1.insert(e1.end(), {P, 1});
    e2.insert(e2.end(), {R, 1});
    n1 = b.reshape(n1, e1);
    n2 = b.reshape(n2, e2);
    Value a = b.concatenate({mul(b, x1, k(b, -2, x1)), n1, b.constant(1, n1.type)}, r - 1);
    Value bb = b.concatenate({x2, b.constant(1, n2.type), n2}, r - 1);
    Value d = b.dot_general(a, bb, bd, bd, {r - 1}, {r - 1}, t);
    return b.unary("sqrt", b.binary("maximum", d, k(b, 0, d)));
  }
  Dims cd = batch;
  cd.insert(cd.end(), {P, R, M});
  Dims m1 = bd, m2 = bd;
  m1.insert(m1.end(), {r - 2, r});
  m2.insert(m2.end(), {r - 1, r});
  Value diff = b.unary("abs", sub(b, b.broadcast_in_dim(x1, cd, m1), b.broadcast_in_dim(x2, cd, m2)));
  return pnorm(b, diff, {r}, p);
}

// _pdist_forward(self [N, M], p): distances of the pairs i < j, row-major.
Value pdist(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = b.convert(c.t(0), t);
  const int64_t N = x.dims()[0], M = x.dims()[1];
  const int64_t K = N * (N - 1) / 2;
  if (K == 0) return b.constant(0, Type{t, {0}});
  if (M == 0) return b.constant(0, Type{t, {K}});
  std::vector<int64_t> is, js;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = i + 1; j < N; ++j) {
      is.push_back(i);
      js.push_back(j);
    }
  hlo::GatherDims g{{1}, {0}, {0}, 1};
  Value a = b.gather(x, b.reshape(const_i64(b, is), {K, 1}), g, {1, M}, {K, M});
  Value bb = b.gather(x, b.reshape(const_i64(b, js), {K, 1}), g, {1, M}, {K, M});
  return pnorm(b, b.unary("abs", sub(b, a, bb)), {1}, c.d(1));
}

// ------------------------------------------------------------------------------------------ FFTs
// stablehlo.fft transforms the trailing dims: the transformed dims are moved last (in order), then
// moved back. XLA's inverse transforms divide by n; torch's normalization: 0 none, 1 1/sqrt(n), 2 1/n.
struct FftDims {
  Dims perm, inverse;  // the permutation moving `dims` last, and its inverse
};

FftDims fft_dims(int64_t rank, const Dims& dims) {
  FftDims f;
  for (int64_t i = 0; i < rank; ++i) {
    bool t = false;
    for (int64_t d : dims) t |= d == i;
    if (!t) f.perm.push_back(i);
  }
  for (int64_t d : dims) f.perm.push_back(d);
  f.inverse.assign(rank, 0);
  for (int64_t i = 0; i < rank; ++i) f.inverse[f.perm[i]] = i;
  return f;
}

Value fft_op(Builder& b, Value x, const char* type, const Dims& lengths, const Type& result) {
  std::string attrs = std::string("fft_type = #stablehlo<fft_type ") + type + ">, fft_length = " + hlo::dims_attr(lengths);
  return b.raw("stablehlo.fft", attrs, {x}, result);
}

Value fft_scale(Builder& b, Value y, double n, int64_t norm, bool inverse_xla) {
  double f = inverse_xla ? n : 1.0;  // undo XLA's 1/n
  if (norm == 1) f /= std::sqrt(n);
  if (norm == 2) f /= n;
  if (f == 1.0) return y;
  ElementType part = pjrt::real_type(y.elem());
  Value s = b.convert(b.scalar(f, ElementType::kF64), part);
  if (pjrt::is_complex(y.elem())) s = b.complex(s, b.convert(b.scalar(0, ElementType::kF64), part));
  return mul(b, y, b.broadcast_to(s, y.dims()));
}

Dims fft_signal_dims(const Ctx& c, size_t k, int64_t rank) {
  Dims d;
  for (int64_t v : c.ints(k)) d.push_back(wrap_dim(v, rank));
  if (d.empty()) throw hlo::Error("fft: no dims");
  return d;
}

ElementType complex_of(ElementType t) { return t == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64; }

// _fft_r2c(self, dim, normalization, onesided)
Value fft_r2c(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.elem() != ElementType::kF32 && x.elem() != ElementType::kF64) throw hlo::Error("fft: f32/f64 only");
  Dims dims = fft_signal_dims(c, 1, x.rank());
  FftDims f = fft_dims(x.rank(), dims);
  Value xt = b.transpose(x, f.perm);
  Dims lengths;
  double n = 1;
  for (int64_t d : dims) {
    lengths.push_back(x.dims()[d]);
    n *= static_cast<double>(x.dims()[d]);
  }
  if (n == 0) throw hlo::Error("fft: empty signal");
  const bool onesided = c.i(3) != 0;
  Dims rd = xt.dims();
  ElementType ct = complex_of(x.elem());
  Value y;
  if (onesided) {
    rd.back() = rd.back() / 2 + 1;
    y = fft_op(b, xt, "RFFT", lengths, Type{ct, rd});
  } else {
    Value xc = b.complex(xt, b.constant(0, xt.type));
    y = fft_op(b, xc, "FFT", lengths, Type{ct, rd});
  }
  y = fft_scale(b, y, n, c.i(2), false);
  return b.reshape(b.transpose(y, f.inverse), c.out_dims());
}

// _fft_c2c(self, dim, normalization, forward)
Value fft_c2c(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (!pjrt::is_complex(x.elem())) throw hlo::Error("fft_c2c: complex input expected");
  Dims dims = fft_signal_dims(c, 1, x.rank());
  FftDims f = fft_dims(x.rank(), dims);
  Value xt = b.transpose(x, f.perm);
  Dims lengths;
  double n = 1;
  for (int64_t d : dims) {
    lengths.push_back(x.dims()[d]);
    n *= static_cast<double>(x.dims()[d]);
  }
  if (n == 0) throw hlo::Error("fft: empty signal");
  const bool forward = c.i(3) != 0;
  Value y = fft_op(b, xt, forward ? "FFT" : "IFFT", lengths, xt.type);
  y = fft_scale(b, y, n, c.i(2), !forward);
  return b.reshape(b.transpose(y, f.inverse), c.out_dims());
}

// _fft_c2r(self, dim, normalization, last_dim_size)
Value fft_c2r(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (!pjrt::is_complex(x.elem())) throw hlo::Error("fft_c2r: complex input expected");
  Dims dims = fft_signal_dims(c, 1, x.rank());
  FftDims f = fft_dims(x.rank(), dims);
  Value xt = b.transpose(x, f.perm);
  const int64_t last = c.i(3);
  Dims lengths;
  double n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t len = i + 1 == dims.size() ? last : x.dims()[dims[i]];
    lengths.push_back(len);
    n *= static_cast<double>(len);
  }
  if (n == 0) throw hlo::Error("fft: empty signal");
  // the input's last transformed dim must hold last/2 + 1 entries
  Dims want = xt.dims();
  want.back() = last / 2 + 1;
  if (xt.dims().back() > want.back()) {
    xt = slice_at(b, xt, xt.rank() - 1, 0, want.back());
  } else if (xt.dims().back() < want.back()) {
    Dims lo(xt.rank(), 0), hi(xt.rank(), 0);
    hi.back() = want.back() - xt.dims().back();
    xt = b.pad(xt, b.scalar(0, xt.elem()), lo, hi, lo);
  }
  Dims rd = xt.dims();
  rd.back() = last;
  Value y = fft_op(b, xt, "IRFFT", lengths, Type{pjrt::real_type(x.elem()), rd});
  y = fft_scale(b, y, n, c.i(2), true);
  return b.reshape(b.transpose(y, f.inverse), c.out_dims());
}

// -------------------------------------------------------------------------- special functions
// polygamma(n, x) and special_zeta(x, q) through CHLO; n == 0 is digamma.
Value polygamma(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 1);
  if (!pjrt::is_float(x.elem())) throw hlo::Error("polygamma: floating-point only");
  int64_t n = c.i(0);
  if (n == 0) return b.chlo_unary("digamma", x);
  return b.raw("chlo.polygamma", "", {k(b, static_cast<double>(n), x), x}, x.type);
}

Value zeta(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 0), q = up(c, 1);
  if (!pjrt::is_float(x.elem())) throw hlo::Error("zeta: floating-point only");
  return b.raw("chlo.zeta", "", {x, q}, x.type);
}

// channel_shuffle(self, groups): [N, g, C/g, ...] -> [N, C/g, g, ...]
Value channel_shuffle(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  int64_t g = c.i(1);
  if (x.rank() < 3 || g <= 0 || x.dims()[1] % g != 0) throw hlo::Error("channel_shuffle: bad arguments");
  Dims split{x.dims()[0], g, x.dims()[1] / g};
  Dims perm{0, 2, 1};
  for (int64_t i = 2; i < x.rank(); ++i) {
    split.push_back(x.dims()[i]);
    perm.push_back(i + 1);
  }
  return b.reshape(b.transpose(b.reshape(x, split), perm), x.dims());
}

const Rows rows = {
    // binary pointwise
    {{"hypot", "hypot_", "hypot.out"}, [](Ctx& c) { return one(hypot(c)); }},
    {{"nextafter", "nextafter_", "nextafter.out"}, [](Ctx& c) { return one(nextafter(c)); }},
    {{"logaddexp", "logaddexp.out"}, [](Ctx& c) { return one(logaddexp(c, false)); }},
    {{"logaddexp2", "logaddexp2.out"}, [](Ctx& c) { return one(logaddexp(c, true)); }},
    {{"xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor"}, [](Ctx& c) { return one(xlogy(c, false)); }},
    {{"xlogy.Scalar_Self", "xlogy.OutScalar_Self"}, [](Ctx& c) { return one(xlogy(c, false)); }},
    {{"xlogy.Scalar_Other", "xlogy_.Scalar_Other", "xlogy.OutScalar_Other"}, [](Ctx& c) { return one(xlogy(c, false)); }},
    {{"special_xlog1py", "special_xlog1py.out"}, [](Ctx& c) { return one(xlogy(c, true)); }},
    {{"special_xlog1py.self_scalar", "special_xlog1py.self_scalar_out"}, [](Ctx& c) { return one(xlogy(c, true)); }},
    {{"special_xlog1py.other_scalar", "special_xlog1py.other_scalar_out"}, [](Ctx& c) { return one(xlogy(c, true)); }},
    {{"fmax", "fmax.out"}, [](Ctx& c) { return one(fmax_fmin(c, true)); }},
    {{"fmin", "fmin.out"}, [](Ctx& c) { return one(fmax_fmin(c, false)); }},
    {{"copysign.Tensor", "copysign_.Tensor", "copysign.out"}, [](Ctx& c) { return one(copysign(c)); }},
    {{"copysign.Scalar", "copysign_.Scalar", "copysign.Scalar_out"}, [](Ctx& c) { return one(copysign(c)); }},
    {{"heaviside", "heaviside_", "heaviside.out"}, [](Ctx& c) { return one(heaviside(c)); }},
    {{"logical_xor", "logical_xor_", "logical_xor.out"}, [](Ctx& c) { return one(logical_xor(c)); }},
    {{"polar", "polar.out"}, [](Ctx& c) {
       ElementType part = pjrt::real_type(c.out_type());
       Value r = operand(c, 0, part, c.out_dims()), a = operand(c, 1, part, c.out_dims());
       return one(c.b.complex(mul(c.b, r, c.b.unary("cosine", a)), mul(c.b, r, c.b.unary("sine", a))));
     }},
    {{"special_zeta", "special_zeta.out"}, [](Ctx& c) { return one(zeta(c)); }},
    {{"special_zeta.self_scalar", "special_zeta.self_scalar_out"}, [](Ctx& c) { return one(zeta(c)); }},
    {{"special_zeta.other_scalar", "special_zeta.other_scalar_out"}, [](Ctx& c) { return one(zeta(c)); }},

    // unary pointwise
    {{"sinc", "sinc_", "sinc.out"}, [](Ctx& c) { return one(sinc(c)); }},
    {{"logit", "logit_", "logit.out"}, [](Ctx& c) { return one(logit(c)); }},
    {{"logit_backward", "logit_backward.grad_input"}, [](Ctx& c) { return one(logit_backward(c)); }},
    {{"special_entr", "special_entr.out"}, [](Ctx& c) { return one(entr(c)); }},
    {{"signbit", "signbit.out"}, [](Ctx& c) { return one(signbit(c.b, c.t(0))); }},
    {{"angle", "angle.out"}, [](Ctx& c) { return one(angle(c)); }},
    {{"round.decimals", "round_.decimals", "round.decimals_out"}, [](Ctx& c) { return one(round_decimals(c)); }},
    {{"frexp.Tensor", "frexp.Tensor_out"}, frexp},
    {{"polygamma", "polygamma.out"}, [](Ctx& c) { return one(polygamma(c)); }},

    // reductions
    {{"nansum", "nansum.out"}, [](Ctx& c) { return one(nansum(c)); }},
    {{"aminmax", "aminmax.out"}, aminmax},
    {{"norm.Scalar", "norm.Scalar_out"}, [](Ctx& c) { return one(norm(c, SIZE_MAX, SIZE_MAX)); }, kBakeScalars},
    {{"norm.ScalarOpt_dim", "norm.out"}, [](Ctx& c) { return one(norm(c, 2, SIZE_MAX)); }, kBakeScalars},
    {{"norm.ScalarOpt_dim_dtype", "norm.dtype_out"}, [](Ctx& c) { return one(norm(c, 2, 4)); }, kBakeScalars},
    {{"norm.ScalarOpt_dtype", "norm.ScalarOpt_dtype_out"}, [](Ctx& c) { return one(norm(c, SIZE_MAX, 2)); }, kBakeScalars},
    {{"renorm", "renorm_", "renorm.out"}, [](Ctx& c) { return one(renorm(c)); }, kBakeScalars},
    {{"trace", "trace.out"}, [](Ctx& c) { return one(trace(c)); }},
    {{"linalg_cross", "linalg_cross.out"}, [](Ctx& c) { return one(cross(c)); }},
    {{"cummax", "cummax.out"}, [](Ctx& c) { return cum_extremum(c, true); }},
    {{"cummin", "cummin.out"}, [](Ctx& c) { return cum_extremum(c, false); }},
    {{"_logcumsumexp", "_logcumsumexp.out"}, [](Ctx& c) { return one(logcumsumexp(c)); }},
    {{"kthvalue", "kthvalue.values"}, kthvalue},
    {{"median"}, [](Ctx& c) { return median_dim(c, false, false); }},
    {{"median.dim", "median.dim_values"}, [](Ctx& c) { return median_dim(c, false, true); }},
    {{"nanmedian"}, [](Ctx& c) { return median_dim(c, true, false); }},
    {{"nanmedian.dim", "nanmedian.dim_values"}, [](Ctx& c) { return median_dim(c, true, true); }},

    // searching
    {{"searchsorted.Tensor", "searchsorted.Tensor_out"}, [](Ctx& c) { return one(searchsorted(c)); }},
    {{"searchsorted.Scalar", "searchsorted.Scalar_out"}, [](Ctx& c) { return one(searchsorted(c)); }},
    {{"bucketize.Tensor", "bucketize.Tensor_out"}, [](Ctx& c) { return one(bucketize(c)); }},
    {{"bucketize.Scalar", "bucketize.Scalar_out"}, [](Ctx& c) { return one(bucketize(c)); }},
    {{"isin.Tensor_Tensor", "isin.Tensor_Tensor_out"}, [](Ctx& c) { return one(isin(c)); }},
    {{"isin.Tensor_Scalar", "isin.Tensor_Scalar_out"}, [](Ctx& c) { return one(isin(c)); }},
    {{"isin.Scalar_Tensor", "isin.Scalar_Tensor_out"}, [](Ctx& c) { return one(isin(c)); }},

    // distances
    {{"_cdist_forward", "_cdist_forward.out"}, [](Ctx& c) { return one(cdist(c)); }},
    {{"_pdist_forward", "_pdist_forward.out"}, [](Ctx& c) { return one(pdist(c)); }},

    // FFTs
    {{"_fft_r2c", "_fft_r2c.out"}, [](Ctx& c) { return one(fft_r2c(c)); }},
    {{"_fft_c2c", "_fft_c2c.out"}, [](Ctx& c) { return one(fft_c2c(c)); }},
    {{"_fft_c2r", "_fft_c2r.out"}, [](Ctx& c) { return one(fft_c2r(c)); }},

    {{"channel_shuffle", "channel_shuffle.out"}, [](Ctx& c) { return one(channel_shuffle(c)); }},
    {{"native_channel_shuffle"}, [](Ctx& c) { return one(channel_shuffle(c)); }},
};

}  // namespace
}  // namespace lowering
