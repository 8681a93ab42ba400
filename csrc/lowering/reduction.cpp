// Reduction rows: sums, means, extrema and their indices, variance, norms, logical reductions, scans
// (logcumsumexp too), softmax, nansum, aminmax, trace, segment_reduce, hash_tensor. Half-precision inputs
// accumulate in float32, as torch does. Results are reshaped to the shape inference's output, which takes
// care of keepdim.
#include <cmath>
#include <functional>
#include <limits>

#include "kernels/kernels.h"
#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }

// The input converted to the accumulation type of the output.
Value acc_input(Ctx& c, size_t k = 0) { return c.b.convert(c.t(k), accumulation_type(c.out_type())); }

Value finish(Ctx& c, Value v, size_t k = 0) { return c.b.reshape(v, c.out_dims(k)); }

Value sum_dims(Ctx& c, size_t dims_arg) {
  Value x = acc_input(c);
  if (x.elem() == ElementType::kPred) x = c.b.convert(x, ElementType::kS64);
  return finish(c, reduce_sum(c.b, x, reduction_dims(c, dims_arg, x.rank())));
}

int64_t count(const Value& x, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dims()[d];
  return n;
}

Value mean_dims(Ctx& c, size_t dims_arg) {
  Value x = acc_input(c);
  Dims dims = reduction_dims(c, dims_arg, x.rank());
  Value s = reduce_sum(c.b, x, dims);
  return finish(c, c.b.binary("divide", s, c.b.constant(static_cast<double>(count(x, dims)), s.type)));
}

Value extremum(Builder& b, Value x, const Dims& dims, bool is_max) {
  return reduce(b, x, dims, is_max ? "maximum" : "minimum", is_max ? lowest(b, x.elem()) : highest(b, x.elem()));
}

// (values, indices) along `dim`: the first index of the extreme value; NaN counts as the extreme.
// bfloat16 values are compared in float32 (exact; see reduce() in the helpers).
std::pair<Value, Value> arg_extremum(Builder& b, Value x, int64_t dim, bool is_max) {
  if (x.elem() == ElementType::kBF16) {
    auto [v, i] = arg_extremum(b, b.convert(x, ElementType::kF32), dim, is_max);
    return {b.convert(v, ElementType::kBF16), i};
  }
  Value idx = b.iota(Type{ElementType::kS64, x.dims()}, dim);
  Value init_v = is_max ? lowest(b, x.elem()) : highest(b, x.elem());
  Value init_i = b.scalar_i(0, ElementType::kS64);
  bool is_fp = pjrt::is_float(x.elem());
  auto r = b.reduce({x, idx}, {init_v, init_i}, {dim}, [is_max, is_fp](Builder& bb, const std::vector<Value>& a) {
    Value v1 = a[0], i1 = a[1], v2 = a[2], i2 = a[3];
    Value better = bb.compare(is_max ? Cmp::GT : Cmp::LT, v1, v2);
    Value tie = bb.binary("and", bb.compare(Cmp::EQ, v1, v2), bb.compare(Cmp::LT, i1, i2));
    Value pick1 = bb.binary("or", better, tie);
    if (is_fp) {
      Value n1 = bb.compare(Cmp::NE, v1, v1), n2 = bb.compare(Cmp::NE, v2, v2);
      Value both = bb.binary("and", n1, n2);
      pick1 = bb.select(n1, bb.select(n2, bb.compare(Cmp::LT, i1, i2), bb.scalar(1, ElementType::kPred)),
                        bb.select(n2, bb.scalar(0, ElementType::kPred), pick1));
      (void)both;
    }
    return std::vector<Value>{bb.select(pick1, v1, v2), bb.select(pick1, i1, i2)};
  });
  return {r[0], r[1]};
}

V max_min_dim(Ctx& c, bool is_max) {
  Value x = c.t(0);
  int64_t dim = wrap_dim(c.i(1), x.rank());
  if (x.rank() == 0) return V{c.b.reshape(x, c.out_dims(0)), c.b.constant_i(0, c.out(1))};
  auto [v, i] = arg_extremum(c.b, x, dim, is_max);
  return V{finish(c, v, 0), finish(c, i, 1)};
}

