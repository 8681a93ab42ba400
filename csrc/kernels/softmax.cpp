// Softmax and log-softmax along the last dim, and their gradients, on the host (see kernels.h), each as
// one custom call.
//
// Why kernels: XLA:CPU computes them as separate passes over the rows (the maximum, the exponentials,
// their sum, the division), and its reductions along the last dim are slow: [256, 256] log_softmax
// (a small model's loss over its vocabulary) and its gradient took 30-60 us each inside a program. Here a
// row is read into vectors once per pass: the maximum (NaN-aware, as the lowering's), exp(x - max) and
// its sum, then the division (softmax) or x - max - log(sum) (log-softmax); the same formulas as the
// StableHLO lowering (lowering/reduction.cpp: a row of -inf takes 0 as its maximum), a row's last partial
// vector with -inf in the lanes past its end. Rows are spread over the kernels' threads in blocks.
#include <cmath>
#include <string>

#include "kernels/cpu.h"
#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"
#include "kernels/vec.h"

namespace kernels {
namespace {

// f(v, j, lanes) for each vector of row x[0, n): whole ones, then the last with `fill` past the row
template <int W, class F>
TP_INLINE void each_vector(const float* x, int64_t n, float fill, const F& f) {
  const int64_t full = n / W * W;
  for (int64_t j = 0; j < full; j += W) f(vload<W>(x + j), j, W);
  if (full < n) f(vload_part<W>(x + full, n - full, fill), full, n - full);
}
template <int W>
TP_INLINE void store(float* y, int64_t j, int64_t lanes, Vec<W> v) {
  if (lanes == W) vstore<W>(y + j, v);
  else vstore_part<W>(y + j, v, lanes);
}

template <int W>
TP_INLINE void forward_row(const float* x, float* y, int64_t n, bool log) {
  Vec<W> m_v = splat<W>(kNegInf);
  IVec<W> nan_v = {};
  each_vector<W>(x, n, kNegInf, [&](Vec<W> v, int64_t, int64_t) {
    nan_v |= v != v;
    m_v = v > m_v ? v : m_v;
  });
  bool nan = false;
  for (int i = 0; i < W; ++i) nan |= nan_v[i] != 0;
  float m = nan ? std::numeric_limits<float>::quiet_NaN() : lanes_max<W>(m_v);
  if (m == kNegInf) m = 0.0f;  // a row of -inf (as the lowering)
  Vec<W> s_v = {};
  each_vector<W>(x, n, kNegInf, [&](Vec<W> v, int64_t j, int64_t lanes) {
    const Vec<W> e = vexp<W>(v - m);
    if (!log) store<W>(y, j, lanes, e);
    s_v += e;
  });
  const float s = lanes_sum<W>(s_v);
  if (log) {
    const float ls = std::log(s);
    each_vector<W>(x, n, 0.0f, [&](Vec<W> v, int64_t j, int64_t lanes) { store<W>(y, j, lanes, (v - m) - ls); });
  } else {
    each_vector<W>(y, n, 0.0f, [&](Vec<W> e, int64_t j, int64_t lanes) { store<W>(y, j, lanes, e / s); });
  }
}

// softmax: dx = y (g - sum(g y)); log-softmax: dx = g - exp(y) sum(g)
template <int W>
TP_INLINE void backward_row(const float* g, const float* y, float* dx, int64_t n, bool log) {
  auto y_at = [&](int64_t j, int64_t lanes) { return lanes == W ? vload<W>(y + j) : vload_part<W>(y + j, lanes, 0.0f); };
  Vec<W> s_v = {};
  each_vector<W>(g, n, 0.0f, [&](Vec<W> v, int64_t j, int64_t lanes) { s_v += log ? v : v * y_at(j, lanes); });
  const float s = lanes_sum<W>(s_v);
  each_vector<W>(g, n, 0.0f, [&](Vec<W> v, int64_t j, int64_t lanes) {
    const Vec<W> yv = y_at(j, lanes);
    store<W>(dx, j, lanes, log ? v - vexp<W>(yv) * s : yv * (v - s));
  });
}

struct Rows {
  const float *x, *g;  // forward: x; backward: g and x = y (the forward's result)
  float* out;
  int64_t rows, n;
  bool log, backward;
};

template <int W>
TP_INLINE void rows_work(const Rows& r, int64_t r0, int64_t r1) {
  for (int64_t i = r0; i < r1; ++i) {
    if (r.backward) backward_row<W>(r.g + i * r.n, r.x + i * r.n, r.out + i * r.n, r.n, r.log);
    else forward_row<W>(r.x + i * r.n, r.out + i * r.n, r.n, r.log);
  }
}
__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl"), flatten)) void rows512(const Rows& r, int64_t r0, int64_t r1) {
  rows_work<16>(r, r0, r1);
}
__attribute__((target("avx2,fma"), flatten)) void rows256(const Rows& r, int64_t r0, int64_t r1) { rows_work<8>(r, r0, r1); }
__attribute__((flatten)) void rows_portable(const Rows& r, int64_t r0, int64_t r1) { rows_work<1>(r, r0, r1); }

void run(const Rows& r) {
  const Isa is = isa();
  auto* work = is == Isa::kAvx512Bf16 ? rows512 : is == Isa::kAvx2 ? rows256 : rows_portable;
  constexpr int64_t kBlock = 16384;  // elements per work item
  const int64_t per = std::max<int64_t>(1, kBlock / std::max<int64_t>(1, r.n)), items = (r.rows + per - 1) / per;
  spread(r.rows * r.n < 4 * kBlock, items, [&](int64_t item) {
    work(r, item * per, std::min(r.rows, (item + 1) * per));
  });
}

// Forward: x f32[R, N] -> y; backward: g, y f32[R, N] -> dx.
ffi::Error* handle(ffi::CallFrame* f, bool log, bool backward) {
  if (!executing(f)) return nullptr;
  const std::string name = backward ? (log ? kLogSoftmaxBackward : kSoftmaxBackward) : (log ? kLogSoftmax : kSoftmax);
  const int64_t args = backward ? 2 : 1;
  if (f->args.size != args || f->rets.size != 1)
    return fail(f, name + (backward ? ": expected g, y and 1 result" : ": expected x and 1 result"));
  auto* out = static_cast<ffi::Buffer*>(f->rets.rets[0]);
  for (int64_t i = 0; i < args; ++i) {
    auto* a = static_cast<ffi::Buffer*>(f->args.args[i]);
    if (f->args.types[i] != ffi::kArgBuffer || a->dtype != ffi::kF32 || a->rank != 2 || out->rank != 2 ||
        a->dims[0] != out->dims[0] || a->dims[1] != out->dims[1] || out->dtype != ffi::kF32)
      return fail(f, name + ": expected float32 [R, N] operands and a result of their shape");
  }
  Rows r;
  r.g = backward ? static_cast<const float*>(static_cast<ffi::Buffer*>(f->args.args[0])->data) : nullptr;
  r.x = static_cast<const float*>(static_cast<ffi::Buffer*>(f->args.args[args - 1])->data);
  r.out = static_cast<float*>(out->data);
  r.rows = out->dims[0], r.n = out->dims[1], r.log = log, r.backward = backward;
  if (r.rows > 0 && r.n > 0) run(r);
  return nullptr;
}

}  // namespace

ffi::Error* softmax(ffi::CallFrame* f) { return handle(f, false, false); }
ffi::Error* log_softmax(ffi::CallFrame* f) { return handle(f, true, false); }
ffi::Error* softmax_backward(ffi::CallFrame* f) { return handle(f, false, true); }
ffi::Error* log_softmax_backward(ffi::CallFrame* f) { return handle(f, true, true); }

}  // namespace kernels
