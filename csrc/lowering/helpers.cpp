#include "lowering/helpers.h"

#include <cmath>
#include <limits>

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

Value unary_op(Ctx& c, const char* op, size_t a) { return c.b.unary(op, operand(c, a)); }

Value reduce(Builder& b, Value x, const Dims& dims, const char* combiner, Value init) {
  std::string op = combiner;
  return b.reduce({x}, {init}, dims, [op](Builder& bb, const std::vector<Value>& v) {
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

Value reduce_sum(Builder& b, Value x, const Dims& dims) {
  return reduce(b, x, dims, "add", b.constant(0, Type{x.elem(), {}}));
}

}  // namespace lowering