// The first index of the extreme value along `dim` (NaN counts as the extreme) from two plain
// reductions, the extremum and then the least index holding it: XLA:CPU runs one reduction over (value,
// index) pairs 3-4x slower than that (argmax over [8, 151936] float32, a greedy decoding step's
// logits: 2.8 ms, torch's CPU kernel 0.85 ms).
Value first_extreme_index(Builder& b, Value x, int64_t dim, bool is_max) {
  const ElementType t = x.elem();
  Value mb = bcast_kept(b, extremum(b, x, {dim}, is_max), x.dims(), {dim});
  Value hit = b.compare(Cmp::EQ, x, mb);
  if (pjrt::is_float(t)) hit = b.select(b.compare(Cmp::NE, mb, mb), b.compare(Cmp::NE, x, x), hit);
  const int64_t n = x.dims()[dim];
  const ElementType index = n < (int64_t{1} << 31) ? ElementType::kS32 : ElementType::kS64;  // half the bytes
  Type it{index, x.dims()};
  Value idx = b.select(hit, b.iota(it, dim), b.constant_i(n, it));
  return b.convert(reduce(b, idx, {dim}, "minimum", b.scalar_i(n, index)), ElementType::kS64);
}

Value argext(Ctx& c, bool is_max) {
  Value x = c.t(0);
  int64_t dim = 0;
  if (!c.has(1)) {
    x = c.b.reshape(x, {x.type.numel()});
  } else {
    dim = wrap_dim(c.i(1), x.rank());
  }
  if (x.rank() == 0) return c.b.constant_i(0, c.out());
  return finish(c, first_extreme_index(c.b, x, dim, is_max));
}

// Sum of squared deviations over dims, divided by N - correction (correction: run-time scalar arg).
std::pair<Value, Value> var_mean(Ctx& c, size_t dims_arg, size_t correction_arg) {
  ElementType acc = accumulation_type(pjrt::real_type(c.t(0).elem()));
  Value x = c.b.convert(c.t(0), acc);
  Dims dims = reduction_dims(c, dims_arg, x.rank());
  double n = static_cast<double>(count(x, dims));
  Value total = reduce_sum(c.b, x, dims);
  Value mean = c.b.binary("divide", total, c.b.constant(n, total.type));
  Dims kept;
  for (int64_t i = 0; i < x.rank(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) kept.push_back(i);
  }
  Value centered = c.b.binary("subtract", x, c.b.broadcast_in_dim(mean, x.dims(), kept));
  Value ss = reduce_sum(c.b, c.b.binary("multiply", centered, centered), dims);
  Value corr = c.has(correction_arg) ? c.b.convert(c.t(correction_arg), acc) : c.b.scalar(1, acc);
  Value denom = c.b.binary("maximum", c.b.binary("subtract", c.b.constant(n, Type{acc, {}}), corr), c.b.scalar(0, acc));
  Value var = c.b.binary("divide", ss, c.b.broadcast_to(denom, ss.dims()));
  return {var, mean};
}

Value vector_norm(Ctx& c, Value x, const Dims& dims, double ord) {
  ElementType acc = accumulation_type(pjrt::real_type(x.elem()));
  Value a = pjrt::is_complex(x.elem()) ? c.b.unary_to("abs", x, acc) : c.b.unary("abs", c.b.convert(x, acc));
  if (std::isinf(ord)) return extremum(c.b, a, dims, ord > 0);
  if (ord == 0) return reduce_sum(c.b, c.b.convert(c.b.compare(Cmp::NE, a, like(c.b, 0, a)), acc), dims);
  if (ord == 1) return reduce_sum(c.b, a, dims);
  if (ord == 2) return c.b.unary("sqrt", reduce_sum(c.b, c.b.binary("multiply", a, a), dims));
  Value p = c.b.scalar(ord, acc);
  Value s = reduce_sum(c.b, c.b.binary("power", a, c.b.broadcast_to(p, a.dims())), dims);
  return c.b.binary("power", s, c.b.broadcast_to(c.b.scalar(1.0 / ord, acc), s.dims()));
}

Value logical_reduce(Ctx& c, const Dims& dims, bool all) {
  Value x = c.b.convert(c.t(0), ElementType::kPred);
  Value r = reduce(c.b, x, dims, all ? "and" : "or", c.b.scalar(all ? 1 : 0, ElementType::kPred));
  return finish(c, r);
}

