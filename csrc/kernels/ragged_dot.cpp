// Grouped rows on the host (see kernels.h): the ragged dot of MoE decoding, as one custom call.
//
// Why a kernel: XLA:CPU does not compile chlo.ragged_dot, and its own code for the static-shape
// formulations (a loop over groups, or one batched dot over slots of every group) reads the expert
// weights at a fraction of the memory bandwidth. A decode step of a mixture of experts is a stream over
// the routed experts' weights with a few rows each, which is what this does: every weight row is read
// once, straight from its storage type (bfloat16 and float16 are widened in registers), multiplied with
// up to four rows of the group at a time, on all cores.
//
// Work items are (non-empty group, block of output columns); threads take them in turn. Rows of no group
// are zero. AVX-512 code on CPUs with AVX512-BF16, AVX2/FMA code on others that have it, portable loops
// otherwise; all accumulate in float32.
// bfloat16 rows times bfloat16 weights in the nt layout (the decode step of a bfloat16 model) take
// AVX512-BF16's pair dot products where the CPU has them: each product is exact in float32 and the sums
// accumulate in float32, as the widening code does, with 32 weights per instruction instead of 8 and no
// widening; as the instruction does, subnormal inputs count as zero.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu.h"
#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"

namespace kernels {
namespace {

// ---- element types of the weights
struct BF16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float widen(float v) { return v; }
inline float widen(BF16 v) {
  uint32_t u = uint32_t{v.bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float widen(F16 v) {  // IEEE binary16 to binary32, subnormals and inf/NaN included
  const uint32_t sign = uint32_t{v.bits & 0x8000u} << 16, exp = (v.bits >> 10) & 0x1f, man = v.bits & 0x3ff;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (!man) {
    u = sign;
  } else {  // subnormal: man * 2^-24
    float f = static_cast<float>(man) * 0x1p-24f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- portable loops: rows [0, R) of x (stride K) times columns [n0, n1) into y (stride N)
template <class W>
void nt_portable(int64_t rows, const float* x, int64_t k, const W* w, float* y, int64_t n, int64_t n0,
                 int64_t n1) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = n0; j < n1; ++j) {
      float part[8] = {};  // eight partial sums, as the vector code keeps (one long sum loses accuracy)
      for (int64_t i = 0; i < k; ++i) part[i % 8] += x[r * k + i] * widen(w[j * k + i]);
      y[r * n + j] = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    }
}

// nn sums run down K, one product per step: in blocks of kSumBlock, each summed apart and then added to
// the total, so that a long K keeps about the accuracy of the CPU's blocked matrix products (one running
// sum over K = 1000 is several times further from the exact result).
constexpr int64_t kSumBlock = 32;

template <class W>
void nn_portable(int64_t rows, const float* x, int64_t k, const W* w, float* y, int64_t n, int64_t n0,
                 int64_t n1) {
  std::vector<float> part(n1 - n0);
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * n;
    std::fill(yr + n0, yr + n1, 0.0f);
    for (int64_t i0 = 0; i0 < k; i0 += kSumBlock) {
      std::fill(part.begin(), part.end(), 0.0f);
      for (int64_t i = i0; i < std::min(k, i0 + kSumBlock); ++i) {
        const float xv = x[r * k + i];
        for (int64_t j = n0; j < n1; ++j) part[j - n0] += xv * widen(w[i * n + j]);
      }
      for (int64_t j = n0; j < n1; ++j) yr[j] += part[j - n0];
    }
  }
}

// ---- AVX2/FMA (F16C for float16): taken when the CPU has them
#define TP_AVX2 __attribute__((target("avx2,fma,f16c")))

TP_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
TP_AVX2 inline __m256 load8(const BF16* p) {
  __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
TP_AVX2 inline __m256 load8(const F16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TP_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// rows of a group taken at once (their x rows stay in L1 while the weights stream past)
constexpr int kRowChunk = 4;
// R rows times C weight rows (columns of y) at a time, over the contiguous K: R * C accumulators.
template <int R, int C, class W>
TP_AVX2 void nt_tile(const float* x, int64_t k, const W* w, float* y, int64_t n, int64_t j) {
  const int64_t k8 = k & ~int64_t{7};
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  // The tile reads C rows of K weights, one contiguous run; the next tile's run follows it. Each
  // iteration prefetches as many bytes of that next run as it reads of its own: a hardware prefetcher
  // stops at page boundaries (a 4 KiB row of float32 weights at K = 1024 is one page), so without this
  // every tile would start its streams cold (1.2-1.4x slower in alternating runs).
  const char* next = reinterpret_cast<const char*>(w + (j + C) * k);
  constexpr int kStep = C * 8 * static_cast<int>(sizeof(W));
  for (int64_t i = 0; i < k8; i += 8) {
    for (int b = 0; b < kStep; b += 64) _mm_prefetch(next + i / 8 * kStep + b, _MM_HINT_T0);
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * k + i);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = load8(w + (j + c) * k + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      for (int64_t i = k8; i < k; ++i) s += x[r * k + i] * widen(w[(j + c) * k + i]);
      y[r * n + j + c] = s;
    }
}

template <int R, class W>
TP_AVX2 void nt_avx2(const float* x, int64_t k, const W* w, float* y, int64_t n, int64_t n0, int64_t n1) {
  constexpr int C = R <= 2 ? 4 : 2;
  int64_t j = n0;
  for (; j + C <= n1; j += C) nt_tile<R, C>(x, k, w, y, n, j);
  for (; j < n1; ++j) nt_tile<R, 1>(x, k, w, y, n, j);
}

constexpr int64_t kRowsAhead = 8;
// R rows (1 or 2) times 32 columns at a time, over K rows of the weights (each read as 32 contiguous
// values): 4R accumulators.
template <int R, class W>
TP_AVX2 void nn_avx2(const float* x, int64_t k, const W* w, float* y, int64_t n, int64_t n0, int64_t n1) {
  constexpr int V = 4;
  int64_t j = n0;
  for (; j + 8 * V <= n1; j += 8 * V) {
    __m256 acc[R][V], part[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
    for (int64_t i0 = 0; i0 < k; i0 += kSumBlock) {  // blocks summed apart (see kSumBlock)
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; ++v) part[r][v] = _mm256_setzero_ps();
      for (int64_t i = i0; i < std::min(k, i0 + kSumBlock); ++i) {
        // rows of the weights are n apart: prefetch a few rows ahead (the hardware does not, across pages)
        _mm_prefetch(reinterpret_cast<const char*>(w + (i + kRowsAhead) * n + j), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(w + (i + kRowsAhead) * n + j + 16), _MM_HINT_T0);
        __m256 wv[V];
        for (int v = 0; v < V; ++v) wv[v] = load8(w + i * n + j + 8 * v);
        for (int r = 0; r < R; ++r) {
          const __m256 xb = _mm256_set1_ps(x[r * k + i]);
          for (int v = 0; v < V; ++v) part[r][v] = _mm256_fmadd_ps(xb, wv[v], part[r][v]);
        }
      }
      for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; ++v) acc[r][v] = _mm256_add_ps(acc[r][v], part[r][v]);
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) _mm256_storeu_ps(y + r * n + j + 8 * v, acc[r][v]);
  }
  if (j < n1) nn_portable(R, x, k, w, y, n, j, n1);
}

const Isa kIsa = isa();
const bool kHasAvx2 = kIsa != Isa::kPortable;

// ---- AVX512-BF16: R bfloat16 rows times C weight rows at a time, 32 of K per step (pairs of products
// summed into 16 float32 lanes): R * C accumulators.
#define TP_AVX512BF16 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")))

TP_AVX512BF16 inline float hsum(__m512 v) { const __m512 s = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(0xffff, v, v, 0x4e));
  return hsum(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(s), 0))); }

TP_AVX512BF16 inline __m512bh load32(const BF16* p) { return (__m512bh)_mm512_loadu_si512(p); }
TP_AVX512BF16 inline __m512bh load32(const BF16* p, __mmask32 m) { return (__m512bh)_mm512_maskz_loadu_epi16(m, p); }

template <int R, int C>
TP_AVX512BF16 void nt_dp_tile(const BF16* x, int64_t k, const BF16* w, float* y, int64_t n, int64_t j) {
  const int64_t k32 = k & ~int64_t{31};
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  // prefetch the next tile's run as this one reads its own (see nt_tile)
  const char* next = reinterpret_cast<const char*>(w + (j + C) * k);
  constexpr int kStep = C * 64;
  for (int64_t i = 0; i < k32; i += 32) {
    for (int b = 0; b < kStep; b += 64) _mm_prefetch(next + i / 32 * kStep + b, _MM_HINT_T0);
    __m512bh xv[R];
    for (int r = 0; r < R; ++r) xv[r] = load32(x + r * k + i);
    for (int c = 0; c < C; ++c) {
      const __m512bh wv = load32(w + (j + c) * k + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
    }
  }
  if (k32 < k) {  // the last K % 32, zeros past it
    const __mmask32 m = _cvtu32_mask32((1u << (k - k32)) - 1);
    __m512bh xv[R];
    for (int r = 0; r < R; ++r) xv[r] = load32(x + r * k + k32, m);
    for (int c = 0; c < C; ++c) {
      const __m512bh wv = load32(w + (j + c) * k + k32, m);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[r * n + j + c] = hsum(acc[r][c]);
}

template <int R>
TP_AVX512BF16 void nt_dp(const BF16* x, int64_t k, const BF16* w, float* y, int64_t n, int64_t n0, int64_t n1) {
  constexpr int C = R == 1 ? 8 : 4;  // one row: more weight rows at once, for independent sums
  int64_t j = n0;
  for (; j + C <= n1; j += C) nt_dp_tile<R, C>(x, k, w, y, n, j);
  for (; j < n1; ++j) nt_dp_tile<R, 1>(x, k, w, y, n, j);
}

// ---- AVX-512 float rows (any of the weight types, widened in registers): R rows times C weight rows at
// a time, 16 of K per step, R * C accumulators: the nt path where the CPU has 512-bit vectors (those of
// AVX512-BF16's CPUs). At several rows per group, and at weights that stay in cache, the 256-bit code is
// bound by its multiplications rather than by memory: eager linear [8, 1024] x [1024, 1024]^T 216 -> 193
// us, [8, 256] x [256, 256]^T 24 -> 18 us, measured side by side.
// (the widening conversions in their zero-masked forms: the plain ones leave GCC 12 warning of an
// uninitialized source in its own header)
TP_AVX512BF16 inline __m512 widen16(__m256i bits, bool bf16) {
  return bf16 ? _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bits), 16))
              : _mm512_maskz_cvtph_ps(0xffff, bits);
}
TP_AVX512BF16 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
TP_AVX512BF16 inline __m512 load16(const BF16* p) { return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), true); }
TP_AVX512BF16 inline __m512 load16(const F16* p) { return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), false); }
TP_AVX512BF16 inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
TP_AVX512BF16 inline __m512 load16(const BF16* p, __mmask16 m) { return widen16(_mm256_maskz_loadu_epi16(m, p), true); }
TP_AVX512BF16 inline __m512 load16(const F16* p, __mmask16 m) { return widen16(_mm256_maskz_loadu_epi16(m, p), false); }

