// Matrix products. Half-precision products accumulate in float32 (the dot's result type), then round.
#include <memory>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }

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

// ---------------------------------------------------------------------------------- factorizations
// LU (partial pivoting), Cholesky and triangular solves as static-shape algorithms, unrolled over the
// matrix size (the CPU plugin has no LAPACK custom calls). Batch dims are flattened: [B, n, n]. Real
// float types only; larger matrices and other types fall back.
constexpr int64_t kMaxUnrolled = 64;

int64_t count_of(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

struct Mat {
  Builder& b;
  int64_t B, n;
  Value iota(int64_t dim, const Dims& dims) { return b.iota(Type{ElementType::kS64, dims}, dim); }
  Value idx(int64_t v, const Dims& dims) { return b.constant_i(v, Type{ElementType::kS64, dims}); }
  Value row(Value a, int64_t i) {  // [B, r, c] -> [B, c]
    return b.reshape(b.slice(a, {0, i, 0}, {B, i + 1, a.dims()[2]}, {1, 1, 1}), {B, a.dims()[2]});
  }
  Value col(Value a, int64_t j) {  // [B, r, c] -> [B, r]
    return b.reshape(b.slice(a, {0, 0, j}, {B, a.dims()[1], j + 1}, {1, 1, 1}), {B, a.dims()[1]});
  }
  Value diag(Value a) {  // [B, n, n] -> [B, n]
    Dims d{B, n, n};
    Value eye = b.compare(Cmp::EQ, iota(1, d), iota(2, d));
    return reduce_sum(b, b.select(eye, a, b.constant(0, a.type)), {2});
  }
  Value put_row(Value a, int64_t i, Value r) {  // row i of a := r [B, c]
    Value at = b.compare(Cmp::EQ, iota(1, a.dims()), idx(i, a.dims()));
    return b.select(at, b.broadcast_in_dim(r, a.dims(), {0, 2}), a);
  }
  Value outer(Value x, Value y) {  // [B, n] x [B, m] -> [B, n, m]
    Dims d{B, x.dims()[1], y.dims()[1]};
    return b.binary("multiply", b.broadcast_in_dim(x, d, {0, 1}), b.broadcast_in_dim(y, d, {0, 2}));
  }
  // swaps rows j and p ([B]) of a [B, n, c] (or entries of a [B, n])
  Value swap(Value a, int64_t j, Value p) {
    Value is_j = b.compare(Cmp::EQ, iota(1, a.dims()), idx(j, a.dims()));
    Value is_p = b.compare(Cmp::EQ, iota(1, a.dims()), b.broadcast_in_dim(p, a.dims(), {0}));
    Value zero = b.constant(0, a.type);
    Value rj, rp;
    if (a.rank() == 3) {
      rj = b.broadcast_in_dim(row(a, j), a.dims(), {0, 2});
      rp = b.broadcast_in_dim(reduce_sum(b, b.select(is_p, a, zero), {1}), a.dims(), {0, 2});
    } else {
      rj = b.broadcast_in_dim(b.reshape(b.slice(a, {0, j}, {B, j + 1}, {1, 1}), {B}), a.dims(), {0});
      rp = b.broadcast_in_dim(reduce_sum(b, b.select(is_p, a, zero), {1}), a.dims(), {0});
    }
    return b.select(is_j, rp, b.select(is_p, rj, a));
  }
  // A [B, n, n] lower / upper triangular, X [B, n, m]: solves A X = R by substitution. Only A's triangle
  // (and, unless `unit`, its diagonal) is read.
  Value tri_solve(Value a, Value r, bool upper, bool unit) {
    const int64_t m = r.dims()[2];
    Dims ad{B, n, n};
    Value keep = b.compare(upper ? Cmp::GT : Cmp::LT, iota(2, ad), iota(1, ad));
    Value strict = b.select(keep, a, b.constant(0, a.type));
    Value d = diag(a);
    Value x = b.constant(0, r.type);
    for (int64_t s = 0; s < n; ++s) {
      int64_t i = upper ? n - 1 - s : s;
      Value acc = b.dot_general(row(strict, i), x, {0}, {0}, {1}, {1}, x.elem());  // [B, m]
      Value xi = b.binary("subtract", row(r, i), acc);
      if (!unit) xi = b.binary("divide", xi, b.broadcast_in_dim(b.reshape(b.slice(d, {0, i}, {B, i + 1}, {1, 1}), {B}), {B, m}, {0}));
      x = put_row(x, i, xi);
    }
    return x;
  }
};

struct Lu {
  Value lu, pivots, perm, info;  // pivots: 1-based LAPACK swaps [B, n]; perm: row i of P A is row perm[i] of A
};

// Doolittle LU with partial pivoting (the first largest |pivot|, as LAPACK's getrf): P A = L U.
Lu lu_factor(Mat& m, Value a) {
  Builder& b = m.b;
  const int64_t B = m.B, n = m.n;
  Dims v{B, n}, d{B, n, n};
  Value rows = m.iota(1, v), rows3 = m.iota(1, d), cols3 = m.iota(2, d);
  Value perm = rows, info = m.idx(0, {B});
  std::vector<Value> piv;
  Value zero = b.constant(0, Type{a.elem(), v});
  for (int64_t j = 0; j < n; ++j) {
    Value below = b.compare(Cmp::GE, rows, m.idx(j, v));
    Value score = b.select(below, b.unary("abs", m.col(a, j)), b.constant(-1, zero.type));
    Value top = reduce(b, score, {1}, "maximum", lowest(b, a.elem()));
    Value at = b.compare(Cmp::EQ, score, b.broadcast_in_dim(top, v, {0}));
    Value p = reduce(b, b.select(at, rows, m.idx(n, v)), {1}, "minimum", b.scalar_i(n, ElementType::kS64));
    p = b.select(b.compare(Cmp::EQ, p, m.idx(n, {B})), m.idx(j, {B}), p);  // a NaN column: no swap
    piv.push_back(b.reshape(b.binary("add", p, m.idx(1, {B})), {B, 1}));
    a = m.swap(a, j, p);
    perm = m.swap(perm, j, p);
    Value dj = b.reshape(b.slice(m.col(a, j), {0, j}, {B, j + 1}, {1, 1}), {B});
    Value singular = b.compare(Cmp::EQ, dj, b.constant(0, dj.type));
    info = b.select(b.binary("and", singular, b.compare(Cmp::EQ, info, m.idx(0, {B}))), m.idx(j + 1, {B}), info);
    Value safe = b.select(singular, b.constant(1, dj.type), dj);
    Value l = b.select(b.compare(Cmp::GT, rows, m.idx(j, v)),
                       b.binary("divide", m.col(a, j), b.broadcast_in_dim(safe, v, {0})), zero);
    l = b.select(b.broadcast_in_dim(singular, v, {0}), zero, l);
    Value u = b.select(b.compare(Cmp::GT, rows, m.idx(j, v)), m.row(a, j), zero);  // row j right of the pivot
    a = b.binary("subtract", a, m.outer(l, u));
    Value lcol = b.binary("and", b.compare(Cmp::GT, rows3, m.idx(j, d)), b.compare(Cmp::EQ, cols3, m.idx(j, d)));
    a = b.select(lcol, b.broadcast_in_dim(l, d, {0, 1}), a);
  }
  return Lu{a, b.concatenate(piv, 1), perm, info};
}

// The row permutation of LAPACK's 1-based sequential swaps.
Value perm_of(Mat& m, Value pivots) {
  Value perm = m.iota(1, {m.B, m.n});
  for (int64_t j = 0; j < m.n; ++j) {
    Value p = m.b.binary("subtract", m.b.reshape(m.b.slice(pivots, {0, j}, {m.B, j + 1}, {1, 1}), {m.B}), m.idx(1, {m.B}));
    perm = m.swap(perm, j, p);
  }
  return perm;
}

// P as a matrix: (P A)[i] = A[perm[i]], i.e. P[i, k] = (perm[i] == k).
Value perm_matrix(Mat& m, Value perm, ElementType t) {
  Dims d{m.B, m.n, m.n};
  Value hit = m.b.compare(Cmp::EQ, m.b.broadcast_in_dim(perm, d, {0, 1}), m.iota(2, d));
  return m.b.select(hit, m.b.constant(1, Type{t, d}), m.b.constant(0, Type{t, d}));
}

Value bmm3(Builder& b, Value x, Value y) { return b.dot_general(x, y, {0}, {0}, {2}, {1}, x.elem()); }
Value mT(Builder& b, Value x) { return b.transpose(x, {0, 2, 1}); }

// A X = R from A's LU: X = U^-1 L^-1 P R.
Value lu_solve(Mat& m, const Lu& f, Value r) {
  Value pr = bmm3(m.b, perm_matrix(m, f.perm, r.elem()), r);
  return m.tri_solve(f.lu, m.tri_solve(f.lu, pr, false, true), true, false);
}

// Lower Cholesky factor of the symmetric matrix whose lower triangle is a; info: the order of the first
// leading minor that is not positive definite (0 when none), as LAPACK's potrf.
std::pair<Value, Value> cholesky(Mat& m, Value a) {
  Builder& b = m.b;
  const int64_t B = m.B, n = m.n;
  Dims v{B, n}, d{B, n, n};
  Value lower = b.compare(Cmp::LE, m.iota(2, d), m.iota(1, d));
  Value w = b.select(lower, a, mT(b, a));
  Value rows = m.iota(1, v), info = m.idx(0, {B});
  Value zero = b.constant(0, Type{a.elem(), v});
  std::vector<Value> cols;
  for (int64_t j = 0; j < n; ++j) {
    Value c = m.col(w, j);
    Value dj = b.reshape(b.slice(c, {0, j}, {B, j + 1}, {1, 1}), {B});
    Value bad = b.unary("not", b.compare(Cmp::GT, dj, b.constant(0, dj.type)));
    info = b.select(b.binary("and", bad, b.compare(Cmp::EQ, info, m.idx(0, {B}))), m.idx(j + 1, {B}), info);
    Value s = b.broadcast_in_dim(b.unary("sqrt", dj), v, {0});
    Value l = b.select(b.compare(Cmp::GT, rows, m.idx(j, v)), b.binary("divide", c, s),
                       b.select(b.compare(Cmp::EQ, rows, m.idx(j, v)), s, zero));
    w = b.binary("subtract", w, m.outer(l, l));
    cols.push_back(b.reshape(l, {B, n, 1}));
  }
  return {b.concatenate(cols, 2), info};
}

// Empty matrices (n == 0 or no batch): every result is empty or a constant; `ones` lists the results that
// are 1 for 0x0 matrices (determinants, their signs).
bool empty_matrices(const Value& a) { return count_of(a.dims()) == 0; }
V constants(Ctx& c, std::initializer_list<size_t> ones) {
  V out;
  for (size_t k = 0; k < c.outs.size(); ++k) {
    bool one_ = false;
    for (size_t o : ones) one_ |= o == k;
    out.push_back(c.wanted(k) ? c.b.constant(one_ ? 1 : 0, c.out(k)) : Value{});
  }
  return out;
}

// The real float matrix argument k as [B, n, n] (batch dims flattened), broadcast to `batch`.
Value square(Ctx& c, Value a, const Dims& batch, Mat*& out, std::unique_ptr<Mat>& holder) {
  if (!pjrt::is_float(a.elem()) || a.elem() == ElementType::kF16 || a.elem() == ElementType::kBF16)
    throw hlo::Error("linalg: float32/float64 only");
  const int64_t n = a.dims().back();
  if (a.dims()[a.rank() - 2] != n) throw hlo::Error("linalg: square matrices only");
  if (n > kMaxUnrolled) throw hlo::Error("linalg: matrices larger than 64x64 are not lowered");
  int64_t B = 1;
  for (int64_t x : batch) B *= x;
  if (B == 0 || n == 0) throw hlo::Error("linalg: empty matrices are not lowered");
  Dims full = batch;
  full.push_back(n);
  full.push_back(n);
  Dims keep;
  for (int64_t i = 0; i < a.rank(); ++i) keep.push_back(static_cast<int64_t>(full.size()) - a.rank() + i);
  a = c.b.broadcast_in_dim(a, full, keep);
  holder = std::make_unique<Mat>(Mat{c.b, B, n});
  out = holder.get();
  return c.b.reshape(a, {B, n, n});
}

Dims batch_of(const Dims& d, int64_t matrix_rank) { return Dims(d.begin(), d.end() - matrix_rank); }

// The right-hand side R (argument k) as [B, n, m]; `vector`: R is [..., n] (m = 1).
Value rhs(Ctx& c, Value r, const Dims& batch, int64_t n, bool vector) {
  Dims full = batch;
  full.push_back(n);
  const int64_t m = vector ? 1 : r.dims().back();
  if (!vector) full.push_back(m);
  Dims keep;
  for (int64_t i = 0; i < r.rank(); ++i) keep.push_back(static_cast<int64_t>(full.size()) - r.rank() + i);
  Value x = c.b.broadcast_in_dim(r, full, keep);
  int64_t B = 1;
  for (int64_t v : batch) B *= v;
  return c.b.reshape(x, {B, n, m});
}

V lu_factor_row(Ctx& c) {
  if (empty_matrices(c.t(0))) return constants(c, {});
  Mat* m;
  std::unique_ptr<Mat> h;
  Value a = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h);
  if (c.has(1) && !c.i(1)) throw hlo::Error("lu_factor: pivot=False is not lowered");
  Lu f = lu_factor(*m, a);
  return V{c.b.reshape(f.lu, c.out_dims(0)), c.b.reshape(f.pivots, c.out_dims(1)), c.b.reshape(f.info, c.out_dims(2))};
}