// Inclusive scan along `dim` in log2(n) steps (Hillis-Steele): each step combines every element with
// the one `shift` places before it. O(n log n) work, no quadratic reduce_window.
// `combine(later, earlier)` must be associative.
using Combine = std::function<Value(Builder&, Value, Value)>;
Value cumulative(Builder& b, Value x, int64_t dim, const Combine& combine, Value init) {
  if (x.rank() == 0) return x;
  const int64_t n = x.dims()[dim];
  Dims zeros(x.rank(), 0), step(x.rank(), 1);
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Dims low = zeros, high = zeros, limit = x.dims();
    low[dim] = shift;
    limit[dim] = n;
    Value padded = b.pad(x, init, low, high, zeros);  // init fills the first `shift` places
    Value before = b.slice(padded, zeros, limit, step);
    x = combine(b, x, before);
  }
  return x;
}
Value cumulative(Builder& b, Value x, int64_t dim, const char* op, Value init) {
  return cumulative(b, x, dim, [op](Builder& bb, Value u, Value v) { return bb.binary(op, u, v); }, init);
}

// hash_tensor(self, dim, keepdim, mode=0): the xor of the elements' bits, each element first widened to
// 64 bits as torch does (floats to double, integers and bools to int64).
Value hash_tensor(Ctx& c) {
  Builder& b = c.b;
  if (c.i(3) != 0) throw hlo::Error("hash_tensor: only mode 0 (xor_sum)");
  Value x = c.t(0);
  if (pjrt::is_complex(x.elem())) throw hlo::Error("hash_tensor: complex inputs are not supported");
  x = b.convert(x, pjrt::is_float(x.elem()) ? ElementType::kF64 : ElementType::kS64);
  x = b.bitcast_convert(x, Type{ElementType::kU64, x.dims()});
  Value r = reduce(b, x, reduction_dims(c, 1, x.rank()), "xor", b.scalar_i(0, ElementType::kU64));
  return finish(c, r);
}

// logcumsumexp as torch's CPU kernel: a scan of log(exp(a) + exp(b)) = max + log1p(exp(min - max)),
// where two equal infinities give themselves and NaN propagates, accumulated in double (float for half
// types).
Value logcumsumexp(Ctx& c) {
  Builder& b = c.b;
  ElementType t = c.out_type();
  if (!pjrt::is_float(t)) throw hlo::Error("logcumsumexp: floating-point only");
  ElementType a = t == ElementType::kF16 || t == ElementType::kBF16 ? ElementType::kF32 : ElementType::kF64;
  Value x = b.convert(c.t(0), a);
  if (x.rank() == 0) return x;
  auto log_add_exp = [](Builder& bb, Value u, Value v) {
    Value lo = nan_min(bb, u, v), hi = nan_max(bb, u, v);
    Value r = add(bb, bb.unary("log_plus_one", bb.unary("exponential", sub(bb, lo, hi))), hi);
    Value same_inf = andv(bb, bb.compare(Cmp::EQ, lo, hi), notv(bb, is_finite(bb, lo)));
    return bb.select(same_inf, u, r);
  };
  return cumulative(b, x, wrap_dim(c.i(1), x.rank()), log_add_exp, b.scalar(-INFINITY, a));
}

// softmax pieces along `dim` in the accumulation type.
Value softmax(Builder& b, Value x, int64_t dim, bool log) {
  Dims kept;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != dim) kept.push_back(i);
  Value m = reduce(b, x, {dim}, "maximum", b.scalar(-INFINITY, x.elem()));
  // rows of -inf stay finite-shifted: max of -inf is -inf; use 0 there
  m = b.select(b.compare(Cmp::EQ, m, like(b, -INFINITY, m)), like(b, 0, m), m);
  Value shifted = b.binary("subtract", x, b.broadcast_in_dim(m, x.dims(), kept));
  Value e = b.unary("exponential", shifted);
  Value s = reduce_sum(b, e, {dim});
  if (log) return b.binary("subtract", shifted, b.broadcast_in_dim(b.unary("log", s), x.dims(), kept));
  return b.binary("divide", e, b.broadcast_in_dim(s, x.dims(), kept));
}

// A 0-d value as a one-element vector; others unchanged.
Value vec(Builder& b, Value x) { return x.rank() == 0 ? b.reshape(x, {1}) : x; }

// Softmax and log-softmax along the last dim of float32 values (forward: {x}; backward: {g, y}) on
// XLA:CPU: the host kernel over the rows, [R, N] (kernels.h; XLA computes them in separate passes and its
// reductions along the last dim are slow). Null where the kernel does not take the call.
Value softmax_kernel(Builder& b, const std::vector<Value>& in, int64_t dim, bool log, bool backward) {
  const Value& x = in.back();
  for (const Value& v : in)
    if (v.elem() != ElementType::kF32) return Value{};
  if (!host_kernels() || dim != x.rank() - 1 || x.type.numel() == 0) return Value{};
  const int64_t n = x.dims().back(), rows = x.type.numel() / n;
  std::vector<Value> flat;
  for (const Value& v : in) flat.push_back(b.reshape(v, {rows, n}));
  const char* target = backward ? (log ? kernels::kLogSoftmaxBackward : kernels::kSoftmaxBackward)
                                : (log ? kernels::kLogSoftmax : kernels::kSoftmax);
  return b.reshape(b.custom_call(target, flat, {flat[0].type})[0], x.dims());
}