template <int R, int C, class W>
TP_AVX512BF16 void nt_tile16(const float* x, int64_t k, const W* w, float* y, int64_t n, int64_t j) {
  const int64_t k16 = k & ~int64_t{15};
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  // prefetch the next tile's run as this one reads its own (see nt_tile)
  const char* next = reinterpret_cast<const char*>(w + (j + C) * k);
  constexpr int kStep = C * 16 * static_cast<int>(sizeof(W));
  for (int64_t i = 0; i < k16; i += 16) {
    for (int b = 0; b < kStep; b += 64) _mm_prefetch(next + i / 16 * kStep + b, _MM_HINT_T0);
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x + r * k + i);
    for (int c = 0; c < C; ++c) {
      const __m512 wv = load16(w + (j + c) * k + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (k16 < k) {  // the last K % 16, zeros past it
    const __mmask16 m = static_cast<__mmask16>((1u << (k - k16)) - 1);
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = load16(x + r * k + k16, m);
    for (int c = 0; c < C; ++c) {
      const __m512 wv = load16(w + (j + c) * k + k16, m);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[r * n + j + c] = hsum(acc[r][c]);
}

template <int R, class W>
TP_AVX512BF16 void nt_avx512(const float* x, int64_t k, const W* w, float* y, int64_t n, int64_t n0, int64_t n1) {
  constexpr int C = R == 1 ? 8 : 4;
  int64_t j = n0;
  for (; j + C <= n1; j += C) nt_tile16<R, C>(x, k, w, y, n, j);
  for (; j < n1; ++j) nt_tile16<R, 1>(x, k, w, y, n, j);
}

// rows [r0, r1) of one group times its weights wg, columns [n0, n1), four rows at a time
template <class W>
void group_block(bool nt, const float* x, int64_t k, const W* wg, float* y, int64_t n, int64_t r0, int64_t r1,
                 int64_t n0, int64_t n1) {
  for (int64_t r = r0; r < r1; r += kRowChunk) {
    const int rows = static_cast<int>(std::min<int64_t>(kRowChunk, r1 - r));
    const float* xr = x + r * k;
    float* yr = y + r * n;
    if (!kHasAvx2) {
      (nt ? nt_portable<W> : nn_portable<W>)(rows, xr, k, wg, yr, n, n0, n1);
      continue;
    }
    using F = void (*)(const float*, int64_t, const W*, float*, int64_t, int64_t, int64_t);
    static constexpr F kNt[4] = {nt_avx2<1, W>, nt_avx2<2, W>, nt_avx2<3, W>, nt_avx2<4, W>};
    static constexpr F kNt16[4] = {nt_avx512<1, W>, nt_avx512<2, W>, nt_avx512<3, W>, nt_avx512<4, W>};
    if (nt) {
      (kIsa == Isa::kAvx512Bf16 ? kNt16 : kNt)[rows - 1](xr, k, wg, yr, n, n0, n1);
      continue;
    }
    for (int i = 0; i < rows; i += 2)  // two rows at a time
      (rows - i >= 2 ? nn_avx2<2, W> : nn_avx2<1, W>)(xr + i * k, k, wg, yr + i * n, n, n0, n1);
  }
}

// bfloat16 rows and weights, nt, on AVX512-BF16 (the handler takes this path only there)
void group_block(bool, const BF16* x, int64_t k, const BF16* wg, float* y, int64_t n, int64_t r0, int64_t r1,
                 int64_t n0, int64_t n1) {
  using F = void (*)(const BF16*, int64_t, const BF16*, float*, int64_t, int64_t, int64_t);
  static constexpr F kNt[4] = {nt_dp<1>, nt_dp<2>, nt_dp<3>, nt_dp<4>};
  for (int64_t r = r0; r < r1; r += kRowChunk) {
    const int rows = static_cast<int>(std::min<int64_t>(kRowChunk, r1 - r));
    kNt[rows - 1](x + r * k, k, wg, y + r * n, n, n0, n1);
  }
}

template <class X, class W>
void ragged_rows(bool nt, const X* x, const W* w, const int32_t* ends, float* y, int64_t m, int64_t k,
                 int64_t n, int64_t groups) {
  // Group g is rows [end[g-1], end[g]) (group 0 from row 0), empty where end[g-1] >= end[g]; where
  // groups overlap (offsets that decrease), the later one writes the row, as torch's CPU kernel does.
  // Runs of rows with the same group are the work; rows of no group are zero.
  std::vector<int32_t> owner(m, -1);
  for (int64_t g = 0, prev = 0; g < groups; ++g) {
    const int64_t e = std::clamp<int64_t>(ends[g], 0, m);
    for (int64_t r = prev; r < e; ++r) owner[r] = static_cast<int32_t>(g);
    prev = e;
  }
  struct Run {
    int64_t g, r0, r1;
  };
  std::vector<Run> busy;
  for (int64_t r = 0; r < m;) {
    int64_t e = r + 1;
    while (e < m && owner[e] == owner[r]) ++e;
    if (owner[r] >= 0) busy.push_back({owner[r], r, e});
    else std::memset(y + r * n, 0, sizeof(float) * (e - r) * n);
    r = e;
  }
  // column blocks of about 128 KiB of weights (L2-resident while the group's rows pass over them)
  const int64_t row_bytes = std::max<int64_t>(1, k * static_cast<int64_t>(sizeof(W)));
  const int64_t block = std::clamp<int64_t>((128 << 10) / row_bytes / 16 * 16, 16, 512);
  const int64_t blocks = (n + block - 1) / block;
  Pool::get().run(static_cast<int64_t>(busy.size()) * blocks, [&](int64_t item) {
    const Run& gr = busy[item / blocks];
    const int64_t n0 = item % blocks * block, n1 = std::min(n, n0 + block);
    group_block(nt, x, k, w + gr.g * k * n, y, n, gr.r0, gr.r1, n0, n1);
  });
}

// ---- the FFI handler
template <bool NT>
ffi::Error* ragged_rows_handler(ffi::CallFrame* f) {
  if (!executing(f)) return nullptr;
  const char* name = NT ? kRaggedRowsNt : kRaggedRowsNn;
  if (f->args.size != 3 || f->rets.size != 1)
    return fail(f, std::string(name) + ": expected 3 operands and 1 result");
  for (int i = 0; i < 3; ++i)
    if (f->args.types[i] != ffi::kArgBuffer) return fail(f, std::string(name) + ": operands must be buffers");
  auto* x = static_cast<ffi::Buffer*>(f->args.args[0]);
  auto* w = static_cast<ffi::Buffer*>(f->args.args[1]);
  auto* ends = static_cast<ffi::Buffer*>(f->args.args[2]);
  auto* y = static_cast<ffi::Buffer*>(f->rets.rets[0]);
  const bool bf16_rows = x->dtype == ffi::kBF16 && w->dtype == ffi::kBF16;
  if (x->rank != 2 || w->rank != 3 || ends->rank != 1 || y->rank != 2 || (x->dtype != ffi::kF32 && !bf16_rows) ||
      ends->dtype != ffi::kS32 || y->dtype != ffi::kF32)
    return fail(f, std::string(name) + ": expected x f32[M,K] (or bf16 with bf16 weights), w[G,..], ends s32[G], "
                                       "result f32[M,N]");
  const int64_t m = x->dims[0], k = x->dims[1], groups = w->dims[0];
  const int64_t n = NT ? w->dims[1] : w->dims[2];
  if ((NT ? w->dims[2] : w->dims[1]) != k || ends->dims[0] != groups || y->dims[0] != m || y->dims[1] != n)
    return fail(f, std::string(name) + ": operand shapes do not agree");
  auto* ed = static_cast<const int32_t*>(ends->data);
  auto* yd = static_cast<float*>(y->data);
  if (bf16_rows && NT && kIsa == Isa::kAvx512Bf16) {
    ragged_rows(NT, static_cast<const BF16*>(x->data), static_cast<const BF16*>(w->data), ed, yd, m, k, n, groups);
    return nullptr;
  }
  std::vector<float> widened;  // bfloat16 rows elsewhere: widened once
  if (bf16_rows) {
    widened.resize(m * k);
    auto* xb = static_cast<const BF16*>(x->data);
    for (int64_t i = 0; i < m * k; ++i) widened[i] = widen(xb[i]);
  }
  auto* xd = bf16_rows ? widened.data() : static_cast<const float*>(x->data);
  switch (w->dtype) {
    case ffi::kF32: ragged_rows(NT, xd, static_cast<const float*>(w->data), ed, yd, m, k, n, groups); break;
    case ffi::kBF16: ragged_rows(NT, xd, static_cast<const BF16*>(w->data), ed, yd, m, k, n, groups); break;
    case ffi::kF16: ragged_rows(NT, xd, static_cast<const F16*>(w->data), ed, yd, m, k, n, groups); break;
    default: return fail(f, std::string(name) + ": weights must be float32, bfloat16 or float16");
  }
  return nullptr;
}

}  // namespace

ffi::Error* ragged_rows_nt(ffi::CallFrame* f) { return ragged_rows_handler<true>(f); }
ffi::Error* ragged_rows_nn(ffi::CallFrame* f) { return ragged_rows_handler<false>(f); }

}  // namespace kernels