// (sign of det(P), product of U's diagonal) from an LU.
std::pair<Value, Value> det_parts(Mat& m, const Lu& f, ElementType t) {
  Builder& b = m.b;
  Value swaps = b.compare(Cmp::NE, f.pivots, b.binary("add", m.iota(1, {m.B, m.n}), m.idx(1, {m.B, m.n})));
  Value count = reduce_sum(b, b.convert(swaps, ElementType::kS64), {1});
  Value odd = b.compare(Cmp::EQ, b.binary("remainder", count, m.idx(2, {m.B})), m.idx(1, {m.B}));
  Value sign = b.select(odd, b.constant(-1, Type{t, {m.B}}), b.constant(1, Type{t, {m.B}}));
  return {sign, m.diag(f.lu)};
}

V det_row(Ctx& c) {
  if (empty_matrices(c.t(0))) return constants(c, {0});
  Mat* m;
  std::unique_ptr<Mat> h;
  Value a = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h);
  Lu f = lu_factor(*m, a);
  auto [sign, diag] = det_parts(*m, f, a.elem());
  Value det = c.b.binary("multiply", sign, reduce(c.b, diag, {1}, "multiply", c.b.scalar(1, a.elem())));
  return V{c.b.reshape(det, c.out_dims(0)), c.b.reshape(f.lu, c.out_dims(1)), c.b.reshape(f.pivots, c.out_dims(2))};
}