int64_t dim_of(const Ctx& c, size_t k, const Value& x) { return x.rank() == 0 ? 0 : wrap_dim(c.i(k), x.rank()); }

// cumsum / cumprod along dim (arg 1) in the result's accumulation type (bools as int64): on XLA:CPU the
// host kernel, one pass accumulating as torch's CPU kernel does (float32 in double; see kernels.h; the
// log-step scan took 13.6 ms for [1024, 1024] float32 there, the kernel about torch's 0.35 ms); the
// log-step scan elsewhere and for the types the kernel does not take.
Value running(Ctx& c, bool product) {
  Builder& b = c.b;
  Value x = b.convert(c.t(0), accumulation_type(c.out_type()));
  if (x.elem() == ElementType::kPred) x = b.convert(x, ElementType::kS64);
  const int64_t dim = dim_of(c, 1, x);
  const ElementType t = x.elem();
  // (half-precision results stay on the scan: torch accumulates them in float32, the kernel in double)
  const bool takes = (t == ElementType::kF32 || t == ElementType::kF64 || t == ElementType::kS64) && t == c.out_type();
  if (takes && x.rank() > 0 && x.type.numel() > 0 && host_kernels()) {
    const Dims& d = x.dims();
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < dim; ++i) outer *= d[i];
    for (int64_t i = dim + 1; i < x.rank(); ++i) inner *= d[i];
    Value r = b.reshape(x, {outer, d[dim], inner});
    return b.reshape(b.custom_call(product ? kernels::kCumprod : kernels::kCumsum, {r}, {r.type})[0], d);
  }
  return cumulative(b, x, dim, product ? "multiply" : "add", b.scalar(product ? 1 : 0, t));
}

Value bcast_reduced(Builder& b, Value r, const Value& like_x, int64_t dim) {
  Dims kept;
  for (int64_t i = 0; i < like_x.rank(); ++i)
    if (i != dim) kept.push_back(i);
  return b.broadcast_in_dim(r, like_x.dims(), kept);
}

// histc(self, bins, min, max): counts per equal-width bin, in the input's dtype; elements outside
// [min, max] are not counted. min == max takes the data's range (widened by one each way when that is
// empty too). The bin of x is (x - lo) * bins / (hi - lo), truncated, the top edge in the last bin:
// for floats in the input's precision, every step rounded (half types too), as torch's CPU kernel; for integers in
// int64 arithmetic, as its CUDA kernel (the CPU has none; Transformers' grouped_mm experts path counts
// tokens per expert with an integer histc on every device but the CPU).
Value histc(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  const ElementType t = x.elem();
  const bool integral = !pjrt::is_float(t);
  if (pjrt::is_complex(t) || t == ElementType::kPred) throw hlo::Error("histc: complex and bool inputs are not lowered");
  const int64_t bins = c.i(1), n = x.type.numel();
  if (bins <= 0) throw hlo::Error("histc: bins must be positive");
  if (n == 0) return b.constant(0, Type{t, {bins}});
  // the range, in the type the bins are computed in
  const ElementType ct = integral ? ElementType::kS64 : t;
  Value flat = b.convert(b.reshape(x, {n}), ct);
  auto bound = [&](size_t k) { return b.convert(b.convert(c.t(k), t), ct); };  // as the kernel casts min/max
  Value lo = bound(2), hi = bound(3);
  Value same = b.compare(Cmp::EQ, lo, hi);
  lo = b.select(same, reduce(b, flat, {0}, "minimum", highest(b, ct)), lo);
  hi = b.select(same, reduce(b, flat, {0}, "maximum", lowest(b, ct)), hi);
  same = b.compare(Cmp::EQ, lo, hi);
  lo = b.select(same, b.binary("subtract", lo, scalar_like(b, 1, lo)), lo);
  hi = b.select(same, b.binary("add", hi, scalar_like(b, 1, hi)), hi);
  Value lo_n = b.broadcast_to(lo, {n}), hi_n = b.broadcast_to(hi, {n});
  Value scaled = b.binary("multiply", b.binary("subtract", flat, lo_n), b.constant(static_cast<double>(bins), flat.type));
  Value bin = b.convert(b.binary("divide", scaled, b.binary("subtract", hi_n, lo_n)), ElementType::kS64);
  bin = b.select(b.compare(Cmp::EQ, bin, b.constant_i(bins, bin.type)), b.constant_i(bins - 1, bin.type), bin);
  Value inside = b.binary("and", b.compare(Cmp::GE, flat, lo_n), b.compare(Cmp::LE, flat, hi_n));
  bin = b.select(inside, bin, b.constant_i(bins, bin.type));  // the spill bin, dropped below
  // scatter-add of ones: O(n), where a one-hot comparison would be O(n * bins)
  Value counts = b.constant_i(0, Type{ElementType::kS64, {bins + 1}});
  hlo::ScatterDims d{{}, {0}, {0}, 1};
  counts = b.scatter(counts, b.reshape(bin, {n, 1}), b.constant_i(1, Type{ElementType::kS64, {n}}), d,
                     [](Builder& bb, const V& a) { return V{bb.binary("add", a[0], a[1])}; });
  return b.convert(b.slice(counts, {0}, {bins}, {1}), t);
}

