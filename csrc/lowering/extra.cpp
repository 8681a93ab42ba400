// Odds and ends not covered by the category files: binary special functions (hypot, copysign, nextafter,
// heaviside, logaddexp, xlogy, fmax/fmin, zeta, ...), unary ones (sinc, logit, signbit, angle, frexp,
// entr, polygamma, i0/i1, ndtri, log_ndtr, erfcx, ...), reductions (nansum, aminmax, norm, trace, median,
// kthvalue, mode, segment_reduce), scans (cummax, cummin), searches (bucketize, searchsorted,
// isin), distances (cdist, pdist and their backwards), cross products, renorm, index_reduce,
// nonzero_static, the FFTs, integer shifts / gcd / lcm and tril/triu_indices. Each follows the formula
// of torch's CPU kernel (special cases included) so results agree to rounding; half-precision inputs
// compute in float32 as those kernels do. NaN is propagated explicitly wherever a maximum or minimum
// could drop it (XLA's CPU maximum/minimum do not always return NaN).
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
    r = b.select(orv(b, isnan(b, x), isnan(b, y)), k(b, NAN, r), r);  // maximum may drop NaN
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
  if (pjrt::is_float(x.elem())) {  // XLA's minimum/maximum may drop NaN: propagate it explicitly
    Value any_nan = reduce(b, isnan(b, x), dims, "or", b.scalar(0, ElementType::kPred));
    mn = b.select(any_nan, b.constant(NAN, mn.type), mn);
    mx = b.select(any_nan, b.constant(NAN, mx.type), mx);
  }
  return V{b.reshape(mn, c.out_dims(0)), b.reshape(mx, c.out_dims(1))};
}

