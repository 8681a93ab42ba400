// Matrix products (mm, bmm, addmm/baddbmm/addbmm, mv/addmv, dot/vdot, outer/addr) and the matrix
// exponential (a polynomial of products). Half-precision products accumulate in float32 (the dot's result
// type), then round once.
#include <cmath>

#include "kernels/kernels.h"
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

// x[M, K] times y[K, N] where y is the transpose of a [N, K] tensor (nn.Linear's weight) at a few rows
// (decoding): XLA:CPU's dot runs that form 10-20x slower than with y dense (K = N = 1024, 4 rows: 2.4 ms
// against 0.11 ms), so on XLA:CPU it goes to the host kernel of grouped rows (one group), which reads the
// weight in its storage order at about the dense form's speed: up to 64 rows, and up to 256 for weights of
// 1M elements or more (measured: K = N = 1024 at 128 and 256 rows 2.4x and 1.3x faster than the dot; at
// K = N = 512 and 128 rows a tie). Small weights go there too at up to 8 rows (a decode step's batch): the
// tiny Llama of bench/modes.py (64 wide, K * N 2K-16K) decodes at batch 8 in 350 us a step instead of 410,
// while at 32 rows and more XLA's dot of such weights is the faster. Weights of under 1K elements and one
// row (a vector product, which XLA does well) keep the dot. In the accumulation type, as dot().
bool transposed_weight_rows(Ctx& c, size_t a, size_t m) {
  const Value& x = c.t(a);
  const Value& y = c.t(m);
  const int64_t rows = x.dims()[0], k = x.dims()[1], n = y.dims()[1];
  const ElementType t = c.out_type();
  const bool types = (t == ElementType::kF32 || t == ElementType::kBF16) && x.elem() == t && y.elem() == t;
  const int64_t size = k * n;
  const bool fits = rows <= 8 ? size >= 1024 : rows <= 64 ? size >= 65536 : rows <= 256 && size >= (int64_t{1} << 20);
  return types && c.arg(m).layout == Dims{1, 0} && rows >= 2 && fits && host_kernels();
}

// The same product at more rows (over 64: the transpose reads and writes the whole weight, which a few
// rows do not pay for; one row, a vector product, is what XLA's dot of this form does well): on XLA:CPU
// the host kernel transposes the weight and the product is the dense form, which XLA's dot runs 1.4-2.8x
// faster than the transposed one once the weight is large ([512, 1024] x [1024, 1024]^T 8.1 -> 4.9 ms;
// [512, 1024] x [4096, 1024]^T 41.9 -> 25.6 ms). Below 256K weight elements the two are within noise, and
// the dot stays as it is. (Measured with XLA's dot; float32 products now go to the host kernel of products,
// helpers.cpp's host_product, which reads the dense form's panels in place or packs them, and would pack
// the transposed form itself: whether this transpose still pays there is not measured.)
bool transposed_weight(Ctx& c, size_t a, size_t m) {
  const Value& y = c.t(m);
  return c.arg(m).layout == Dims{1, 0} && c.t(a).dims()[0] > 64 && y.dims()[0] * y.dims()[1] >= (int64_t{1} << 18) &&
         host_kernels();
}

Value mm(Ctx& c, size_t a, size_t m) {
  if (transposed_weight_rows(c, a, m)) {
    Builder& b = c.b;
    Value x = c.t(a), y = c.t(m);
    const int64_t rows = x.dims()[0], k = x.dims()[1], n = y.dims()[1];
    Value w = b.reshape(b.transpose(y, {1, 0}), {1, n, k});  // the weight as stored: the transposes cancel
    Value ends = b.constant_i(rows, Type{ElementType::kS32, {1}});
    Value out = b.custom_call(kernels::kRaggedRowsNt, {x, w, ends}, {Type{ElementType::kF32, {rows, n}}})[0];
    return b.convert(out, accumulation_type(c.out_type()));
  }
  if (transposed_weight(c, a, m)) {
    return dot(c.b, c.t(a), swap_last_two(c.b, c.b.transpose(c.t(m), {1, 0})), {}, {}, {1}, {0}, c.out_type());
  }
  return dot(c.b, c.t(a), c.t(m), {}, {}, {1}, {0}, c.out_type());
}
// The batched product; a transposed right factor ([G, K, N] viewing a [G, N, K] tensor: attention's q k^T
// written out, as in eager attention code) is transposed by the host kernel first on XLA:CPU where the
// rows pay for it, for the reason of transposed_weight.
Value bmm(Ctx& c, size_t a, size_t m) {
  const Value &x = c.t(a), &y = c.t(m);
  if (c.arg(m).layout == Dims{0, 2, 1} && x.dims()[1] >= 16 && y.type.numel() >= 65536 && host_kernels())
    return dot(c.b, x, swap_last_two(c.b, c.b.transpose(y, {0, 2, 1})), {0}, {0}, {2}, {1}, c.out_type());
  return dot(c.b, x, y, {0}, {0}, {2}, {1}, c.out_type());
}

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

