// Norms, distances and vector products: norm (all overloads), renorm, cdist and pdist with their backwards,
// linalg_cross. p is a program constant (it decides the program); NaN is propagated explicitly where a
// maximum could drop it.
#include <cmath>
#include <utility>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

// The p-norm of |x| over dims (x already real, in the accumulation type).
Value pnorm(Builder& b, Value a, const Dims& dims, double p) {
  if (std::isinf(p)) {
    Value r = p > 0 ? reduce(b, a, dims, "maximum", b.scalar(-INFINITY, a.elem()))
                    : reduce(b, a, dims, "minimum", b.scalar(INFINITY, a.elem()));
    Value any_nan = reduce(b, isnan(b, a), dims, "or", b.scalar(0, ElementType::kPred));
    return b.select(any_nan, b.constant(NAN, r.type), r);  // XLA's maximum may drop NaN
  }
  if (p == 0) return reduce_sum(b, b.convert(b.compare(Cmp::NE, a, like(b, 0, a)), a.elem()), dims);
  if (p == 1) return reduce_sum(b, a, dims);
  if (p == 2) return b.unary("sqrt", reduce_sum(b, mul(b, a, a), dims));
  Value s = reduce_sum(b, b.binary("power", a, like(b, p, a)), dims);
  return b.binary("power", s, like(b, 1.0 / p, s));
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
  Dims dims = dims_k == SIZE_MAX ? iota_dims(0, a.rank()) : reduction_dims(c, dims_k, a.rank());
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
  Value mn = like(b, maxnorm, n);
  Value f = b.select(b.compare(Cmp::GT, n, mn), div(b, mn, add(b, n, like(b, 1e-7, n))), like(b, 1, n));
  f = b.convert(f, x.elem());
  return mul(b, x, bcast_kept(b, f, x.dims(), dims));
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

// `batch` followed by `tail`.
Dims with_batch(const Dims& batch, std::initializer_list<int64_t> tail) {
  Dims d = batch;
  d.insert(d.end(), tail);
  return d;
}

// _cdist_forward(x1 [.., P, M], x2 [.., R, M], p, compute_mode): p == 2 uses torch's matrix-product
// formula where torch does (compute_mode 1, or 0 with more than 25 rows), else direct differences.
Value cdist(Ctx& c) {
  Builder& b = c.b;
  ElementType t = accumulation_type(c.out_type());
  if (!pjrt::is_float(t)) throw hlo::Error("cdist: floating-point only");
  Value x1 = b.convert(c.t(0), t), x2 = b.convert(c.t(1), t);
  const Dims& od = c.out_dims();
  const int64_t r = static_cast<int64_t>(od.size());
  const int64_t P = od[r - 2], R = od[r - 1], M = x1.dims().back();
  Dims batch(od.begin(), od.end() - 2);
  x1 = b.broadcast_to(x1, with_batch(batch, {P, M}));
  x2 = b.broadcast_to(x2, with_batch(batch, {R, M}));
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
    Value a = b.concatenate({mul(b, x1, like(b, -2, x1)), n1, b.constant(1, n1.type)}, r - 1);
    Value bb = b.concatenate({x2, b.constant(1, n2.type), n2}, r - 1);
    Value d = b.dot_general(a, bb, bd, bd, {r - 1}, {r - 1}, t);
    return b.unary("sqrt", b.binary("maximum", d, like(b, 0, d)));
  }
  Dims cd = batch;
  cd.insert(cd.end(), {P, R, M});
  Dims m1 = bd, m2 = bd;
  m1.insert(m1.end(), {r - 2, r});
  m2.insert(m2.end(), {r - 1, r});
  Value diff = b.unary("abs", sub(b, b.broadcast_in_dim(x1, cd, m1), b.broadcast_in_dim(x2, cd, m2)));
  return pnorm(b, diff, {r}, p);
}

// d|a - b|_p / da for diff = a - b and the pair's distance (torch's cdist/pdist backward terms).
Value pnorm_grad(Builder& b, Value diff, Value dist, Value g, double p) {
  Value zero = like(b, 0, diff);
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
    Value pm1 = like(b, p - 1, diff);
    term = div(b, mul(b, mul(b, sgn, b.binary("power", b.unary("abs", diff), pm1)), g), b.binary("power", dist, pm1));
    if (p < 1) term = b.select(b.compare(Cmp::EQ, diff, zero), zero, term);
  } else {
    term = div(b, mul(b, mul(b, diff, b.binary("power", b.unary("abs", diff), like(b, p - 2, diff))), g),
               b.binary("power", dist, like(b, p - 1, diff)));
  }
  return b.select(b.compare(Cmp::EQ, dist, zero), zero, term);
}

