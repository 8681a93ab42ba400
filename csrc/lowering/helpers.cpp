#include "lowering/helpers.h"

#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "pjrt/session.h"

namespace lowering {
namespace {

using pjrt::is_complex;
using pjrt::is_float;
using pjrt::is_integral;

int category(ElementType t) {
  if (t == ElementType::kPred) return 0;
  if (is_integral(t)) return 1;
  if (is_float(t)) return 2;
  return 3;
}

ElementType to_complex(ElementType t) { return t == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64; }

// torch's combine_categories(higher, lower) from ResultTypeState.
ElementType combine(ElementType higher, ElementType lower) {
  if (higher == ElementType::kInvalid) return lower;
  if (lower == ElementType::kInvalid) return higher;
  if (is_complex(higher)) return higher;
  if (is_complex(lower)) return is_float(higher) ? promote_types(to_complex(higher), lower) : lower;
  if (is_float(higher)) return higher;
  if (higher == ElementType::kPred || is_float(lower)) return promote_types(higher, lower);
  return higher;
}

}  // namespace

ElementType promote_types(ElementType a, ElementType b) {
  if (a == b) return a;
  if (a == ElementType::kInvalid) return b;
  if (b == ElementType::kInvalid) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) {
    ElementType hi = ca > cb ? a : b, lo = ca > cb ? b : a;
    if (is_complex(hi) && lo == ElementType::kF64) return ElementType::kC128;
    return hi;
  }
  size_t wa = pjrt::byte_size(a), wb = pjrt::byte_size(b);
  if (ca == 1) {
    bool sa = pjrt::is_signed_int(a), sb = pjrt::is_signed_int(b);
    if (sa == sb) return wa >= wb ? a : b;
    // mixed signedness: the smallest signed type holding both (u8 + s8 -> s16)
    ElementType u = sa ? b : a, s = sa ? a : b;
    size_t need = std::max(pjrt::byte_size(s), pjrt::byte_size(u) * 2);
    if (need <= 2) return ElementType::kS16;
    if (need <= 4) return ElementType::kS32;
    return ElementType::kS64;
  }
  if (ca == 2) {
    if ((a == ElementType::kF16 && b == ElementType::kBF16) || (a == ElementType::kBF16 && b == ElementType::kF16))
      return ElementType::kF32;
    return wa >= wb ? a : b;
  }
  return wa >= wb ? a : b;  // complex
}

ElementType result_type(const Ctx& c, std::initializer_list<size_t> args) {
  ElementType dim = ElementType::kInvalid, zero = ElementType::kInvalid, wrapped = ElementType::kInvalid;
  for (size_t k : args) {
    if (k >= c.args.size()) continue;
    const Arg& a = c.args[k];
    if (a.kind == Arg::kTensor && a.value.valid()) {
      ElementType t = a.value.elem();
      if (a.weak) {
        // wrapped numbers count by category only: float -> the default dtype, complex -> complex64
        ElementType w = is_complex(t) ? ElementType::kC64 : is_float(t) ? ElementType::kF32 : t;
        if (is_integral(t)) w = ElementType::kS64;
        wrapped = promote_types(wrapped, w);
      } else if (a.value.rank() == 0) {
        zero = promote_types(zero, t);
      } else {
        dim = promote_types(dim, t);
      }
    } else if (a.kind == Arg::kScalar) {
      ElementType t = a.scalar_type;
      ElementType w = is_complex(t) ? ElementType::kC64 : is_float(t) ? ElementType::kF32 : t;
      wrapped = promote_types(wrapped, w);
    }
  }
  return combine(dim, combine(zero, wrapped));
}