Value nansum(Ctx& c) {
  Builder& b = c.b;
  ElementType acc = accumulation_type(c.out_type());
  Value x = b.convert(c.t(0), acc);
  if (pjrt::is_complex(acc)) throw hlo::Error("nansum: complex inputs are not lowered");
  if (pjrt::is_float(acc)) x = b.select(isnan(b, x), like(b, 0, x), x);
  return b.reshape(reduce_sum(b, x, reduction_dims(c, 1, x.rank())), c.out_dims());
}

V aminmax(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  Dims dims = c.has(1) && x.rank() > 0 ? Dims{wrap_dim(c.i(1), x.rank())} : iota_dims(0, x.rank());
  if (c.has(1) && x.rank() == 0) wrap_dim(c.i(1), 0);
  const bool pred = x.elem() == ElementType::kPred;
  Value mn = reduce(b, x, dims, pred ? "and" : "minimum", highest(b, x.elem()));
  Value mx = reduce(b, x, dims, pred ? "or" : "maximum", lowest(b, x.elem()));
  if (pjrt::is_float(x.elem())) {  // XLA's minimum/maximum may drop NaN: propagate it explicitly
    Value any_nan = reduce(b, isnan(b, x), dims, "or", b.scalar(0, ElementType::kPred));
    mn = b.select(any_nan, b.constant(NAN, mn.type), mn);
    mx = b.select(any_nan, b.constant(NAN, mx.type), mx);
  }
  return V{b.reshape(mn, c.out_dims(0)), b.reshape(mx, c.out_dims(1))};
}

Value trace(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() != 2) throw hlo::Error("trace: expected a matrix");
  ElementType acc = accumulation_type(c.out_type());
  Value xv = b.convert(x, acc);
  if (xv.elem() == ElementType::kPred) xv = b.convert(xv, ElementType::kS64);
  Type it{ElementType::kS64, x.dims()};
  Value diag = b.compare(Cmp::EQ, b.iota(it, 0), b.iota(it, 1));
  Value d = b.select(diag, xv, b.constant(0, xv.type));
  return b.reshape(reduce_sum(b, d, {0, 1}), c.out_dims());
}