// _cdist_backward(grad [.., P, R], x1 [.., P, M], x2 [.., R, M], p, cdist [.., P, R]) -> grad of x1:
// sum over r of grad * d|x1 - x2|_p / dx1, zero where the distance is zero.
Value cdist_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = accumulation_type(c.out_type());
  if (!pjrt::is_float(t)) throw hlo::Error("cdist_backward: floating-point only");
  const Dims& od = c.out_dims();  // x1's shape, batch-broadcast
  const int64_t r = static_cast<int64_t>(od.size());
  Value g = b.convert(c.t(0), t), x1 = b.convert(c.t(1), t), x2 = b.convert(c.t(2), t), dist = b.convert(c.t(4), t);
  const int64_t P = od[r - 2], M = od[r - 1], R = g.dims().back();
  // no pairs (an empty batch of the other side included: the CPU then returns zeros of x1's own shape)
  if (numel(od) == 0 || g.type.numel() == 0) return b.constant(0, Type{t, od});
  Dims batch(od.begin(), od.end() - 2);
  x1 = b.broadcast_to(x1, od);
  x2 = b.broadcast_to(x2, with_batch(batch, {R, M}));
  g = b.broadcast_to(g, with_batch(batch, {P, R}));
  dist = b.broadcast_to(dist, with_batch(batch, {P, R}));
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
  if (p == 0) return b.constant(0, Type{t, od});
  return reduce_sum(b, pnorm_grad(b, diff, db, gb, p), {r - 1});
}

// The rows (i, j) of the pairs i < j of N rows, row-major, as two s64 [K, 1] index columns.
std::pair<Value, Value> pair_rows(Builder& b, int64_t N) {
  std::vector<int64_t> is, js;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = i + 1; j < N; ++j) {
      is.push_back(i);
      js.push_back(j);
    }
  const int64_t K = static_cast<int64_t>(is.size());
  return {b.reshape(const_i64(b, is), {K, 1}), b.reshape(const_i64(b, js), {K, 1})};
}

// pdist's input [N, M] (argument k) in the accumulation type, with its pair count K.
struct PdistInput {
  Value x;
  int64_t N, M, K;
};

PdistInput pdist_input(Ctx& c, size_t k) {
  Value x = c.b.convert(c.t(k), accumulation_type(c.out_type()));
  const int64_t N = x.dims()[0];
  return {x, N, x.dims()[1], N * (N - 1) / 2};
}

// x[i] - x[j] for the pairs' rows: [K, M].
Value pair_diff(Builder& b, Value x, Value ii, Value jj) {
  const int64_t K = ii.dims()[0], M = x.dims()[1];
  hlo::GatherDims g{{1}, {0}, {0}, 1};
  return sub(b, b.gather(x, ii, g, {1, M}, {K, M}), b.gather(x, jj, g, {1, M}, {K, M}));
}

// _pdist_forward(self [N, M], p): distances of the pairs i < j, row-major.
Value pdist(Ctx& c) {
  Builder& b = c.b;
  auto [x, N, M, K] = pdist_input(c, 0);
  if (K == 0) return b.constant(0, Type{x.elem(), {0}});
  if (M == 0) return b.constant(0, Type{x.elem(), {K}});
  auto [ii, jj] = pair_rows(b, N);
  return pnorm(b, b.unary("abs", pair_diff(b, x, ii, jj)), {1}, c.d(1));
}

// _pdist_backward(grad [K], self [N, M], p, pdist [K]): each pair's gradient added to row i and
// subtracted from row j.
Value pdist_backward(Ctx& c) {
  Builder& b = c.b;
  auto [x, N, M, K] = pdist_input(c, 1);
  const ElementType t = x.elem();
  if (K == 0 || M == 0) return b.constant(0, Type{t, {N, M}});
  auto [ii, jj] = pair_rows(b, N);
  Value diff = pair_diff(b, x, ii, jj);
  Value gk = b.broadcast_in_dim(b.convert(c.t(0), t), {K, M}, {0});
  Value dk = b.broadcast_in_dim(b.convert(c.t(3), t), {K, M}, {0});
  Value term = pnorm_grad(b, diff, dk, gk, c.d(2));
  hlo::ScatterDims sd{{1}, {0}, {0}, 1};
  auto body = [](Builder& bb, const V& a) { return V{bb.binary("add", a[0], a[1])}; };
  Value r = b.scatter(b.constant(0, Type{t, {N, M}}), ii, term, sd, body);
  return b.scatter(r, jj, b.unary("negate", term), sd, body);
}

const Rows rows = {
    {{"norm.Scalar", "norm.Scalar_out"}, [](Ctx& c) { return one(norm(c, SIZE_MAX, SIZE_MAX)); }, kBakeScalars},
    {{"norm.ScalarOpt_dim", "norm.out"}, [](Ctx& c) { return one(norm(c, 2, SIZE_MAX)); }, kBakeScalars},
    {{"norm.ScalarOpt_dim_dtype", "norm.dtype_out"}, [](Ctx& c) { return one(norm(c, 2, 4)); }, kBakeScalars},
    {{"norm.ScalarOpt_dtype", "norm.ScalarOpt_dtype_out"}, [](Ctx& c) { return one(norm(c, SIZE_MAX, 2)); }, kBakeScalars},
    {{"renorm", "renorm_", "renorm.out"}, [](Ctx& c) { return one(renorm(c)); }, kBakeScalars},
    {{"linalg_cross", "linalg_cross.out"}, [](Ctx& c) { return one(cross(c)); }},
    {{"_cdist_forward", "_cdist_forward.out"}, [](Ctx& c) { return one(cdist(c)); }},
    {{"_cdist_backward", "_cdist_backward.out"}, [](Ctx& c) { return one(cdist_backward(c)); }},
    {{"_pdist_forward", "_pdist_forward.out"}, [](Ctx& c) { return one(pdist(c)); }},
    {{"_pdist_backward", "_pdist_backward.out"}, [](Ctx& c) { return one(pdist_backward(c)); }},
};

}  // namespace
}  // namespace lowering
