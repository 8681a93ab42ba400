// Attention rows: scaled_dot_product_attention as one fused program, forward and backward
// (aten::_scaled_dot_product_fused_attention_overrideable and its _backward, the ops torch calls for a
// PrivateUse1 device when _fused_sdp_choice answers SDPBackend::overrideable; see aten/ops.cpp).
//
// query [B, Hq, L, E], key [B, Hkv, S, E], value [B, Hkv, S, Ev]; Hq = G * Hkv (grouped-query attention:
// query head h reads key/value head h / G, as repeat_interleave does; Hkv == 1 is plain broadcasting).
// The work is laid out as [B, Hkv, G, L, S] so keys and values are never repeated in memory.
//
// Numerics follow the CPU's fused kernel (flash attention for CPU): half-precision inputs are computed in
// float32 (scores, softmax, both products) and rounded once; scores are scaled after the product; the
// additive mask (a boolean mask arrives as 0 / -inf, converted by torch) and the causal mask
// (key j visible to query i when j <= i, top-left aligned) both apply; a row whose keys are all masked
// (-inf everywhere) gives 0, not NaN, and logsumexp 0 there. A finite mask value such as finfo.min
// stays finite in float32, so such rows are uniform, as on the CPU.
//
// Dropout draws its keep-mask from the device generator (only when dropout_p > 0) and returns the
// generator state it used as philox_seed / philox_offset; the backward rebuilds the same mask from them.
#include <cmath>
#include <utility>

#include "kernels/kernels.h"
#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

struct Layout {
  int64_t B, Hq, Hkv, G, L, S, E, Ev;
  ElementType acc;
  double scale;
  Dims scores() const { return {B, Hkv, G, L, S}; }
};

// Shapes from query, key and value; `scale` is the optional float argument.
Layout layout(Ctx& c, const Value& qv, const Value& kv, const Value& vv, size_t scale) {
  if (qv.rank() != 4 || kv.rank() != 4 || vv.rank() != 4) throw hlo::Error("attention: 4-d query, key and value only");
  Layout a;
  a.B = qv.dims()[0], a.Hq = qv.dims()[1], a.L = qv.dims()[2], a.E = qv.dims()[3];
  a.Hkv = kv.dims()[1], a.S = kv.dims()[2], a.Ev = vv.dims()[3];
  if (kv.dims()[0] != a.B || vv.dims()[0] != a.B || vv.dims()[1] != a.Hkv || vv.dims()[2] != a.S || kv.dims()[3] != a.E ||
      a.Hkv == 0 || a.Hq % a.Hkv != 0)
    throw hlo::Error("attention: unsupported query/key/value shapes");
  a.G = a.Hq / a.Hkv;
  if (!pjrt::is_float(qv.elem())) throw hlo::Error("attention: floating-point inputs only");
  a.acc = accumulation_type(qv.elem());
  a.scale = c.has(scale) ? c.d(scale) : 1.0 / std::sqrt(static_cast<double>(a.E));
  return a;
}

// Key or value as repeat_kv gives them (Transformers' attention with a mask: each of H heads repeated R
// times in a row, [B, H, S, E] broadcast to [B, H, R, S, E] and reshaped to [B, H * R, S, E]): the heads
// before the repeat and R, else (x, 1). Query head h reads repeated head h / G, that is head h / (G * R)
// before the repeat, which is the grouping the rows compute with; XLA would write the repeat out in full
// (a static-cache decode step: each layer's whole key and value cache, R times).
std::pair<Value, int64_t> unrepeated(Builder& b, const Value& x) {
  const Value r = b.reshaped_from(x);
  const auto* src = r.id == x.id ? nullptr : b.broadcast_of(r);
  if (x.rank() != 4 || !src || r.rank() != 5) return {x, 1};
  const Dims &d = x.dims(), &rd = r.dims();
  if (rd[0] != d[0] || rd[1] * rd[2] != d[1] || rd[3] != d[2] || rd[4] != d[3]) return {x, 1};
  const Value& from = src->first;
  if (src->second == Dims{0, 1, 3, 4} && from.dims() == Dims{rd[0], rd[1], rd[3], rd[4]}) return {from, rd[2]};
  return {x, 1};
}