// linalg_matrix_exp(self [..., n, n]): scaling and squaring. Each matrix is scaled by 2^-s so that its
// 1-norm is at most 1, exp of that from its Taylor polynomial of degree 18 (truncation below 1e-17),
// then squared s times. In float64 for every real input (rounded once at the end), so the result is as
// close to exact as float32 holds; the CPU's own float32 algorithm is the less accurate side.
Value matrix_exp(Ctx& c) {
  Builder& b = c.b;
  Value a = c.t(0);
  const Dims& d = a.dims();
  const int64_t n = d.back();
  if (pjrt::is_complex(a.elem())) throw hlo::Error("linalg_matrix_exp: complex inputs are not lowered");
  if (a.type.numel() == 0) return a;
  const int64_t batch = a.type.numel() / (n * n);
  constexpr ElementType f64 = ElementType::kF64;
  Value x = b.reshape(b.convert(a, f64), {batch, n, n});
  Value norm = reduce(b, reduce_sum(b, b.unary("abs", x), {1}), {1}, "maximum", b.scalar(0, f64));  // [batch]
  // s = ceil(log2(norm)) in [0, 1023]; a non-finite norm gives 0 (the result is non-finite anyway)
  Value s = b.unary("ceil", b.binary("divide", b.unary("log", norm), b.constant(std::log(2.0), norm.type)));
  Value finite = is_finite(b, s);
  s = b.clamp(b.constant(0, s.type), b.select(finite, s, b.constant(0, s.type)), b.constant(1023, s.type));
  Value scale = b.binary("power", b.constant(0.5, s.type), s);
  x = b.binary("multiply", x, b.broadcast_in_dim(scale, {batch, n, n}, {0}));
  Type it{ElementType::kS64, {batch, n, n}};
  Value eye = b.convert(b.compare(Cmp::EQ, b.iota(it, 1), b.iota(it, 2)), f64);
  auto product = [&](Builder& bb, Value p, Value q) { return bb.dot_general(p, q, {0}, {0}, {2}, {1}, f64); };
  Value t = eye;  // Horner: I + x/1 (I + x/2 (I + ... (I + x/18)))
  for (int k = 18; k >= 1; --k)
    t = b.binary("add", eye, b.binary("divide", product(b, x, t), b.constant(k, Type{f64, {batch, n, n}})));
  Value steps = b.convert(s, ElementType::kS64);
  Value most = reduce(b, steps, {0}, "maximum", b.scalar_i(0, ElementType::kS64));
  std::vector<Value> done = b.while_loop(
      {b.scalar_i(0, ElementType::kS64), t, steps, most},
      [&](Builder& bb, const std::vector<Value>& q) { return std::vector<Value>{bb.compare(Cmp::LT, q[0], q[3])}; },
      [&](Builder& bb, const std::vector<Value>& q) {
        Value more = bb.compare(Cmp::LT, bb.broadcast_in_dim(q[0], {batch}, {}), q[2]);
        Value sq = bb.select(bb.broadcast_in_dim(more, {batch, n, n}, {0}), product(bb, q[1], q[1]), q[1]);
        return std::vector<Value>{bb.binary("add", q[0], bb.scalar_i(1, ElementType::kS64)), sq, q[2], q[3]};
      });
  return b.reshape(b.convert(done[1], a.elem()), d);
}

const Rows rows = {
    {{"linalg_matrix_exp"}, [](Ctx& c) { return one(matrix_exp(c)); }},
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