Value operand(Ctx& c, size_t k, ElementType type, const Dims& dims) {
  const Arg& a = c.args.at(k);
  Value v;
  if (a.kind == Arg::kScalar && !a.value.valid()) {
    v = is_complex(a.scalar_type) ? c.b.complex(c.b.scalar(a.c.real(), ElementType::kF64),
                                                c.b.scalar(a.c.imag(), ElementType::kF64))
                                  : c.b.scalar(a.d, ElementType::kF64);
  } else {
    v = c.t(k);
  }
  if (v.elem() == ElementType::kPred && is_float_or_complex(type)) {
    // through u8: XLA rewrites x * convert(mask) and x / convert(mask) to selects, which lose
    // inf * 0 = NaN, 0 / 0 = NaN and the sign of -1 * 0; a bool operand is 0 or 1 like any other number
    v = c.b.convert(v, ElementType::kU8);
  }
  return c.b.broadcast_to(c.b.convert(v, type), dims);
}

ElementType accumulation_type(ElementType t) {
  return t == ElementType::kF16 || t == ElementType::kBF16 ? ElementType::kF32 : t;
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = rank == 0 ? 1 : rank;
  if (dim < -r || dim >= r) throw hlo::Error("dimension out of range");
  return dim < 0 ? dim + r : dim;
}

Dims reduction_dims(const Ctx& c, size_t k, int64_t rank) {
  Dims out;
  if (!c.has(k) || c.ints(k).empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : c.ints(k)) {
    if (rank == 0) continue;
    int64_t w = wrap_dim(d, rank);
    bool seen = false;
    for (int64_t e : out) seen |= e == w;
    if (!seen) out.push_back(w);
  }
  return out;
}

Value binary_op(Ctx& c, const char* op, size_t a, size_t b) {
  return c.b.binary(op, operand(c, a), operand(c, b));
}

Value unary_op(Ctx& c, const char* op, size_t a) { return c.b.unary(op, up(c, a)); }

namespace {
Value nan_extremum(Builder& b, const char* op, Value x, Value y) {
  Value r = b.binary(op, x, y);
  if (!pjrt::is_float(x.elem())) return r;
  // a NaN operand wins (x's NaN first, as torch's kernels pick it)
  return b.select(b.compare(hlo::Cmp::NE, x, x), x, b.select(b.compare(hlo::Cmp::NE, y, y), y, r));
}
}  // namespace

Value nan_max(Builder& b, Value x, Value y) { return nan_extremum(b, "maximum", x, y); }
Value nan_min(Builder& b, Value x, Value y) { return nan_extremum(b, "minimum", x, y); }

// An extremum of bfloat16 values is reduced in float32 and rounded back, which is exact (the result is
// one of the values). XLA:CPU computes a bfloat16 reduction in float32 either way, but rounds the running
// value back to bfloat16 after every element (the compiler's excess precision is off: torch rounds every
// op), in software: amax over [4096, 1024] took 25-29 ms, 1.9 ms this way (torch's CPU kernel: 0.7 ms).
// float16 has the hardware's conversions and is faster as it is (0.65 ms; 1.7 ms through float32).
Value reduce(Builder& b, Value x, const Dims& dims, const char* combiner, Value init) {
  std::string op = combiner;
  constexpr ElementType f32 = ElementType::kF32;
  if ((op == "maximum" || op == "minimum") && x.elem() == ElementType::kBF16)
    return b.convert(reduce(b, b.convert(x, f32), dims, combiner, b.convert(init, f32)), x.elem());
  return b.reduce({x}, {init}, dims, [op](Builder& bb, const std::vector<Value>& v) {
    if (op == "maximum") return std::vector<Value>{nan_max(bb, v[0], v[1])};
    if (op == "minimum") return std::vector<Value>{nan_min(bb, v[0], v[1])};
    return std::vector<Value>{bb.binary(op.c_str(), v[0], v[1])};
  })[0];
}

Value lowest(Builder& b, ElementType t) {
  if (is_float(t)) return b.scalar(-INFINITY, t);
  if (t == ElementType::kPred) return b.scalar(0, t);
  if (pjrt::is_unsigned_int(t)) return b.scalar_i(0, t);
  int64_t bits = static_cast<int64_t>(pjrt::byte_size(t)) * 8;
  return b.scalar_i(bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1)), t);
}

