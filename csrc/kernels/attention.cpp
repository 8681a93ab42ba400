// Attention's softmax on the host (see kernels.h), as one custom call between the two products.
//
// Why a kernel: XLA:CPU runs the softmax of scaled_dot_product_attention as separate passes over the
// [L, S] scores of every head (the scale, the mask, the maximum, the exponentials, the sum, the
// division), and its reductions along the last dim are slow: [1, 16, 512, 64] causal took 18-20 ms against
// torch's 4.4 ms, most of it there. Here each row is read once and written once: scaled scores plus the
// bias up to the causal limit, the row maximum, exponentials through a vector polynomial (Cephes' expf:
// within 2 ulp), their sum, the division; masked keys are 0. A row whose keys are all masked gives 0 and
// logsumexp 0, and a NaN score makes its row NaN, as the StableHLO lowering (lowering/attention.cpp).
// Element by element where the CPU has no AVX2.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cpu.h"
#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"

namespace kernels {
namespace {

#define TP_AVX2 __attribute__((target("avx2,fma")))

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// e^x for 8 lanes: x = n ln2 + r, e^r by Cephes' polynomial, 2^n through the exponent bits. Below -87.3
// (where e^x is subnormal) the result is 0, -inf included; NaN stays NaN.
TP_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447505531f);
  const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  xc = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
  xc = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), xc);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, xc, _mm256_set1_ps(5.0000001201e-1f));
  __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, xc), xc, _mm256_add_ps(xc, _mm256_set1_ps(1.0f)));
  const __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(n));
  y = _mm256_andnot_ps(tiny, y);                                    // below the range (and -inf): 0
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN in, NaN out
}

TP_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct Problem {
  const float *s, *bias;  // scores [BH, L, S] (q k^T, unscaled), bias [BH, L, S] or null
  float *p, *lse;         // probabilities [BH, L, S], logsumexp [BH, L]
  int64_t bh, L, S;
  float scale;
  bool causal;
};

// One query row's pieces: its scores, bias and probabilities, and the keys the causal mask leaves it.
struct Row {
  const float *s, *bias;
  float *out, *lse;
  int64_t visible, S;
};

Row row_of(const Problem& p, int64_t h, int64_t i) {
  const int64_t off = (h * p.L + i) * p.S;
  return Row{p.s + off, p.bias ? p.bias + off : nullptr, p.p + off, p.lse + h * p.L + i,
             p.causal ? std::min<int64_t>(p.S, i + 1) : p.S, p.S};  // keys j <= i under the causal mask
}

// the scaled score of key j plus its bias, into the row's probabilities; the maximum and NaN tracked
inline void take(const Problem& p, const Row& r, int64_t j, float& m, bool& nan) {
  float x = r.s[j] * p.scale;
  if (r.bias) x += r.bias[j];
  r.out[j] = x;
  nan |= x != x;
  m = std::max(m, x);
}

// a NaN score makes the row NaN, as the lowering's maximum does
void nan_row(const Row& r) {
  std::fill(r.out, r.out + r.S, std::numeric_limits<float>::quiet_NaN());
  *r.lse = std::numeric_limits<float>::quiet_NaN();
}

// masked keys 0; the logsumexp (0 where every key is masked: the exponentials' sum is 0)
void close_row(const Row& r, float m_safe, float sum) {
  std::fill(r.out + r.visible, r.out + r.S, 0.0f);
  *r.lse = sum == 0.0f ? 0.0f : m_safe + std::log(sum);
}

// One row: scaled scores plus bias up to the causal limit and their maximum; then the exponentials (of
// -inf: 0, where every key is masked), their sum and the probabilities.
TP_AVX2 void row_avx2(const Problem& p, int64_t h, int64_t i) {
  const Row r = row_of(p, h, i);
  const __m256 scale = _mm256_set1_ps(p.scale);
  __m256 m8 = _mm256_set1_ps(kNegInf), nan8 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= r.visible; j += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(r.s + j), scale);
    if (r.bias) x = _mm256_add_ps(x, _mm256_loadu_ps(r.bias + j));
    _mm256_storeu_ps(r.out + j, x);
    nan8 = _mm256_or_ps(nan8, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    m8 = _mm256_max_ps(m8, x);
  }
  float m = kNegInf;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m8);
  for (float x : lanes) m = std::max(m, x);
  bool nan = _mm256_movemask_ps(nan8) != 0;
  for (; j < r.visible; ++j) take(p, r, j, m, nan);
  if (nan) return nan_row(r);
  const float m_safe = m == kNegInf ? 0.0f : m;
  const __m256 mv = _mm256_set1_ps(m_safe);
  __m256 sum8 = _mm256_setzero_ps();
  for (j = 0; j + 8 <= r.visible; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(r.out + j), mv));
    _mm256_storeu_ps(r.out + j, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  float sum = hsum8(sum8);
  for (; j < r.visible; ++j) sum += r.out[j] = std::exp(r.out[j] - m_safe);
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  const __m256 inv8 = _mm256_set1_ps(inv);
  for (j = 0; j + 8 <= r.visible; j += 8) _mm256_storeu_ps(r.out + j, _mm256_mul_ps(_mm256_loadu_ps(r.out + j), inv8));
  for (; j < r.visible; ++j) r.out[j] *= inv;
  close_row(r, m_safe, sum);
}

