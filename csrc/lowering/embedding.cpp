// Embedding rows: embedding, embedding_renorm, embedding_bag, and their backwards.
#include <cmath>
#include <utility>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }
Value maxv(Builder& b, Value x, Value y) { return nan_max(b, x, y); }
// `v` (whose dims are the `kept` dims of `dims`) broadcast to `dims`.
Value bcast(Builder& b, Value v, const Dims& dims, const Dims& kept) { return b.broadcast_in_dim(v, dims, kept); }
// Tensor argument k converted to `t`.
Value arg_as(Ctx& c, size_t k, ElementType t) { return c.b.convert(c.t(k), t); }

// embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse): rows of weight.
V embedding(Ctx& c) {
  Builder& b = c.b;
  Value w = c.t(0);
  if (w.rank() != 2) throw hlo::Error("embedding: weight must be 2-d");
  int64_t k = c.t(1).type.numel(), d = w.dims()[1];
  IndexCheck how;
  how.wrap = false, how.message = "index out of range in self";
  Value idx = b.reshape(checked_index(b, c.t(1), w.dims()[0], how), {k, 1});
  hlo::GatherDims gd{{1}, {0}, {0}, 1};
  Value rows = b.gather(w, idx, gd, {1, d}, {k, d});
  return one(b.reshape(rows, c.out_dims()));
}

// embedding_renorm(weight, indices, max_norm, norm_type): every row that indices name and whose p-norm
// exceeds max_norm is scaled by max_norm / (norm + 1e-7). The norm is computed in double and rounded to
// the weight's type, the scale in double from it and rounded, as torch's CPU kernel uses them.
V embedding_renorm(Ctx& c) {
  Builder& b = c.b;
  Value w = c.t(0);
  if (w.rank() != 2 || !pjrt::is_float(w.elem())) throw hlo::Error("embedding_renorm: expects a 2-d floating-point weight");
  const int64_t n = w.dims()[0], d = w.dims()[1], k = c.t(1).type.numel();
  const double max_norm = c.d(2), p = c.d(3);
  if (!(p > 0)) throw hlo::Error("embedding_renorm: norm_type must be positive");
  const ElementType f64 = ElementType::kF64;
  if (n == 0 || d == 0 || k == 0) return one(w);
  Value a = b.unary("abs", b.convert(w, f64));
  Value norm;
  if (std::isinf(p)) {
    norm = reduce(b, a, {1}, "maximum", b.scalar(0, f64));
  } else if (p == 2) {
    norm = b.unary("sqrt", reduce_sum(b, mul(b, a, a), {1}));
  } else {
    Value s = reduce_sum(b, b.binary("power", a, b.constant(p, a.type)), {1});
    norm = b.binary("power", s, b.constant(1 / p, s.type));
  }
  norm = b.convert(b.convert(norm, w.elem()), f64);
  Value idx = b.reshape(b.convert(c.t(1), ElementType::kS64), {k, 1});
  Value named = scatter_add_rows(b, b.constant(0, Type{f64, {n}}), idx, b.constant(1, Type{f64, {k}}));
  Value over = andv(b, b.compare(Cmp::GT, named, b.constant(0, named.type)), b.compare(Cmp::GT, norm, b.constant(max_norm, norm.type)));
  Value scale = div(b, b.constant(max_norm, norm.type), add(b, norm, b.constant(1e-7, norm.type)));
  scale = b.convert(b.select(over, scale, b.constant(1, scale.type)), compute_type(w.elem()));
  Value r = mul(b, b.convert(w, scale.elem()), bcast(b, scale, {n, d}, {0}));
  return one(b.select(bcast(b, over, {n, d}, {0}), r, b.convert(w, r.elem())));
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
V embedding_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(0).elem());
  int64_t k = c.t(1).type.numel(), nw = c.i(2), pad = c.i(3);
  int64_t d = c.out_dims().back();
  if (k == 0 || d == 0) return one(b.constant(0, Type{t, c.out_dims()}));
  Value flat = b.reshape(b.convert(c.t(1), ElementType::kS64), {k});
  Value g = b.reshape(arg_as(c, 0, t), {k, d});
  Value keep = b.compare(Cmp::NE, flat, b.constant_i(pad, flat.type));
  g = b.select(bcast(b, keep, g.dims(), {0}), g, like(b, 0, g));
  Value idx = b.reshape(flat, {k, 1});
  Value res = scatter_add_rows(b, b.constant(0, Type{t, {nw, d}}), idx, g);
  if (c.i(4)) {  // scale_grad_by_freq: every contribution to a row is divided by that row's count
    Value counts = scatter_add_rows(b, b.constant(0, Type{t, {nw}}), idx, b.constant(1, Type{t, {k}}));
    counts = maxv(b, counts, like(b, 1, counts));
    res = div(b, res, bcast(b, counts, res.dims(), {0}));
  }
  return one(res);
}