V slogdet_row(Ctx& c) {
  if (empty_matrices(c.t(0))) return constants(c, {0});
  Builder& b = c.b;
  Mat* m;
  std::unique_ptr<Mat> h;
  Value a = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h);
  Lu f = lu_factor(*m, a);
  auto [sign, diag] = det_parts(*m, f, a.elem());
  Value s = b.binary("multiply", sign, reduce(b, b.unary("sign", diag), {1}, "multiply", b.scalar(1, a.elem())));
  Value logabs = reduce_sum(b, b.unary("log", b.unary("abs", diag)), {1});
  return V{b.reshape(s, c.out_dims(0)), b.reshape(logabs, c.out_dims(1)), b.reshape(f.lu, c.out_dims(2)),
           b.reshape(f.pivots, c.out_dims(3))};
}

// _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info)
V solve_row(Ctx& c) {
  if (empty_matrices(c.t(0)) || empty_matrices(c.t(1))) return constants(c, {});
  Builder& b = c.b;
  if (c.has(2) && !c.i(2)) throw hlo::Error("linalg.solve: left=False is not lowered");
  const Dims& out = c.out_dims(0);
  const bool vector = static_cast<int64_t>(out.size()) == c.t(0).rank() - 1 || c.t(1).rank() == 1;
  Dims batch = batch_of(out, vector ? 1 : 2);
  Mat* m;
  std::unique_ptr<Mat> h;
  Value a = square(c, c.t(0), batch, m, h);
  Value r = rhs(c, b.convert(c.t(1), a.elem()), batch, m->n, vector);
  Lu f = lu_factor(*m, a);
  Value x = lu_solve(*m, f, r);
  return V{b.reshape(x, out), b.reshape(f.lu, c.out_dims(1)), b.reshape(f.pivots, c.out_dims(2)), b.reshape(f.info, c.out_dims(3))};
}

