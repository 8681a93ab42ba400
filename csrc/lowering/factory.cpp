// Factory rows: arange, linspace, logspace, eye, tril_indices / triu_indices. (full, zeros, ones and the *_like variants reach the
// device as empty + fill_, which are native already.) Each follows the arithmetic of torch's CPU kernel
// (the same precision and the same two-sided formula of linspace) so results agree to rounding.
#include <cmath>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }

// A baked Scalar argument as an integer (exact for integral Scalars, truncated otherwise).
int64_t baked_int(const Arg& a) { return a.scalar_type == ElementType::kF64 ? static_cast<int64_t>(a.d) : a.i; }

// arange(start, end, step): start + i * step, in int64 for integral results and in the CPU kernel's
// accumulation type otherwise (double for float/double, float for half types).
Value arange(Ctx& c, size_t start_k, size_t step_k) {
  Builder& b = c.b;
  const ElementType t = c.out_type();
  const int64_t n = c.out_dims()[0];
  if (n == 0) return b.constant(0, c.out());
  Type it{ElementType::kS64, {n}};
  Value i = b.iota(it, 0);
  const Arg* start = start_k == SIZE_MAX ? nullptr : &c.arg(start_k);
  const Arg* step = step_k == SIZE_MAX ? nullptr : &c.arg(step_k);
  if (pjrt::is_integral(t) || t == ElementType::kPred) {
    int64_t s0 = start ? baked_int(*start) : 0, st = step ? baked_int(*step) : 1;
    return b.convert(b.binary("add", b.constant_i(s0, it), b.binary("multiply", i, b.constant_i(st, it))), t);
  }
  if (!pjrt::is_float(t)) throw hlo::Error("arange: unsupported result type");
  const ElementType acc = t == ElementType::kF16 || t == ElementType::kBF16 ? ElementType::kF32 : ElementType::kF64;
  Type at{acc, {n}};
  double s0 = start ? start->d : 0, st = step ? step->d : 1;
  Value v = b.binary("add", b.constant(s0, at), b.binary("multiply", b.convert(i, acc), b.constant(st, at)));
  return b.convert(v, t);
}

// The CPU kernel rounds every operation to the result type (half types included); integral results
// are computed in double. A half type's rounding is stablehlo.reduce_precision in float32: XLA (which
// allows excess precision by default) may drop a pair of converts to the half type and back, and did
// on a CPU with AVX512-FP16, where linspace's float16 products then kept float32 precision.
struct Arith {
  Builder& b;
  ElementType t;      // the result type
  ElementType step;   // the type of step and of the arithmetic
  Value r(Value v) const {
    if (t == ElementType::kF16)
      return b.raw("stablehlo.reduce_precision", "exponent_bits = 5 : i32, mantissa_bits = 10 : i32", {v}, v.type);
    if (t == ElementType::kBF16)
      return b.raw("stablehlo.reduce_precision", "exponent_bits = 8 : i32, mantissa_bits = 7 : i32", {v}, v.type);
    return v;
  }
  Value add(Value x, Value y) const { return r(b.binary("add", x, y)); }
  Value sub(Value x, Value y) const { return r(b.binary("subtract", x, y)); }
  Value mul(Value x, Value y) const { return r(b.binary("multiply", x, y)); }
  Value div(Value x, Value y) const { return r(b.binary("divide", x, y)); }
};

ElementType step_type(ElementType t) {
  if (t == ElementType::kF16 || t == ElementType::kBF16) return ElementType::kF32;
  if (pjrt::is_float(t)) return t;
  return ElementType::kF64;
}

// start + step * i for the first half, end - step * (steps - 1 - i) for the second (torch's linspace),
// in the step type; start and end are first converted to the result type, as torch does.
Value linspace_values(Ctx& c, size_t start_k, size_t end_k, int64_t steps) {
  Builder& b = c.b;
  const ElementType t = c.out_type();
  if (pjrt::is_complex(t)) throw hlo::Error("linspace: complex results are not supported");
  const ElementType st = step_type(t);
  Arith a{b, t, st};
  Value start = b.convert(b.convert(operand(c, start_k, ElementType::kF64, {}), t), st);
  Value end = b.convert(b.convert(operand(c, end_k, ElementType::kF64, {}), t), st);
  if (steps == 1) return b.broadcast_to(start, {1});
  Value step = a.div(a.sub(end, start), opaque(b, b.scalar(static_cast<double>(steps - 1), st)));
  Value i = b.iota(Type{ElementType::kS64, {steps}}, 0);
  Value fi = a.r(b.convert(i, st));
  Value back = a.r(b.convert(b.binary("subtract", b.constant_i(steps - 1, i.type), i), st));
  Value sv = b.broadcast_to(step, {steps});
  Value lo = a.add(b.broadcast_to(start, {steps}), a.mul(sv, fi));
  Value hi = a.sub(b.broadcast_to(end, {steps}), a.mul(sv, back));
  Value first = b.compare(Cmp::LT, i, b.constant_i(steps / 2, i.type));
  return b.select(first, lo, hi);
}

