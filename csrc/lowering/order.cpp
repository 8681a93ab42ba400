// Order statistics and searches in sorted sequences: kthvalue, median, nanmedian, mode; searchsorted,
// bucketize, isin. NaN sorts last, as in torch's CPU kernels.
#include <utility>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

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

// Along the last dim of m [R, n]: the smallest of the most frequent values and its last index, from
// runs of equal values in stable sorted order (for rows too long to count pairwise).
V mode_sorted(Builder& b, Value m) {
  const int64_t R = m.dims()[0], n = m.dims()[1];
  auto [s, p] = sort_nan_last(b, m, 1);
  Value head = b.slice(s, {0, 0}, {R, n - 1}, {1, 1}), tail = b.slice(s, {0, 1}, {R, n}, {1, 1});
  Value differ = b.compare(Cmp::NE, head, tail);  // 0 and -0 are one run, as on the CPU; NaN never equal
  Value one = b.constant_i(1, Type{ElementType::kPred, {R, 1}});
  Value starts = b.concatenate({one, differ}, 1), ends = b.concatenate({differ, one}, 1);
  Value iota = b.iota(Type{ElementType::kS64, {R, n}}, 1), zero = b.constant_i(0, iota.type);
  Value first = b.select(starts, iota, zero);  // -> the start of each position's run: a prefix maximum
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Value before = b.slice(b.pad(first, b.scalar_i(0, ElementType::kS64), {0, shift}, {0, 0}, {0, 0}), {0, 0},
                           {R, n}, {1, 1});
    first = b.binary("maximum", first, before);
  }
  Value len = b.select(ends, b.binary("add", b.binary("subtract", iota, first), b.constant_i(1, iota.type)), zero);
  Value maxf = reduce(b, len, {1}, "maximum", b.scalar_i(0, ElementType::kS64));
  Value best = b.compare(Cmp::EQ, len, b.broadcast_in_dim(maxf, {R, n}, {0}));
  Value pos = reduce(b, b.select(best, iota, b.constant_i(n, iota.type)), {1}, "minimum", b.scalar_i(n, ElementType::kS64));
  return V{pick(b, s, 1, pos), pick(b, p, 1, pos)};
}

// mode(self, dim, keepdim) -> (values, indices): the smallest of the most frequent values and the last
// index holding it (torch's CPU kernel on small rows); pairwise counting for rows up to 2048 long, sorted
// runs beyond.
V mode(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() == 0) return V{x, b.constant_i(0, c.out(1))};
  int64_t dim = wrap_dim(c.i(1), x.rank());
  const int64_t n = x.dims()[dim];
  if (n == 0) throw hlo::Error("mode: unsupported row length");
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
  if (n > 2048) {
    V r = mode_sorted(b, m);
    return V{b.reshape(r[0], c.out_dims(0)), b.reshape(r[1], c.out_dims(1))};
  }
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

const Rows rows = {
    {{"kthvalue", "kthvalue.values"}, kthvalue},
    {{"median"}, [](Ctx& c) { return median_dim(c, false, false); }},
    {{"median.dim", "median.dim_values"}, [](Ctx& c) { return median_dim(c, false, true); }},
    {{"nanmedian"}, [](Ctx& c) { return median_dim(c, true, false); }},
    {{"nanmedian.dim", "nanmedian.dim_values"}, [](Ctx& c) { return median_dim(c, true, true); }},
    {{"searchsorted.Tensor", "searchsorted.Tensor_out"}, [](Ctx& c) { return one(searchsorted(c)); }},
    {{"searchsorted.Scalar", "searchsorted.Scalar_out"}, [](Ctx& c) { return one(searchsorted(c)); }},
    {{"bucketize.Tensor", "bucketize.Tensor_out"}, [](Ctx& c) { return one(bucketize(c)); }},
    {{"bucketize.Scalar", "bucketize.Scalar_out"}, [](Ctx& c) { return one(bucketize(c)); }},
    {{"isin.Tensor_Tensor", "isin.Tensor_Tensor_out"}, [](Ctx& c) { return one(isin(c)); }},
    {{"isin.Tensor_Scalar", "isin.Tensor_Scalar_out"}, [](Ctx& c) { return one(isin(c)); }},
    {{"isin.Scalar_Tensor", "isin.Scalar_Tensor_out"}, [](Ctx& c) { return one(isin(c)); }},
    {{"mode", "mode.values"}, mode},
};

}  // namespace
}  // namespace lowering