Value eye(Mat& m, ElementType t) {
  Dims d{m.B, m.n, m.n};
  return m.b.select(m.b.compare(Cmp::EQ, m.iota(1, d), m.iota(2, d)), m.b.constant(1, Type{t, d}), m.b.constant(0, Type{t, d}));
}

V inv_row(Ctx& c) {
  if (empty_matrices(c.t(0))) return constants(c, {});
  Mat* m;
  std::unique_ptr<Mat> h;
  Value a = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h);
  Lu f = lu_factor(*m, a);
  return V{c.b.reshape(lu_solve(*m, f, eye(*m, a.elem())), c.out_dims(0)), c.b.reshape(f.info, c.out_dims(1))};
}

// A X = R (left) or X A = R (right, as A^T X^T = R^T) with triangular A.
Value triangular(Ctx& c, Value a0, Value r0, bool upper, bool left, bool unit, bool transpose_a) {
  Builder& b = c.b;
  if (empty_matrices(a0) || empty_matrices(r0)) return b.constant(0, c.out(0));
  const Dims& out = c.out_dims(0);
  Dims batch = batch_of(out, 2);
  Mat* m;
  std::unique_ptr<Mat> h;
  Value a = square(c, a0, batch, m, h);
  Value r = b.convert(r0, a.elem());
  if (transpose_a) {
    a = mT(b, a);
    upper = !upper;
  }
  if (!left) {  // X A = R as A^T X^T = R^T
    a = mT(b, a);
    upper = !upper;
    Value rr = rhs(c, r, batch, r.dims()[r.rank() - 2], false);
    return b.reshape(mT(b, m->tri_solve(a, mT(b, rr), upper, unit)), out);
  }
  Value x = m->tri_solve(a, rhs(c, r, batch, m->n, false), upper, unit);
  return b.reshape(x, out);
}