// The bag of each of n positions for bag offsets off (s64 [m]): how many offsets are <= j, minus one.
Value bag_of_positions(Builder& b, Value off, int64_t n) {
  const ElementType s64 = ElementType::kS64;
  const int64_t m = off.dims()[0];
  if (m == 0 || n == 0) return b.constant_i(-1, Type{s64, {n}});
  Value pos = b.iota(Type{s64, {n, m}}, 0);
  Value ge = b.convert(b.compare(Cmp::GE, pos, bcast(b, off, {n, m}, {1})), s64);
  return sub(b, reduce_sum(b, ge, {1}), b.constant_i(1, Type{s64, {n}}));
}

// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
//                include_last_offset, padding_idx) -> (output, offset2bag, bag_size, max_indices)
// Bag b holds the positions offsets[b] <= j < offsets[b + 1] (the last bag runs to the end, or ends at the
// last offset with include_last_offset); entries equal to padding_idx (>= 0) take no part. Sum (times
// per_sample_weights), mean over the counted entries, or max (the first maximal entry's row in
// max_indices); empty bags give 0. Static shapes: rows are scattered into their bags.
V embedding_bag(Ctx& c) {
  Builder& b = c.b;
  const ElementType s64 = ElementType::kS64;
  Value w = c.t(0);
  if (w.rank() != 2 || c.t(1).rank() != 1 || c.t(2).rank() != 1)
    throw hlo::Error("_embedding_bag: expects 2-d weight and 1-d indices and offsets");
  const int64_t n = c.t(1).dims()[0], d = w.dims()[1];
  const int64_t bags = c.out_dims(0)[0], mode = c.i(4), pad = c.i(8);
  const ElementType t = compute_type(w.elem());
  IndexCheck how;
  how.wrap = false, how.index_error = false;
  how.message = "Index {position} of input takes value {value} which is not in the valid range [0, " +
                std::to_string(w.dims()[0]) + ")";
  Value idx = checked_index(b, c.t(1), w.dims()[0], how);
  Value bag = bag_of_positions(b, b.convert(c.t(2), s64), n);
  Value valid = andv(b, b.compare(Cmp::GE, bag, b.constant_i(0, bag.type)), b.compare(Cmp::LT, bag, b.constant_i(bags, bag.type)));
  if (pad >= 0) valid = andv(b, valid, b.compare(Cmp::NE, idx, b.constant_i(pad, idx.type)));
  Value slot = b.reshape(b.select(valid, bag, b.constant_i(0, bag.type)), {n, 1});  // invalid ones add nothing
  Value counts = scatter_add_rows(b, b.constant_i(0, Type{s64, {bags}}), slot, b.convert(valid, s64));
  Value rows = b.convert(b.gather(w, b.reshape(idx, {n, 1}), hlo::GatherDims{{1}, {0}, {0}, 1}, {1, d}, {n, d}), t);
  Value valid_nd = bcast(b, valid, {n, d}, {0});
  V out(4);
  if (mode == 2) {
    Value lo = b.constant(-INFINITY, Type{t, {n, d}});
    hlo::ScatterDims sd{{1}, {0}, {0}, 1};
    Value mx = b.scatter(b.constant(-INFINITY, Type{t, {bags, d}}), slot, b.select(valid_nd, rows, lo), sd,
                         [](Builder& bb, const V& a) { return V{maxv(bb, a[0], a[1])}; });
    Value empty = bcast(b, b.compare(Cmp::EQ, counts, b.constant_i(0, counts.type)), {bags, d}, {0});
    out[0] = b.select(empty, b.constant(0, mx.type), mx);
    if (c.wanted(3)) {
      // the first position whose row attains its bag's maximum, then that position's index
      Value at = b.gather(mx, slot, hlo::GatherDims{{1}, {0}, {0}, 1}, {1, d}, {n, d});
      Value hit = andv(b, valid_nd, orv(b, b.compare(Cmp::EQ, rows, at), andv(b, isnan(b, rows), isnan(b, at))));
      Value pos = b.iota(Type{s64, {n, d}}, 0), none = b.constant_i(n, Type{s64, {n, d}});
      Value first = b.scatter(b.constant_i(n, Type{s64, {bags, d}}), slot, b.select(hit, pos, none), sd,
                              [](Builder& bb, const V& a) { return V{bb.binary("minimum", a[0], a[1])}; });
      Value idx_ext = b.concatenate({idx, b.constant_i(0, Type{s64, {1}})}, 0);
      Value chosen = b.gather(idx_ext, b.reshape(first, {bags, d, 1}), hlo::GatherDims{{}, {0}, {0}, 2}, {1}, {bags, d});
      out[3] = chosen;
    }
  } else {
    if (c.has(6)) rows = mul(b, rows, bcast(b, b.convert(c.t(6), t), {n, d}, {0}));
    Value sum = scatter_add_rows(b, b.constant(0, Type{t, {bags, d}}), slot, b.select(valid_nd, rows, b.constant(0, rows.type)));
    if (mode == 1) {
      Value cnt = bcast(b, b.convert(counts, t), {bags, d}, {0});
      Value empty = b.compare(Cmp::EQ, cnt, b.constant(0, cnt.type));
      sum = b.select(empty, b.constant(0, sum.type), div(b, sum, b.select(empty, b.constant(1, cnt.type), cnt)));
    }
    out[0] = sum;
    if (c.wanted(3)) out[3] = b.constant_i(0, c.out(3));
  }
  if (c.wanted(1)) out[1] = c.out_dims(1) == Dims{n} ? bag : b.constant_i(0, c.out(1));
  if (c.wanted(2)) {  // one entry per offset (with include_last_offset the last is past the bags)
    const int64_t len = c.out_dims(2)[0];
    out[2] = len == bags ? counts : b.pad(counts, b.scalar_i(0, s64), {0}, {len - bags}, {0});
  }
  return out;
}