Value linspace(Ctx& c) {
  const int64_t steps = c.i(2);
  if (steps == 0) return c.b.constant(0, c.out());
  return c.b.convert(linspace_values(c, 0, 1, steps), c.out_type());
}

// base ** linspace: torch converts start and end to the result type, then computes the exponents and
// the powers in double (for every result type), and rounds once at the end. One step: base ** start.
Value logspace(Ctx& c) {
  Builder& b = c.b;
  const int64_t steps = c.i(2);
  if (steps == 0) return b.constant(0, c.out());
  const ElementType t = c.out_type(), f64 = ElementType::kF64;
  if (pjrt::is_complex(t)) throw hlo::Error("logspace: complex results are not supported");
  const double base = c.has(3) ? c.d(3) : 10.0;
  Value bv = b.constant(base, Type{f64, {steps}});
  if (steps == 1) return b.convert(b.binary("power", bv, b.broadcast_to(operand(c, 0, f64, {}), {1})), t);
  Value st = operand(c, 0, t, {}), en = operand(c, 1, t, {});
  Value start = b.convert(st, f64), end = b.convert(en, f64);
  // end - start in the result type's arithmetic (half types compute in float and round)
  ElementType at = accumulation_type(t);
  Value diff = b.convert(b.convert(b.binary("subtract", b.convert(en, at), b.convert(st, at)), t), f64);
  Value step = b.binary("divide", diff, b.scalar(static_cast<double>(steps - 1), f64));
  Value i = b.iota(Type{ElementType::kS64, {steps}}, 0);
  Value back = b.convert(b.binary("subtract", b.constant_i(steps - 1, i.type), i), f64);
  Value sv = b.broadcast_to(step, {steps});
  Value lo = b.binary("add", b.broadcast_to(start, {steps}), b.binary("multiply", sv, b.convert(i, f64)));
  Value hi = b.binary("subtract", b.broadcast_to(end, {steps}), b.binary("multiply", sv, back));
  Value e = b.select(b.compare(Cmp::LT, i, b.constant_i(steps / 2, i.type)), lo, hi);
  return b.convert(b.binary("power", bv, e), t);
}

Value eye(Ctx& c, int64_t n, int64_t m) {
  Builder& b = c.b;
  if (n == 0 || m == 0) return b.constant(0, c.out());
  Type it{ElementType::kS64, {n, m}};
  Value diag = b.compare(Cmp::EQ, b.iota(it, 0), b.iota(it, 1));
  return b.select(diag, b.constant(1, c.out()), b.constant(0, c.out()));
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

// Only the functional overloads: an out= variant of a factory lacks the functional's dtype / layout /
// device arguments, which the aten layer's shape inference needs (see the report on out= factories).
const Rows rows = {
    {{"arange.start_step"}, [](Ctx& c) { return one(arange(c, 0, 2)); }, kBakeScalars},
    {{"arange.start"}, [](Ctx& c) { return one(arange(c, 0, SIZE_MAX)); }, kBakeScalars},
    {{"arange"}, [](Ctx& c) { return one(arange(c, SIZE_MAX, SIZE_MAX)); }, kBakeScalars},
    {{"linspace"}, [](Ctx& c) { return one(linspace(c)); }},
    {{"logspace"}, [](Ctx& c) { return one(logspace(c)); }},
    {{"eye"}, [](Ctx& c) { return one(eye(c, c.i(0), c.i(0))); }},
    {{"eye.m"}, [](Ctx& c) { return one(eye(c, c.i(0), c.i(1))); }},
    {{"tril_indices", "tril_indices.out"}, [](Ctx& c) { return one(tri_indices(c, true)); }},
    {{"triu_indices", "triu_indices.out"}, [](Ctx& c) { return one(tri_indices(c, false)); }},
};

}  // namespace
}  // namespace lowering