V cholesky_row(Ctx& c, bool upper, bool with_info) {
  if (empty_matrices(c.t(0))) return constants(c, {});
  Mat* m;
  std::unique_ptr<Mat> h;
  Value a = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h);
  auto [l, info] = cholesky(*m, upper ? mT(c.b, a) : a);
  Value r = c.b.reshape(upper ? mT(c.b, l) : l, c.out_dims(0));
  if (with_info) return V{r, c.b.reshape(info, c.out_dims(1))};
  return V{r};
}

// (P, L, U) of an LU: A = P L U.
V unpack(Ctx& c, Mat& m, Value lu, Value perm) {
  Builder& b = c.b;
  Dims d{m.B, m.n, m.n};
  Value r = m.iota(1, d), k = m.iota(2, d), zero = b.constant(0, lu.type);
  Value l = b.select(b.compare(Cmp::GT, r, k), lu, b.select(b.compare(Cmp::EQ, r, k), b.constant(1, lu.type), zero));
  Value u = b.select(b.compare(Cmp::LE, r, k), lu, zero);
  Value p = mT(b, perm_matrix(m, perm, lu.elem()));
  V out{p, l, u};
  for (size_t i = 0; i < 3; ++i) out[i] = c.wanted(i) && count_of(c.out_dims(i)) > 0 ? b.reshape(out[i], c.out_dims(i)) : b.constant(0, c.out(i));
  return out;
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
    // factorizations and solves (static-shape algorithms above)
    {{"linalg_lu_factor_ex", "linalg_lu_factor_ex.out"}, lu_factor_row},
    {{"_linalg_det", "_linalg_det.result"}, det_row},
    {{"_linalg_slogdet", "_linalg_slogdet.sign"}, slogdet_row},
    {{"_linalg_solve_ex", "_linalg_solve_ex.result"}, solve_row},
    {{"linalg_inv_ex", "linalg_inv_ex.inverse"}, inv_row},
    {{"linalg_cholesky_ex", "linalg_cholesky_ex.L"}, [](Ctx& c) { return cholesky_row(c, c.has(1) && c.i(1), true); }},
    {{"cholesky", "cholesky.out"}, [](Ctx& c) { return cholesky_row(c, c.has(1) && c.i(1), false); }},
    {{"linalg_solve_triangular", "linalg_solve_triangular.out"}, [](Ctx& c) {
       return one(triangular(c, c.t(0), c.t(1), c.i(2), !c.has(3) || c.i(3), c.has(4) && c.i(4), false));
     }},
    {{"triangular_solve", "triangular_solve.X"}, [](Ctx& c) {
       // (self = B, A, upper, transpose, unitriangular) -> (X, A)
       bool upper = !c.has(2) || c.i(2);
       Value x = triangular(c, c.t(1), c.t(0), upper, true, c.has(4) && c.i(4), c.has(3) && c.i(3));
       return V{x, c.b.broadcast_to(c.b.convert(c.t(1), c.out_type(1)), c.out_dims(1))};
     }},
    {{"linalg_lu", "linalg_lu.out"}, [](Ctx& c) {
       Mat* m;
       std::unique_ptr<Mat> h;
       if (c.has(1) && !c.i(1)) throw hlo::Error("linalg.lu: pivot=False is not lowered");
       if (empty_matrices(c.t(0))) return constants(c, {});
       Value a = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h);
       Lu f = lu_factor(*m, a);
       return unpack(c, *m, f.lu, f.perm);
     }},
    {{"lu_unpack", "lu_unpack.out"}, [](Ctx& c) {
       Mat* m;
       std::unique_ptr<Mat> h;
       if (empty_matrices(c.t(0))) return constants(c, {});
       Value lu = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h);
       Value piv = c.b.reshape(c.b.convert(c.t(1), ElementType::kS64), {m->B, m->n});
       return unpack(c, *m, lu, perm_of(*m, piv));
     }},
    {{"linalg_lu_solve", "linalg_lu_solve.out"}, [](Ctx& c) {
       if ((c.has(3) && !c.i(3)) || (c.has(4) && c.i(4))) throw hlo::Error("lu_solve: left=False / adjoint are not lowered");
       Builder& b = c.b;
       if (empty_matrices(c.t(0)) || empty_matrices(c.t(2))) return constants(c, {});
       const Dims& out = c.out_dims(0);
       Dims batch = batch_of(out, 2);
       Mat* m;
       std::unique_ptr<Mat> h;
       Value lu = square(c, c.t(0), batch, m, h);
       Dims pd = batch;
       pd.push_back(m->n);
       Value piv = c.t(1);
       Dims keep;
       for (int64_t i = 0; i < piv.rank(); ++i) keep.push_back(static_cast<int64_t>(pd.size()) - piv.rank() + i);
       piv = b.reshape(b.broadcast_in_dim(b.convert(piv, ElementType::kS64), pd, keep), {m->B, m->n});
       Lu f{lu, piv, perm_of(*m, piv), Value{}};
       return one(b.reshape(lu_solve(*m, f, rhs(c, b.convert(c.t(2), lu.elem()), batch, m->n, false)), out));
     }},
    {{"outer"}, [](Ctx& c) { return one(dot(c.b, c.t(0), c.t(1), {}, {}, {}, {}, c.out_type())); }},
    {{"addr", "addr_", "addr.out"}, [](Ctx& c) {
       return one(scaled_sum(c, dot(c.b, c.t(1), c.t(2), {}, {}, {}, {}, c.out_type()), 0, 3, 4));
     }},
};

}  // namespace
}  // namespace lowering
