// Matrix products (mm, bmm, addmm/baddbmm/addbmm, mv/addmv, dot/vdot, outer/addr). Half-precision
// products accumulate in float32 (the dot's result type), then round once.
#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

// The product in the accumulation type (f32 for half types); rows round once, at the end.
Value dot(Builder& b, Value x, Value y, const Dims& lb, const Dims& rb, const Dims& lc, const Dims& rc, ElementType out) {
  ElementType acc = accumulation_type(out);
  x = b.convert(x, out);
  y = b.convert(y, out);
  return b.dot_general(x, y, lb, rb, lc, rc, acc);
}

Value mm(Ctx& c, size_t a, size_t m) { return dot(c.b, c.t(a), c.t(m), {}, {}, {1}, {0}, c.out_type()); }
Value bmm(Ctx& c, size_t a, size_t m) { return dot(c.b, c.t(a), c.t(m), {0}, {0}, {2}, {1}, c.out_type()); }

// beta * self + alpha * product; beta == 0 ignores self entirely (NaN included), as torch does.
// Computed in the product's (accumulation) type.
Value scaled_sum(Ctx& c, Value product, size_t self, size_t beta, size_t alpha) {
  ElementType t = product.elem();
  Value p = c.b.binary("multiply", product, operand(c, alpha, t, product.dims()));
  Value s = operand(c, self, t, product.dims());
  Value bv = operand(c, beta, t, product.dims());
  Value term = c.b.select(c.b.compare(Cmp::EQ, bv, like(c.b, 0, bv)), like(c.b, 0, s), c.b.binary("multiply", bv, s));
  return c.b.binary("add", term, p);
}

// beta * self + alpha * sum_i batch1[i] @ batch2[i]: one contraction over the batches and k, so the sum
// accumulates once (f32 for half types) and rounds once. The CPU's addmm_ per batch rounds after each
// batch, which puts it further from the exact sum than this (PyTorch's own tests allow its CPU result
// 1.3e-5 from the NumPy reference in float32).
Value addbmm(Ctx& c) {
  Value p = dot(c.b, c.t(1), c.t(2), {}, {}, {0, 2}, {0, 1}, c.out_type());
  return scaled_sum(c, p, 0, 3, 4);
}

const Rows rows = {
    {{"mm", "mm.out"}, [](Ctx& c) { return one(mm(c, 0, 1)); }},
    {{"bmm", "bmm.out"}, [](Ctx& c) { return one(bmm(c, 0, 1)); }},
    {{"addmm", "addmm_", "addmm.out"}, [](Ctx& c) { return one(scaled_sum(c, mm(c, 1, 2), 0, 3, 4)); }},
    {{"baddbmm", "baddbmm_", "baddbmm.out"}, [](Ctx& c) { return one(scaled_sum(c, bmm(c, 1, 2), 0, 3, 4)); }},
    {{"addbmm", "addbmm_", "addbmm.out"}, [](Ctx& c) { return one(addbmm(c)); }},
    {{"mv", "mv.out"}, [](Ctx& c) { return one(dot(c.b, c.t(0), c.t(1), {}, {}, {1}, {0}, c.out_type())); }},
    {{"addmv", "addmv_", "addmv.out"}, [](Ctx& c) {
       return one(scaled_sum(c, dot(c.b, c.t(1), c.t(2), {}, {}, {1}, {0}, c.out_type()), 0, 3, 4));
     }},
    {{"dot", "dot.out"}, [](Ctx& c) { return one(dot(c.b, c.t(0), c.t(1), {}, {}, {0}, {0}, c.out_type())); }},
    {{"vdot", "vdot.out"}, [](Ctx& c) {
       Value x = c.t(0);
       if (pjrt::is_complex(x.elem())) {
         ElementType part = pjrt::real_type(x.elem());
         x = c.b.complex(c.b.unary_to("real", x, part), c.b.unary("negate", c.b.unary_to("imag", x, part)));
       }
       return one(dot(c.b, x, c.t(1), {}, {}, {0}, {0}, c.out_type()));
     }},
    {{"outer"}, [](Ctx& c) { return one(dot(c.b, c.t(0), c.t(1), {}, {}, {}, {}, c.out_type())); }},
    {{"addr", "addr_", "addr.out"}, [](Ctx& c) {
       return one(scaled_sum(c, dot(c.b, c.t(1), c.t(2), {}, {}, {}, {}, c.out_type()), 0, 3, 4));
     }},
};

}  // namespace
}  // namespace lowering
