// Sums along the middle dim of x f32[outer, n, inner] on the host (see kernels.h), one custom call.
//
// Why a kernel: XLA:CPU emits a reduction as scalar code (it may not reassociate float adds, so nothing
// vectorizes it). A sum over leading dims (a norm's weight gradient, a bias gradient: [tokens, features]
// -> [features]) walks each output column down its rows, one element a step, a row's stride apart; a sum
// over the last dim becomes a reduce_window and a reduce (its tree-reduction rewrite), two scalar passes.
// In the tiny Llama's compiled training step its five norms' weight gradients alone were a fifth of the
// time spent in XLA's own fusions. Here a column sum adds whole rows into vectors of accumulators (W
// columns each), and a row sum adds W lanes at a time, their lanes added at the end of the row.
// Accumulation: float32 within blocks of kBlock rows (column sums) or kBlock vectors (row sums), the
// blocks' sums added in double, rounded once; every sum adds its terms in index order within a lane.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cpu.h"
#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"
#include "kernels/vec.h"

namespace kernels {
namespace {

constexpr int64_t kBlock = 1024;  // rows (vectors, for a row sum) summed in float32 before the double total
constexpr int64_t kCols = 256;    // columns per work item of a column sum

struct Sum {
  const float* x;
  float* y;
  int64_t outer, n, inner;
};

// y[o, c0:c1] = the sum over i of x[o, i, c0:c1]: W columns a vector, four vectors at a time
template <int W>
TP_INLINE void columns(const Sum& s, int64_t o, int64_t c0, int64_t c1) {
  double total[kCols];
  std::fill(total, total + (c1 - c0), 0.0);
  const float* xo = s.x + o * s.n * s.inner;
  for (int64_t i0 = 0; i0 < s.n; i0 += kBlock) {
    const int64_t i1 = std::min(s.n, i0 + kBlock);
    int64_t c = c0;
    for (; c + 4 * W <= c1; c += 4 * W) {
      Vec<W> a0 = {}, a1 = {}, a2 = {}, a3 = {};
      for (int64_t i = i0; i < i1; ++i) {
        const float* r = xo + i * s.inner + c;
        a0 += vload<W>(r), a1 += vload<W>(r + W), a2 += vload<W>(r + 2 * W), a3 += vload<W>(r + 3 * W);
      }
      for (int l = 0; l < W; ++l) {
        total[c - c0 + l] += a0[l], total[c - c0 + W + l] += a1[l];
        total[c - c0 + 2 * W + l] += a2[l], total[c - c0 + 3 * W + l] += a3[l];
      }
    }
    for (; c + W <= c1; c += W) {
      Vec<W> a = {};
      for (int64_t i = i0; i < i1; ++i) a += vload<W>(xo + i * s.inner + c);
      for (int l = 0; l < W; ++l) total[c - c0 + l] += a[l];
    }
    for (; c < c1; ++c) {
      float a = 0.0f;
      for (int64_t i = i0; i < i1; ++i) a += xo[i * s.inner + c];
      total[c - c0] += a;
    }
  }
  for (int64_t c = c0; c < c1; ++c) s.y[o * s.inner + c] = static_cast<float>(total[c - c0]);
}

// y[o] = the sum of x[o, :] (inner == 1): W lanes a vector, the tail added in order after them
template <int W>
TP_INLINE void row(const Sum& s, int64_t o) {
  const float* r = s.x + o * s.n;
  const int64_t full = s.n / W * W;
  double total = 0.0;
  for (int64_t j0 = 0; j0 < full; j0 += kBlock * W) {
    const int64_t j1 = std::min(full, j0 + kBlock * W);
    Vec<W> a = {};
    for (int64_t j = j0; j < j1; j += W) a += vload<W>(r + j);
    total += lanes_sum<W>(a);
  }
  float tail = 0.0f;
  for (int64_t j = full; j < s.n; ++j) tail += r[j];
  s.y[o] = static_cast<float>(total + tail);
}

template <int W>
TP_INLINE void item_work(const Sum& s, int64_t item) {
  if (s.inner == 1) {
    row<W>(s, item);
    return;
  }
  const int64_t blocks = (s.inner + kCols - 1) / kCols, o = item / blocks, c0 = item % blocks * kCols;
  columns<W>(s, o, c0, std::min(s.inner, c0 + kCols));
}
__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl"), flatten)) void item512(const Sum& s, int64_t item) {
  item_work<16>(s, item);
}
__attribute__((target("avx2,fma"), flatten)) void item256(const Sum& s, int64_t item) { item_work<8>(s, item); }
__attribute__((flatten)) void item_portable(const Sum& s, int64_t item) { item_work<1>(s, item); }

ffi::Error* handle(ffi::CallFrame* f) {
  if (!executing(f)) return nullptr;
  const std::string name = kSumMiddle;
  if (f->args.size != 1 || f->rets.size != 1 || f->args.types[0] != ffi::kArgBuffer)
    return fail(f, name + ": expected 1 operand and 1 result");
  auto* x = static_cast<ffi::Buffer*>(f->args.args[0]);
  auto* y = static_cast<ffi::Buffer*>(f->rets.rets[0]);
  if (x->rank != 3 || y->rank != 2 || x->dtype != ffi::kF32 || y->dtype != ffi::kF32 || y->dims[0] != x->dims[0] ||
      y->dims[1] != x->dims[2])
    return fail(f, name + ": expected x f32[outer, n, inner] and a result f32[outer, inner]");
  Sum s{static_cast<const float*>(x->data), static_cast<float*>(y->data), x->dims[0], x->dims[1], x->dims[2]};
  if (s.outer * s.inner == 0) return nullptr;
  const Isa is = isa();
  auto* work = is == Isa::kAvx512Bf16 ? item512 : is == Isa::kAvx2 ? item256 : item_portable;
  const int64_t items = s.inner == 1 ? s.outer : s.outer * ((s.inner + kCols - 1) / kCols);
  spread(s.outer * s.n * s.inner < (int64_t{1} << 18), items, [&](int64_t item) { work(s, item); });
  return nullptr;
}

}  // namespace

ffi::Error* sum_middle(ffi::CallFrame* f) { return handle(f); }

}  // namespace kernels
