// Pointwise ops defined by the floating-point representation and by complex parts, as C and torch's CPU
// kernels define them: hypot, nextafter, copysign, signbit, heaviside, fmax/fmin (NaN ignored), frexp,
// round(decimals), angle, polar and conj_physical.
#include <cmath>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

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
    r = mul(b, m, b.unary("sqrt", add(b, like(b, 1, q), mul(b, q, q))));
    r = b.select(b.compare(Cmp::EQ, m, like(b, 0, m)), like(b, 0, m), r);
    r = b.select(orv(b, isnan(b, x), isnan(b, y)), like(b, NAN, r), r);  // maximum may drop NaN
  }
  Value inf = orv(b, is_inf(b, x), is_inf(b, y));
  return b.select(inf, like(b, INFINITY, r), r);
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
  Value zero = like(b, 0, x);
  Value toward_up = b.compare(Cmp::EQ, b.compare(Cmp::LT, x, y), b.compare(Cmp::GT, x, zero));
  Value stepped = b.bitcast_convert(b.select(toward_up, add(b, xi, one_i), sub(b, xi, one_i)), x.type);
  Value tiny = b.bitcast_convert(one_i, x.type);
  Value from_zero = b.select(b.compare(Cmp::GT, y, zero), tiny, b.unary("negate", tiny));
  Value r = b.select(b.compare(Cmp::EQ, x, zero), from_zero, stepped);
  r = b.select(b.compare(Cmp::EQ, x, y), y, r);
  return b.select(orv(b, isnan(b, x), isnan(b, y)), add(b, x, y), r);
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

// angle: atan2(imag, real) for complex; pi for negative reals, 0 otherwise, NaN stays.
Value angle(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (pjrt::is_complex(x.elem())) {
    ElementType part = pjrt::real_type(x.elem());
    return b.binary("atan2", b.unary_to("imag", x, part), b.unary_to("real", x, part));
  }
  Value v = up(c, 0), zero = like(b, 0, v);
  Value r = b.select(b.compare(Cmp::LT, v, zero), like(b, M_PI, v), zero);
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
  Value subnormal = b.compare(Cmp::LT, ax, like(b, min_normal, x));
  Value xs = b.select(subnormal, mul(b, x, like(b, std::ldexp(1.0, scale_bits), x)), x);
  Value bits = b.bitcast_convert(xs, it);
  Value e = b.binary("and", b.binary("shift_right_logical", bits, b.constant_i(mant_bits, it)), b.constant_i(exp_mask, it));
  e = sub(b, e, b.constant_i(bias_half, it));
  e = b.select(subnormal, sub(b, e, b.constant_i(scale_bits, it)), e);
  int64_t clear = ~(static_cast<int64_t>(exp_mask) << mant_bits);
  Value mbits = b.binary("or", b.binary("and", bits, b.constant_i(clear, it)),
                         b.constant_i(static_cast<int64_t>(bias_half) << mant_bits, it));
  Value m = b.bitcast_convert(mbits, x.type);
  Value special = orv(b, b.compare(Cmp::EQ, x, like(b, 0, x)), notv(b, is_finite(b, x)));
  m = b.select(special, x, m);
  e = b.select(special, b.constant_i(0, it), e);
  return V{m, b.convert(e, ElementType::kS32)};
}

Value conj_physical(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (!pjrt::is_complex(x.elem())) return x;
  ElementType part = pjrt::real_type(x.elem());
  return b.complex(b.unary_to("real", x, part), b.unary("negate", b.unary_to("imag", x, part)));
}

const Rows rows = {
    {{"hypot", "hypot_", "hypot.out"}, [](Ctx& c) { return one(hypot(c)); }},
    {{"nextafter", "nextafter_", "nextafter.out"}, [](Ctx& c) { return one(nextafter(c)); }},
    {{"fmax", "fmax.out"}, [](Ctx& c) { return one(fmax_fmin(c, true)); }},
    {{"fmin", "fmin.out"}, [](Ctx& c) { return one(fmax_fmin(c, false)); }},
    {{"copysign.Tensor", "copysign_.Tensor", "copysign.out"}, [](Ctx& c) { return one(copysign(c)); }},
    {{"copysign.Scalar", "copysign_.Scalar", "copysign.Scalar_out"}, [](Ctx& c) { return one(copysign(c)); }},
    {{"heaviside", "heaviside_", "heaviside.out"}, [](Ctx& c) { return one(heaviside(c)); }},
    {{"polar", "polar.out"}, [](Ctx& c) {
       ElementType part = pjrt::real_type(c.out_type());
       Value r = operand(c, 0, part, c.out_dims()), a = operand(c, 1, part, c.out_dims());
       return one(c.b.complex(mul(c.b, r, c.b.unary("cosine", a)), mul(c.b, r, c.b.unary("sine", a))));
     }},
    {{"signbit", "signbit.out"}, [](Ctx& c) { return one(signbit(c.b, c.t(0))); }},
    {{"angle", "angle.out"}, [](Ctx& c) { return one(angle(c)); }},
    {{"round.decimals", "round_.decimals", "round.decimals_out"}, [](Ctx& c) { return one(round_decimals(c)); }},
    {{"frexp.Tensor", "frexp.Tensor_out"}, frexp},
    {{"conj_physical", "conj_physical_", "conj_physical.out"}, [](Ctx& c) { return one(conj_physical(c)); }},
};

}  // namespace
}  // namespace lowering
