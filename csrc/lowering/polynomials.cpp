// Orthogonal polynomials of torch.special, evaluated as torch's CPU kernels evaluate them so results agree
// bit for bit: Chebyshev T/U/V/W (plain on [-1, 1] and shifted to [0, 1]), Hermite H/He, Laguerre L and
// Legendre P of x and a degree n given as a tensor (or scalar) of the same floating type. The degree is
// truncated to an integer (NaN, infinities and values beyond int64 give a negative degree, hence 0, as
// the x86 conversion does); the endpoints and, for Chebyshev inside (-1, 1) at high degree, the
// trigonometric forms are special cases; otherwise the three-term recurrence runs in a stablehlo.while,
// one step for all elements at a time, each element stopping at its own degree or at a NaN.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

// Which polynomial; the Chebyshev kinds come plain or shifted.
enum Kind { kT, kU, kV, kW, kH, kHe, kL, kP };

// One step of a recurrence: the next value from the step counter k (of x's type), x, p (the value before
// q) and q.
using Step = std::function<Value(Builder&, Value k, Value x, Value p, Value q)>;

// Runs q <- step(k, x, p, q), p <- q for k = first, first + 1, ... while k <= last (per element, s64)
// and q is not NaN; returns q.
Value recurrence(Builder& b, Value x, Value p, Value q, Value last, int64_t first, const Step& step) {
  const ElementType t = x.elem();
  const ElementType s64 = ElementType::kS64;
  auto active = [&](Builder& bb, Value k, Value q_, Value last_) {
    Value kk = bb.broadcast_in_dim(k, last_.dims(), {});
    return andv(bb, bb.compare(Cmp::LE, kk, last_), notv(bb, isnan(bb, q_)));
  };
  V out = b.while_loop(
      {b.scalar_i(first, s64), p, q, x, last},
      [&](Builder& bb, const V& s) {
        Value any = reduce(bb, active(bb, s[0], s[2], s[4]), iota_dims(0, s[2].rank()), "or",
                           bb.scalar(0, ElementType::kPred));
        return V{any};
      },
      [&](Builder& bb, const V& s) {
        Value on = active(bb, s[0], s[2], s[4]);
        Value kf = bb.broadcast_in_dim(bb.convert(s[0], t), s[2].dims(), {});
        Value r = step(bb, kf, s[3], s[1], s[2]);
        return V{add(bb, s[0], bb.scalar_i(1, s64)), bb.select(on, s[2], s[1]), bb.select(on, r, s[2]), s[3], s[4]};
      });
  return out[2];
}

// static_cast<int64_t>(n) on x86: truncation, and INT64_MIN where the value has no int64 image.
Value degree(Builder& b, Value n) {
  Value fits = b.compare(Cmp::LT, b.unary("abs", n), like(b, 9223372036854775808.0, n));  // false for NaN
  Value i = b.convert(n, ElementType::kS64);
  return b.select(fits, i, b.constant_i(std::numeric_limits<int64_t>::min(), i.type));
}