Value highest(Builder& b, ElementType t) {
  if (is_float(t)) return b.scalar(INFINITY, t);
  if (t == ElementType::kPred) return b.scalar(1, t);
  int64_t bits = static_cast<int64_t>(pjrt::byte_size(t)) * 8;
  if (pjrt::is_unsigned_int(t)) return b.scalar_i(bits == 64 ? -1 : (int64_t{1} << bits) - 1, t);
  return b.scalar_i(bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1, t);
}

namespace {
// A float32 sum over a run of adjacent dims on XLA:CPU: the host kernel's (kernels/reduce.cpp), which
// vectorizes what XLA's reduction emits as scalar code. Small sums (under 4096 elements) stay with XLA,
// which fuses them into their neighbours.
Value host_sum(Builder& b, const Value& x, const Dims& dims) {
  if (!host_kernels() || x.elem() != ElementType::kF32 || dims.empty() || x.type.numel() < 4096) return {};
  Dims sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i] != sorted[i - 1] + 1) return {};
  int64_t outer = 1, n = 1, inner = 1;
  Dims out;
  for (int64_t i = 0; i < x.rank(); ++i) {
    const int64_t d = x.dims()[i];
    if (i < sorted.front()) outer *= d, out.push_back(d);
    else if (i <= sorted.back()) n *= d;
    else inner *= d, out.push_back(d);
  }
  Value y = b.custom_call(kernels::kSumMiddle, {b.reshape(x, {outer, n, inner})},
                          {Type{ElementType::kF32, {outer, inner}}})[0];
  return b.reshape(y, out);
}
}  // namespace

Value reduce_sum(Builder& b, Value x, const Dims& dims) {
  if (Value v = host_sum(b, x, dims); v.valid()) return v;
  return reduce(b, x, dims, "add", b.constant(0, Type{x.elem(), {}}));
}

// ------------------------------------------------------------------------------- row shorthands
Value is_inf(Builder& b, Value x) { return b.compare(hlo::Cmp::EQ, b.unary("abs", x), like(b, INFINITY, x)); }
Value is_finite(Builder& b, Value x) { return b.compare(hlo::Cmp::LT, b.unary("abs", x), like(b, INFINITY, x)); }

ElementType compute_type(ElementType t) {
  ElementType a = accumulation_type(t);
  return pjrt::is_float(a) ? a : ElementType::kF32;
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

Dims iota_dims(int64_t lo, int64_t hi) {
  Dims d;
  for (int64_t i = lo; i < hi; ++i) d.push_back(i);
  return d;
}

Value scatter_add_rows(Builder& b, Value zeros, Value idx, Value updates) {
  hlo::ScatterDims sd{iota_dims(1, updates.rank()), {0}, {0}, 1};
  return b.scatter(zeros, idx, updates, sd, [](Builder& bb, const std::vector<Value>& a) {
    return std::vector<Value>{bb.binary("add", a[0], a[1])};
  });
}

Value const_i64(Builder& b, const std::vector<int64_t>& v) {
  if (v.empty()) return b.constant_i(0, Type{ElementType::kS64, {0}});
  std::string s = "value = dense<[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]> : tensor<" + std::to_string(v.size()) + "xi64>";
  return b.raw("stablehlo.constant", s, {}, Type{ElementType::kS64, {static_cast<int64_t>(v.size())}});
}

Value const_float(Builder& b, const std::vector<double>& v, ElementType t) {
  const bool dbl = t == ElementType::kF64;
  ElementType ft = dbl ? ElementType::kF64 : ElementType::kF32;
  if (v.empty()) return b.constant(0, Type{ft, {0}});
  std::string s = "value = dense<[";
  char hex[32];
  for (size_t i = 0; i < v.size(); ++i) {
    if (dbl) {
      uint64_t bits;
      std::memcpy(&bits, &v[i], sizeof bits);
      std::snprintf(hex, sizeof hex, "0x%016llX", static_cast<unsigned long long>(bits));
    } else {
      float f = static_cast<float>(v[i]);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      std::snprintf(hex, sizeof hex, "0x%08X", bits);
    }
    s += (i ? ", " : "");
    s += hex;
  }
  s += "]> : tensor<" + std::to_string(v.size()) + "x" + (dbl ? "f64" : "f32") + ">";
  return b.raw("stablehlo.constant", s, {}, Type{ft, {static_cast<int64_t>(v.size())}});
}

Value bcast_kept(Builder& b, Value v, const Dims& dims, const Dims& reduced) {
  Dims kept;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    bool r = false;
    for (int64_t d : reduced) r |= d == i;
    if (!r) kept.push_back(i);
  }
  return b.broadcast_in_dim(b.reshape(v, [&] {
                              Dims kd;
                              for (int64_t i : kept) kd.push_back(dims[i]);
                              return kd;
                            }()),
                            dims, kept);
}

