// Attention and its gradients on the host (see kernels.h), each as one custom call.
//
// Why kernels: XLA:CPU runs the softmax of scaled_dot_product_attention as separate passes over the
// [L, S] scores of every head (the scale, the mask, the maximum, the exponentials, the sum, the
// division), its reductions along the last dim are slow, and its batched products of one head's small
// matrices pay per head: [1, 16, 512, 64] causal took 18-20 ms against torch's 4.4 ms. Forward: a work
// item is a block of query rows of one head; their scores against the head's keys (the keys transposed
// once per call, so every product is a broadcast multiply-add along contiguous keys, no horizontal sums);
// each row's softmax in one pass (scale, bias up to the causal limit, maximum, exponentials through a
// vector polynomial (Cephes' expf: within 2 ulp), sum, division); then the rows' output as the
// probabilities times the values. Under the causal mask a block reads only the keys its last row sees.
// Backward: a work item is a key/value head, whose dk and dv it sums alone (see grad_work). A row whose
// keys are all masked gives 0 and logsumexp 0, and a NaN score makes its row NaN, as the StableHLO
// lowering (lowering/attention.cpp). The work of an item is written once with GCC's vector types and
// compiled for 512-bit vectors, 256-bit ones and plain code (taken by what the CPU has).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu.h"
#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"
#include "kernels/vec.h"