Value polynomial(Ctx& c, Kind kind, bool shifted) {
  Builder& b = c.b;
  const ElementType t = c.out_type();
  if (t != ElementType::kF32 && t != ElementType::kF64) throw hlo::Error("special polynomials: float32 and float64 only");
  Value x = operand(c, 0);
  Value n = degree(b, operand(c, 1));
  const Type it = n.type;
  auto fl = [&](double v) { return like(b, v, x); };
  auto ni = [&](int64_t v) { return b.constant_i(v, it); };
  auto nf = [&](Value k) { return b.convert(k, t); };  // an int64 expression as torch converts it to T
  Value zero_i = ni(0), one_i = ni(1);
  Value even = b.compare(Cmp::EQ, b.binary("remainder", n, ni(2)), zero_i);
  Value two_n1 = nf(add(b, add(b, n, n), one_i));  // 2n + 1
  auto by_parity = [&](Value v) { return b.select(even, v, b.unary("negate", v)); };

  Value r;            // the result where no special case applies
  Value q0;           // the degree-1 value
  Value special;      // the special case's value where `is_special`
  Value is_special = b.constant(0, Type{ElementType::kPred, x.dims()});
  auto set = [&](Value where, Value v) {  // earlier special cases win
    Value fresh = andv(b, where, notv(b, is_special));
    special = special.valid() ? b.select(fresh, v, special) : v;
    is_special = orv(b, is_special, where);
  };

  if (kind <= kW) {
    // y is the argument on [-1, 1]: x, or 2x - 1 for the shifted kinds
    Value y = shifted ? sub(b, add(b, x, x), fl(1)) : x;
    Value yy = add(b, y, y);
    Value at_hi = b.compare(Cmp::EQ, shifted ? x : y, fl(1));
    Value at_lo = b.compare(Cmp::EQ, x, fl(shifted ? 0 : -1));
    Value n1 = nf(add(b, n, one_i));
    Value one_ = fl(1);
    // the endpoint values at y = 1 and at y = -1
    Value hi = kind == kT || kind == kV ? one_ : kind == kU ? n1 : two_n1;
    Value lo = kind == kT || kind == kW ? by_parity(one_) : by_parity(kind == kU ? n1 : two_n1);
    set(b.compare(Cmp::LT, n, zero_i), fl(0));
    set(at_hi, hi);
    set(at_lo, lo);
    // inside (-1, 1) at high degree: trigonometric forms
    int64_t threshold = kind == kT ? 6 : shifted ? (kind == kW ? 4 : 6) : 8;
    Value inside = andv(b, b.compare(Cmp::GT, n, ni(threshold)), b.compare(Cmp::LT, b.unary("abs", y), one_));
    // acos, sin and cos evaluated in double and rounded, as libm rounds them (XLA's float versions are
    // a few ulp off, which the degree amplifies)
    auto fn = [&](const char* op, Value v) {
      Value d = b.convert(v, ElementType::kF64);
      return b.convert(op[0] == 'a' ? b.chlo_unary(op, d) : b.unary(op, d), t);
    };
    Value a = fn("acos", y);
    Value trig;
    if (kind == kT) {
      trig = fn("cosine", mul(b, nf(n), a));
    } else if (kind == kU) {
      Value s = fn("sine", a), na = mul(b, n1, a);
      Value main = div(b, fn("sine", na), s);
      Value edge = div(b, mul(b, n1, fn("cosine", na)), y);
      trig = b.select(b.compare(Cmp::NE, s, fl(0)), main, edge);
    } else {
      Value half = div(b, a, fl(2));
      Value nh = mul(b, add(b, nf(n), fl(0.5)), a);
      if (kind == kV) {
        Value main = div(b, fn("cosine", nh), fn("cosine", half));
        trig = b.select(b.compare(Cmp::NE, fn("sine", half), one_), main, by_parity(two_n1));
      } else {
        Value main = div(b, fn("sine", nh), fn("sine", half));
        Value edge = by_parity(one_);
        if (!shifted) edge = b.select(b.compare(Cmp::GT, y, fl(0)), two_n1, edge);
        trig = b.select(b.compare(Cmp::NE, fn("cosine", half), one_), main, edge);
      }
    }
    set(inside, trig);
    q0 = kind == kT ? y : kind == kU ? yy : kind == kV ? sub(b, yy, one_) : add(b, yy, one_);
    // elements settled by a special case do not iterate (a high degree inside (-1, 1) would run long)
    Value last = b.select(is_special, ni(1), n);
    r = recurrence(b, yy, one_, q0, last, 2, [](Builder& bb, Value, Value m, Value p, Value q) {
      return sub(bb, mul(bb, m, q), p);
    });
  } else {
    set(b.compare(Cmp::LT, n, zero_i), fl(0));
    if (kind == kL) set(b.compare(Cmp::EQ, b.unary("abs", x), fl(0)), fl(1));
    if (kind == kP) {
      Value end = b.compare(Cmp::EQ, b.unary("abs", x), fl(1));
      Value pos = orv(b, b.compare(Cmp::GT, x, fl(0)), even);
      set(end, b.select(pos, fl(1), fl(-1)));
    }
    q0 = kind == kH ? add(b, x, x) : kind == kL ? sub(b, fl(1), x) : x;
    if (kind == kH || kind == kHe) {
      // past degree 128 (float) or 512 (double) torch returns NaN
      int64_t limit = t == ElementType::kF32 ? 128 : 512;
      Value big = andv(b, b.compare(Cmp::GT, n, ni(limit)), b.compare(Cmp::GT, n, one_i));
      set(big, fl(NAN));
    }
    Step step;
    if (kind == kH) {  // k = 2, 4, ... < 2n: (x + x) q - k p
      step = [](Builder& bb, Value j, Value x2, Value p, Value q) {
        return sub(bb, mul(bb, x2, q), mul(bb, add(bb, j, j), p));
      };
    } else if (kind == kHe) {  // x q - k p
      step = [](Builder& bb, Value k, Value x_, Value p, Value q) { return sub(bb, mul(bb, x_, q), mul(bb, k, p)); };
    } else if (kind == kL) {  // ((2k + (1 - x)) q - k p) / (k + 1)
      step = [](Builder& bb, Value k, Value x_, Value p, Value q) {
        Value one_ = like(bb, 1, k);
        Value m = add(bb, add(bb, k, k), sub(bb, one_, x_));
        return div(bb, sub(bb, mul(bb, m, q), mul(bb, k, p)), add(bb, k, one_));
      };
    } else {  // ((2k + 1) x q - k p) / (k + 1)
      step = [](Builder& bb, Value k, Value x_, Value p, Value q) {
        Value one_ = like(bb, 1, k);
        Value m = mul(bb, add(bb, add(bb, k, k), one_), x_);
        return div(bb, sub(bb, mul(bb, m, q), mul(bb, k, p)), add(bb, k, one_));
      };
    }
    // Hermite H counts j = 1 .. n - 1 (k = 2j); the others k = 1 .. n - 1
    Value arg = kind == kH ? add(b, x, x) : x;
    // last step n - 1; none for settled elements (n - 1 would wrap for the INT64_MIN of a NaN degree)
    Value last = b.select(orv(b, is_special, b.compare(Cmp::LT, n, one_i)), zero_i, sub(b, n, one_i));
    r = recurrence(b, arg, fl(1), q0, last, 1, step);
  }
  r = b.select(b.compare(Cmp::EQ, n, one_i), q0, r);
  r = b.select(b.compare(Cmp::EQ, n, zero_i), fl(1), r);
  return b.select(is_special, special, r);
}