// The bag of each of n positions as embedding_bag's backwards read it: offset2bag when it has one per
// position, else (the CPU's fast path for sums leaves it empty) from the offsets; and whether the
// position is in one of the `bags` bags.
std::pair<Value, Value> bags_of(Builder& b, Value offset2bag, Value offsets, int64_t n, int64_t bags) {
  const ElementType s64 = ElementType::kS64;
  Value bag = offset2bag.type.numel() == n ? b.reshape(b.convert(offset2bag, s64), {n})
                                           : bag_of_positions(b, b.convert(offsets, s64), n);
  Value in = andv(b, b.compare(Cmp::GE, bag, b.constant_i(0, bag.type)), b.compare(Cmp::LT, bag, b.constant_i(bags, bag.type)));
  return {b.select(in, bag, b.constant_i(0, bag.type)), in};
}

// _embedding_bag_per_sample_weights_backward(grad [B, D], weight, indices, offsets, offset2bag, mode,
// padding_idx): sum mode only, as on the CPU; the gradient of position j's weight is grad[bag of j] .
// weight[indices[j]], 0 at padding_idx. An empty offset2bag (the CPU's fast path leaves it so) is made from
// the offsets.
Value embedding_bag_per_sample_weights_backward(Ctx& c) {
  Builder& b = c.b;
  const ElementType s64 = ElementType::kS64;
  if (c.i(5) != 0)
    throw hlo::Error("embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  Value g = c.t(0), w = c.t(1);
  const int64_t n = c.t(2).type.numel(), bags = g.dims()[0], d = g.dims()[1];
  if (n == 0 || bags == 0) return b.constant(0, c.out());
  const ElementType t = compute_type(c.out_type());
  Value idx = b.reshape(b.convert(c.t(2), s64), {n});
  Value bag = bags_of(b, c.t(4), c.t(3), n, bags).first;
  auto rows = [&](Value table, Value at) {
    return b.convert(b.gather(table, b.reshape(at, {n, 1}), hlo::GatherDims{{1}, {0}, {0}, 1}, {1, d}, {n, d}), t);
  };
  Value dot = reduce_sum(b, mul(b, rows(g, bag), rows(w, idx)), {1});
  const int64_t pad = c.i(6);
  if (pad >= 0) dot = b.select(b.compare(Cmp::EQ, idx, b.constant_i(pad, idx.type)), b.constant(0, dot.type), dot);
  return b.convert(dot, c.out_type());
}

// _embedding_bag_backward(grad [B, D], indices, offsets, offset2bag, bag_size, maximum_indices,
// num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights?, padding_idx): the weight's dense
// gradient. Sum: grad[bag of j] (times per_sample_weights[j]) into row indices[j]; mean: divided by the
// bag's size; max: grad[b, d] into row maximum_indices[b, d] of the bags with entries. Positions at
// padding_idx add nothing; scale_grad_by_freq (sum and mean) divides each row by how often indices name it.
Value embedding_bag_backward(Ctx& c) {
  Builder& b = c.b;
  const ElementType s64 = ElementType::kS64;
  if (c.i(9)) throw hlo::Error("_embedding_bag_backward: sparse gradients are not supported on tpu");
  Value g = c.t(0);
  const int64_t bags = g.dims()[0], d = g.dims()[1], n = c.t(1).type.numel(), nw = c.i(6), mode = c.i(8);
  const int64_t pad = c.i(11);
  const ElementType t = compute_type(g.elem());
  Value zeros = b.constant(0, Type{t, {nw, d}});
  if (n == 0 || bags == 0 || d == 0 || nw == 0) return b.convert(zeros, c.out_type());
  g = b.convert(g, t);
  Value idx = b.reshape(b.convert(c.t(1), s64), {n});
  Value res;
  if (mode == 2) {
    Value mi = b.convert(c.t(5), s64);
    mi = b.clamp(b.constant_i(0, mi.type), mi, b.constant_i(nw - 1, mi.type));
    Value size = b.convert(c.t(4), s64);  // one per offset: with include_last_offset one past the bags
    if (size.dims()[0] != bags) size = b.slice(size, {0}, {bags}, {1});
    Value has = bcast(b, b.compare(Cmp::GT, size, b.constant_i(0, size.type)), {bags, d}, {0});
    Value at = b.concatenate({b.reshape(mi, {bags, d, 1}), b.iota(Type{s64, {bags, d, 1}}, 1)}, 2);
    hlo::ScatterDims sd{{}, {0, 1}, {0, 1}, 2};
    res = b.scatter(zeros, at, b.select(has, g, like(b, 0, g)), sd, [](Builder& bb, const std::vector<Value>& a) {
      return std::vector<Value>{bb.binary("add", a[0], a[1])};
    });
  } else {
    auto [bag, valid] = bags_of(b, c.t(3), c.t(2), n, bags);
    if (pad >= 0) valid = andv(b, valid, b.compare(Cmp::NE, idx, b.constant_i(pad, idx.type)));
    Value rows = b.gather(g, b.reshape(bag, {n, 1}), hlo::GatherDims{{1}, {0}, {0}, 1}, {1, d}, {n, d});
    if (c.has(10)) rows = mul(b, rows, bcast(b, b.reshape(b.convert(c.t(10), t), {n}), {n, d}, {0}));
    if (mode == 1) {
      Value size = b.gather(b.convert(c.t(4), t), b.reshape(bag, {n, 1}), hlo::GatherDims{{}, {0}, {0}, 1}, {1}, {n});
      rows = div(b, rows, bcast(b, maxv(b, size, like(b, 1, size)), {n, d}, {0}));
    }
    rows = b.select(bcast(b, valid, {n, d}, {0}), rows, like(b, 0, rows));
    res = scatter_add_rows(b, zeros, b.reshape(idx, {n, 1}), rows);
    if (c.i(7)) {  // scale_grad_by_freq
      Value counts = scatter_add_rows(b, b.constant(0, Type{t, {nw}}), b.reshape(idx, {n, 1}), b.constant(1, Type{t, {n}}));
      res = div(b, res, bcast(b, maxv(b, counts, like(b, 1, counts)), {nw, d}, {0}));
    }
  }
  return b.convert(res, c.out_type());
}

const Rows rows = {
    {{"embedding", "embedding.out"}, embedding},
    {{"embedding_dense_backward", "embedding_dense_backward.out"}, embedding_backward},
    {{"embedding_renorm", "embedding_renorm_", "embedding_renorm.out"}, embedding_renorm},
    {{"_embedding_bag_forward_only", "_embedding_bag_forward_only.out"}, embedding_bag},
    {{"_embedding_bag", "_embedding_bag.out"}, embedding_bag},
    {{"_embedding_bag_backward"}, [](Ctx& c) { return one(embedding_bag_backward(c)); }},
    {{"_embedding_bag_per_sample_weights_backward", "_embedding_bag_per_sample_weights_backward.out"},
     [](Ctx& c) { return one(embedding_bag_per_sample_weights_backward(c)); }},
};

}  // namespace
}  // namespace lowering