// query as [B, Hkv, G, L, E] in the accumulation type
Value grouped(Builder& b, const Value& x, const Layout& a, int64_t last) {
  return b.reshape(b.convert(x, a.acc), {a.B, a.Hkv, a.G, a.L, last});
}
Value ungrouped(Builder& b, const Value& x, const Layout& a, int64_t last) { return b.reshape(x, {a.B, a.Hq, a.L, last}); }

Value bcast_rows(Builder& b, const Value& r, const Layout& a) { return b.broadcast_in_dim(r, a.scores(), {0, 1, 2, 3}); }

// scale * q k^T + bias, causal positions -inf: [B, Hkv, G, L, S] in the accumulation type.
Value scores(Ctx& c, const Layout& a, const Value& q5, const Value& k, size_t bias, bool causal) {
  Builder& b = c.b;
  Value s = b.dot_general(q5, b.convert(k, a.acc), {0, 1}, {0, 1}, {4}, {3}, a.acc);
  s = b.binary("multiply", s, b.constant(a.scale, s.type));
  if (c.has(bias)) {
    Value m = c.t(bias);
    if (m.elem() == ElementType::kPred) throw hlo::Error("attention: boolean attn_bias (torch converts masks first)");
    m = b.broadcast_to(b.convert(m, a.acc), {a.B, a.Hq, a.L, a.S});
    s = b.binary("add", s, b.reshape(m, a.scores()));
  }
  if (causal) {
    Type it{ElementType::kS64, a.scores()};
    Value visible = b.compare(Cmp::LE, b.iota(it, 4), b.iota(it, 3));
    s = b.select(visible, s, b.constant(-INFINITY, s.type));
  }
  return s;
}

// softmax over keys and its logsumexp, rows of all -inf giving 0 (both). The backward recomputes this
// rather than using exp(s - logsumexp): with a finite mask as large as finfo(float32).min, the
// logsumexp rounds to the row maximum and loses the log of the row sum.
std::pair<Value, Value> softmax(Builder& b, const Value& s, const Layout& a) {
  Value m = reduce(b, s, {4}, "maximum", lowest(b, a.acc));
  Value m_safe = b.select(b.compare(Cmp::EQ, m, like(b, -INFINITY, m)), like(b, 0, m), m);  // all masked
  Value e = b.unary("exponential", b.binary("subtract", s, bcast_rows(b, m_safe, a)));
  Value sum = reduce_sum(b, e, {4});
  Value empty = b.compare(Cmp::EQ, sum, like(b, 0, sum));
  Value inv = b.select(empty, like(b, 0, sum), b.binary("divide", like(b, 1, sum), sum));
  Value p = b.binary("multiply", e, bcast_rows(b, inv, a));
  Value lse = b.select(empty, like(b, 0, sum), b.binary("add", m_safe, b.unary("log", sum)));
  return {p, lse};
}

// The dropout keep-mask for a generator state (ui64[2]); the same state gives the same mask.
Value keep_mask(Builder& b, const Value& state, const Layout& a, double p) {
  auto [next, bits] = b.rng_bit_generator(state, Type{ElementType::kU32, a.scores()});
  (void)next;
  Value u = unit_f32(b, bits);
  return b.compare(Cmp::LT, u, b.constant(1.0 - p, u.type));
}

// P with dropout applied: kept entries scaled by 1 / (1 - p), the rest 0.
Value dropped(Builder& b, const Value& p, const Value& keep, double dropout) {
  if (!keep.valid()) return p;
  double scale = dropout >= 1 ? 0.0 : 1.0 / (1.0 - dropout);
  return b.select(keep, b.binary("multiply", p, b.constant(scale, p.type)), b.constant(0, p.type));
}

// A 0-d s64 holding word i of the generator state (philox_seed: 0, philox_offset: 1).
Value state_word(Builder& b, const Value& state, int64_t i) {
  Value w = b.reshape(b.slice(state, {i}, {i + 1}, {1}), {});
  return b.bitcast_convert(w, Type{ElementType::kS64, {}});
}

