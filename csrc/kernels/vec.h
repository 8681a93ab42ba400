// The host kernels' vector code, written once with GCC's vector types: each kernel's work is a template
// on the vector width W (16 floats: 512 bits, 8: 256 bits, 1: plain code), instantiated in functions
// compiled for that instruction set (__attribute__((target(...)), flatten) and picked by kernels::isa().
// Everything here is inlined into those functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kernels {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// (GCC notes that passing such vectors between functions compiled for different instruction sets would
// change the ABI: here they only pass between inlined functions)
#pragma GCC diagnostic ignored "-Wpsabi"
// W floats (or int32s) in one vector; W = 1 is plain code. An attribute on an alias template is dropped by
// GCC: member typedefs keep it.
template <int W>
struct VecOf {
  typedef float f __attribute__((vector_size(W * sizeof(float))));
  typedef int32_t i __attribute__((vector_size(W * sizeof(int32_t))));
};
template <int W>
using Vec = typename VecOf<W>::f;
template <int W>
using IVec = typename VecOf<W>::i;
static_assert(sizeof(Vec<2>) == 8 && sizeof(Vec<16>) == 64 && sizeof(Vec<8>) == 32 && sizeof(Vec<1>) == 4, "vector widths");

#define TP_INLINE __attribute__((always_inline)) inline

template <int W>
TP_INLINE Vec<W> vload(const float* p) {
  Vec<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int W>
TP_INLINE void vstore(float* p, Vec<W> v) { std::memcpy(p, &v, sizeof v); }
// x in every lane: a shuffle of lane 0, which compiles to a broadcast (or a multiply-add's broadcast
// operand); x + Vec{} costs a scalar add first (x + 0 is not x for -0), and GCC builds x - Vec{} lane by
// lane inside the kernels' loops.
template <int W>
TP_INLINE Vec<W> splat(float x) {
  Vec<W> v = {x};
  if constexpr (W == 16) return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  else if constexpr (W == 8) return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);
  else if constexpr (W == 1) return v;
  else return x + Vec<W>{};
}

// e^x lane by lane: x = n ln2 + r, e^r by Cephes' polynomial (within 2 ulp), 2^n through the exponent
// bits; n rounded to nearest by adding and taking away 1.5 * 2^23. Below -87.3 (where e^x is subnormal)
// the result is 0, -inf included; NaN stays NaN.
template <int W>
TP_INLINE Vec<W> vexp(Vec<W> x) {
  const Vec<W> lo = splat<W>(-87.3365447505531f), hi = splat<W>(88.3762626647949f), magic = splat<W>(12582912.0f);
  Vec<W> xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const Vec<W> t = xc * 1.44269504088896341f + magic, fx = t - magic;
  const IVec<W> n = (IVec<W>)t - (IVec<W>)magic;  // the integer fx, from the same bits
  xc = xc - fx * 0.693359375f;
  xc = xc - fx * -2.12194440e-4f;
  Vec<W> y = splat<W>(1.9875691500e-4f);
  y = y * xc + 1.3981999507e-3f;
  y = y * xc + 8.3334519073e-3f;
  y = y * xc + 4.1665795894e-2f;
  y = y * xc + 1.6666665459e-1f;
  y = y * xc + 5.0000001201e-1f;
  y = y * xc * xc + (xc + 1.0f);
  y = y * (Vec<W>)((n + 127) << 23);
  y = x < lo ? Vec<W>{} : y;  // below the range (and -inf): 0
  return x != x ? x : y;     // NaN in, NaN out
}

// A vector's lanes summed pairwise (lanes i += lanes i + W/2, then i + W/4, ...), as a vector reduction
// adds; and their maximum. By halves of the vector (a lane-by-lane loop compiles to many extracts, and
// short rows take two of these each).
template <int W, class Op>
TP_INLINE float lanes(Vec<W> v, Op op) {
  if constexpr (W == 1) {
    return v[0];
  } else {
    Vec<W / 2> lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return lanes<W / 2>(op(lo, hi), op);
  }
}
template <int W>
TP_INLINE float lanes_max(Vec<W> v) {
  return lanes<W>(v, [](auto a, auto b) { return a > b ? a : b; });
}
template <int W>
TP_INLINE float lanes_sum(Vec<W> v) {
  return lanes<W>(v, [](auto a, auto b) { return a + b; });
}

// The first `tail` (< W) elements at x as a vector, `fill` in the lanes past them; and their store
template <int W>
TP_INLINE Vec<W> vload_part(const float* x, int64_t tail, float fill) {
  float b[W];
  for (int i = 0; i < W; ++i) b[i] = fill;
  std::memcpy(b, x, tail * sizeof(float));
  return vload<W>(b);
}
template <int W>
TP_INLINE void vstore_part(float* y, Vec<W> v, int64_t tail) {
  float b[W];
  vstore<W>(b, v);
  std::memcpy(y, b, tail * sizeof(float));
}

}  // namespace kernels