// The p-norm of |x| over dims (x already real, in the accumulation type).
Value pnorm(Builder& b, Value a, const Dims& dims, double p) {
  if (std::isinf(p)) {
    Value r = p > 0 ? reduce(b, a, dims, "maximum", b.scalar(-INFINITY, a.elem()))
                    : reduce(b, a, dims, "minimum", b.scalar(INFINITY, a.elem()));
    Value any_nan = reduce(b, isnan(b, a), dims, "or", b.scalar(0, ElementType::kPred));
    return b.select(any_nan, b.constant(NAN, r.type), r);  // XLA's maximum may drop NaN
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
  // a sum of one element and zeros: exact, and it keeps NaN (XLA's maximum may not)
  return reduce_sum(b, b.select(at, x, b.constant(0, x.type)), {dim});
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
  Value v = c.arg(1).kind == Arg::kTensor ? c.t(1) : operand(c, 1, seq.elem(), {});
  if (seq.dims().back() == 0 || numel(c.out_dims()) == 0) return b.constant_i(0, c.out());
  if (c.has(5)) seq = take_last(b, seq, c.t(5));
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

// _cdist_backward(grad [.., P, R], x1 [.., P, M], x2 [.., R, M], p, cdist [.., P, R]) -> grad of x1:
// sum over r of grad * d|x1 - x2|_p / dx1, zero where the distance is zero.
Value cdist_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  if (!pjrt::is_float(t)) throw hlo::Error("cdist_backward: floating-point only");
  const Dims& od = c.out_dims();  // x1's shape, batch-broadcast
  const int64_t r = static_cast<int64_t>(od.size());
  Value g = b.convert(c.t(0), t), x1 = b.convert(c.t(1), t), x2 = b.convert(c.t(2), t), dist = b.convert(c.t(4), t);
  const int64_t P = od[r - 2], M = od[r - 1], R = g.dims().back();
  if (numel(od) == 0) return b.constant(0, Type{t, od});
  Dims batch(od.begin(), od.end() - 2);
  Dims d2 = batch, dg = batch;
  d2.insert(d2.end(), {R, M});
  dg.insert(dg.end(), {P, R});
  x1 = b.broadcast_to(x1, od);
  x2 = b.broadcast_to(x2, d2);
  g = b.broadcast_to(g, dg);
  dist = b.broadcast_to(dist, dg);
  if (R == 0) return b.constant(0, Type{t, od});
  Dims cd = batch;
  cd.insert(cd.end(), {P, R, M});
  Dims bd = iota_dims(0, r - 2), m1 = bd, m2 = bd, mg = bd;
  m1.insert(m1.end(), {r - 2, r});
  m2.insert(m2.end(), {r - 1, r});
  mg.insert(mg.end(), {r - 2, r - 1});
  Value diff = sub(b, b.broadcast_in_dim(x1, cd, m1), b.broadcast_in_dim(x2, cd, m2));
  Value gb = b.broadcast_in_dim(g, cd, mg), db = b.broadcast_in_dim(dist, cd, mg);
  double p = c.d(3);
  Value zero = k(b, 0, diff);
  Value sgn = b.unary("sign", diff);
  Value term;
  if (p == 0) {
    return b.constant(0, Type{t, od});
  } else if (p == 1) {
    term = mul(b, sgn, gb);
  } else if (std::isinf(p)) {
    Value at_max = b.compare(Cmp::EQ, b.unary("abs", diff), db);
    term = b.select(at_max, mul(b, sgn, gb), zero);
  } else if (p == 2) {
    term = div(b, mul(b, diff, gb), db);
  } else if (p < 2) {
    Value pm1 = k(b, p - 1, diff);
    term = div(b, mul(b, mul(b, sgn, b.binary("power", b.unary("abs", diff), pm1)), gb), b.binary("power", db, pm1));
    if (p < 1) term = b.select(b.compare(Cmp::EQ, diff, zero), zero, term);
  } else {
    term = div(b, mul(b, mul(b, diff, b.binary("power", b.unary("abs", diff), k(b, p - 2, diff))), gb),
               b.binary("power", db, k(b, p - 1, diff)));
  }
  term = b.select(b.compare(Cmp::EQ, db, zero), zero, term);
  return reduce_sum(b, term, {r - 1});
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

// d|a - b|_p / da for diff = a - b and the pair's distance (torch's cdist/pdist backward terms).
Value pnorm_grad(Builder& b, Value diff, Value dist, Value g, double p) {
  Value zero = k(b, 0, diff);
  Value sgn = b.unary("sign", diff);
  Value term;
  if (p == 0) return zero;
  if (p == 1) {
    term = mul(b, sgn, g);
  } else if (std::isinf(p)) {
    term = b.select(b.compare(Cmp::EQ, b.unary("abs", diff), dist), mul(b, sgn, g), zero);
  } else if (p == 2) {
    term = div(b, mul(b, diff, g), dist);
  } else if (p < 2) {
    Value pm1 = k(b, p - 1, diff);
    term = div(b, mul(b, mul(b, sgn, b.binary("power", b.unary("abs", diff), pm1)), g), b.binary("power", dist, pm1));
    if (p < 1) term = b.select(b.compare(Cmp::EQ, diff, zero), zero, term);
  } else {
    term = div(b, mul(b, mul(b, diff, b.binary("power", b.unary("abs", diff), k(b, p - 2, diff))), g),
               b.binary("power", dist, k(b, p - 1, diff)));
  }
  return b.select(b.compare(Cmp::EQ, dist, zero), zero, term);
}

// _pdist_backward(grad [K], self [N, M], p, pdist [K]): each pair's gradient added to row i and
// subtracted from row j.
Value pdist_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = b.convert(c.t(1), t);
  const int64_t N = x.dims()[0], M = x.dims()[1];
  const int64_t K = N * (N - 1) / 2;
  if (K == 0 || M == 0) return b.constant(0, Type{t, {N, M}});
  std::vector<int64_t> is, js;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = i + 1; j < N; ++j) {
      is.push_back(i);
      js.push_back(j);
    }
  Value ii = b.reshape(const_i64(b, is), {K, 1}), jj = b.reshape(const_i64(b, js), {K, 1});
  hlo::GatherDims g{{1}, {0}, {0}, 1};
  Value diff = sub(b, b.gather(x, ii, g, {1, M}, {K, M}), b.gather(x, jj, g, {1, M}, {K, M}));
  Value gk = b.broadcast_in_dim(b.convert(c.t(0), t), {K, M}, {0});
  Value dk = b.broadcast_in_dim(b.convert(c.t(3), t), {K, M}, {0});
  Value term = pnorm_grad(b, diff, dk, gk, c.d(2));
  hlo::ScatterDims sd{{1}, {0}, {0}, 1};
  auto body = [](Builder& bb, const V& a) { return V{bb.binary("add", a[0], a[1])}; };
  Value r = b.scatter(b.constant(0, Type{t, {N, M}}), ii, term, sd, body);
  return b.scatter(r, jj, b.unary("negate", term), sd, body);
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

// ------------------------------------------------------------------------------ more pointwise ops
Value conj_physical(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (!pjrt::is_complex(x.elem())) return x;
  ElementType part = pjrt::real_type(x.elem());
  return b.complex(b.unary_to("real", x, part), b.unary("negate", b.unary_to("imag", x, part)));
}

// Modified Bessel functions of the first kind, orders 0 and 1 (optionally scaled by exp(-|x|)), in
// double: the power series sum_k (x/2)^(2k+nu) / (k! (k+nu)!) up to |x| = 30, Hankel's asymptotic
// expansion e^x / sqrt(2 pi x) * sum_k (-1)^k a_k(nu) / x^k beyond. Accurate to double rounding, so
// float results are correctly rounded.
Value bessel_i(Builder& b, Value x_in, int nu, bool scaled) {
  ElementType t = x_in.elem();
  Value x = b.convert(x_in, ElementType::kF64);
  Value ax = b.unary("abs", x);
  Value big = b.compare(Cmp::GT, ax, k(b, 30, ax));
  // series on min(|x|, 30) (the other branch is selected past 30)
  Value xs = b.binary("minimum", ax, k(b, 30, ax));
  Value h = mul(b, xs, k(b, 0.5, xs));
  Value h2 = mul(b, h, h);
  Value term = nu == 0 ? k(b, 1, h) : h;
  Value sum = term;
  for (int kk = 1; kk < 100; ++kk) {
    term = mul(b, term, div(b, h2, k(b, static_cast<double>(kk) * (kk + nu), h2)));
    sum = add(b, sum, term);
  }
  Value series = scaled ? mul(b, sum, b.unary("exponential", b.unary("negate", xs))) : sum;
  // asymptotic on max(|x|, 30)
  Value xa = b.binary("maximum", ax, k(b, 30, ax));
  double mu = 4.0 * nu * nu;
  Value inv = div(b, k(b, 1, xa), xa);
  Value acc = k(b, 1, xa), p = k(b, 1, xa);
  double coef = 1;
  for (int kk = 1; kk < 30; ++kk) {
    double odd = 2.0 * kk - 1;
    coef *= -(mu - odd * odd) / (kk * 8.0);
    p = mul(b, p, inv);
    acc = add(b, acc, mul(b, k(b, coef, p), p));
  }
  Value pre = b.unary("rsqrt", mul(b, k(b, 2 * M_PI, xa), xa));
  Value asym = mul(b, pre, acc);
  if (!scaled) asym = mul(b, asym, b.unary("exponential", xa));
  Value r = b.select(big, asym, series);
  if (nu == 1) r = b.select(b.compare(Cmp::LT, x, k(b, 0, x)), b.unary("negate", r), r);  // odd function
  r = b.select(isnan(b, x), x, r);
  return b.convert(r, t);
}

Value bessel_row(Ctx& c, int nu, bool scaled) {
  Value x = up(c, 0);
  if (!pjrt::is_float(x.elem())) throw hlo::Error("bessel: floating-point only");
  return bessel_i(c.b, x, nu, scaled);
}

// special_ndtri(p) = sqrt(2) erfinv(2p - 1), in double.
Value ndtri(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 0);
  if (!pjrt::is_float(x.elem())) throw hlo::Error("ndtri: floating-point only");
  Value p = b.convert(x, ElementType::kF64);
  Value y = sub(b, mul(b, p, k(b, 2, p)), k(b, 1, p));
  Value r = mul(b, b.chlo_unary("erf_inv", y), k(b, M_SQRT2, y));
  return b.convert(r, x.elem());
}

