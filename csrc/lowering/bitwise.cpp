// Integer and boolean ops: bit shifts (and the __lshift__/__rshift__ operators), gcd, lcm, logical_xor.
#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

Value logical_xor(Ctx& c) {
  Builder& b = c.b;
  Value x = b.broadcast_to(b.convert(c.t(0), ElementType::kPred), c.out_dims());
  Value y = b.broadcast_to(b.convert(c.t(1), ElementType::kPred), c.out_dims());
  return b.binary("xor", x, y);
}

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

const Rows rows = {
    {{"logical_xor", "logical_xor_", "logical_xor.out"}, [](Ctx& c) { return one(logical_xor(c)); }},
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
};

}  // namespace
}  // namespace lowering
