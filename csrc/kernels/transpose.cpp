// A matrix's transpose on the host (see kernels.h), as one custom call; and the identity permutation, a
// copy.
//
// Why a kernel: XLA:CPU copies a transposed matrix element by element in the order of the result, reading
// the source a row apart each step: [1024, 1024] float32 in 3.4 ms, [4096, 1024] in 17 ms (torch: 1.1 ms
// for the first). Its dot of an input times a weight's transpose (nn.Linear's x @ W.T) is also 1.4-2.8x
// slower than of the dense form, so a linear layer at many rows is the dense product after this, and so
// is a batched product with a transposed right factor (q @ k.transpose(-2, -1): 7.1 ms against 3.1 at
// [16, 512, 64] x [16, 512, 64]^T).
// Tiles of 64 x 64 elements, each moved as 8 x 8 blocks through vector registers (AVX2 for 4-byte
// elements, SSE2 for 2-byte ones; element by element for 8-byte ones, the portable path and the edges),
// bands of tiles spread over the cores.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <string>

#include "kernels/cpu.h"
#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"

namespace kernels {
namespace {

template <int Bytes>
struct Word {
  unsigned char b[Bytes];
};
using W2 = Word<2>;
using W4 = Word<4>;
using W8 = Word<8>;

#define TP_AVX2 __attribute__((target("avx2")))

// y[0..8)[0..8) = x[0..8)[0..8)^T: rows of x sx elements apart, rows of y sy apart
TP_AVX2 void block8(const W4* xp, int64_t sx, W4* yp, int64_t sy) {
  const float* x = reinterpret_cast<const float*>(xp);
  float* y = reinterpret_cast<float*>(yp);
  __m256 r[8], t[8], s[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + i * sx);
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(y + i * sy, _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
    _mm256_storeu_ps(y + (i + 4) * sy, _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
  }
}

TP_AVX2 void block8(const W2* xp, int64_t sx, W2* yp, int64_t sy) {
  const uint16_t* x = reinterpret_cast<const uint16_t*>(xp);
  uint16_t* y = reinterpret_cast<uint16_t*>(yp);
  __m128i r[8], a[8], b[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i * sx));
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    b[4 * i] = _mm_unpacklo_epi32(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm_unpackhi_epi32(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm_unpacklo_epi32(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm_unpackhi_epi32(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + 2 * i * sy), _mm_unpacklo_epi64(b[i], b[i + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + (2 * i + 1) * sy), _mm_unpackhi_epi64(b[i], b[i + 4]));
  }
}

template <class T>
void element_by_element(const T* x, int64_t sx, T* y, int64_t sy, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t r = r0; r < r1; ++r) y[c * sy + r] = x[r * sx + c];
}

constexpr int64_t kTile = 64;

// y[b, C, R] = x[b, R, C]^T for each of `batch` matrices
template <class T>
void transpose(const T* xs, T* ys, int64_t batch, int64_t rows, int64_t cols) {
  constexpr bool kVector = sizeof(T) != 8;
  const bool vector = kVector && isa() != Isa::kPortable;
  const int64_t bands = (rows + kTile - 1) / kTile;
  Pool::get().run(batch * bands, [&](int64_t item) {
    const T* x = xs + item / bands * rows * cols;
    T* y = ys + item / bands * rows * cols;
    const int64_t r0 = item % bands * kTile, r1 = std::min(rows, r0 + kTile);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      int64_t r = r0;
      if constexpr (kVector) {
        if (vector) {
          for (; r + 8 <= r1; r += 8) {
            int64_t c = c0;
            for (; c + 8 <= c1; c += 8) block8(x + r * cols + c, cols, y + c * rows + r, rows);
            element_by_element(x, cols, y, rows, r, r + 8, c, c1);
          }
        }
      }
      element_by_element(x, cols, y, rows, r, r1, c0, c1);
    }
  });
}

// The bytes of an element of `dtype` (only they matter here), or 0 for the types not taken.
int64_t element_bytes(int dtype) {
  switch (dtype) {
    case ffi::kF16: case ffi::kBF16: case ffi::kS16: case ffi::kU16: return 2;
    case ffi::kF32: case ffi::kS32: case ffi::kU32: return 4;
    case ffi::kF64: case ffi::kS64: case ffi::kU64: case ffi::kC64: return 8;
    default: return 0;
  }
}

// The one operand and result of the call (of the same element type, of 2, 4 or 8 bytes), or an error.
ffi::Error* operand_and_result(ffi::CallFrame* f, const std::string& name, ffi::Buffer** x, ffi::Buffer** y) {
  if (f->args.size != 1 || f->rets.size != 1 || f->args.types[0] != ffi::kArgBuffer)
    return fail(f, name + ": expected 1 operand and 1 result");
  *x = static_cast<ffi::Buffer*>(f->args.args[0]);
  *y = static_cast<ffi::Buffer*>(f->rets.rets[0]);
  if ((*x)->dtype != (*y)->dtype) return fail(f, name + ": expected a result of the operand's type");
  if (!element_bytes((*x)->dtype)) return fail(f, name + ": elements of 2, 4 or 8 bytes only");
  return nullptr;
}

ffi::Error* handle(ffi::CallFrame* f) {
  if (!executing(f)) return nullptr;
  const std::string name = kTranspose;
  ffi::Buffer *x, *y;
  if (ffi::Error* e = operand_and_result(f, name, &x, &y)) return e;
  if (x->rank != 3 || y->rank != 3 || y->dims[0] != x->dims[0] || y->dims[1] != x->dims[2] || y->dims[2] != x->dims[1])
    return fail(f, name + ": expected x[B, R, C] and a result [B, C, R] of its type");
  const int64_t batch = x->dims[0], rows = x->dims[1], cols = x->dims[2];
  switch (element_bytes(x->dtype)) {
    case 2: transpose(static_cast<const W2*>(x->data), static_cast<W2*>(y->data), batch, rows, cols); break;
    case 4: transpose(static_cast<const W4*>(x->data), static_cast<W4*>(y->data), batch, rows, cols); break;
    default: transpose(static_cast<const W8*>(x->data), static_cast<W8*>(y->data), batch, rows, cols); break;
  }
  return nullptr;
}

ffi::Error* handle_copy(ffi::CallFrame* f) {
  if (!executing(f)) return nullptr;
  ffi::Buffer *x, *y;
  if (ffi::Error* e = operand_and_result(f, kCopy, &x, &y)) return e;
  int64_t n = x->rank == y->rank ? 1 : -1;
  for (int64_t i = 0; n >= 0 && i < x->rank; ++i) n = x->dims[i] == y->dims[i] ? n * x->dims[i] : -1;
  if (n < 0) return fail(f, std::string(kCopy) + ": expected a result of the operand's shape");
  if (n > 0) std::memcpy(y->data, x->data, static_cast<size_t>(n * element_bytes(x->dtype)));
  return nullptr;
}

}  // namespace

ffi::Error* transpose(ffi::CallFrame* f) { return handle(f); }
ffi::Error* copy(ffi::CallFrame* f) { return handle_copy(f); }

}  // namespace kernels