// special_log_ndtr(x) = log(Phi(x)): log(erfc(-x/sqrt2)/2) below 0, log1p(-erfc(x/sqrt2)/2) above, and
// the asymptotic series -x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - 15/x^6) far below.
Value log_ndtr(Ctx& c) {
  Builder& b = c.b;
  Value x0 = up(c, 0);
  if (!pjrt::is_float(x0.elem())) throw hlo::Error("log_ndtr: floating-point only");
  Value x = b.convert(x0, ElementType::kF64);
  Value s = mul(b, x, k(b, M_SQRT1_2, x));
  Value lo = b.unary("log", mul(b, b.chlo_unary("erfc", b.unary("negate", s)), k(b, 0.5, s)));
  Value hi = b.unary("log_plus_one", b.unary("negate", mul(b, b.chlo_unary("erfc", s), k(b, 0.5, s))));
  Value xm = b.binary("minimum", x, k(b, -20, x));
  Value i2 = div(b, k(b, 1, xm), mul(b, xm, xm));
  Value poly = add(b, k(b, 1, i2), mul(b, i2, add(b, k(b, -1, i2), mul(b, i2, add(b, k(b, 3, i2), mul(b, i2, k(b, -15, i2)))))));
  Value far = sub(b, sub(b, mul(b, k(b, -0.5, xm), mul(b, xm, xm)), b.unary("log", b.unary("negate", xm))),
                  k(b, 0.5 * std::log(2 * M_PI), xm));
  far = add(b, far, b.unary("log", poly));
  Value r = b.select(b.compare(Cmp::LT, x, k(b, 0, x)), lo, hi);
  r = b.select(b.compare(Cmp::LT, x, k(b, -20, x)), far, r);
  return b.convert(r, x0.elem());
}

// special_erfcx(x) = exp(x^2) erfc(x), in double; an asymptotic series for x > 25.
Value erfcx(Ctx& c) {
  Builder& b = c.b;
  Value x0 = up(c, 0);
  if (!pjrt::is_float(x0.elem())) throw hlo::Error("erfcx: floating-point only");
  Value x = b.convert(x0, ElementType::kF64);
  Value xs = b.binary("minimum", x, k(b, 25, x));
  Value direct = mul(b, b.unary("exponential", mul(b, xs, xs)), b.chlo_unary("erfc", xs));
  Value xl = b.binary("maximum", x, k(b, 25, x));
  Value i2 = div(b, k(b, 1, xl), mul(b, xl, xl));
  // 1/(x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8))
  Value series = k(b, 105.0 / 16, i2);
  for (double cf : {-15.0 / 8, 3.0 / 4, -1.0 / 2, 1.0}) series = add(b, k(b, cf, i2), mul(b, i2, series));
  Value asym = div(b, series, mul(b, xl, k(b, std::sqrt(M_PI), xl)));
  Value r = b.select(b.compare(Cmp::GT, x, k(b, 25, x)), asym, direct);
  r = b.select(isnan(b, x), x, r);
  return b.convert(r, x0.elem());
}

