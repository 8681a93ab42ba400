// Linear algebra: LU, Cholesky and triangular solves, QR, symmetric eigendecomposition and SVD, as
// static-shape algorithms (matrix products are in matmul.cpp).
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

// ---------------------------------------------------------------------------------- factorizations
// LU (partial pivoting), Cholesky and triangular solves as static-shape algorithms (the CPU plugin has no
// LAPACK custom calls). LU and the triangular solves are while loops over the matrix size, so the program
// does not grow with it (unrolled, XLA:GPU took 503 s to compile a 12x12 inverse); Cholesky is unrolled.
// Batch dims are flattened: [B, n, n]. Real float types only; larger matrices and other types fall back.
constexpr int64_t kMaxUnrolled = 64;

int64_t count_of(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

V for_range(Builder& b, int64_t from, int64_t step, int64_t count, V state,
            const std::function<V(Builder&, Value, const V&)>& body);
Value column(Builder& b, Value x, Value j);
Value entry(Builder& b, Value v, Value j);
Value at_all(Builder& b, Value j, const Dims& d);

struct Mat {
  Builder& b;
  int64_t B, n;
  Value iota(int64_t dim, const Dims& dims) { return b.iota(Type{ElementType::kS64, dims}, dim); }
  Value idx(int64_t v, const Dims& dims) { return b.constant_i(v, Type{ElementType::kS64, dims}); }
  Value col(Value a, int64_t j) {  // [B, r, c] -> [B, r]
    return b.reshape(b.slice(a, {0, 0, j}, {B, a.dims()[1], j + 1}, {1, 1, 1}), {B, a.dims()[1]});
  }
  // row i (a run-time s64) of [B, r, c] -> [B, c] (column j and entry j: column() and entry() below)
  Value row_at(Value a, Value i) {
    Value z = b.scalar_i(0, ElementType::kS64);
    return b.reshape(b.dynamic_slice(a, {z, i, z}, {B, 1, a.dims()[2]}), {B, a.dims()[2]});
  }
  Value diag(Value a) {  // [B, n, n] -> [B, n]
    Dims d{B, n, n};
    Value eye = b.compare(Cmp::EQ, iota(1, d), iota(2, d));
    return reduce_sum(b, b.select(eye, a, b.constant(0, a.type)), {2});
  }
  Value put_row(Value a, Value i, Value r) {  // row i (run-time) of a := r [B, c]
    Value hit = b.compare(Cmp::EQ, iota(1, a.dims()), at_all(b, i, a.dims()));
    return b.select(hit, b.broadcast_in_dim(r, a.dims(), {0, 2}), a);
  }
  Value outer(Value x, Value y) {  // [B, n] x [B, m] -> [B, n, m]
    Dims d{B, x.dims()[1], y.dims()[1]};
    return b.binary("multiply", b.broadcast_in_dim(x, d, {0, 1}), b.broadcast_in_dim(y, d, {0, 2}));
  }
  // swaps rows j (a run-time s64) and p ([B]) of a [B, n, c] (or entries of a [B, n])
  Value swap(Value a, Value j, Value p) {
    Value is_j = b.compare(Cmp::EQ, iota(1, a.dims()), at_all(b, j, a.dims()));
    Value is_p = b.compare(Cmp::EQ, iota(1, a.dims()), b.broadcast_in_dim(p, a.dims(), {0}));
    Value zero = b.constant(0, a.type);
    Value rj, rp;
    if (a.rank() == 3) {
      rj = b.broadcast_in_dim(row_at(a, j), a.dims(), {0, 2});
      rp = b.broadcast_in_dim(reduce_sum(b, b.select(is_p, a, zero), {1}), a.dims(), {0, 2});
    } else {
      rj = b.broadcast_in_dim(entry(b, a, j), a.dims(), {0});
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
    V init{b.constant(0, r.type), b.select(keep, a, b.constant(0, a.type)), diag(a), r};
    return for_range(b, upper ? n - 1 : 0, upper ? -1 : 1, n, init, [&](Builder&, Value i, const V& s) {
      const Value &x = s[0], &strict = s[1], &d = s[2], &rr = s[3];
      Value acc = b.dot_general(row_at(strict, i), x, {0}, {0}, {1}, {1}, x.elem());  // [B, m]
      Value xi = b.binary("subtract", row_at(rr, i), acc);
      if (!unit) xi = b.binary("divide", xi, b.broadcast_in_dim(entry(b, d, i), {B, m}, {0}));
      return V{put_row(x, i, xi), strict, d, rr};
    })[0];
  }
};

struct Lu {
  Value lu, pivots, perm, info;  // pivots: 1-based LAPACK swaps [B, n]; perm: row i of P A is row perm[i] of A
};

// Doolittle LU with partial pivoting (the first largest |pivot|, as LAPACK's getrf): P A = L U, for
// a [B, n, q] (m.n rows, any number of columns q; min(n, q) pivots).
Lu lu_factor(Mat& m, Value a) {
  Builder& b = m.b;
  const int64_t B = m.B, n = m.n, q = a.dims()[2], k = std::min(n, q);
  const Dims v{B, n}, d{B, n, q}, kd{B, k};
  V init{a, m.iota(1, v), m.idx(0, {B}), m.idx(0, kd)};
  V s = for_range(b, 0, 1, k, init, [&](Builder&, Value j, const V& st) {
    Value a = st[0], perm = st[1], info = st[2], piv = st[3];
    Value rows = m.iota(1, v), zero = b.constant(0, Type{a.elem(), v});
    Value below = b.compare(Cmp::GE, rows, at_all(b, j, v));
    Value score = b.select(below, b.unary("abs", column(b, a, j)), b.constant(-1, zero.type));
    Value top = reduce(b, score, {1}, "maximum", lowest(b, a.elem()));
    Value hit = b.compare(Cmp::EQ, score, b.broadcast_in_dim(top, v, {0}));
    Value p = reduce(b, b.select(hit, rows, m.idx(n, v)), {1}, "minimum", b.scalar_i(n, ElementType::kS64));
    p = b.select(b.compare(Cmp::EQ, p, m.idx(n, {B})), at_all(b, j, {B}), p);  // a NaN column: no swap
    Value p1 = b.binary("add", p, m.idx(1, {B}));
    piv = b.select(b.compare(Cmp::EQ, m.iota(1, kd), at_all(b, j, kd)), b.broadcast_in_dim(p1, kd, {0}), piv);
    a = m.swap(a, j, p);
    perm = m.swap(perm, j, p);
    Value cj = column(b, a, j), dj = entry(b, cj, j);
    Value singular = b.compare(Cmp::EQ, dj, b.constant(0, dj.type));
    Value j1 = b.binary("add", at_all(b, j, {B}), m.idx(1, {B}));
    info = b.select(b.binary("and", singular, b.compare(Cmp::EQ, info, m.idx(0, {B}))), j1, info);
    Value safe = b.select(singular, b.constant(1, dj.type), dj);
    Value l = b.select(b.compare(Cmp::GT, rows, at_all(b, j, v)), b.binary("divide", cj, b.broadcast_in_dim(safe, v, {0})), zero);
    l = b.select(b.broadcast_in_dim(singular, v, {0}), zero, l);
    Value u = b.select(b.compare(Cmp::GT, m.iota(1, {B, q}), at_all(b, j, {B, q})), m.row_at(a, j),
                       b.constant(0, Type{a.elem(), {B, q}}));  // row j right of the pivot
    a = b.binary("subtract", a, m.outer(l, u));
    Value lcol = b.binary("and", b.compare(Cmp::GT, m.iota(1, d), at_all(b, j, d)), b.compare(Cmp::EQ, m.iota(2, d), at_all(b, j, d)));
    a = b.select(lcol, b.broadcast_in_dim(l, d, {0, 1}), a);
    return V{a, perm, info, piv};
  });
  return Lu{s[0], s[3], s[1], s[2]};
}

// The row permutation (of m.n rows) of LAPACK's 1-based sequential swaps.
Value perm_of(Mat& m, Value pivots) {
  Value perm = m.iota(1, {m.B, m.n});
  for (int64_t j = 0; j < pivots.dims()[1]; ++j) {
    Value p = m.b.binary("subtract", m.b.reshape(m.b.slice(pivots, {0, j}, {m.B, j + 1}, {1, 1}), {m.B}), m.idx(1, {m.B}));
    perm = m.swap(perm, m.b.scalar_i(j, ElementType::kS64), p);
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

// A X = R from A's LU (P A = L U): X = U^-1 L^-1 P R; with `transposed`, A^T X = R: X = P^T L^-T U^-T R.
Value lu_solve(Mat& m, const Lu& f, Value r, bool transposed = false) {
  Value p = perm_matrix(m, f.perm, r.elem());
  if (!transposed) return m.tri_solve(f.lu, m.tri_solve(f.lu, bmm3(m.b, p, r), false, true), true, false);
  Value lut = mT(m.b, f.lu);  // U^T: lower, L^T: unit upper
  return bmm3(m.b, mT(m.b, p), m.tri_solve(lut, m.tri_solve(lut, r, false, false), true, true));
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

// The real float matrix argument k as [B, n, q] (batch dims flattened), broadcast to `batch`; q == n
// unless `rectangular`. m.n is the number of rows.
Value square(Ctx& c, Value a, const Dims& batch, Mat*& out, std::unique_ptr<Mat>& holder, bool rectangular = false) {
  if (!pjrt::is_float(a.elem()) || a.elem() == ElementType::kF16 || a.elem() == ElementType::kBF16)
    throw hlo::Error("linalg: float32/float64 only");
  const int64_t n = a.dims()[a.rank() - 2], q = a.dims().back();
  if (!rectangular && q != n) throw hlo::Error("linalg: square matrices only");
  if (n > kMaxUnrolled || q > kMaxUnrolled) throw hlo::Error("linalg: matrices larger than 64x64 are not lowered");
  int64_t B = 1;
  for (int64_t x : batch) B *= x;
  if (B == 0 || n == 0 || q == 0) throw hlo::Error("linalg: empty matrices are not lowered");
  Dims full = batch;
  full.push_back(n);
  full.push_back(q);
  Dims keep;
  for (int64_t i = 0; i < a.rank(); ++i) keep.push_back(static_cast<int64_t>(full.size()) - a.rank() + i);
  a = c.b.broadcast_in_dim(a, full, keep);
  holder = std::make_unique<Mat>(Mat{c.b, B, n});
  out = holder.get();
  return c.b.reshape(a, {B, n, q});
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
  Value a = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h, true);
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

// The matrix whose LU _linalg_det and _linalg_slogdet return: the CPU factors A^T when A is contiguous
// and real (det(A^T) = det(A), and LAPACK wants column-major), and its backward solves with that LU
// accordingly, so the LU is part of the result.
Value det_input(Ctx& c) {
  Value a = c.t(0);
  if (!c.arg(0).contiguous || pjrt::is_complex(a.elem())) return a;
  Dims perm(a.rank());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[a.rank() - 1], perm[a.rank() - 2]);
  return c.b.transpose(a, perm);
}

V det_row(Ctx& c) {
  if (empty_matrices(c.t(0))) return constants(c, {0});
  Mat* m;
  std::unique_ptr<Mat> h;
  Value a = square(c, det_input(c), batch_of(c.t(0).dims(), 2), m, h);
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
  Value a = square(c, det_input(c), batch_of(c.t(0).dims(), 2), m, h);
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

// X = A^-1 R for A = L L^T (or U^T U when `upper`) from its Cholesky factor f [B, n, n].
Value cholesky_solve(Mat& m, Value f, Value r, bool upper) {
  Value lower = upper ? mT(m.b, f) : f;
  return m.tri_solve(mT(m.b, lower), m.tri_solve(lower, r, false, false), true, false);
}

// _cholesky_solve_helper(B, factor, upper) (B already broadcast) and cholesky_inverse(factor, upper).
V cholesky_solve_row(Ctx& c, bool inverse) {
  const size_t fk = inverse ? 0 : 1;
  if (empty_matrices(c.t(fk)) || (!inverse && empty_matrices(c.t(0)))) return constants(c, {});
  const bool upper = inverse ? c.has(1) && c.i(1) : c.i(2);
  const Dims& out = c.out_dims(0);
  Mat* m;
  std::unique_ptr<Mat> h;
  Value f = square(c, c.t(fk), batch_of(out, 2), m, h);
  Value r = inverse ? eye(*m, f.elem()) : rhs(c, c.b.convert(c.t(0), f.elem()), batch_of(out, 2), m->n, false);
  return one(c.b.reshape(cholesky_solve(*m, f, r, upper), out));
}

// (P, L, U) of an LU [B, n, q]: A = P L U, L [B, n, k] and U [B, k, q] with k = min(n, q).
V unpack(Ctx& c, Mat& m, Value lu, Value perm) {
  Builder& b = c.b;
  const int64_t q = lu.dims()[2], k = std::min(m.n, q);
  Value rows = m.iota(1, lu.dims()), cols = m.iota(2, lu.dims()), zero = b.constant(0, lu.type);
  Value l = b.select(b.compare(Cmp::GT, rows, cols), lu,
                     b.select(b.compare(Cmp::EQ, rows, cols), b.constant(1, lu.type), zero));
  l = b.slice(l, {0, 0, 0}, {m.B, m.n, k}, {1, 1, 1});
  Value u = b.slice(b.select(b.compare(Cmp::LE, rows, cols), lu, zero), {0, 0, 0}, {m.B, k, q}, {1, 1, 1});
  Value p = mT(b, perm_matrix(m, perm, lu.elem()));
  V out{p, l, u};
  for (size_t i = 0; i < 3; ++i) out[i] = c.wanted(i) && count_of(c.out_dims(i)) > 0 ? b.reshape(out[i], c.out_dims(i)) : b.constant(0, c.out(i));
  return out;
}

// ----------------------------------------------------------------------- orthogonal factorizations
// Householder QR in LAPACK's geqrf form (same reflector convention, so Q and R carry the CPU's signs),
// symmetric eigendecomposition by cyclic two-sided Jacobi, SVD by one-sided (Hestenes) Jacobi. Jacobi
// works on all pairs at once: positions 2i and 2i+1 form pair i, and a fixed permutation between rounds
// (the circle method of round-robin tournaments) brings every pair together once per sweep of n-1 rounds,
// after which the order is back where it started. Sweeps run in a while loop until every matrix of the
// batch has converged (or a fixed number of sweeps). Inner products are elementwise products and sums,
// not dots, so that they are exact float arithmetic on every plugin (a float32 dot may run in reduced
// precision on an accelerator). Same limits as above: float32/float64, at most 64 rows and columns.

Value iota_of(Builder& b, const Dims& d, int64_t dim) { return b.iota(Type{ElementType::kS64, d}, dim); }
Value splat(Builder& b, double v, ElementType t, const Dims& d) { return b.constant(v, Type{t, d}); }

// Column j (a run-time s64 index) of x [B, m, n] as [B, m]; entry j of v [B, m] as [B]; j broadcast to d.
Value column(Builder& b, Value x, Value j) {
  const Dims& d = x.dims();
  Value z = b.scalar_i(0, ElementType::kS64);
  return b.reshape(b.dynamic_slice(x, {z, z, j}, {d[0], d[1], 1}), {d[0], d[1]});
}
Value entry(Builder& b, Value v, Value j) {
  return b.reshape(b.dynamic_slice(v, {b.scalar_i(0, ElementType::kS64), j}, {v.dims()[0], 1}), {v.dims()[0]});
}
Value at_all(Builder& b, Value j, const Dims& d) { return b.broadcast_in_dim(j, d, {}); }
// v^T x: v [B, m], x [B, m, p] -> [B, p]; x v: x [B, p, m], v [B, m] -> [B, p].
Value vt_x(Builder& b, Value v, Value x) { return reduce_sum(b, mul(b, b.broadcast_in_dim(v, x.dims(), {0, 1}), x), {1}); }
Value x_v(Builder& b, Value x, Value v) { return reduce_sum(b, mul(b, x, b.broadcast_in_dim(v, x.dims(), {0, 2})), {2}); }
// x - (tau u) w^T: u [B, r], tau [B], w [B, c], x [B, r, c].
Value minus_outer(Builder& b, Value x, Value u, Value tau, Value w) {
  Value tu = mul(b, u, b.broadcast_in_dim(tau, u.dims(), {0}));
  return sub(b, x, mul(b, b.broadcast_in_dim(tu, x.dims(), {0, 1}), b.broadcast_in_dim(w, x.dims(), {0, 2})));
}
// The sum over `dim` as a balanced tree of additions (the halves added pairwise): rounding grows with
// log2(n), not n as in a running sum, which brings Jacobi's singular values and eigenvalues as close to the
// exact ones as LAPACK's.
Value tree_sum(Builder& b, Value x, int64_t dim) {
  int64_t n = x.dims()[dim], p = 1;
  while (p < n) p *= 2;
  if (p != n) {
    Dims lo(x.rank(), 0), hi(x.rank(), 0), in(x.rank(), 0);
    hi[dim] = p - n;
    x = b.pad(x, b.scalar(0, x.elem()), lo, hi, in);
  }
  while (p > 1) {
    p /= 2;
    Dims start(x.rank(), 0), mid = x.dims(), end = x.dims(), one_(x.rank(), 1);
    mid[dim] = p;
    Dims start2 = start;
    start2[dim] = p;
    x = add(b, b.slice(x, start, mid, one_), b.slice(x, start2, end, one_));
  }
  Dims out;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != dim) out.push_back(x.dims()[i]);
  return b.reshape(x, out);
}

// The columns of v [B, n, n] scaled to norm 1: hundreds of rotations leave their norms a few ulps off.
Value unit_columns(Builder& b, Value v) {
  Value norm = b.unary("sqrt", tree_sum(b, mul(b, v, v), 1));
  return div(b, v, b.broadcast_in_dim(norm, v.dims(), {0, 2}));
}

// x y for x [B, r, k], y [B, k, c], as products and a tree sum.
Value product(Builder& b, Value x, Value y) {
  const Dims d{x.dims()[0], x.dims()[1], x.dims()[2], y.dims()[2]};
  return tree_sum(b, mul(b, b.broadcast_in_dim(x, d, {0, 1, 2}), b.broadcast_in_dim(y, d, {0, 2, 3})), 2);
}
Value eye_of(Builder& b, ElementType t, const Dims& d) {  // [..., r, c] with ones on the main diagonal
  const int64_t r = static_cast<int64_t>(d.size());
  return b.select(b.compare(Cmp::EQ, iota_of(b, d, r - 2), iota_of(b, d, r - 1)), splat(b, 1, t, d), splat(b, 0, t, d));
}
double epsilon(ElementType t) {
  return t == ElementType::kF64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
}

// The real float matrices `a` [..., m, n] as [B, m, n], after the same checks as square().
Value matrices(Value a, Builder& b, const char* op) {
  if (!pjrt::is_float(a.elem()) || a.elem() == ElementType::kF16 || a.elem() == ElementType::kBF16)
    throw hlo::Error(std::string(op) + ": float32/float64 only");
  const int64_t m = a.dims()[a.rank() - 2], n = a.dims().back();
  if (m > kMaxUnrolled || n > kMaxUnrolled)
    throw hlo::Error(std::string(op) + ": matrices larger than 64x64 are not lowered (" + std::to_string(m) + "x" +
                     std::to_string(n) + ")");
  return b.reshape(a, {count_of(batch_of(a.dims(), 2)), m, n});
}

// for (i = 0; i < count; ++i) state = body(from + step * i, state), as a while loop: the program does not
// grow with the matrix size (unrolled, a 64-step Householder QR took XLA:CPU minutes to compile). The body
// makes its values in the loop's region from the state: it captures none from outside.
V for_range(Builder& b, int64_t from, int64_t step, int64_t count, V state,
            const std::function<V(Builder&, Value, const V&)>& body) {
  const ElementType s64 = ElementType::kS64;
  V init{b.scalar_i(0, s64)};
  init.insert(init.end(), state.begin(), state.end());
  V out = b.while_loop(
      init, [&](Builder& bb, const V& s) { return V{bb.compare(Cmp::LT, s[0], bb.scalar_i(count, s64))}; },
      [&](Builder& bb, const V& s) {
        Value j = add(bb, bb.scalar_i(from, s64), mul(bb, bb.scalar_i(step, s64), s[0]));
        V next{add(bb, s[0], bb.scalar_i(1, s64))};
        V r = body(bb, j, V(s.begin() + 1, s.end()));
        next.insert(next.end(), r.begin(), r.end());
        return next;
      });
  return V(out.begin() + 1, out.end());
}

// Householder reflector j of a geqrf result: 1 at row j, the stored tail below, 0 above. [B, m]
Value reflector(Builder& b, Value a, Value j) {
  const Dims v{a.dims()[0], a.dims()[1]};
  Value rows = iota_of(b, v, 1);
  return b.select(b.compare(Cmp::GT, rows, at_all(b, j, v)), column(b, a, j),
                  b.select(b.compare(Cmp::EQ, rows, at_all(b, j, v)), splat(b, 1, a.elem(), v), splat(b, 0, a.elem(), v)));
}

struct Reflectors {
  Value a, tau;  // LAPACK's geqrf form: R on and above the diagonal, reflector tails below; tau [B, k]
};

// A = Q R with Q = H_0 ... H_{k-1}, H_j = I - tau_j v_j v_j^T, as LAPACK's geqrf (dlarfg's choice of
// beta = -sign(alpha) ||x||, and H = I when x below the diagonal is zero).
Reflectors householder_qr(Builder& b, Value a) {
  const Dims d = a.dims();
  const int64_t B = d[0], m = d[1], n = d[2], k = std::min(m, n);
  const ElementType t = a.elem();
  V r = for_range(b, 0, 1, k, {a, splat(b, 0, t, {B, k})}, [&](Builder& bb, Value j, const V& s) {
    const Dims v{B, m}, w{B, n}, sd{B};
    Value a = s[0];
    Value rows = iota_of(bb, v, 1);
    Value zero = splat(bb, 0, t, v), zs = splat(bb, 0, t, sd), os = splat(bb, 1, t, sd);
    auto bv = [&](Value x) { return bb.broadcast_in_dim(x, v, {0}); };
    Value x = column(bb, a, j);
    Value below = bb.compare(Cmp::GT, rows, at_all(bb, j, v)), diag = bb.compare(Cmp::EQ, rows, at_all(bb, j, v));
    Value tail = bb.select(below, x, zero);
    Value alpha = entry(bb, x, j);
    // ||x[j:]||, scaled by its largest entry so that the squares neither overflow nor underflow
    Value big = nan_max(bb, reduce(bb, bb.unary("abs", tail), {1}, "maximum", bb.scalar(0, t)), bb.unary("abs", alpha));
    Value safe = bb.select(bb.compare(Cmp::EQ, big, zs), os, big);
    Value st = div(bb, tail, bv(safe));
    Value tail2 = reduce_sum(bb, mul(bb, st, st), {1});
    Value sa = div(bb, alpha, safe);
    Value norm = mul(bb, safe, bb.unary("sqrt", add(bb, mul(bb, sa, sa), tail2)));
    Value beta = bb.select(bb.compare(Cmp::GE, alpha, zs), bb.unary("negate", norm), norm);
    Value trivial = bb.compare(Cmp::EQ, tail2, zs);
    Value tau = bb.select(trivial, zs, div(bb, sub(bb, beta, alpha), beta));
    Value vj = bb.select(below, div(bb, x, bv(bb.select(trivial, os, sub(bb, alpha, beta)))),
                         bb.select(diag, splat(bb, 1, t, v), zero));
    Value wj = bb.select(bb.compare(Cmp::GT, iota_of(bb, w, 1), at_all(bb, j, w)), vt_x(bb, vj, a), splat(bb, 0, t, w));
    a = minus_outer(bb, a, vj, tau, wj);
    Value col = bb.select(below, vj, bb.select(diag, bv(bb.select(trivial, alpha, beta)), x));
    a = bb.select(bb.compare(Cmp::EQ, iota_of(bb, d, 2), at_all(bb, j, d)), bb.broadcast_in_dim(col, d, {0, 1}), a);
    const Dims kd{B, k};
    Value taus = bb.select(bb.compare(Cmp::EQ, iota_of(bb, kd, 1), at_all(bb, j, kd)), bb.broadcast_in_dim(tau, kd, {0}), s[1]);
    return V{a, taus};
  });
  return {r[0], r[1]};
}

// The first p columns of H_0 ... H_{k-1} (as LAPACK's orgqr): [B, m, p].
Value householder_q(Builder& b, Value a, Value tau, int64_t k, int64_t p) {
  Value q = eye_of(b, a.elem(), {a.dims()[0], a.dims()[1], p});
  return for_range(b, k - 1, -1, k, {q, a, tau}, [](Builder& bb, Value j, const V& s) {
    Value v = reflector(bb, s[1], j);
    return V{minus_outer(bb, s[0], v, entry(bb, s[2], j), vt_x(bb, v, s[0])), s[1], s[2]};
  })[0];
}

// Q C, Q^T C, C Q or C Q^T for Q = H_0 ... H_{k-1} (as LAPACK's ormqr).
Value householder_apply(Builder& b, Value a, Value tau, int64_t k, Value x, bool left, bool transpose) {
  const bool forward = left == transpose;  // Q^T C = H_{k-1} ... H_0 C and C Q = C H_0 ... H_{k-1}
  return for_range(b, forward ? 0 : k - 1, forward ? 1 : -1, k, {x, a, tau}, [left](Builder& bb, Value j, const V& s) {
    Value v = reflector(bb, s[1], j), tj = entry(bb, s[2], j), x = s[0];
    x = left ? minus_outer(bb, x, v, tj, vt_x(bb, v, x)) : minus_outer(bb, x, x_v(bb, x, v), tj, v);
    return V{x, s[1], s[2]};
  })[0];
}

std::vector<int64_t> round_robin(int64_t n) {
  std::vector<int64_t> cycle, src(n, 0);
  for (int64_t i = 1; i < n / 2; ++i) cycle.push_back(2 * i);
  for (int64_t i = n / 2 - 1; i >= 0; --i) cycle.push_back(2 * i + 1);
  const size_t len = cycle.size();
  for (size_t i = 0; i < len; ++i) src[cycle[(i + 1) % len]] = cycle[i];
  return src;
}

// The rotation [[c, s], [-s, c]] that diagonalizes [[p, r], [r, q]] (Golub & Van Loan's sym.schur2), with
// the smaller angle; the identity where `keep` or r == 0.
std::pair<Value, Value> jacobi_rotation(Builder& b, Value p, Value q, Value r, Value keep) {
  Value zero = like(b, 0, r), one = like(b, 1, r);
  Value none = orv(b, keep, b.compare(Cmp::EQ, r, zero));
  Value tau = div(b, sub(b, q, p), mul(b, like(b, 2, r), b.select(none, one, r)));
  Value sign = b.select(b.compare(Cmp::GE, tau, zero), one, like(b, -1, r));
  // |tau| so large that tau^2 overflows: t = 1/inf = 0, the rotation the update needs anyway
  Value t = div(b, sign, add(b, b.unary("abs", tau), b.unary("sqrt", add(b, one, mul(b, tau, tau)))));
  Value c = div(b, one, b.unary("sqrt", add(b, one, mul(b, t, t))));
  return {b.select(none, one, c), b.select(none, zero, mul(b, t, c))};
}

// Rotates the pairs (2i, 2i+1) of rows (axis 1) or columns (axis 2) of x [B, r, c]: p' = c p - s q,
// q' = s p + c q, with c, s [B, pairs].
Value rotate(Builder& b, Value x, int64_t axis, Value c, Value s) {
  const int64_t B = x.dims()[0], n = x.dims()[axis], h = n / 2, o = x.dims()[3 - axis];
  const Dims d4 = axis == 1 ? Dims{B, h, 2, o} : Dims{B, o, h, 2}, d3 = axis == 1 ? Dims{B, h, o} : Dims{B, o, h};
  const int64_t pd = axis == 1 ? 2 : 3;
  Value x4 = b.reshape(x, d4);
  auto half = [&](int64_t i) {
    Dims lo(4, 0), hi = d4;
    lo[pd] = i;
    hi[pd] = i + 1;
    return b.reshape(b.slice(x4, lo, hi, {1, 1, 1, 1}), d3);
  };
  Value p = half(0), q = half(1);
  const Dims keep = axis == 1 ? Dims{0, 1} : Dims{0, 2};
  Value cc = b.broadcast_in_dim(c, d3, keep), ss = b.broadcast_in_dim(s, d3, keep);
  Value p2 = sub(b, mul(b, cc, p), mul(b, ss, q)), q2 = add(b, mul(b, ss, p), mul(b, cc, q));
  Dims d1 = d3;
  d1.insert(d1.begin() + pd, 1);
  return b.reshape(b.concatenate({b.reshape(p2, d1), b.reshape(q2, d1)}, pd), x.dims());
}

// 2x2 diagonal blocks of x [B, n, n]: entry (i, j) of every block, [B, n/2].
std::vector<Value> pair_blocks(Builder& b, Value x) {
  const int64_t B = x.dims()[0], h = x.dims()[1] / 2;
  const Dims d5{B, h, 2, h, 2};
  Value x5 = b.reshape(x, d5);
  Value blocks = reduce_sum(b, b.select(b.compare(Cmp::EQ, iota_of(b, d5, 1), iota_of(b, d5, 3)), x5, like(b, 0, x5)), {3});
  std::vector<Value> out;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      out.push_back(b.reshape(b.slice(blocks, {0, 0, i, j}, {B, h, i + 1, j + 1}, {1, 1, 1, 1}), {B, h}));
  return out;  // (0,0), (0,1), (1,0), (1,1)
}

constexpr int64_t kMaxSweeps = 30;

// Jacobi sweeps over `state` (matrices [B, n, .] rotated pairwise, n even): each sweep runs `round`
// n - 1 times (then the order is the starting one again); sweeps continue while `done` (pred[]) is false.
V jacobi_sweeps(Builder& b, V state, int64_t n, const std::function<V(Builder&, const V&)>& round,
                const std::function<Value(Builder&, const V&)>& done) {
  const ElementType s64 = ElementType::kS64;
  V init{b.scalar_i(0, s64), done(b, state)};
  init.insert(init.end(), state.begin(), state.end());
  V out = b.while_loop(
      init,
      [&](Builder& bb, const V& s) {
        return V{andv(bb, bb.compare(Cmp::LT, s[0], bb.scalar_i(kMaxSweeps, s64)), notv(bb, s[1]))};
      },
      [&](Builder& bb, const V& s) {
        V inner{bb.scalar_i(0, s64)};
        inner.insert(inner.end(), s.begin() + 2, s.end());
        V r = bb.while_loop(
            inner, [&](Builder& b2, const V& q) { return V{b2.compare(Cmp::LT, q[0], b2.scalar_i(n - 1, s64))}; },
            [&](Builder& b2, const V& q) {
              V next{add(b2, q[0], b2.scalar_i(1, s64))};
              V moved = round(b2, V(q.begin() + 1, q.end()));
              next.insert(next.end(), moved.begin(), moved.end());
              return next;
            });
        V st(r.begin() + 1, r.end());
        V next{add(bb, s[0], bb.scalar_i(1, s64)), done(bb, st)};
        next.insert(next.end(), st.begin(), st.end());
        return next;
      });
  return V(out.begin() + 2, out.end());
}

Value all_of(Builder& b, Value pred) {  // pred[...] -> pred[]
  Dims all;
  for (int64_t i = 0; i < pred.rank(); ++i) all.push_back(i);
  return reduce(b, pred, all, "and", b.constant(1, Type{ElementType::kPred, {}}));
}

// x scaled so that its largest |entry| is 1 (per matrix), and that scale [B]: keeps squares finite.
std::pair<Value, Value> unit_scaled(Builder& b, Value x) {
  const ElementType t = x.elem();
  Value big = reduce(b, b.unary("abs", x), {1, 2}, "maximum", b.scalar(0, t));
  Value scale = b.select(b.compare(Cmp::EQ, big, like(b, 0, big)), like(b, 1, big), big);
  return {div(b, x, b.broadcast_in_dim(scale, x.dims(), {0})), scale};
}

// The columns of x [B, r, n] in the order perm [B, n] (s64): out[., ., j] = x[., ., perm[j]].
Value permute_columns(Builder& b, Value x, Value perm) {
  const int64_t B = x.dims()[0], r = x.dims()[1], n = x.dims()[2];
  const Dims d4{B, r, n, n};  // [., ., k, j]
  Value hit = b.compare(Cmp::EQ, b.broadcast_in_dim(perm, d4, {0, 3}), iota_of(b, d4, 2));
  return reduce_sum(b, b.select(hit, b.broadcast_in_dim(x, d4, {0, 1, 2}), splat(b, 0, x.elem(), d4)), {2});
}

// The diagonal of x [B, n, n] as [B, n].
Value diagonal(Builder& b, Value x) {
  const Dims& d = x.dims();
  return reduce_sum(b, b.select(b.compare(Cmp::EQ, iota_of(b, d, 1), iota_of(b, d, 2)), x, splat(b, 0, x.elem(), d)), {2});
}

// Sorts w [B, n] (ascending or descending, stable) -> (sorted, the permutation).
std::pair<Value, Value> sort_with_perm(Builder& b, Value w, bool descending) {
  Value idx = iota_of(b, w.dims(), 1);
  auto r = b.sort({w, idx}, 1, true, [descending](Builder& bb, const V& a) {
    return V{bb.compare(descending ? Cmp::GT : Cmp::LT, a[0], a[1])};
  });
  return {r[0], r[1]};
}

// Eigenvalues (ascending, [B, n]) and eigenvectors (columns, [B, n, n]) of the symmetric a [B, n, n].
std::pair<Value, Value> symmetric_eigen(Builder& b, Value a, bool vectors) {
  const int64_t B = a.dims()[0], n = a.dims()[1], np = n + n % 2;
  const ElementType t = a.elem();
  auto [x, scale] = unit_scaled(b, a);
  if (np != n) x = b.pad(x, b.scalar(0, t), {0, 0, 0}, {0, 1, 1}, {0, 0, 0});
  Value v = eye_of(b, t, {B, np, np});
  const std::vector<int64_t> src = round_robin(np);
  const double tol = epsilon(t) * std::sqrt(static_cast<double>(np));
  auto round = [&](Builder& bb, const V& s) {
    std::vector<Value> blk = pair_blocks(bb, s[0]);
    auto [c, sn] = jacobi_rotation(bb, blk[0], blk[3], blk[1], bb.constant(0, Type{ElementType::kPred, blk[1].dims()}));
    Value y = rotate(bb, rotate(bb, s[0], 1, c, sn), 2, c, sn);
    // the entries this round annihilated are zero exactly
    const Dims d = y.dims();
    Value i = iota_of(bb, d, 1), j = iota_of(bb, d, 2);
    Value two = bb.constant_i(2, i.type);
    Value paired = andv(bb, bb.compare(Cmp::EQ, bb.binary("divide", i, two), bb.binary("divide", j, two)), bb.compare(Cmp::NE, i, j));
    y = bb.select(paired, like(bb, 0, y), y);
    Value w = rotate(bb, s[1], 2, c, sn);
    return V{take_axis(bb, take_axis(bb, y, 1, src), 2, src), take_axis(bb, w, 2, src)};
  };
  auto done = [&](Builder& bb, const V& s) {  // ||off(x)||_F <= tol ||x||_F for every matrix
    const Dims& d = s[0].dims();
    Value sq = mul(bb, s[0], s[0]);
    Value off = reduce_sum(bb, bb.select(bb.compare(Cmp::NE, iota_of(bb, d, 1), iota_of(bb, d, 2)), sq, like(bb, 0, sq)), {1, 2});
    Value total = reduce_sum(bb, sq, {1, 2});
    return all_of(bb, bb.compare(Cmp::LE, off, mul(bb, total, like(bb, tol * tol, total))));
  };
  V r = jacobi_sweeps(b, {x, v}, np, round, done);
  // the eigenvalues as Rayleigh quotients v^T A v of the input: rounding accumulated on the rotated
  // diagonal over all sweeps does not reach them
  Value vec = unit_columns(b, b.slice(r[1], {0, 0, 0}, {B, n, n}, {1, 1, 1}));
  Value xs = b.slice(x, {0, 0, 0}, {B, n, n}, {1, 1, 1});
  Value rq = tree_sum(b, mul(b, vec, product(b, xs, vec)), 1);
  auto [w, perm] = sort_with_perm(b, rq, false);
  w = mul(b, w, b.broadcast_in_dim(scale, w.dims(), {0}));
  if (!vectors) return {w, Value{}};
  return {w, permute_columns(b, vec, perm)};
}

struct Svd {
  Value u, s, vh;
};

// A = U S Vh for a [B, m, n] with m >= n, by one-sided Jacobi: rotations of column pairs until every two
// columns of W = A V are orthogonal (to tol relative to their norms); then S = the column norms
// (descending) and U = W S^-1. U is completed (to p = n or m orthonormal columns, and where a singular value
// is zero) through a Householder QR of U itself: Q's columns are U's up to sign, which R's diagonal gives.
Svd svd_tall(Builder& b, Value a, bool vectors, bool full) {
  const int64_t B = a.dims()[0], m = a.dims()[1], n = a.dims()[2], np = n + n % 2;
  const ElementType t = a.elem();
  auto [w, scale] = unit_scaled(b, a);
  if (np != n) w = b.pad(w, b.scalar(0, t), {0, 0, 0}, {0, 0, 1}, {0, 0, 0});
  Value v = eye_of(b, t, {B, np, np});
  const std::vector<int64_t> src = round_robin(np);
  const double tol = epsilon(t) * std::sqrt(static_cast<double>(m));
  auto round = [&](Builder& bb, const V& s) {
    const Dims d4{B, m, np / 2, 2}, d3{B, m, np / 2};
    Value w4 = bb.reshape(s[0], d4);
    Value p = bb.reshape(bb.slice(w4, {0, 0, 0, 0}, {B, m, np / 2, 1}, {1, 1, 1, 1}), d3);
    Value q = bb.reshape(bb.slice(w4, {0, 0, 0, 1}, {B, m, np / 2, 2}, {1, 1, 1, 1}), d3);
    Value alpha = tree_sum(bb, mul(bb, p, p), 1), beta = tree_sum(bb, mul(bb, q, q), 1);
    Value gamma = tree_sum(bb, mul(bb, p, q), 1);
    Value orthogonal = bb.compare(Cmp::LE, bb.unary("abs", gamma),
                                  mul(bb, like(bb, tol, gamma), bb.unary("sqrt", mul(bb, alpha, beta))));
    auto [c, sn] = jacobi_rotation(bb, alpha, beta, gamma, orthogonal);
    Value w2 = rotate(bb, s[0], 2, c, sn), v2 = rotate(bb, s[1], 2, c, sn);
    return V{take_axis(bb, w2, 2, src), take_axis(bb, v2, 2, src)};
  };
  auto done = [&](Builder& bb, const V& s) {  // |w_i . w_j| <= tol ||w_i|| ||w_j|| for all i != j
    const Dims d4{B, m, np, np};
    Value wi = bb.broadcast_in_dim(s[0], d4, {0, 1, 2}), wj = bb.broadcast_in_dim(s[0], d4, {0, 1, 3});
    Value g = reduce_sum(bb, mul(bb, wi, wj), {1});  // [B, np, np]
    Value dg = diagonal(bb, g);
    const Dims d3{B, np, np};
    Value bound = mul(bb, like(bb, tol, g), bb.unary("sqrt", mul(bb, bb.broadcast_in_dim(dg, d3, {0, 1}), bb.broadcast_in_dim(dg, d3, {0, 2}))));
    Value ok = orv(bb, bb.compare(Cmp::EQ, iota_of(bb, d3, 1), iota_of(bb, d3, 2)), bb.compare(Cmp::LE, bb.unary("abs", g), bound));
    return all_of(bb, ok);
  };
  Value a1 = b.slice(w, {0, 0, 0}, {B, m, n}, {1, 1, 1});
  V r = jacobi_sweeps(b, {w, v}, np, round, done);
  // W = A V once more from the input: rounding accumulated on the rotated columns does not reach S
  Value vn = unit_columns(b, b.slice(r[1], {0, 0, 0}, {B, n, n}, {1, 1, 1}));
  w = product(b, a1, vn);
  Value norms = b.unary("sqrt", tree_sum(b, mul(b, w, w), 1));
  auto [sv, perm] = sort_with_perm(b, norms, true);
  Svd out{Value{}, mul(b, sv, b.broadcast_in_dim(scale, sv.dims(), {0})), Value{}};
  if (!vectors) return out;
  w = permute_columns(b, w, perm);
  Value vv = permute_columns(b, vn, perm);
  Value zero = like(b, 0, sv);
  Value denom = b.broadcast_in_dim(b.select(b.compare(Cmp::GT, sv, zero), sv, like(b, 1, sv)), w.dims(), {0, 2});
  Value u = b.select(b.broadcast_in_dim(b.compare(Cmp::GT, sv, zero), w.dims(), {0, 2}), div(b, w, denom), like(b, 0, w));
  Reflectors f = householder_qr(b, u);
  const int64_t p = full ? m : n;
  Value q = householder_q(b, f.a, f.tau, n, p);
  Value rd = diagonal(b, b.slice(f.a, {0, 0, 0}, {B, n, n}, {1, 1, 1}));
  Value sign = b.select(b.compare(Cmp::LT, rd, like(b, 0, rd)), like(b, -1, rd), like(b, 1, rd));
  if (p > n) sign = b.pad(sign, b.scalar(1, t), {0, 0}, {0, p - n}, {0, 0});
  out.u = mul(b, q, b.broadcast_in_dim(sign, q.dims(), {0, 2}));
  out.vh = mT(b, vv);
  return out;
}

// Any shape: a tall matrix directly, a wide one as A^T = U' S V'^T, i.e. A = V' S U'^T.
Svd svd(Builder& b, Value a, bool vectors, bool full) {
  if (a.dims()[1] >= a.dims()[2]) return svd_tall(b, a, vectors, full);
  Svd r = svd_tall(b, mT(b, a), vectors, full);
  if (!vectors) return r;
  return {mT(b, r.vh), r.s, mT(b, r.u)};
}

// Results of empty inputs: zeros (all empty), except the orthogonal factors `eyes` of an m x 0 or 0 x n
// matrix, which are identities as on the CPU.
V empty_results(Ctx& c, std::initializer_list<size_t> eyes) {
  V out;
  for (size_t k = 0; k < c.outs.size(); ++k) {
    bool eye = false;
    for (size_t e : eyes) eye |= e == k;
    if (!c.wanted(k))
      out.push_back(Value{});
    else if (eye && count_of(c.out_dims(k)) > 0)
      out.push_back(eye_of(c.b, c.out_type(k), c.out_dims(k)));
    else
      out.push_back(c.b.constant(0, c.out(k)));
  }
  return out;
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors); only the UPLO triangle is read.
V eigh_row(Ctx& c) {
  Builder& b = c.b;
  const bool vectors = !c.has(2) || c.i(2);
  if (empty_matrices(c.t(0))) return empty_results(c, {});
  Value a = matrices(c.t(0), b, "linalg.eigh");
  if (a.dims()[1] != a.dims()[2]) throw hlo::Error("linalg.eigh: square matrices only");
  const bool upper = c.has(1) && c.arg(1).s == "U";
  const Dims& d = a.dims();
  a = b.select(b.compare(upper ? Cmp::LE : Cmp::GE, iota_of(b, d, 1), iota_of(b, d, 2)), a, mT(b, a));
  auto [w, v] = symmetric_eigen(b, a, vectors);
  V out{b.reshape(w, c.out_dims(0)), Value{}};
  if (c.wanted(1)) out[1] = vectors ? b.reshape(v, c.out_dims(1)) : b.constant(0, c.out(1));
  return out;
}

// _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh)
V svd_row(Ctx& c) {
  Builder& b = c.b;
  const bool full = c.has(1) && c.i(1), vectors = !c.has(2) || c.i(2);
  if (empty_matrices(c.t(0))) return empty_results(c, {0, 2});
  Svd r = svd(b, matrices(c.t(0), b, "linalg.svd"), vectors, full);
  V out = empty_results(c, {});
  out[1] = b.reshape(r.s, c.out_dims(1));
  if (vectors) {
    out[0] = b.reshape(r.u, c.out_dims(0));
    out[2] = b.reshape(r.vh, c.out_dims(2));
  }
  return out;
}

// linalg_qr(A, mode) -> (Q, R); mode "reduced", "complete" or "r" (Q empty).
V qr_row(Ctx& c) {
  Builder& b = c.b;
  const std::string mode = c.has(1) ? c.arg(1).s : "reduced";
  if (empty_matrices(c.t(0))) return empty_results(c, {0});
  Value a = matrices(c.t(0), b, "linalg.qr");
  const int64_t B = a.dims()[0], m = a.dims()[1], n = a.dims()[2], k = std::min(m, n);
  const int64_t p = mode == "complete" ? m : k;
  Reflectors f = householder_qr(b, a);
  Value r = b.slice(f.a, {0, 0, 0}, {B, p, n}, {1, 1, 1});
  const Dims& d = r.dims();
  r = b.select(b.compare(Cmp::LE, iota_of(b, d, 1), iota_of(b, d, 2)), r, like(b, 0, r));
  V out{Value{}, b.reshape(r, c.out_dims(1))};
  out[0] = mode == "r" ? b.constant(0, c.out(0)) : b.reshape(householder_q(b, f.a, f.tau, k, p), c.out_dims(0));
  return out;
}

// geqrf(A) -> (a, tau): LAPACK's compact form.
V geqrf_row(Ctx& c) {
  if (empty_matrices(c.t(0))) return empty_results(c, {});
  Reflectors f = householder_qr(c.b, matrices(c.t(0), c.b, "geqrf"));
  return V{c.b.reshape(f.a, c.out_dims(0)), c.b.reshape(f.tau, c.out_dims(1))};
}

// The reflectors' count k and tau as [B, k] (batch dims of the reflectors' matrices).
Value taus(Ctx& c, size_t k, int64_t B) { return c.b.reshape(c.b.convert(c.t(k), c.t(0).elem()), {B, c.t(k).dims().back()}); }

// linalg_householder_product(A, tau): the first n columns of H_0 ... H_{k-1}.
V householder_product_row(Ctx& c) {
  Builder& b = c.b;
  const int64_t k = c.t(1).dims().back();
  if (count_of(c.out_dims()) == 0) return empty_results(c, {});
  if (k == 0) return one(eye_of(b, c.out_type(), c.out_dims()));
  Value a = matrices(c.t(0), b, "linalg.householder_product");
  Value tau = taus(c, 1, a.dims()[0]);
  return one(b.reshape(householder_q(b, a, tau, k, a.dims()[2]), c.out_dims()));
}

// ormqr(A, tau, C, left, transpose): Q C, Q^T C, C Q or C Q^T.
V ormqr_row(Ctx& c) {
  Builder& b = c.b;
  const int64_t k = c.t(1).dims().back();
  if (count_of(c.out_dims()) == 0) return empty_results(c, {});
  Value x = b.convert(c.t(2), c.out_type());
  if (k == 0) return one(x);
  Value a = matrices(c.t(0), b, "ormqr");
  const int64_t B = a.dims()[0];
  if (count_of(batch_of(x.dims(), 2)) != B) throw hlo::Error("ormqr: batch dims differ");
  x = b.reshape(x, {B, x.dims()[x.rank() - 2], x.dims().back()});
  const bool left = !c.has(3) || c.i(3), transpose = c.has(4) && c.i(4);
  return one(b.reshape(householder_apply(b, a, taus(c, 1, B), k, x, left, transpose), c.out_dims()));
}

const Rows rows = {
    // factorizations and solves (static-shape algorithms above)
    {{"linalg_lu_factor_ex", "linalg_lu_factor_ex.out"}, lu_factor_row},
    {{"_linalg_det", "_linalg_det.result"}, det_row},
    {{"_linalg_slogdet", "_linalg_slogdet.sign"}, slogdet_row},
    {{"_linalg_solve_ex", "_linalg_solve_ex.result"}, solve_row},
    {{"linalg_inv_ex", "linalg_inv_ex.inverse"}, inv_row},
    {{"linalg_cholesky_ex", "linalg_cholesky_ex.L"}, [](Ctx& c) { return cholesky_row(c, c.has(1) && c.i(1), true); }},
    {{"cholesky", "cholesky.out"}, [](Ctx& c) { return cholesky_row(c, c.has(1) && c.i(1), false); }},
    {{"_cholesky_solve_helper"}, [](Ctx& c) { return cholesky_solve_row(c, false); }},
    {{"cholesky_inverse", "cholesky_inverse.out"}, [](Ctx& c) { return cholesky_solve_row(c, true); }},
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
       Value a = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h, true);
       Lu f = lu_factor(*m, a);
       return unpack(c, *m, f.lu, f.perm);
     }},
    {{"lu_unpack", "lu_unpack.out"}, [](Ctx& c) {
       Mat* m;
       std::unique_ptr<Mat> h;
       if (empty_matrices(c.t(0))) return constants(c, {});
       Value lu = square(c, c.t(0), batch_of(c.t(0).dims(), 2), m, h, true);
       const int64_t k = std::min(m->n, lu.dims()[2]);
       Value piv = c.b.reshape(c.b.convert(c.t(1), ElementType::kS64), {m->B, k});
       return unpack(c, *m, lu, perm_of(*m, piv));
     }},
    {{"linalg_lu_solve", "linalg_lu_solve.out"}, [](Ctx& c) {
       // (LU, pivots, B, left, adjoint); X A = B is solved as A^T X^T = B^T
       const bool left = !c.has(3) || c.i(3), adjoint = c.has(4) && c.i(4);
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
       Value r = b.convert(c.t(2), lu.elem());
       if (left) return one(b.reshape(lu_solve(*m, f, rhs(c, r, batch, m->n, false), adjoint), out));
       Value rt = mT(b, rhs(c, r, batch, r.dims()[r.rank() - 2], false));
       return one(b.reshape(mT(b, lu_solve(*m, f, rt, !adjoint)), out));
     }},
    // orthogonal factorizations (Householder and Jacobi, above)
    {{"linalg_qr", "linalg_qr.out"}, qr_row},
    {{"geqrf", "geqrf.a"}, geqrf_row},
    {{"linalg_householder_product", "linalg_householder_product.out"}, householder_product_row},
    {{"ormqr", "ormqr.out"}, ormqr_row},
    {{"_linalg_eigh", "_linalg_eigh.eigenvalues"}, eigh_row},
    {{"_linalg_svd", "_linalg_svd.U"}, svd_row},
};

}  // namespace
}  // namespace lowering