Value slice_at(Builder& b, Value x, int64_t dim, int64_t i, int64_t len) {
  Dims start(x.rank(), 0), limit = x.dims(), strides(x.rank(), 1);
  start[dim] = i;
  limit[dim] = i + len;
  return b.slice(x, start, limit, strides);
}

namespace {
// The dims 0..rank-1 without `axis`: the window dims of a gather or scatter along `axis`.
Dims all_but(int64_t rank, int64_t axis) {
  Dims d;
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis) d.push_back(i);
  return d;
}
}  // namespace

Value take_axis(Builder& b, Value x, int64_t axis, const std::vector<int64_t>& idx) {
  const int64_t n = static_cast<int64_t>(idx.size());
  Dims out = x.dims();
  out[axis] = n;
  if (numel(out) == 0) return b.constant(0, Type{x.elem(), out});
  hlo::GatherDims g{all_but(x.rank(), axis), {axis}, {axis}, 1};
  Dims sizes = x.dims();
  sizes[axis] = 1;
  return b.gather(x, b.reshape(const_i64(b, idx), {n, 1}), g, sizes, out);
}

Value scatter_add_axis(Builder& b, Value acc, int64_t axis, const std::vector<int64_t>& idx, Value upd) {
  const int64_t n = static_cast<int64_t>(idx.size());
  if (n == 0 || upd.type.numel() == 0 || acc.type.numel() == 0) return acc;
  hlo::ScatterDims s{all_but(upd.rank(), axis), {axis}, {axis}, 1};
  return b.scatter(acc, b.reshape(const_i64(b, idx), {n, 1}), upd, s, [](Builder& bb, const std::vector<Value>& a) {
    return std::vector<Value>{bb.binary("add", a[0], a[1])};
  });
}

namespace {
Dims last_two_swapped(int64_t rank) {  // the permutation of a matrix transpose over `rank` >= 2 dims
  Dims perm = iota_dims(0, rank);
  std::swap(perm[rank - 2], perm[rank - 1]);
  return perm;
}
}  // namespace

Value swap_last_two(Builder& b, Value x) {
  const Dims& d = x.dims();
  const size_t bytes = pjrt::byte_size(x.elem());
  if (!host_kernels() || (bytes != 2 && bytes != 4 && bytes != 8)) return b.transpose(x, last_two_swapped(x.rank()));
  const int64_t r = d[d.size() - 2], c = d.back(), batch = x.type.numel() / std::max<int64_t>(1, r * c);
  Dims out = d;
  std::swap(out[out.size() - 2], out.back());
  Value y = b.custom_call(kernels::kTranspose, {b.reshape(x, {batch, r, c})}, {Type{x.elem(), {batch, c, r}}})[0];
  return b.reshape(y, out);
}

Value transposed_copy(Ctx& c, size_t k) {
  const Value& v = c.t(k);
  if (v.rank() < 2 || v.type.numel() < 65536) return v;
  const Dims swapped = last_two_swapped(v.rank());
  if (c.arg(k).layout != swapped) return v;
  return swap_last_two(c.b, c.b.transpose(v, swapped));  // the transposes cancel: the storage order
}