namespace kernels {
namespace {

// One query row of scores, softmaxed in place: x[0, visible) are the raw scores q.k of the keys it sees,
// bias the row of the additive bias (or null); out: x[0, n) the probabilities (0 past visible) and *lse.
// x has room up to the next multiple of W past visible: the last vector's lanes past visible are -inf, so
// they change neither the maximum nor the sum. Scaled scores plus bias and their maximum; the
// exponentials (of -inf: 0, where every key is masked), their sum and the probabilities. A NaN score
// makes the row NaN, as the lowering's maximum does.
template <int W>
TP_INLINE void softmax_row(float* x, const float* bias, float* lse, int64_t visible, int64_t n, float scale) {
  const int64_t full = visible / W * W, tail = visible - full, end = full + (tail ? W : 0);
  Vec<W> m_v = splat<W>(kNegInf);
  IVec<W> nan_v = {};
  for (int64_t j = 0; j < end; j += W) {
    Vec<W> v = vload<W>(x + j) * scale;
    if (j == full) {  // the last, partial vector
      if (bias) v += vload_part<W>(bias + j, tail, 0.0f);
      IVec<W> lane;
      for (int i = 0; i < W; ++i) lane[i] = i;
      v = lane < static_cast<int32_t>(tail) ? v : splat<W>(kNegInf);
    } else if (bias) {
      v += vload<W>(bias + j);
    }
    vstore<W>(x + j, v);
    nan_v |= v != v;
    m_v = v > m_v ? v : m_v;
  }
  const float m = lanes_max<W>(m_v);
  bool nan = false;
  for (int i = 0; i < W; ++i) nan |= nan_v[i] != 0;
  if (nan) {
    std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
    *lse = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float m_safe = m == kNegInf ? 0.0f : m;
  Vec<W> sum_v = {};
  for (int64_t j = 0; j < end; j += W) {
    const Vec<W> e = vexp<W>(vload<W>(x + j) - m_safe);
    vstore<W>(x + j, e);
    sum_v += e;
  }
  const float sum = lanes_sum<W>(sum_v);
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int64_t j = 0; j < end; j += W) vstore<W>(x + j, vload<W>(x + j) * inv);
  if (end < n) std::fill(x + end, x + n, 0.0f);
  *lse = sum == 0.0f ? 0.0f : m_safe + std::log(sum);
}

// s[R, ld] = q[R, E] . kt[E, :ld] (kt: the keys transposed, rows kt_ld apart; ld a multiple of 2W)
template <int W, int R>
TP_INLINE void scores_rows(const float* q, int64_t e_len, const float* kt, int64_t kt_ld, int64_t ld, float* s) {
  for (int64_t j = 0; j < ld; j += 2 * W) {
    Vec<W> acc[R][2] = {};
    for (int64_t e = 0; e < e_len; ++e) {
      const Vec<W> k0 = vload<W>(kt + e * kt_ld + j), k1 = vload<W>(kt + e * kt_ld + j + W);
      for (int r = 0; r < R; ++r) {
        const Vec<W> qb = splat<W>(q[r * e_len + e]);
        acc[r][0] += qb * k0;
        acc[r][1] += qb * k1;
      }
    }
    for (int r = 0; r < R; ++r) {
      vstore<W>(s + r * ld + j, acc[r][0]);
      vstore<W>(s + r * ld + j + W, acc[r][1]);
    }
  }
}

// Columns [c, c + V) of o[R, ev] = p[R, n] (rows ld apart, elements step apart) . v[n, ev], or o += that (Add)
template <int V, int R, bool Add>
TP_INLINE void output_cols(const float* p, int64_t ld, int64_t step, const float* v, int64_t n, int64_t ev, float* o,
                           int64_t c) {
  Vec<V> acc[R] = {};
  if (Add)
    for (int r = 0; r < R; ++r) acc[r] = vload<V>(o + r * ev + c);
  for (int64_t j = 0; j < n; ++j) {
    const Vec<V> v0 = vload<V>(v + j * ev + c);
    for (int r = 0; r < R; ++r) acc[r] += splat<V>(p[r * ld + j * step]) * v0;
  }
  for (int r = 0; r < R; ++r) vstore<V>(o + r * ev + c, acc[r]);
}

// o[R, ev] = p[R, n] (rows ld apart, elements step apart: a transposed p is read in place) . v[n, ev], or
// o += that (Add). Columns two vectors at a time, then one; heads narrower than a vector (a UNet's 8-wide
// heads under 16-float vectors) take 8- and 4-float vectors before the last few columns go one by one.
template <int W, int R, bool Add = false>
TP_INLINE void output_rows(const float* p, int64_t ld, int64_t step, const float* v, int64_t n, int64_t ev, float* o) {
  int64_t c = 0;
  for (; c + 2 * W <= ev; c += 2 * W) {
    Vec<W> acc[R][2] = {};
    if (Add)
      for (int r = 0; r < R; ++r) acc[r][0] = vload<W>(o + r * ev + c), acc[r][1] = vload<W>(o + r * ev + c + W);
    for (int64_t j = 0; j < n; ++j) {
      const Vec<W> v0 = vload<W>(v + j * ev + c), v1 = vload<W>(v + j * ev + c + W);
      for (int r = 0; r < R; ++r) {
        const Vec<W> pb = splat<W>(p[r * ld + j * step]);
        acc[r][0] += pb * v0;
        acc[r][1] += pb * v1;
      }
    }
    for (int r = 0; r < R; ++r) {
      vstore<W>(o + r * ev + c, acc[r][0]);
      vstore<W>(o + r * ev + c + W, acc[r][1]);
    }
  }
  if (c + W <= ev) {  // one more vector of columns
    output_cols<W, R, Add>(p, ld, step, v, n, ev, o, c);
    c += W;
  }
  if constexpr (W > 8) {
    if (c + 8 <= ev) {
      output_cols<8, R, Add>(p, ld, step, v, n, ev, o, c);
      c += 8;
    }
  }
  if constexpr (W > 4) {
    if (c + 4 <= ev) {
      output_cols<4, R, Add>(p, ld, step, v, n, ev, o, c);
      c += 4;
    }
  }
  for (; c < ev; ++c)  // the last ev % 4 columns
    for (int r = 0; r < R; ++r) {
      float acc = Add ? o[r * ev + c] : 0.0f;
      for (int64_t j = 0; j < n; ++j) acc += p[r * ld + j * step] * v[j * ev + c];
      o[r * ev + c] = acc;
    }
}

// q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev], bias [Bb, Hb, Lb, S] (each of Bb, Hb, Lb 1 or
// full) -> out [B, Hq, L, Ev], lse [B, Hq, L]
struct Problem {
  const float *q, *k, *v, *bias;
  float *out, *lse;
  int64_t B, Hq, Hkv, L, S, E, Ev, Bb, Hb, Lb;
  float scale;
  bool causal;
};

constexpr int64_t kRows = 32;  // query rows per work item

// keys padded to whole pairs of vectors
int64_t padded(int64_t n, int w) { return std::max<int64_t>((n + 2 * w - 1) / (2 * w) * 2 * w, 1); }

// rows [0, rows) of o[rows, ev] (+)= a[rows, n] (rows a_ld apart, elements a_step apart) . b[n, ev], R at
// a time
template <int W, int R, bool Add>
TP_INLINE void product_rows(int64_t rows, const float* a, int64_t a_ld, int64_t a_step, const float* b, int64_t n,
                            int64_t ev, float* o) {
  int64_t r = 0;
  for (; r + R <= rows; r += R) output_rows<W, R, Add>(a + r * a_ld, a_ld, a_step, b, n, ev, o + r * ev);
  for (; r < rows; ++r) output_rows<W, 1, Add>(a + r * a_ld, a_ld, a_step, b, n, ev, o + r * ev);
}

// Work item `item` (a block of kRows query rows of one head): scores against the keys transposed (kt:
// [B * Hkv, E, kt_ld]), R rows at a time; each row's softmax; the rows' output.
template <int W, int R>
TP_INLINE void item_work(const Problem& p, const float* kt, int64_t kt_ld, int64_t item) {
  const int64_t blocks = (p.L + kRows - 1) / kRows, G = p.Hq / p.Hkv;
  const int64_t bh = item / blocks, b = bh / p.Hq, h = bh % p.Hq, kv = b * p.Hkv + h / G;
  const int64_t i0 = item % blocks * kRows, i1 = std::min(p.L, i0 + kRows), rows = i1 - i0;
  const int64_t n = p.causal ? std::min(p.S, i1) : p.S;  // the keys the block's last row sees
  const int64_t ld = padded(n, W);
  std::vector<float> scratch(rows * ld);  // the block's scores, then its probabilities
  float* s = scratch.data();
  const float *q = p.q + (bh * p.L + i0) * p.E, *k = kt + kv * p.E * kt_ld, *v = p.v + kv * p.S * p.Ev;
  int64_t r = 0;
  for (; r + R <= rows; r += R) scores_rows<W, R>(q + r * p.E, p.E, k, kt_ld, ld, s + r * ld);
  for (; r < rows; ++r) scores_rows<W, 1>(q + r * p.E, p.E, k, kt_ld, ld, s + r * ld);
  const float* bias_head = p.bias ? p.bias + ((p.Bb > 1 ? b : 0) * p.Hb + (p.Hb > 1 ? h : 0)) * p.Lb * p.S : nullptr;
  for (r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    softmax_row<W>(s + r * ld, bias_head ? bias_head + (p.Lb > 1 ? i : 0) * p.S : nullptr, p.lse + bh * p.L + i,
                   p.causal ? std::min(p.S, i + 1) : p.S, n, p.scale);
  }
  product_rows<W, R, false>(rows, s, ld, 1, v, n, p.Ev, p.out + (bh * p.L + i0) * p.Ev);
}

// [n, e] rows of x transposed into t[e, t_ld] (zero past n)
TP_INLINE void transpose_keys(const float* x, int64_t n, int64_t e, float* t, int64_t t_ld) {
  std::fill(t, t + e * t_ld, 0.0f);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < e; ++i) t[i * t_ld + j] = x[j * e + i];
}

// The gradients of one key/value head (work item `kv` of B * Hkv): every query head that reads it, block
// by block of query rows, recomputes the scores and probabilities P as the forward does, then
// dP = dout v^T, dS = P (dP - rowsum(dP P)); dq = scale dS k, and into this head's dk += scale dS^T q and
// dv += P^T dout (the item owns them: no two threads add into the same rows).
template <int W, int R>
TP_INLINE void grad_work(const Problem& p, const float* go, float* dq, float* dk, float* dv, int64_t kv) {
  const int64_t G = p.Hq / p.Hkv, b = kv / p.Hkv, S = p.S, E = p.E, Ev = p.Ev;
  const int64_t k_ld = padded(S, W);
  std::vector<float> kt(E * k_ld), vt(Ev * k_ld), sc(kRows * k_ld), dp(kRows * k_ld), lse(kRows);
  const float *k = p.k + kv * S * E, *v = p.v + kv * S * Ev;
  transpose_keys(k, S, E, kt.data(), k_ld);
  transpose_keys(v, S, Ev, vt.data(), k_ld);
  float *dk_h = dk + kv * S * E, *dv_h = dv + kv * S * Ev;
  std::fill(dk_h, dk_h + S * E, 0.0f);
  std::fill(dv_h, dv_h + S * Ev, 0.0f);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t h = (kv % p.Hkv) * G + g, bh = b * p.Hq + h;
    const float* bias_head = p.bias ? p.bias + ((p.Bb > 1 ? b : 0) * p.Hb + (p.Hb > 1 ? h : 0)) * p.Lb * S : nullptr;
    for (int64_t i0 = 0; i0 < p.L; i0 += kRows) {
      const int64_t rows = std::min(kRows, p.L - i0), n = p.causal ? std::min(S, i0 + rows) : S, ld = padded(n, W);
      const float *q = p.q + (bh * p.L + i0) * E, *o_grad = go + (bh * p.L + i0) * Ev;
      float *s = sc.data(), *d = dp.data();
      int64_t r = 0;
      for (; r + R <= rows; r += R) {
        scores_rows<W, R>(q + r * E, E, kt.data(), k_ld, ld, s + r * ld);
        scores_rows<W, R>(o_grad + r * Ev, Ev, vt.data(), k_ld, ld, d + r * ld);
      }
      for (; r < rows; ++r) {
        scores_rows<W, 1>(q + r * E, E, kt.data(), k_ld, ld, s + r * ld);
        scores_rows<W, 1>(o_grad + r * Ev, Ev, vt.data(), k_ld, ld, d + r * ld);
      }
      for (r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        float *pr = s + r * ld, *dr = d + r * ld;
        softmax_row<W>(pr, bias_head ? bias_head + (p.Lb > 1 ? i : 0) * S : nullptr, lse.data() + r,
                       p.causal ? std::min(S, i + 1) : S, n, p.scale);
        const int64_t full = n / W * W;
        Vec<W> dot_v = {};
        for (int64_t j = 0; j < full; j += W) dot_v += vload<W>(dr + j) * vload<W>(pr + j);
        float dot = lanes_sum<W>(dot_v);
        for (int64_t j = full; j < n; ++j) dot += dr[j] * pr[j];
        for (int64_t j = 0; j < full; j += W) vstore<W>(dr + j, vload<W>(pr + j) * (vload<W>(dr + j) - dot));  // dS
        for (int64_t j = full; j < n; ++j) dr[j] = pr[j] * (dr[j] - dot);
      }
      float* dq_rows = dq + (bh * p.L + i0) * E;
      product_rows<W, R, false>(rows, d, ld, 1, k, n, E, dq_rows);
      for (int64_t x = 0; x < rows * E; ++x) dq_rows[x] *= p.scale;
      product_rows<W, R, true>(n, d, 1, ld, q, rows, E, dk_h);           // dS^T [n, rows], read in place
      product_rows<W, R, true>(n, s, 1, ld, o_grad, rows, Ev, dv_h);  // P^T
    }
  }
  for (int64_t x = 0; x < S * E; ++x) dk_h[x] *= p.scale;
}