// segment_reduce(data, reduce, *, lengths?, indices?, offsets?, axis, unsafe, initial?) along any axis,
// lengths or offsets carrying the data's dims before the axis: each segment reduced starting from `initial` (sum, mean, max, min,
// prod); mean divides by the segment's length, and an empty segment gives initial (NaN without one).
Value segment_reduce(Ctx& c) {
  Builder& b = c.b;
  Value d = c.t(0);
  ElementType t = d.elem();
  if (!pjrt::is_float(t)) throw hlo::Error("segment_reduce: floating-point only");
  if (c.has(3)) throw hlo::Error("segment_reduce: indices are not lowered");
  if (d.rank() == 0) throw hlo::Error("segment_reduce: 0-d data");
  const std::string red = c.arg(1).s;
  // data [P, L, rest...] with P the dims before the axis; lengths/offsets [P, S(+1)]
  const int64_t axis = wrap_dim(c.i(5), d.rank());
  const int64_t P = numel(Dims(d.dims().begin(), d.dims().begin() + axis)), L = d.dims()[axis];
  Dims rest(d.dims().begin() + axis + 1, d.dims().end());
  Value start, end;
  int64_t S;
  if (c.has(2)) {
    Value len = c.t(2);
    if (len.rank() != axis + 1) throw hlo::Error("segment_reduce: lengths of another rank");
    S = len.dims().back();
    len = b.reshape(b.convert(len, ElementType::kS64), {P, S});
    end = len;
    for (int64_t shift = 1; shift < S; shift *= 2)
      end = add(b, end, b.slice(b.pad(end, b.scalar_i(0, ElementType::kS64), {0, shift}, {0, 0}, {0, 0}), {0, 0}, {P, S}, {1, 1}));
    start = sub(b, end, len);
  } else if (c.has(4)) {
    Value off = c.t(4);
    if (off.rank() != axis + 1 || off.dims().back() < 1) throw hlo::Error("segment_reduce: offsets of another rank");
    S = off.dims().back() - 1;
    off = b.reshape(b.convert(off, ElementType::kS64), {P, S + 1});
    start = b.slice(off, {0, 0}, {P, S}, {1, 1});
    end = b.slice(off, {0, 1}, {P, S + 1}, {1, 1});
  } else {
    throw hlo::Error("segment_reduce: lengths or offsets required");
  }
  if (S == 0 || numel(c.out_dims()) == 0) return b.constant(0, c.out());
  d = b.reshape(d, [&] { Dims x{P, L}; x.insert(x.end(), rest.begin(), rest.end()); return x; }());
  Dims full{P, S, L};
  full.insert(full.end(), rest.begin(), rest.end());
  Dims od{P, S};
  od.insert(od.end(), rest.begin(), rest.end());
  Type it{ElementType::kS64, {P, S, L}};
  Value i = b.iota(it, 2);
  Value in = andv(b, b.compare(Cmp::GE, i, b.broadcast_in_dim(start, {P, S, L}, {0, 1})),
                  b.compare(Cmp::LT, i, b.broadcast_in_dim(end, {P, S, L}, {0, 1})));
  Value mask = b.broadcast_in_dim(in, full, {0, 1, 2});
  Dims dd{0};
  for (int64_t k2 = 1; k2 < d.rank(); ++k2) dd.push_back(k2 + 1);
  Value x = b.broadcast_in_dim(d, full, dd);
  Value init = c.has(7) ? operand(c, 7, t, od) : Value{};
  Value count = b.convert(b.broadcast_in_dim(sub(b, end, start), od, {0, 1}), t);
  Value any_nan = reduce(b, andv(b, mask, isnan(b, x)), {2}, "or", b.scalar(0, ElementType::kPred));
  Value r;
  if (red == "sum" || red == "mean") {
    r = reduce_sum(b, b.select(mask, x, b.constant(0, x.type)), {2});
    if (init.valid()) r = add(b, init, r);
    if (red == "mean") {
      Value m = div(b, r, count);
      r = b.select(b.compare(Cmp::EQ, count, like(b, 0, count)), init.valid() ? init : b.constant(NAN, m.type), m);
    }
  } else if (red == "max" || red == "min") {
    bool mx = red == "max";
    Value fill = b.constant(mx ? -INFINITY : INFINITY, x.type);
    r = reduce(b, b.select(mask, x, fill), {2}, mx ? "maximum" : "minimum", b.scalar(mx ? -INFINITY : INFINITY, t));
    if (init.valid()) {
      Value better = b.compare(mx ? Cmp::GT : Cmp::LT, init, r);
      r = b.select(orv(b, better, isnan(b, init)), init, r);
    }
    r = b.select(any_nan, b.constant(NAN, r.type), r);
  } else if (red == "prod") {
    r = reduce(b, b.select(mask, x, b.constant(1, x.type)), {2}, "multiply", b.scalar(1, t));
    if (init.valid()) r = mul(b, init, r);
  } else {
    throw hlo::Error("segment_reduce: unknown reduction");
  }
  return b.reshape(r, c.out_dims());
}