// the same, element by element (CPUs without AVX2/FMA, and TORCH_PJRT_KERNEL_ISA=portable)
void row_portable(const Problem& p, int64_t h, int64_t i) {
  const Row r = row_of(p, h, i);
  float m = kNegInf;
  bool nan = false;
  for (int64_t j = 0; j < r.visible; ++j) take(p, r, j, m, nan);
  if (nan) return nan_row(r);
  const float m_safe = m == kNegInf ? 0.0f : m;
  float sum = 0;
  for (int64_t j = 0; j < r.visible; ++j) sum += r.out[j] = std::exp(r.out[j] - m_safe);
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int64_t j = 0; j < r.visible; ++j) r.out[j] *= inv;
  close_row(r, m_safe, sum);
}

void softmax_rows(const Problem& p) {
  constexpr int64_t kRows = 32;  // rows per work item
  const int64_t blocks = (p.L + kRows - 1) / kRows;
  const bool vector = isa() != Isa::kPortable;
  Pool::get().run(p.bh * blocks, [&](int64_t item) {
    const int64_t h = item / blocks, i0 = item % blocks * kRows, i1 = std::min(p.L, i0 + kRows);
    for (int64_t i = i0; i < i1; ++i) (vector ? row_avx2 : row_portable)(p, h, i);
  });
}

ffi::Error* handle(ffi::CallFrame* f) {
  if (!executing(f)) return nullptr;
  const std::string name = kAttentionSoftmax;
  const int64_t n = f->args.size;
  if ((n != 2 && n != 3) || f->rets.size != 2) return fail(f, name + ": expected scores, params[, bias] and 2 results");
  for (int64_t i = 0; i < n; ++i)
    if (f->args.types[i] != ffi::kArgBuffer) return fail(f, name + ": operands must be buffers");
  auto* s = static_cast<ffi::Buffer*>(f->args.args[0]);
  auto* params = static_cast<ffi::Buffer*>(f->args.args[1]);
  auto* pr = static_cast<ffi::Buffer*>(f->rets.rets[0]);
  auto* lse = static_cast<ffi::Buffer*>(f->rets.rets[1]);
  for (auto* b : {s, params, pr, lse})
    if (b->dtype != ffi::kF32) return fail(f, name + ": float32 operands and results only");
  if (s->rank != 3 || pr->rank != 3 || lse->rank != 2 || params->rank != 1 || params->dims[0] != 2)
    return fail(f, name + ": expected scores[BH, L, S], params f32[2], probabilities[BH, L, S], logsumexp[BH, L]");
  Problem p;
  p.bh = s->dims[0], p.L = s->dims[1], p.S = s->dims[2];
  for (int i = 0; i < 3; ++i)
    if (pr->dims[i] != s->dims[i]) return fail(f, name + ": the probabilities' shape differs from the scores'");
  if (lse->dims[0] != p.bh || lse->dims[1] != p.L) return fail(f, name + ": logsumexp shape does not agree");
  p.bias = nullptr;
  if (n == 3) {
    auto* bias = static_cast<ffi::Buffer*>(f->args.args[2]);
    if (bias->dtype != ffi::kF32 || bias->rank != 3 || bias->dims[0] != p.bh || bias->dims[1] != p.L || bias->dims[2] != p.S)
      return fail(f, name + ": expected bias f32[BH, L, S]");
    p.bias = static_cast<const float*>(bias->data);
  }
  const float* prm = static_cast<const float*>(params->data);
  p.scale = prm[0];
  p.causal = prm[1] != 0.0f;
  p.s = static_cast<const float*>(s->data);
  p.p = static_cast<float*>(pr->data), p.lse = static_cast<float*>(lse->data);
  if (p.bh * p.L * p.S > 0) softmax_rows(p);
  else if (p.bh * p.L > 0) std::fill(p.lse, p.lse + p.bh * p.L, 0.0f);  // no keys: logsumexp of nothing
  return nullptr;
}

}  // namespace

ffi::Error* attention_softmax(ffi::CallFrame* f) { return handle(f); }

}  // namespace kernels