// the item's work for 512-bit vectors (eight rows at a time: 16 accumulators of 32), 256-bit ones (four
// rows: 8 of 16) and plain code
using ItemFn = void (*)(const Problem&, const float*, int64_t, int64_t);
__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl"), flatten)) void item512(const Problem& p, const float* kt,
                                                                                    int64_t kt_ld, int64_t item) {
  item_work<16, 8>(p, kt, kt_ld, item);
}
__attribute__((target("avx2,fma"), flatten)) void item256(const Problem& p, const float* kt, int64_t kt_ld,
                                                          int64_t item) {
  item_work<8, 4>(p, kt, kt_ld, item);
}
__attribute__((flatten)) void item_portable(const Problem& p, const float* kt, int64_t kt_ld, int64_t item) {
  item_work<1, 4>(p, kt, kt_ld, item);
}
using GradFn = void (*)(const Problem&, const float*, float*, float*, float*, int64_t);
__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl"), flatten)) void grad512(const Problem& p, const float* go,
                                                                                    float* dq, float* dk, float* dv,
                                                                                    int64_t kv) {
  grad_work<16, 8>(p, go, dq, dk, dv, kv);
}
__attribute__((target("avx2,fma"), flatten)) void grad256(const Problem& p, const float* go, float* dq, float* dk,
                                                          float* dv, int64_t kv) {
  grad_work<8, 4>(p, go, dq, dk, dv, kv);
}
__attribute__((flatten)) void grad_portable(const Problem& p, const float* go, float* dq, float* dk, float* dv,
                                            int64_t kv) {
  grad_work<1, 4>(p, go, dq, dk, dv, kv);
}