const Rows rows = {
    {{"histc", "histc.out"}, [](Ctx& c) { return one(histc(c)); }},
    {{"sum.dim_IntList", "sum.IntList_out"}, [](Ctx& c) { return one(sum_dims(c, 1)); }},
    {{"sum", "sum.out"}, [](Ctx& c) { return one(sum_dims(c, 99)); }},
    {{"mean.dim", "mean.out"}, [](Ctx& c) { return one(mean_dims(c, 1)); }},
    {{"mean", "mean.dtype_out"}, [](Ctx& c) { return one(mean_dims(c, 99)); }},
    {{"prod.dim_int", "prod.int_out"}, [](Ctx& c) {
       Value x = acc_input(c);
       if (x.elem() == ElementType::kPred) x = c.b.convert(x, ElementType::kS64);
       Dims dims = x.rank() == 0 ? Dims{} : Dims{wrap_dim(c.i(1), x.rank())};
       return one(finish(c, reduce(c.b, x, dims, "multiply", c.b.scalar(1, x.elem()))));
     }},
    {{"prod", "prod.out"}, [](Ctx& c) {
       Value x = acc_input(c);
       if (x.elem() == ElementType::kPred) x = c.b.convert(x, ElementType::kS64);
       return one(finish(c, reduce(c.b, x, reduction_dims(c, 99, x.rank()), "multiply", c.b.scalar(1, x.elem()))));
     }},
    {{"max", "max.unary_out"}, [](Ctx& c) { return one(finish(c, extremum(c.b, c.t(0), reduction_dims(c, 99, c.t(0).rank()), true))); }},
    {{"min", "min.unary_out"}, [](Ctx& c) { return one(finish(c, extremum(c.b, c.t(0), reduction_dims(c, 99, c.t(0).rank()), false))); }},
    {{"amax", "amax.out"}, [](Ctx& c) { return one(finish(c, extremum(c.b, c.t(0), reduction_dims(c, 1, c.t(0).rank()), true))); }},
    {{"amin", "amin.out"}, [](Ctx& c) { return one(finish(c, extremum(c.b, c.t(0), reduction_dims(c, 1, c.t(0).rank()), false))); }},
    {{"max.dim", "max.dim_max"}, [](Ctx& c) { return max_min_dim(c, true); }},
    {{"min.dim", "min.dim_min"}, [](Ctx& c) { return max_min_dim(c, false); }},
    {{"argmax", "argmax.out"}, [](Ctx& c) { return one(argext(c, true)); }},
    {{"argmin", "argmin.out"}, [](Ctx& c) { return one(argext(c, false)); }},
    {{"var.correction", "var.correction_out"}, [](Ctx& c) { return one(finish(c, var_mean(c, 1, 2).first)); }},
    {{"std.correction", "std.correction_out"}, [](Ctx& c) { return one(finish(c, c.b.unary("sqrt", var_mean(c, 1, 2).first))); }},
    {{"var_mean.correction", "var_mean.correction_out"}, [](Ctx& c) {
       auto [v, m] = var_mean(c, 1, 2);
       return V{finish(c, v, 0), finish(c, m, 1)};
     }},
    {{"std_mean.correction", "std_mean.correction_out"}, [](Ctx& c) {
       auto [v, m] = var_mean(c, 1, 2);
       return V{finish(c, c.b.unary("sqrt", v), 0), finish(c, m, 1)};
     }},
    {{"linalg_vector_norm", "linalg_vector_norm.out"}, [](Ctx& c) {
       Value x = c.t(0);
       return one(finish(c, vector_norm(c, x, reduction_dims(c, 2, x.rank()), c.arg(1).d)));
     }, kBakeScalars},
    {{"all", "all.all_out"}, [](Ctx& c) { return one(logical_reduce(c, reduction_dims(c, 99, c.t(0).rank()), true)); }},
    {{"any", "any.all_out"}, [](Ctx& c) { return one(logical_reduce(c, reduction_dims(c, 99, c.t(0).rank()), false)); }},
    {{"all.dim", "all.out"}, [](Ctx& c) {
       Dims d = c.t(0).rank() ? Dims{wrap_dim(c.i(1), c.t(0).rank())} : Dims{};
       return one(logical_reduce(c, d, true));
     }},
    {{"any.dim", "any.out"}, [](Ctx& c) {
       Dims d = c.t(0).rank() ? Dims{wrap_dim(c.i(1), c.t(0).rank())} : Dims{};
       return one(logical_reduce(c, d, false));
     }},
    {{"all.dims", "all.dims_out"}, [](Ctx& c) { return one(logical_reduce(c, reduction_dims(c, 1, c.t(0).rank()), true)); }},
    {{"any.dims", "any.dims_out"}, [](Ctx& c) { return one(logical_reduce(c, reduction_dims(c, 1, c.t(0).rank()), false)); }},
    {{"count_nonzero.dim_IntList"}, [](Ctx& c) {
       Value x = c.b.convert(c.b.convert(c.t(0), ElementType::kPred), ElementType::kS64);
       return one(finish(c, reduce_sum(c.b, x, reduction_dims(c, 1, x.rank()))));
     }},
    {{"logsumexp", "logsumexp.out"}, [](Ctx& c) {
       Value x = c.b.convert(c.t(0), accumulation_type(c.out_type()));
       if (!pjrt::is_float(x.elem())) x = c.b.convert(x, ElementType::kF32);
       Dims dims = reduction_dims(c, 1, x.rank());
       Value m = extremum(c.b, x, dims, true);
       m = c.b.select(c.b.compare(Cmp::EQ, c.b.unary("abs", m), like(c.b, INFINITY, m)), like(c.b, 0, m), m);
       Dims kept;
       for (int64_t i = 0; i < x.rank(); ++i) {
         bool r = false;
         for (int64_t d : dims) r |= d == i;
         if (!r) kept.push_back(i);
       }
       Value s = reduce_sum(c.b, c.b.unary("exponential", c.b.binary("subtract", x, c.b.broadcast_in_dim(m, x.dims(), kept))), dims);
       return one(finish(c, c.b.binary("add", c.b.unary("log", s), m)));
     }},
    {{"cumsum", "cumsum_", "cumsum.out"}, [](Ctx& c) { return one(running(c, false)); }},
    // the public overloads: _logcumsumexp has no meta kernel for shape inference
    {{"logcumsumexp", "logcumsumexp.out"}, [](Ctx& c) { return one(logcumsumexp(c)); }},
    {{"hash_tensor", "hash_tensor.out"}, [](Ctx& c) { return one(hash_tensor(c)); }},
    {{"cumprod", "cumprod_", "cumprod.out"}, [](Ctx& c) { return one(running(c, true)); }},
    // 0-d inputs compute as one-element vectors (a reduction over dim 0 of a scalar)
    {{"_softmax", "_softmax.out"}, [](Ctx& c) {
       Value x = vec(c.b, c.b.convert(c.t(0), accumulation_type(c.t(0).elem())));
       if (Value k = softmax_kernel(c.b, {x}, dim_of(c, 1, x), false, false); k.valid()) return one(finish(c, k));
       return one(finish(c, softmax(c.b, x, dim_of(c, 1, x), false)));
     }},
    {{"_log_softmax", "_log_softmax.out"}, [](Ctx& c) {
       Value x = vec(c.b, c.b.convert(c.t(0), accumulation_type(c.t(0).elem())));
       if (Value k = softmax_kernel(c.b, {x}, dim_of(c, 1, x), true, false); k.valid()) return one(finish(c, k));
       return one(finish(c, softmax(c.b, x, dim_of(c, 1, x), true)));
     }},
    {{"_softmax_backward_data", "_softmax_backward_data.out"}, [](Ctx& c) {
       ElementType acc = accumulation_type(c.out_type());
       Value g = vec(c.b, c.b.convert(c.t(0), acc)), y = vec(c.b, c.b.convert(c.t(1), acc));
       int64_t dim = dim_of(c, 2, y);
       if (Value k = softmax_kernel(c.b, {g, y}, dim, false, true); k.valid()) return one(finish(c, k));
       Value s = reduce_sum(c.b, c.b.binary("multiply", g, y), {dim});
       return one(finish(c, c.b.binary("multiply", y, c.b.binary("subtract", g, bcast_reduced(c.b, s, y, dim)))));
     }},
    {{"_log_softmax_backward_data", "_log_softmax_backward_data.out"}, [](Ctx& c) {
       ElementType acc = accumulation_type(c.out_type());
       Value g = vec(c.b, c.b.convert(c.t(0), acc)), y = vec(c.b, c.b.convert(c.t(1), acc));
       int64_t dim = dim_of(c, 2, y);
       if (Value k = softmax_kernel(c.b, {g, y}, dim, true, true); k.valid()) return one(finish(c, k));
       Value s = reduce_sum(c.b, g, {dim});
       return one(finish(c, c.b.binary("subtract", g, c.b.binary("multiply", c.b.unary("exponential", y), bcast_reduced(c.b, s, y, dim)))));
     }},
    {{"nansum", "nansum.out"}, [](Ctx& c) { return one(nansum(c)); }},
    {{"aminmax", "aminmax.out"}, aminmax},
    {{"trace", "trace.out"}, [](Ctx& c) { return one(trace(c)); }},
    {{"segment_reduce", "segment_reduce.out"}, [](Ctx& c) { return one(segment_reduce(c)); }},
};

}  // namespace
}  // namespace lowering