// The host kernels' operands: the tensor arguments `tensors` in float32, params f32[2] = {scale, causal}
// (argument `causal`), and torch's attn_mask (argument `bias`, if given) in float32, broadcast only to
// rank 4 (sizes of 1 stay 1, keys full).
std::vector<Value> kernel_operands(Ctx& c, const Layout& a, std::initializer_list<Value> tensors, size_t causal,
                                   size_t bias) {
  Builder& b = c.b;
  constexpr ElementType f32 = ElementType::kF32;
  std::vector<Value> operands;
  for (const Value& t : tensors) operands.push_back(b.convert(t, f32));
  operands.push_back(const_float(b, {a.scale, c.i(causal) != 0 ? 1.0 : 0.0}, f32));
  if (!c.has(bias)) return operands;
  const Value& m = c.t(bias);
  if (m.elem() == ElementType::kPred) throw hlo::Error("attention: boolean attn_bias (torch converts masks first)");
  if (m.rank() > 4) throw hlo::Error("attention: attn_bias of rank above 4");
  Dims dims(4 - m.rank(), 1);  // leading 1s, then its own sizes
  for (int64_t d : m.dims()) dims.push_back(d);
  const Dims full{a.B, a.Hq, a.L, a.S};
  Dims target = dims;
  target[3] = a.S;
  for (int i = 0; i < 3; ++i)
    if (dims[i] != 1 && dims[i] != full[i]) throw hlo::Error("attention: attn_bias does not broadcast to the scores");
  operands.push_back(b.broadcast_to(b.reshape(b.convert(m, f32), dims), target));
  return operands;
}

// Without dropout on XLA:CPU, at 16 query rows or more: the host kernel (kernels/attention.cpp: both
// products and the softmax between them, per block of query rows; XLA:CPU ran the softmax as separate
// passes over the scores and each head's small products apart). The bias goes in as torch gives it,
// broadcast only to rank 4. A decoding step's query row keeps the lowering, whose small softmax XLA fuses
// well (a custom call made the tiny Llama's compiled decode at batch 8 30-60 us slower).
V forward_kernel(Ctx& c, const Layout& a, const Value& k, const Value& v) {
  Builder& b = c.b;
  constexpr ElementType f32 = ElementType::kF32;
  auto r = b.custom_call(kernels::kAttention, kernel_operands(c, a, {c.t(0), k, v}, 5, 3),
                         {Type{f32, {a.B, a.Hq, a.L, a.Ev}}, Type{f32, {a.B, a.Hq, a.L}}});
  Value zero = b.constant_i(0, Type{ElementType::kS64, {}});
  return V{b.convert(r[0], a.acc), r[1], Value{}, Value{}, zero, zero, Value{}};
}

// _scaled_dot_product_fused_attention_overrideable(q, k, v, attn_bias?, dropout_p, is_causal,
// return_debug_mask, *, scale?) -> (output, logsumexp, cum_seq_q, cum_seq_k, [max_q, max_k], philox_seed,
// philox_offset, debug_attn_mask)
V forward(Ctx& c) {
  Builder& b = c.b;
  const double dropout = c.d(4);
  // key and value repeated by repeat_kv are read before the repeat, when both are, by the same factor, and
  // without dropout (the backward, which sees the repeated key, draws the keep-mask in its own layout)
  auto [key, rk] = unrepeated(b, c.t(1));
  auto [value, rv] = unrepeated(b, c.t(2));
  if (rk != rv || dropout != 0) key = c.t(1), value = c.t(2);
  const Layout a = layout(c, c.t(0), key, value, 7);
  if (dropout == 0 && a.acc == ElementType::kF32 && a.L >= 16 && host_kernels())
    return forward_kernel(c, a, key, value);
  Value q5 = grouped(b, c.t(0), a, a.E);
  Value s = scores(c, a, q5, key, 3, c.i(5) != 0);
  auto [p, lse] = softmax(b, s, a);

  Value keep, seed = b.constant_i(0, Type{ElementType::kS64, {}}), offset = seed;
  if (dropout > 0) {
    Value state = c.random_state();
    if (!state.valid()) throw hlo::Error("attention: dropout needs the device generator here");
    keep = keep_mask(b, state, a, dropout);
    seed = state_word(b, state, 0);
    offset = state_word(b, state, 1);
  }
  Value v = b.convert(value, a.acc);
  Value out = b.dot_general(dropped(b, p, keep, dropout), v, {0, 1}, {0, 1}, {4}, {2}, a.acc);
  return V{ungrouped(b, out, a, a.Ev), b.reshape(lse, {a.B, a.Hq, a.L}), Value{}, Value{}, seed, offset, Value{}};
}