void attend(const Problem& p) {
  const Isa is = isa();
  const int width = is == Isa::kAvx512Bf16 ? 16 : is == Isa::kAvx2 ? 8 : 1;
  const ItemFn work = is == Isa::kAvx512Bf16 ? item512 : is == Isa::kAvx2 ? item256 : item_portable;
  // [1, 4, 16, 16]: 19 -> 16 us; [8, 4, 32, 16] (with 2 keys/values heads, causal) 92 -> 73 us
  const bool small = p.B * p.Hq * p.L * p.S * (p.E + p.Ev) < (int64_t{1} << 21);
  // every key/value head's keys transposed, [E, S] (rows kt_ld apart, zero past S), once
  const int64_t kt_ld = padded(p.S, width), heads = p.B * p.Hkv;
  std::vector<float> kt(heads * p.E * kt_ld, 0.0f);
  spread(small, heads, [&](int64_t kv) {
    const float* k = p.k + kv * p.S * p.E;
    float* t = kt.data() + kv * p.E * kt_ld;
    for (int64_t j = 0; j < p.S; ++j)
      for (int64_t e = 0; e < p.E; ++e) t[e * kt_ld + j] = k[j * p.E + e];
  });
  const int64_t blocks = (p.L + kRows - 1) / kRows;
  spread(small, p.B * p.Hq * blocks, [&](int64_t item) { work(p, kt.data(), kt_ld, item); });
}

