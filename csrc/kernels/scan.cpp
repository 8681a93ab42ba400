// Running sums and products on the host (see kernels.h): cumsum and cumprod as one custom call.
//
// Why a kernel: a scan in StableHLO is either a reduce_window as long as the axis (XLA:CPU rewrites it
// into a tree: [1024, 1024] float32 in 3.3 ms) or log2(n) shifted adds (XLA fuses them into one loop
// that recomputes the tree per element: 13.6 ms; [8, 151936], a top-p sampling step's cumulative
// probabilities, 38.6 ms). torch's CPU kernel runs one pass in 0.35 ms. This is that pass, with torch's
// accumulation: float32 in double, rounded per element; float64 in double; int64 with wraparound.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"

namespace kernels {
namespace {

template <class T, class Acc, bool Product>
void scan(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  // items: (outer index, block of inner lanes); a block's lanes run along n together (contiguous loads)
  constexpr int64_t kLanes = 256;
  const int64_t blocks = (inner + kLanes - 1) / kLanes;
  if (inner == 1) {  // along the last dim: one running value per row
    Pool::get().run(outer, [&](int64_t o) {
      Acc a = Product ? Acc(1) : Acc(0);
      for (int64_t i = o * n; i < (o + 1) * n; ++i) {
        a = Product ? a * static_cast<Acc>(x[i]) : a + static_cast<Acc>(x[i]);
        y[i] = static_cast<T>(a);
      }
    });
    return;
  }
  Pool::get().run(outer * blocks, [&](int64_t item) {
    const int64_t o = item / blocks, l0 = item % blocks * kLanes, l1 = std::min(inner, l0 + kLanes);
    Acc acc[kLanes];
    for (int64_t l = l0; l < l1; ++l) acc[l - l0] = Product ? Acc(1) : Acc(0);
    const T* xo = x + o * n * inner;
    T* yo = y + o * n * inner;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t l = l0; l < l1; ++l) {
        Acc& a = acc[l - l0];
        const Acc v = static_cast<Acc>(xo[i * inner + l]);  // int64 through uint64: wraps, as torch's
        a = Product ? a * v : a + v;
        yo[i * inner + l] = static_cast<T>(a);
      }
  });
}

template <bool Product>
ffi::Error* handle(ffi::CallFrame* f) {
  if (!executing(f)) return nullptr;
  const std::string name = Product ? kCumprod : kCumsum;
  if (f->args.size != 1 || f->rets.size != 1 || f->args.types[0] != ffi::kArgBuffer)
    return fail(f, name + ": expected 1 operand and 1 result");
  auto* x = static_cast<ffi::Buffer*>(f->args.args[0]);
  auto* y = static_cast<ffi::Buffer*>(f->rets.rets[0]);
  if (x->rank != 3 || y->rank != 3 || x->dtype != y->dtype)
    return fail(f, name + ": expected x[outer, n, inner] and a result of its type and shape");
  for (int i = 0; i < 3; ++i)
    if (x->dims[i] != y->dims[i]) return fail(f, name + ": the result's shape differs from the operand's");
  const int64_t outer = x->dims[0], n = x->dims[1], inner = x->dims[2];
  switch (x->dtype) {
    case ffi::kF32:
      scan<float, double, Product>(static_cast<const float*>(x->data), static_cast<float*>(y->data), outer, n, inner);
      return nullptr;
    case ffi::kF64:
      scan<double, double, Product>(static_cast<const double*>(x->data), static_cast<double*>(y->data), outer, n, inner);
      return nullptr;
    case ffi::kS64:
      scan<int64_t, uint64_t, Product>(static_cast<const int64_t*>(x->data), static_cast<int64_t*>(y->data), outer, n,
                                       inner);
      return nullptr;
    default:
      return fail(f, name + ": float32, float64 or int64 only");
  }
}

}  // namespace

ffi::Error* cumsum(ffi::CallFrame* f) { return handle<false>(f); }
ffi::Error* cumprod(ffi::CallFrame* f) { return handle<true>(f); }

}  // namespace kernels