bool host_kernels() {
  pjrt::Session* s = pjrt::Session::get_or_null();
  if (!s || !s->host_kernels()) return false;
  if (!Builder::two_variants) return true;
  // Lowering for deviceless targets too (hlo::Builder::per_variant): the host kernels are this device's
  // variant; outside a per-variant scope, the program must suit both, so no kernel.
  if (hlo::lowering_variant() != 0) return false;
  hlo::note_variant_choice();
  return true;
}

namespace {
// hlo::Builder::materialize on XLA:CPU: the host kernel's copy, which XLA's fusion cannot look into.
Value copy_of(Builder& b, Value v) {
  const size_t bytes = pjrt::byte_size(v.elem());
  if (!host_kernels() || (bytes != 2 && bytes != 4 && bytes != 8)) return v;
  return b.custom_call(kernels::kCopy, {v}, {v.type})[0];
}
const bool copy_installed = (Builder::materialize = copy_of, true);

// hlo::Builder::product on XLA:CPU: float32 products of at least 8 rows go to the host kernel
// (kernels/matmul.cpp; at a small model's sizes an eager product, its launch included, 1.3-2.7x faster than with
// XLA's dot). Tiny products (a few thousand multiply-adds) and vector products stay with the dot, which XLA
// fuses or runs inline. Large ones go to the kernel too, for accuracy: XLA's dot (Eigen's contraction) sums
// all of k in one running sum where the CPU's caches let its blocking take k whole (seen on a 2-core
// EPYC: [600, 1024] x [1024, 1024] 2.4e-4 from the float64 result, torch's CPU product 5.1e-5, the
// kernel's blocks of k 3.3e-5), at a cost: there, XLA's dot of [2048, 1024] x [1024, 1024] was about
// 1.2-1.5x faster than the kernel.
Value host_product(Builder& b, const Builder::Product& p) {
  constexpr ElementType f32 = ElementType::kF32;
  if (!host_kernels() || p.a.elem() != f32 || p.b.elem() != f32 || p.result != f32) return {};
  const int64_t r = p.a.rank();
  const int64_t m = p.a.dims()[p.a_t ? r - 1 : r - 2], k = p.a.dims()[p.a_t ? r - 2 : r - 1];
  const int64_t n = p.b.dims()[p.b_t ? r - 2 : r - 1];
  int64_t batch = 1;
  for (int64_t i = 0; i + 2 < r; ++i) batch *= p.a.dims()[i];
  const int64_t macs = batch * m * n * k;
  if (m < 8 || n < 16 || k < 8 || macs < (int64_t{1} << 15)) return {};
  const char* target = p.a_t ? (p.b_t ? kernels::kMatmulTT : kernels::kMatmulTN)
                             : (p.b_t ? kernels::kMatmulNT : kernels::kMatmulNN);
  Dims out(p.a.dims().begin(), p.a.dims().end() - 2);
  out.push_back(m);
  out.push_back(n);
  return b.custom_call(target, {p.a, p.b}, {Type{f32, out}})[0];
}
const bool product_installed = (Builder::product = host_product, true);
}  // namespace

Value fused_mul_add(Builder& b, Value x, Value y, Value z) {
  if (x.elem() != ElementType::kF32) return add(b, mul(b, x, y), z);
  constexpr ElementType f64 = ElementType::kF64;
  Value r = add(b, mul(b, b.convert(x, f64), b.convert(y, f64)), b.convert(z, f64));
  return b.convert(r, ElementType::kF32);
}

Value add_alpha(Ctx& c, size_t a, size_t b, size_t alpha, double sign) {
  Value x = operand(c, a), y = operand(c, b);
  ElementType t = c.out_type();
  if ((t == ElementType::kBF16 || t == ElementType::kF16) && c.has(alpha)) {
    x = c.b.convert(x, ElementType::kF32);
    y = mul(c.b, c.b.convert(y, ElementType::kF32), c.b.convert(operand(c, alpha), ElementType::kF32));
    return c.b.convert(sign < 0 ? sub(c.b, x, y) : add(c.b, x, y), t);
  }
  if (c.has(alpha)) y = c.b.binary("multiply", y, operand(c, alpha));
  if (sign < 0) return c.b.binary("subtract", x, y);
  if (c.out_type() == ElementType::kPred) return c.b.binary("or", x, y);
  return c.b.binary("add", x, y);
}