#define POLY(name, kind, shifted)                                                                         \
  {{"special_" name, "special_" name ".out"}, [](Ctx& c) { return one(polynomial(c, kind, shifted)); }},   \
      {{"special_" name ".x_scalar", "special_" name ".x_scalar_out"},                                     \
       [](Ctx& c) { return one(polynomial(c, kind, shifted)); }},                                           \
      {{"special_" name ".n_scalar", "special_" name ".n_scalar_out"},                                     \
       [](Ctx& c) { return one(polynomial(c, kind, shifted)); }}

const Rows rows = {
    POLY("chebyshev_polynomial_t", kT, false),
    POLY("chebyshev_polynomial_u", kU, false),
    POLY("chebyshev_polynomial_v", kV, false),
    POLY("chebyshev_polynomial_w", kW, false),
    POLY("shifted_chebyshev_polynomial_t", kT, true),
    POLY("shifted_chebyshev_polynomial_u", kU, true),
    POLY("shifted_chebyshev_polynomial_v", kV, true),
    POLY("shifted_chebyshev_polynomial_w", kW, true),
    POLY("hermite_polynomial_h", kH, false),
    POLY("hermite_polynomial_he", kHe, false),
    POLY("laguerre_polynomial_l", kL, false),
    POLY("legendre_polynomial_p", kP, false),
};

}  // namespace
}  // namespace lowering