// The Hurwitz zeta function zeta(x, q), following the Euler-Maclaurin evaluation of torch's CPU kernel
// in the input's precision: s = sum of (q + i)^-x for i = 0.. while i < 9 or q + i <= 9 (returning
// early once a term no longer changes s), then the remainder and 12 Bernoulli corrections. The terms
// are computed side by side along a new axis of 40 (exact for q >= -30) and summed by a prefix sum.
Value zeta_values(Builder& b, Value x, Value q) {
  const int64_t K = 40;
  const Dims& d = x.dims();
  const int64_t r = x.rank();
  Dims dk = d;
  dk.push_back(K);
  Dims keep = iota_dims(0, r);
  auto wide = [&](Value v) { return b.broadcast_in_dim(v, dk, keep); };
  Value one_ = k(b, 1, x), zero = k(b, 0, x);
  Value machep = k(b, 1.11022302462515654042e-16, x);
  Value s0 = b.binary("power", q, b.unary("negate", x));
  Type ik{ElementType::kS64, dk};
  Value i1 = add(b, b.iota(ik, r), b.constant_i(1, ik));  // 1..K
  Value fi = b.convert(i1, x.elem());
  Value a = add(b, wide(q), fi);                           // q + i
  Value a_prev = sub(b, a, b.constant(1, a.type));
  Value t = b.binary("power", a, wide(b.unary("negate", x)));
  Value cond = orv(b, b.compare(Cmp::LE, i1, b.constant_i(9, ik)), b.compare(Cmp::LE, a_prev, b.constant(9, a.type)));
  // prefix sums s0 + t_1 + ... + t_i along the new axis
  Value ps = t;
  Dims zeros(r + 1, 0), ones(r + 1, 1);
  for (int64_t shift = 1; shift < K; shift *= 2) {
    Dims low = zeros;
    low[r] = shift;
    ps = add(b, ps, b.slice(b.pad(ps, b.scalar(0, x.elem()), low, zeros, zeros), zeros, dk, ones));
  }
  ps = add(b, ps, wide(s0));
  Value mk = wide(machep);
  Value tiny = andv(b, b.compare(Cmp::LT, mul(b, b.unary("negate", mk), ps), t), b.compare(Cmp::LT, t, mul(b, mk, ps)));
  Value big_i = b.constant_i(K + 1, ik);
  Value first_tiny = reduce(b, b.select(andv(b, tiny, cond), i1, big_i), {r}, "minimum", b.scalar_i(K + 1, ElementType::kS64));
  Value n_end = reduce_sum(b, b.convert(cond, ElementType::kS64), {r});
  auto at = [&](Value v, Value pos) {  // v[..., pos - 1]
    Value hit = b.compare(Cmp::EQ, i1, b.broadcast_in_dim(pos, dk, keep));
    return reduce_sum(b, b.select(hit, v, b.constant(0, v.type)), {r});
  };
  Value done = b.compare(Cmp::LE, first_tiny, b.constant_i(K, first_tiny.type));
  Value early = at(ps, first_tiny);
  Value sv = at(ps, n_end), bb = at(t, n_end), w = at(a, n_end);
  sv = add(b, sv, div(b, mul(b, bb, w), sub(b, x, one_)));
  sv = sub(b, sv, mul(b, k(b, 0.5, bb), bb));
  // A[i] = (2i+2)! / B_{2i+2}
  static const double bern[12] = {1.0 / 6,       -1.0 / 30,    1.0 / 42,         -1.0 / 30,
                                  5.0 / 66,      -691.0 / 2730, 7.0 / 6,         -3617.0 / 510,
                                  43867.0 / 798, -174611.0 / 330, 854513.0 / 138, -236364091.0 / 2730};
  Value av = one_, kv = zero;
  Value tail_done = b.constant(0, Type{ElementType::kPred, d});
  double fact = 1;
  for (int i = 0; i < 12; ++i) {
    fact *= (2.0 * i + 1) * (2.0 * i + 2);
    av = mul(b, av, add(b, x, kv));
    bb = div(b, bb, w);
    Value term = div(b, mul(b, av, bb), k(b, fact / bern[i], av));
    Value s2 = add(b, sv, term);
    sv = b.select(tail_done, sv, s2);
    tail_done = orv(b, tail_done, b.compare(Cmp::LT, b.unary("abs", div(b, term, s2)), machep));
    kv = add(b, kv, one_);
    av = mul(b, av, add(b, x, kv));
    bb = div(b, bb, w);
    kv = add(b, kv, one_);
  }
  Value res = b.select(done, early, sv);
  // special cases: x == 1 -> inf; x < 1 -> NaN; q <= 0: integer q -> inf, non-integer x -> NaN
  Value q_le0 = b.compare(Cmp::LE, q, zero);
  res = b.select(andv(b, q_le0, b.compare(Cmp::NE, x, b.unary("floor", x))), k(b, NAN, x), res);
  res = b.select(andv(b, q_le0, b.compare(Cmp::EQ, q, b.unary("floor", q))), k(b, INFINITY, x), res);
  res = b.select(b.compare(Cmp::LT, x, one_), k(b, NAN, x), res);
  res = b.select(b.compare(Cmp::EQ, x, one_), k(b, INFINITY, x), res);
  return res;
}

// trigamma: reflection below 1/2, six recurrence steps, then the asymptotic series (as torch's CPU).
Value trigamma(Builder& b, Value x) {
  Value one_ = k(b, 1, x);
  Value reflect = b.compare(Cmp::LT, x, k(b, 0.5, x));
  Value pi = k(b, static_cast<double>(static_cast<float>(M_PI)), x);
  if (x.elem() == ElementType::kF64) pi = k(b, M_PI, x);
  Value sn = b.unary("sine", mul(b, pi, x));
  Value result = b.select(reflect, b.unary("negate", div(b, mul(b, pi, pi), mul(b, sn, sn))), k(b, 0, x));
  Value z = b.select(reflect, sub(b, one_, x), x);
  for (int i = 0; i < 6; ++i) {
    result = add(b, result, div(b, one_, mul(b, z, z)));
    z = add(b, z, one_);
  }
  Value ixx = div(b, one_, mul(b, z, z));
  Value inner = sub(b, k(b, 1.0 / 30, x), mul(b, ixx, k(b, 1.0 / 42, x)));
  inner = sub(b, k(b, 1.0 / 6, x), mul(b, ixx, inner));
  Value series = add(b, add(b, one_, div(b, one_, mul(b, k(b, 2, z), z))), mul(b, ixx, inner));
  result = add(b, result, div(b, series, z));
  return b.select(reflect, b.unary("negate", result), result);
}