Value lerp(Ctx& c) {
  ElementType t = c.out_type(), ct = accumulation_type(t);
  Value s = c.b.convert(operand(c, 0), ct), e = c.b.convert(operand(c, 1), ct);
  Value w = operand(c, 2, ct, c.out_dims()), d = sub(c.b, e, s);
  Value low = add(c.b, s, mul(c.b, w, d));
  if (pjrt::is_complex(t)) return low;
  Value high = sub(c.b, e, mul(c.b, d, sub(c.b, like(c.b, 1, w), w)));
  Value small = c.b.compare(hlo::Cmp::LT, c.b.unary("abs", w), like(c.b, 0.5, w));
  return c.b.convert(c.b.select(small, low, high), t);
}

// The CPU's kernels: self + value * t1 * t2 and self + value * t1 / t2, in that order, in f32 for
// f16/bf16 with the value as a float (not rounded to the tensors' type), rounded once.
Value addcmul(Ctx& c) {
  const ElementType t = c.out_type();
  Value p = mul(c.b, mul(c.b, up(c, 3), up(c, 1)), up(c, 2));
  return c.b.convert(add(c.b, up(c, 0), p), t);
}
Value addcdiv(Ctx& c) {
  const ElementType t = c.out_type();
  Value q = div(c.b, mul(c.b, up(c, 3), up(c, 1)), up(c, 2));
  return c.b.convert(add(c.b, up(c, 0), q), t);
}

Value check(Builder& b, Value bad, Value values, const std::string& message, bool index_error) {
  const int64_t n = bad.type.numel();
  if (!b.can_check() || n == 0) return Value{};
  const ElementType s64 = ElementType::kS64;
  Value flat = b.reshape(bad, {n});
  Value iota = b.iota(Type{s64, {n}}, 0);
  Value pos = reduce(b, b.select(flat, iota, b.constant_i(n, iota.type)), {0}, "minimum", b.scalar_i(n, s64));
  Value failed = b.compare(hlo::Cmp::LT, pos, b.scalar_i(n, s64));
  Value first = b.select(failed, b.binary("add", pos, b.scalar_i(1, s64)), b.scalar_i(0, s64));
  Value value = b.scalar_i(0, s64);
  if (values.valid()) {
    Value at = b.compare(hlo::Cmp::EQ, iota, b.broadcast_to(pos, {n}));
    Value v = b.reshape(b.convert(values, s64), {n});
    value = reduce(b, b.select(at, v, b.constant_i(0, v.type)), {0}, "add", b.scalar_i(0, s64));
  }
  b.add_check({b.concatenate({b.reshape(first, {1}), b.reshape(value, {1})}, 0), message, index_error});
  return failed;
}

Value checked_index(Builder& b, Value idx, int64_t size, const IndexCheck& how) {
  if (!pjrt::is_integral(idx.elem()) || idx.elem() == ElementType::kPred)
    throw hlo::Error("index tensors must be integers");
  Value raw = b.convert(idx, ElementType::kS64);
  Value zero = b.constant_i(0, raw.type), n = b.constant_i(size, raw.type);
  Value negative = b.compare(hlo::Cmp::LT, raw, zero);
  Value wrapped = how.wrap ? b.select(negative, b.binary("add", raw, n), raw) : raw;
  if (!b.can_check()) return wrapped;
  Value bad = b.binary("or", b.compare(hlo::Cmp::LT, wrapped, zero), b.compare(hlo::Cmp::GE, wrapped, n));
  const std::string message = !how.message.empty() ? how.message
      : how.prefix + "index {value} is out of bounds for dimension " + std::to_string(how.dim) + " with size " +
            std::to_string(size);
  Value failed = check(b, bad, raw, message, how.index_error);
  if (!how.write || !failed.valid()) return wrapped;
  return b.select(b.broadcast_to(failed, wrapped.dims()), n, wrapped);
}

}  // namespace lowering