// Sums a [B, Hq, L, S] gradient down to the (broadcast) shape of the bias.
Value reduce_to(Builder& b, Value g, const Dims& target) {
  const int64_t lead = g.rank() - static_cast<int64_t>(target.size());
  Dims dims;
  for (int64_t i = 0; i < g.rank(); ++i)
    if (i < lead || (target[i - lead] == 1 && g.dims()[i] != 1)) dims.push_back(i);
  if (!dims.empty()) g = reduce_sum(b, g, dims);
  return b.reshape(g, target);
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, q, k, v, attn_bias, grad_input_mask,
// out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset,
// *, scale?) -> (grad_query, grad_key, grad_value, grad_attn_bias). Recomputes P (out and logsumexp unused).
// Without dropout or a bias gradient (asked for: aten/shape_rules.cpp leaves the others undefined) on
// XLA:CPU, at 16 query rows or more: the gradients by the host kernel (per key/value head: the
// probabilities recomputed block by block, dq, and dk, dv summed there).
V backward_kernel(Ctx& c, const Layout& a) {
  Builder& b = c.b;
  constexpr ElementType f32 = ElementType::kF32;
  auto r = b.custom_call(kernels::kAttentionBackward, kernel_operands(c, a, {c.t(1), c.t(2), c.t(3), c.t(0)}, 13, 4),
                         {Type{f32, {a.B, a.Hq, a.L, a.E}}, Type{f32, {a.B, a.Hkv, a.S, a.E}},
                          Type{f32, {a.B, a.Hkv, a.S, a.Ev}}});
  V grads(4);
  for (size_t i = 0; i < 3; ++i)
    if (c.wanted(i)) grads[i] = b.convert(r[i], a.acc);
  return grads;
}

V backward(Ctx& c) {
  Builder& b = c.b;
  const Layout a = layout(c, c.t(1), c.t(2), c.t(3), 16);
  const double dropout = c.d(12);
  if (dropout == 0 && !c.wanted(3) && a.acc == ElementType::kF32 && a.L >= 16 && host_kernels())
    return backward_kernel(c, a);
  Value q5 = grouped(b, c.t(1), a, a.E);
  Value k = b.convert(c.t(2), a.acc), v = b.convert(c.t(3), a.acc);
  Value s = scores(c, a, q5, k, 4, c.i(13) != 0);
  Value p = softmax(b, s, a).first;

  Value keep;
  if (dropout > 0) {
    auto word = [&](size_t k) { return b.reshape(b.bitcast_convert(b.convert(c.t(k), ElementType::kS64), Type{ElementType::kU64, {}}), {1}); };
    keep = keep_mask(b, b.concatenate({word(14), word(15)}, 0), a, dropout);
  }
  Value go = grouped(b, c.t(0), a, a.Ev);
  V grads(4);
  if (c.wanted(2)) {
    Value dv = b.dot_general(dropped(b, p, keep, dropout), go, {0, 1}, {0, 1}, {2, 3}, {2, 3}, a.acc);
    grads[2] = dv;  // [B, Hkv, S, Ev]
  }
  if (c.wanted(0) || c.wanted(1) || c.wanted(3)) {
    Value dp = dropped(b, b.dot_general(go, v, {0, 1}, {0, 1}, {4}, {3}, a.acc), keep, dropout);
    Value d = reduce_sum(b, b.binary("multiply", dp, p), {4});
    Value ds = b.binary("multiply", p, b.binary("subtract", dp, bcast_rows(b, d, a)));  // d loss / d scores
    Value scale = b.constant(a.scale, Type{a.acc, {}});
    if (c.wanted(0)) {
      Value dq = b.dot_general(ds, k, {0, 1}, {0, 1}, {4}, {2}, a.acc);
      grads[0] = ungrouped(b, b.binary("multiply", dq, b.broadcast_to(scale, dq.dims())), a, a.E);
    }
    if (c.wanted(1)) {
      Value dk = b.dot_general(ds, q5, {0, 1}, {0, 1}, {2, 3}, {2, 3}, a.acc);
      grads[1] = b.binary("multiply", dk, b.broadcast_to(scale, dk.dims()));
    }
    if (c.wanted(3)) grads[3] = reduce_to(b, ungrouped(b, ds, a, a.S), c.out_dims(3));
  }
  return grads;
}

const Rows rows = {
    {{"_scaled_dot_product_fused_attention_overrideable"}, forward},
    {{"_scaled_dot_product_fused_attention_overrideable_backward"}, backward},
};

}  // namespace
}  // namespace lowering