Value polygamma(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 1);
  if (!pjrt::is_float(x.elem())) throw hlo::Error("polygamma: floating-point only");
  int64_t n = c.i(0);
  if (n < 0) throw hlo::Error("polygamma: negative order");
  if (n == 0) return b.chlo_unary("digamma", x);
  if (n == 1) return trigamma(b, x);
  double fact = 1;
  for (int64_t i = 2; i <= n; ++i) fact *= static_cast<double>(i);
  Value z = zeta_values(b, k(b, static_cast<double>(n + 1), x), x);
  Value r = mul(b, b.convert(z, ElementType::kF64), b.constant((n % 2 ? 1.0 : -1.0) * fact, Type{ElementType::kF64, x.dims()}));
  return b.convert(r, x.elem());
}

Value zeta(Ctx& c) {
  Value x = up(c, 0), q = up(c, 1);
  if (!pjrt::is_float(x.elem())) throw hlo::Error("zeta: floating-point only");
  return zeta_values(c.b, x, q);
}

// ------------------------------------------------------------------------------- index_reduce
// index_reduce(self, dim, index, source, reduce, *, include_self): self's slices at index combined
// with source's slices (prod, amax, amin, mean); without include_self the indexed slices start from
// the reduction's identity.
Value index_reduce(Ctx& c) {
  Builder& b = c.b;
  ElementType t = c.out_type();
  Value self = b.convert(c.t(0), t), index = c.t(2), src = b.convert(c.t(3), t);
  const std::string red = c.arg(4).s;
  const bool include_self = !c.has(5) || c.i(5);
  if (self.rank() == 0) self = b.reshape(self, {1});
  if (src.rank() == 0) src = b.reshape(src, {1});
  int64_t dim = wrap_dim(c.i(1), self.rank());
  const int64_t n = index.type.numel();
  if (n == 0 || self.type.numel() == 0) return b.reshape(self, c.out_dims());
  if (!pjrt::is_integral(index.elem())) throw hlo::Error("index_reduce: integer index expected");
  Value idx = b.convert(b.reshape(index, {n}), ElementType::kS64);
  idx = b.select(b.compare(Cmp::LT, idx, b.constant_i(0, idx.type)), add(b, idx, b.constant_i(self.dims()[dim], idx.type)), idx);
  idx = b.reshape(idx, {n, 1});
  Dims ud = self.dims();
  ud[dim] = n;
  src = b.reshape(src, ud);
  hlo::ScatterDims s;
  for (int64_t i = 0; i < self.rank(); ++i)
    if (i != dim) s.update_window_dims.push_back(i);
  s.inserted_window_dims = {dim};
  s.scatter_dims_to_operand_dims = {dim};
  s.index_vector_dim = 1;
  auto scatter = [&](Value into, Value upd, const char* op) {
    std::string o = op;
    return b.scatter(into, idx, upd, s, [o](Builder& bb, const V& a) {
      return V{o.empty() ? a[1] : bb.binary(o.c_str(), a[0], a[1])};
    });
  };
  const char* op;
  Value init;
  if (red == "prod") {
    op = "multiply";
    init = b.scalar(1, t);
  } else if (red == "amax") {
    op = "maximum";
    init = lowest(b, t);
  } else if (red == "amin") {
    op = "minimum";
    init = highest(b, t);
  } else if (red == "mean") {
    op = "add";
    init = b.scalar(0, t);
  } else {
    throw hlo::Error("index_reduce: unknown reduction");
  }
  if (!include_self) self = scatter(self, b.broadcast_to(init, ud), "");
  Value r = scatter(self, src, op);
  if (red == "mean") {
    Value cnt = b.constant(include_self ? 1 : 0, self.type);
    cnt = scatter(cnt, b.constant(1, Type{t, ud}), "add");
    cnt = b.select(b.compare(Cmp::EQ, cnt, k(b, 0, cnt)), k(b, 1, cnt), cnt);
    if (pjrt::is_integral(t)) {
      Value q = div(b, r, cnt), rem = b.binary("remainder", r, cnt);
      Value fix = andv(b, b.compare(Cmp::NE, rem, k(b, 0, rem)), b.compare(Cmp::LT, rem, k(b, 0, rem)));
      r = b.select(fix, sub(b, q, k(b, 1, q)), q);
    } else {
      r = div(b, r, cnt);
    }
  }
  return b.reshape(r, c.out_dims());
}