void attend_grad(const Problem& p, const float* go, float* dq, float* dk, float* dv) {
  const Isa is = isa();
  const GradFn work = is == Isa::kAvx512Bf16 ? grad512 : is == Isa::kAvx2 ? grad256 : grad_portable;
  // the forward's bound: the tiny Llama's [8, 4, 32, 16] layers (2 key/value heads, causal) run on the calling
  // thread, whose compiled training step spent more handing them to a helper than it gained (2.72-3.00 ->
  // 2.63-2.83 ms a step, and 6% less CPU: the other core runs the host's work)
  const bool small = p.B * p.Hq * p.L * p.S * (p.E + p.Ev) < (int64_t{1} << 21);
  spread(small, p.B * p.Hkv, [&](int64_t kv) { work(p, go, dq, dk, dv, kv); });
}

// Forward: q, k, v, params[, bias] -> out, logsumexp. Backward: q, k, v, dout, params[, bias] -> dq, dk, dv.
ffi::Error* handle(ffi::CallFrame* f, bool backward) {
  if (!executing(f)) return nullptr;
  const std::string name = backward ? kAttentionBackward : kAttention;
  const int64_t n = f->args.size, first = backward ? 5 : 4;
  if ((n != first && n != first + 1) || f->rets.size != (backward ? 3 : 2))
    return fail(f, name + (backward ? ": expected q, k, v, dout, params[, bias] and 3 results"
                                    : ": expected q, k, v, params[, bias] and 2 results"));
  for (int64_t i = 0; i < n; ++i)
    if (f->args.types[i] != ffi::kArgBuffer) return fail(f, name + ": operands must be buffers");
  auto arg = [&](int64_t i) { return static_cast<ffi::Buffer*>(f->args.args[i]); };
  auto ret = [&](int64_t i) { return static_cast<ffi::Buffer*>(f->rets.rets[i]); };
  auto *q = arg(0), *k = arg(1), *v = arg(2), *params = arg(first - 1);
  for (int64_t i = 0; i < n; ++i)
    if (arg(i)->dtype != ffi::kF32) return fail(f, name + ": float32 operands and results only");
  for (int64_t i = 0; i < static_cast<int64_t>(f->rets.size); ++i)
    if (ret(i)->dtype != ffi::kF32) return fail(f, name + ": float32 operands and results only");
  auto dims_are = [](const ffi::Buffer* b, std::initializer_list<int64_t> d) {
    if (b->rank != static_cast<int64_t>(d.size())) return false;
    int64_t i = 0;
    for (int64_t x : d)
      if (b->dims[i++] != x) return false;
    return true;
  };
  if (q->rank != 4 || k->rank != 4 || v->rank != 4 || params->rank != 1 || params->dims[0] != 2)
    return fail(f, name + ": expected q[B, Hq, L, E], k[B, Hkv, S, E], v[B, Hkv, S, Ev], params f32[2]");
  Problem p;
  p.B = q->dims[0], p.Hq = q->dims[1], p.L = q->dims[2], p.E = q->dims[3];
  p.Hkv = k->dims[1], p.S = k->dims[2], p.Ev = v->dims[3];
  if (p.Hkv == 0 || p.Hq % p.Hkv != 0 || !dims_are(k, {p.B, p.Hkv, p.S, p.E}) || !dims_are(v, {p.B, p.Hkv, p.S, p.Ev}))
    return fail(f, name + ": operand shapes do not agree");
  const bool results_ok =
      backward ? dims_are(arg(3), {p.B, p.Hq, p.L, p.Ev}) && dims_are(ret(0), {p.B, p.Hq, p.L, p.E}) &&
                     dims_are(ret(1), {p.B, p.Hkv, p.S, p.E}) && dims_are(ret(2), {p.B, p.Hkv, p.S, p.Ev})
               : dims_are(ret(0), {p.B, p.Hq, p.L, p.Ev}) && dims_are(ret(1), {p.B, p.Hq, p.L});
  if (!results_ok) return fail(f, name + ": operand shapes do not agree");
  p.bias = nullptr;
  p.Bb = p.Hb = p.Lb = 1;
  if (n == first + 1) {
    auto* bias = arg(first);
    const bool ok = bias->rank == 4 && (bias->dims[0] == 1 || bias->dims[0] == p.B) &&
                    (bias->dims[1] == 1 || bias->dims[1] == p.Hq) && (bias->dims[2] == 1 || bias->dims[2] == p.L) &&
                    bias->dims[3] == p.S;
    if (!ok) return fail(f, name + ": expected bias f32[B or 1, Hq or 1, L or 1, S]");
    p.bias = static_cast<const float*>(bias->data);
    p.Bb = bias->dims[0], p.Hb = bias->dims[1], p.Lb = bias->dims[2];
  }
  const float* prm = static_cast<const float*>(params->data);
  p.scale = prm[0];
  p.causal = prm[1] != 0.0f;
  p.q = static_cast<const float*>(q->data), p.k = static_cast<const float*>(k->data);
  p.v = static_cast<const float*>(v->data);
  if (!backward) {
    p.out = static_cast<float*>(ret(0)->data), p.lse = static_cast<float*>(ret(1)->data);
    if (p.B * p.Hq * p.L > 0) attend(p);
    return nullptr;
  }
  p.out = p.lse = nullptr;
  if (p.B * p.Hkv > 0)
    attend_grad(p, static_cast<const float*>(arg(3)->data), static_cast<float*>(ret(0)->data),
                static_cast<float*>(ret(1)->data), static_cast<float*>(ret(2)->data));
  return nullptr;
}

}  // namespace

ffi::Error* attention(ffi::CallFrame* f) { return handle(f, false); }
ffi::Error* attention_backward(ffi::CallFrame* f) { return handle(f, true); }

}  // namespace kernels