// ------------------------------------------------------------------------------- nonzero_static
// nonzero_static(self, *, size, fill_value): the coordinates of the first `size` nonzero elements in
// row-major order, padded with fill_value.
Value nonzero_static(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  const Dims& od = c.out_dims();
  const int64_t size = od[0], r = od[1], n = x.type.numel();
  Value out = b.constant_i(c.i(2), Type{ElementType::kS64, od});
  if (size == 0 || r == 0 || n == 0) return out;
  Value nz = b.reshape(b.convert(x, ElementType::kPred), {n});
  Value cnt = b.convert(nz, ElementType::kS64);
  // inclusive prefix sum
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Value before = b.slice(b.pad(cnt, b.scalar_i(0, ElementType::kS64), {shift}, {0}, {0}), {0}, {n}, {1});
    cnt = add(b, cnt, before);
  }
  Value pos = sub(b, cnt, b.constant_i(1, cnt.type));
  pos = b.select(nz, pos, b.constant_i(size, pos.type));  // zeros go out of range: dropped
  V coords;
  for (int64_t i = 0; i < r; ++i) coords.push_back(b.reshape(b.iota(Type{ElementType::kS64, x.dims()}, i), {n, 1}));
  Value upd = b.concatenate(coords, 1);  // [n, r]
  hlo::ScatterDims s{{1}, {0}, {0}, 1};
  return b.scatter(out, b.reshape(pos, {n, 1}), upd, s, [](Builder& bb, const V& a) { return V{a[1]}; });
}

// ------------------------------------------------------------------------------------------- mode
// mode(self, dim, keepdim) -> (values, indices): the smallest of the most frequent values and the last
// index holding it (torch's CPU kernel on small rows); pairwise counting, for rows up to 2048 long.
V mode(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() == 0) return V{x, b.constant_i(0, c.out(1))};
  int64_t dim = wrap_dim(c.i(1), x.rank());
  const int64_t n = x.dims()[dim];
  if (n == 0 || n > 2048) throw hlo::Error("mode: unsupported row length");
  if (pjrt::is_complex(x.elem())) throw hlo::Error("mode: complex inputs are not lowered");
  // move dim last: [R, n]
  Dims perm;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != dim) perm.push_back(i);
  perm.push_back(dim);
  Value xt = b.transpose(x, perm);
  Dims rest(xt.dims().begin(), xt.dims().end() - 1);
  const int64_t R = numel(rest);
  Value m = b.reshape(xt, {R, n});
  Value eq = b.compare(Cmp::EQ, b.broadcast_in_dim(m, {R, n, n}, {0, 1}), b.broadcast_in_dim(m, {R, n, n}, {0, 2}));
  Value freq = reduce_sum(b, b.convert(eq, ElementType::kS64), {2});  // [R, n]
  Value maxf = reduce(b, freq, {1}, "maximum", b.scalar_i(0, ElementType::kS64));
  Value cand = b.compare(Cmp::EQ, freq, b.broadcast_in_dim(maxf, {R, n}, {0}));
  Value val = reduce(b, b.select(cand, m, b.broadcast_to(highest(b, m.elem()), m.dims())), {1}, "minimum", highest(b, m.elem()));
  Value iota = b.iota(Type{ElementType::kS64, {R, n}}, 1);
  Value at = b.compare(Cmp::EQ, m, b.broadcast_in_dim(val, {R, n}, {0}));
  Value idx = reduce(b, b.select(at, iota, b.constant_i(-1, iota.type)), {1}, "maximum", b.scalar_i(-1, ElementType::kS64));
  return V{b.reshape(val, c.out_dims(0)), b.reshape(idx, c.out_dims(1))};
}

// ------------------------------------------------------------------------------- segment_reduce
// segment_reduce(data, reduce, *, lengths?, indices?, offsets?, axis, unsafe, initial?) along axis 0
// with 1-d lengths or offsets: each segment reduced starting from `initial` (sum, mean, max, min,
// prod); mean divides by the segment's length, and an empty segment gives initial (NaN without one).
Value segment_reduce(Ctx& c) {
  Builder& b = c.b;
  Value d = c.t(0);
  ElementType t = d.elem();
  if (!pjrt::is_float(t)) throw hlo::Error("segment_reduce: floating-point only");
  if (c.has(3)) throw hlo::Error("segment_reduce: indices are not lowered");
  const std::string red = c.arg(1).s;
  Value start, end;
  int64_t S;
  if (c.has(2)) {
    Value len = c.t(2);
    if (len.rank() != 1) throw hlo::Error("segment_reduce: only 1-d lengths");
    S = len.dims()[0];
    len = b.convert(len, ElementType::kS64);
    end = len;
    for (int64_t shift = 1; shift < S; shift *= 2)
      end = add(b, end, b.slice(b.pad(end, b.scalar_i(0, ElementType::kS64), {shift}, {0}, {0}), {0}, {S}, {1}));
    start = sub(b, end, len);
  } else if (c.has(4)) {
    Value off = b.convert(c.t(4), ElementType::kS64);
    if (off.rank() != 1 || off.dims()[0] < 1) throw hlo::Error("segment_reduce: only 1-d offsets");
    S = off.dims()[0] - 1;
    start = b.slice(off, {0}, {S}, {1});
    end = b.slice(off, {1}, {S + 1}, {1});
  } else {
    throw hlo::Error("segment_reduce: lengths or offsets required");
  }
  if (c.i(5) != 0 && !(c.i(5) == -1 && d.rank() == 1)) throw hlo::Error("segment_reduce: only axis 0");
  if (S == 0 || numel(c.out_dims()) == 0) return b.constant(0, c.out());
  const int64_t L = d.dims()[0];
  Dims rest(d.dims().begin() + 1, d.dims().end());
  Dims full{S, L};
  full.insert(full.end(), rest.begin(), rest.end());
  Dims od{S};
  od.insert(od.end(), rest.begin(), rest.end());
  Type it{ElementType::kS64, {S, L}};
  Value i = b.iota(it, 1);
  Value in = andv(b, b.compare(Cmp::GE, i, b.broadcast_in_dim(start, {S, L}, {0})),
                  b.compare(Cmp::LT, i, b.broadcast_in_dim(end, {S, L}, {0})));
  Value mask = b.broadcast_in_dim(in, full, {0, 1});
  Dims dd;
  for (int64_t k2 = 0; k2 < d.rank(); ++k2) dd.push_back(k2 + 1);
  Value x = b.broadcast_in_dim(d, full, dd);
  Value init = c.has(7) ? operand(c, 7, t, od) : Value{};
  Value count = b.convert(b.broadcast_in_dim(sub(b, end, start), od, {0}), t);
  Value any_nan = reduce(b, andv(b, mask, isnan(b, x)), {1}, "or", b.scalar(0, ElementType::kPred));
  Value r;
  if (red == "sum" || red == "mean") {
    r = reduce_sum(b, b.select(mask, x, b.constant(0, x.type)), {1});
    if (init.valid()) r = add(b, init, r);
    if (red == "mean") {
      Value m = div(b, r, count);
      r = b.select(b.compare(Cmp::EQ, count, k(b, 0, count)), init.valid() ? init : b.constant(NAN, m.type), m);
    }
  } else if (red == "max" || red == "min") {
    bool mx = red == "max";
    Value fill = b.constant(mx ? -INFINITY : INFINITY, x.type);
    r = reduce(b, b.select(mask, x, fill), {1}, mx ? "maximum" : "minimum", b.scalar(mx ? -INFINITY : INFINITY, t));
    if (init.valid()) {
      Value better = b.compare(mx ? Cmp::GT : Cmp::LT, init, r);
      r = b.select(orv(b, better, isnan(b, init)), init, r);
    }
    r = b.select(any_nan, b.constant(NAN, r.type), r);
  } else if (red == "prod") {
    r = reduce(b, b.select(mask, x, b.constant(1, x.type)), {1}, "multiply", b.scalar(1, t));
    if (init.valid()) r = mul(b, init, r);
  } else {
    throw hlo::Error("segment_reduce: unknown reduction");
  }
  return b.reshape(r, c.out_dims());
}

// ------------------------------------------------------------------------------- integer ops
// Bit shifts: out-of-range (or negative) amounts give 0 to the left and the sign fill to the right,
// which is how stablehlo's shifts treat them (the amount read as unsigned).
Value shift(Ctx& c, bool left) {
  Builder& b = c.b;
  ElementType t = c.out_type();
  if (!pjrt::is_integral(t)) throw hlo::Error("shift: integer types only");
  Value x = operand(c, 0), s = operand(c, 1);
  if (left) return b.binary("shift_left", x, s);
  return b.binary(pjrt::is_signed_int(t) ? "shift_right_arithmetic" : "shift_right_logical", x, s);
}

// gcd by Euclid's algorithm, unrolled for the longest chain of the type (consecutive Fibonacci numbers).
Value gcd_values(Builder& b, Value a, Value v) {
  const int64_t bits = static_cast<int64_t>(pjrt::byte_size(a.elem())) * 8;
  const int steps = static_cast<int>(bits * 3 / 2) + 2;
  Value zero = b.constant_i(0, a.type), one_ = b.constant_i(1, a.type);
  if (pjrt::is_signed_int(a.elem())) {
    a = b.unary("abs", a);
    v = b.unary("abs", v);
  }
  for (int i = 0; i < steps; ++i) {
    Value nz = b.compare(Cmp::NE, a, zero);
    Value r = b.binary("remainder", v, b.select(nz, a, one_));
    Value na = b.select(nz, r, a), nv = b.select(nz, a, v);
    a = na;
    v = nv;
  }
  return v;
}

Value gcd(Ctx& c) {
  if (!pjrt::is_integral(c.out_type())) throw hlo::Error("gcd: integer types only");
  return gcd_values(c.b, operand(c, 0), operand(c, 1));
}

// lcm = |a / gcd * b|, 0 when the gcd is 0.
Value lcm(Ctx& c) {
  Builder& b = c.b;
  if (!pjrt::is_integral(c.out_type())) throw hlo::Error("lcm: integer types only");
  Value x = operand(c, 0), y = operand(c, 1);
  // C++ promotes narrow integers to int for a / g * b, then the result wraps to the type
  if (pjrt::byte_size(x.elem()) < 4) {
    x = b.convert(x, ElementType::kS32);
    y = b.convert(y, ElementType::kS32);
  }
  Value g = gcd_values(b, x, y);
  Value zero = b.constant_i(0, g.type);
  Value gz = b.compare(Cmp::EQ, g, zero);
  Value r = mul(b, div(b, x, b.select(gz, b.constant_i(1, g.type), g)), y);
  if (pjrt::is_signed_int(r.elem())) r = b.unary("abs", r);
  return b.select(gz, zero, r);
}

// tril_indices / triu_indices(row, col, offset): the coordinates of the lower (upper) triangle, row by
// row, as a [2, N] constant.
Value tri_indices(Ctx& c, bool lower) {
  Builder& b = c.b;
  int64_t rows = c.i(0), cols = c.i(1), off = c.i(2);
  std::vector<int64_t> rs, cs;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (lower ? j - i <= off : j - i >= off) {
        rs.push_back(i);
        cs.push_back(j);
      }
  const int64_t n = static_cast<int64_t>(rs.size());
  if (c.out_dims() != Dims{2, n}) throw hlo::Error("tri_indices: unexpected result shape");
  if (n == 0) return b.constant_i(0, c.out());
  rs.insert(rs.end(), cs.begin(), cs.end());
  return b.convert(b.reshape(const_i64(b, rs), {2, n}), c.out_type());
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
    {{"_cdist_backward", "_cdist_backward.out"}, [](Ctx& c) { return one(cdist_backward(c)); }},
    {{"_pdist_forward", "_pdist_forward.out"}, [](Ctx& c) { return one(pdist(c)); }},
    {{"_pdist_backward", "_pdist_backward.out"}, [](Ctx& c) { return one(pdist_backward(c)); }},

    // FFTs
    {{"_fft_r2c", "_fft_r2c.out"}, [](Ctx& c) { return one(fft_r2c(c)); }},
    {{"_fft_c2c", "_fft_c2c.out"}, [](Ctx& c) { return one(fft_c2c(c)); }},
    {{"_fft_c2r", "_fft_c2r.out"}, [](Ctx& c) { return one(fft_c2r(c)); }},

    {{"conj_physical", "conj_physical_", "conj_physical.out"}, [](Ctx& c) { return one(conj_physical(c)); }},
    {{"i0", "i0_", "i0.out"}, [](Ctx& c) { return one(bessel_row(c, 0, false)); }},
    {{"special_i0e", "special_i0e.out"}, [](Ctx& c) { return one(bessel_row(c, 0, true)); }},
    {{"special_i1", "special_i1.out"}, [](Ctx& c) { return one(bessel_row(c, 1, false)); }},
    {{"special_i1e", "special_i1e.out"}, [](Ctx& c) { return one(bessel_row(c, 1, true)); }},
    {{"special_ndtri", "special_ndtri.out"}, [](Ctx& c) { return one(ndtri(c)); }},
    {{"special_log_ndtr", "special_log_ndtr.out"}, [](Ctx& c) { return one(log_ndtr(c)); }},
    {{"special_erfcx", "special_erfcx.out"}, [](Ctx& c) { return one(erfcx(c)); }},
    {{"index_reduce", "index_reduce_", "index_reduce.out"}, [](Ctx& c) { return one(index_reduce(c)); }},
    {{"nonzero_static", "nonzero_static.out"}, [](Ctx& c) { return one(nonzero_static(c)); }},
    {{"mode", "mode.values"}, mode},
    {{"bitwise_left_shift.Tensor", "bitwise_left_shift_.Tensor", "bitwise_left_shift.Tensor_out"}, [](Ctx& c) { return one(shift(c, true)); }},
    {{"bitwise_left_shift.Tensor_Scalar", "bitwise_left_shift_.Tensor_Scalar", "bitwise_left_shift.Tensor_Scalar_out"}, [](Ctx& c) { return one(shift(c, true)); }},
    {{"bitwise_left_shift.Scalar_Tensor", "bitwise_left_shift.Scalar_Tensor_out"}, [](Ctx& c) { return one(shift(c, true)); }},
    {{"__lshift__.Tensor", "__ilshift__.Tensor"}, [](Ctx& c) { return one(shift(c, true)); }},
    {{"__lshift__.Scalar", "__ilshift__.Scalar"}, [](Ctx& c) { return one(shift(c, true)); }},
    {{"bitwise_right_shift.Tensor", "bitwise_right_shift_.Tensor", "bitwise_right_shift.Tensor_out"}, [](Ctx& c) { return one(shift(c, false)); }},
    {{"bitwise_right_shift.Tensor_Scalar", "bitwise_right_shift_.Tensor_Scalar", "bitwise_right_shift.Tensor_Scalar_out"}, [](Ctx& c) { return one(shift(c, false)); }},
    {{"bitwise_right_shift.Scalar_Tensor", "bitwise_right_shift.Scalar_Tensor_out"}, [](Ctx& c) { return one(shift(c, false)); }},
    {{"__rshift__.Tensor", "__irshift__.Tensor"}, [](Ctx& c) { return one(shift(c, false)); }},
    {{"__rshift__.Scalar", "__irshift__.Scalar"}, [](Ctx& c) { return one(shift(c, false)); }},
    {{"gcd", "gcd_", "gcd.out"}, [](Ctx& c) { return one(gcd(c)); }},
    {{"lcm", "lcm_", "lcm.out"}, [](Ctx& c) { return one(lcm(c)); }},
    {{"tril_indices", "tril_indices.out"}, [](Ctx& c) { return one(tri_indices(c, true)); }},
    {{"triu_indices", "triu_indices.out"}, [](Ctx& c) { return one(tri_indices(c, false)); }},
    {{"segment_reduce", "segment_reduce.out"}, [](Ctx& c) { return one(segment_reduce(c)); }},

    {{"channel_shuffle", "channel_shuffle.out"}, [](Ctx& c) { return one(channel_shuffle(c)); }},
    {{"native_channel_shuffle"}, [](Ctx& c) { return one(channel_shuffle(c)); }},
};

}  // namespace
}  // namespace lowering
