// Matrix products on the host (see kernels.h): float32 products of 8 rows or more (small models' linear
// layers, and the large products, whose sums XLA's dot does not block), as one custom call each.
//
// Why a kernel: XLA:CPU's dot (Eigen's contraction) runs the products of a small model at a fraction of
// what the cores do: inside a program, [256, 64] x [64, 128] took 42 us (108 GFLOP/s on two threads)
// where this code's tile loop took 18 us on one in a standalone benchmark (about 235 GFLOP/s, on the
// 2-core Xeon of our benchmarks), and the tiny Llama's training step is mostly such products.
//
// The classic register-blocked product: c is computed in tiles of R rows by P = V vectors of columns,
// their sums held in registers while k runs; each step loads P columns of b's row k and multiplies them
// by a(i, k) broadcast for each of the R rows. b is read from a panel of P columns laid out k-major: b's
// own rows when b is [K, N] and the panel is whole (see in_place), else a copy (b stored [N, K], the last
// columns padded with zeros, or b's rows far apart in a large item). a is read in place in either
// layout. Sums over k in order, in float32, one multiply-add per term; k runs in blocks of kBlockK so a
// panel stays in the first-level cache, each block's sums added to c's (blocked summation: nearer the
// exact sum than one running sum at large K).
// Work items (batch, group of panels, block of rows) are spread over the kernels' threads when the product
// is large enough to pay for the hand-off; within an item each tile of rows runs over the group's panels.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu.h"
#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"
#include "kernels/vec.h"

namespace kernels {
namespace {

constexpr int64_t kBlockK = 64;
constexpr int64_t kGroupPanels = 8;

struct Product {
  const float* a;
  const float* b;
  float* c;
  int64_t batch, m, n, k;
  bool a_t, b_t;  // a stored [K, M]; b stored [N, K]
};

// Tile geometry for a vector width: rows R, vectors of columns V (R * V sums in registers)
template <int W>
struct Tile;
template <>
struct Tile<16> {  // 32 registers: 16 sums, 2 columns, 1 broadcast
  static constexpr int R = 8, V = 2;
};
template <>
struct Tile<8> {  // 16 registers: 12 sums, 2 columns, 1 broadcast
  static constexpr int R = 6, V = 2;
};
template <>
struct Tile<1> {
  static constexpr int R = 4, V = 4;
};

// c[R rows x P = V * W columns] (+)= a(rows, k0 .. k0 + kc) * panel[kc][P]: the block's sums start from
// zero and are added to c's after the first block; `cols` of the P columns are stored (the rest are
// padding). a(i, k) = a[i * a_row + k * a_k].
template <int W, int R, int V>
TP_INLINE void tile(const float* a, int64_t a_row, int64_t a_k, const float* panel, int64_t ldp, int64_t kc,
                    float* c, int64_t ldc, int64_t cols, bool accumulate) {
  constexpr int P = V * W;
  Vec<W> sum[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) {
      sum[r][v] = Vec<W>{};
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    Vec<W> bv[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) bv[v] = vload<W>(panel + kk * ldp + v * W);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec<W> ar = splat<W>(a[r * a_row + kk * a_k]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) sum[r][v] += ar * bv[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) {
      float* to = c + r * ldc + v * W;
      if (cols == P) {
        vstore<W>(to, accumulate ? vload<W>(to) + sum[r][v] : sum[r][v]);
      } else if (cols > v * W) {
        const int64_t lanes = std::min<int64_t>(cols - v * W, W);
        vstore_part<W>(to, accumulate ? vload_part<W>(to, lanes, 0.0f) + sum[r][v] : sum[r][v], lanes);
      }
    }
  }
}

// The tile for the last rows of a block (fewer than R): R is a template argument, picked at run time
template <int W, int R, int V>
TP_INLINE void tile_rows(int64_t rows, const float* a, int64_t a_row, int64_t a_k, const float* panel, int64_t ldp,
                         int64_t kc, float* c, int64_t ldc, int64_t cols, bool accumulate) {
  if constexpr (R > 0) {
    if (rows == R) return tile<W, R, V>(a, a_row, a_k, panel, ldp, kc, c, ldc, cols, accumulate);
    tile_rows<W, R - 1, V>(rows, a, a_row, a_k, panel, ldp, kc, c, ldc, cols, accumulate);
  }
}

// W x W floats in W vectors transposed: log2(W) steps, each swapping one bit of the row index with that
// bit of the lane index (lanes and rows with bit d set trade places), one two-vector shuffle per vector
template <int W, int D, size_t... L>
TP_INLINE void swap_bit(Vec<W>* v, std::index_sequence<L...>) {
  for (int i = 0; i < W; ++i) {
    if (i & D) continue;
    const Vec<W> lo = v[i], hi = v[i + D];
    v[i] = __builtin_shufflevector(lo, hi, ((L & D) ? W + L - D : L)...);
    v[i + D] = __builtin_shufflevector(lo, hi, ((L & D) ? W + L : L + D)...);
  }
}
template <int W, int D = 1>
TP_INLINE void transpose_square(Vec<W>* v) {
  if constexpr (D < W) {
    swap_bit<W, D>(v, std::make_index_sequence<W>{});
    transpose_square<W, 2 * D>(v);
  }
}

// panel[kk][jj] = b(k0 + kk, j + jj) for kk < kc, jj < cols; zeros for jj in [cols, P). b is [K, N]
// (b_t: [N, K], read W x W at a time and transposed in registers).
template <int W>
TP_INLINE void pack(const float* b, bool b_t, int64_t k, int64_t n, int64_t j, int64_t cols, int64_t k0, int64_t kc,
                    float* panel) {
  constexpr int P = Tile<W>::V * W;
  int64_t kk0 = 0;
  if (b_t && W > 1 && cols == P) {
    for (; kk0 + W <= kc; kk0 += W) {
      for (int jb = 0; jb < P; jb += W) {
        Vec<W> v[W];
        for (int t = 0; t < W; ++t) v[t] = vload<W>(b + (j + jb + t) * k + k0 + kk0);
        transpose_square<W>(v);
        for (int t = 0; t < W; ++t) vstore<W>(panel + (kk0 + t) * P + jb, v[t]);
      }
    }
  }
  for (int64_t kk = kk0; kk < kc; ++kk) {
    float* row = panel + kk * P;
    for (int64_t jj = 0; jj < cols; ++jj) row[jj] = b_t ? b[(j + jj) * k + k0 + kk] : b[(k0 + kk) * n + j + jj];
    for (int64_t jj = cols; jj < P; ++jj) row[jj] = 0.0f;
  }
}

// Whether a panel of `cols` columns of a work item of `rows` rows is read from b in place: b's rows hold
// it as it is, and either the rows are few (a copy would cost more than it saves) or b's rows are not a
// multiple of 512 bytes apart (rows that far apart fall in few sets of the first-level cache, where a
// block of k of them evicts itself: [2048, 1024] x [1024, 1024] about 1.2x faster packed).
template <int W>
TP_INLINE bool in_place(const Product& p, int64_t cols, int64_t rows) {
  return !p.b_t && cols == Tile<W>::V * W && (rows < 128 || p.n % 128 != 0);
}

// One work item: rows [r0, r1) of c's columns [j0, j1) (whole panels of P, the last one maybe not) in matrix
// `g` of the batch. For each block of k, the panels of the columns are packed (or read in place), then
// each tile of R rows runs over every panel while its rows of a stay in the first-level cache.
template <int W>
TP_INLINE void item(const Product& p, int64_t g, int64_t j0, int64_t j1, int64_t r0, int64_t r1,
                    std::vector<float>& buf) {
  constexpr int R = Tile<W>::R, V = Tile<W>::V, P = V * W;
  const float* a = p.a + g * p.m * p.k;
  const float* b = p.b + g * p.k * p.n;
  float* c = p.c + g * p.m * p.n;
  const int64_t a_row = p.a_t ? 1 : p.k, a_k = p.a_t ? p.m : 1;
  const int64_t panels = (j1 - j0 + P - 1) / P;
  auto cols_of = [&](int64_t q) { return std::min<int64_t>(P, p.n - j0 - q * P); };
  for (int64_t k0 = 0; k0 < p.k; k0 += kBlockK) {
    const int64_t kc = std::min(kBlockK, p.k - k0);
    buf.resize(static_cast<size_t>(panels * kc * P));
    for (int64_t q = 0; q < panels; ++q)
      if (!in_place<W>(p, cols_of(q), r1 - r0))
        pack<W>(b, p.b_t, p.k, p.n, j0 + q * P, cols_of(q), k0, kc, buf.data() + q * kc * P);
    const float* ak = a + k0 * a_k;
    for (int64_t i = r0; i < r1; i += R) {
      const int64_t rows = std::min<int64_t>(R, r1 - i);
      for (int64_t q = 0; q < panels; ++q) {
        const int64_t j = j0 + q * P, cols = cols_of(q);
        const bool direct = in_place<W>(p, cols, r1 - r0);
        const float* panel = direct ? b + k0 * p.n + j : buf.data() + q * kc * P;
        const int64_t ldp = direct ? p.n : P;
        if (rows == R)
          tile<W, R, V>(ak + i * a_row, a_row, a_k, panel, ldp, kc, c + i * p.n + j, p.n, cols, k0 > 0);
        else
          tile_rows<W, R - 1, V>(rows, ak + i * a_row, a_row, a_k, panel, ldp, kc, c + i * p.n + j, p.n, cols, k0 > 0);
      }
    }
  }
}

struct Items {
  int64_t groups, group_cols, row_blocks, rows_per;
};

template <int W>
TP_INLINE void items_work(const Product& p, const Items& it, int64_t i0, int64_t i1) {
  static thread_local std::vector<float> buf;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t g = i / (it.groups * it.row_blocks), rest = i % (it.groups * it.row_blocks);
    const int64_t j = rest / it.row_blocks * it.group_cols, r0 = rest % it.row_blocks * it.rows_per;
    item<W>(p, g, j, std::min(p.n, j + it.group_cols), r0, std::min(p.m, r0 + it.rows_per), buf);
  }
}
__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl"), flatten)) void work512(const Product& p, const Items& it,
                                                                                     int64_t i0, int64_t i1) {
  items_work<16>(p, it, i0, i1);
}
__attribute__((target("avx2,fma"), flatten)) void work256(const Product& p, const Items& it, int64_t i0, int64_t i1) {
  items_work<8>(p, it, i0, i1);
}
__attribute__((flatten)) void work_portable(const Product& p, const Items& it, int64_t i0, int64_t i1) {
  items_work<1>(p, it, i0, i1);
}

void run(const Product& p) {
  const Isa is = isa();
  const int w = is == Isa::kAvx512Bf16 ? 16 : is == Isa::kAvx2 ? 8 : 1;
  auto* work = is == Isa::kAvx512Bf16 ? work512 : is == Isa::kAvx2 ? work256 : work_portable;
  const int64_t width = w == 16 ? Tile<16>::V * 16 : w == 8 ? Tile<8>::V * 8 : Tile<1>::V;
  Items it;
  // columns in groups of kGroupPanels panels (the panels of one block of k stay in the second-level
  // cache while the tiles of rows run over them), rows in blocks of 64 to 256, as many as make
  // about 8 items per matrix
  it.group_cols = kGroupPanels * width;
  it.groups = (p.n + it.group_cols - 1) / it.group_cols;
  const int64_t want = std::max<int64_t>(1, 8 / it.groups);
  it.rows_per = std::clamp<int64_t>((p.m + want - 1) / want, 64, 256);
  it.row_blocks = (p.m + it.rows_per - 1) / it.rows_per;
  const int64_t items = p.batch * it.groups * it.row_blocks;
  constexpr int64_t kThreadsAbove = int64_t{1} << 22;  // multiply-adds
  spread(p.batch * p.m * p.n * p.k < kThreadsAbove, items, [&](int64_t i) { work(p, it, i, i + 1); });
}

// a f32[..., M, K] (a_t: [..., K, M]), b f32[..., K, N] (b_t: [..., N, K]) -> c f32[..., M, N]
ffi::Error* handle(ffi::CallFrame* f, bool a_t, bool b_t) {
  if (!executing(f)) return nullptr;
  const char* name = a_t ? (b_t ? kMatmulTT : kMatmulTN) : (b_t ? kMatmulNT : kMatmulNN);  // no allocation per call
  if (f->args.size != 2 || f->rets.size != 1 || f->args.types[0] != ffi::kArgBuffer || f->args.types[1] != ffi::kArgBuffer)
    return fail(f, std::string(name) + ": expected a, b and 1 result");
  auto* a = static_cast<ffi::Buffer*>(f->args.args[0]);
  auto* b = static_cast<ffi::Buffer*>(f->args.args[1]);
  auto* c = static_cast<ffi::Buffer*>(f->rets.rets[0]);
  const int64_t rank = c->rank;
  bool ok = a->dtype == ffi::kF32 && b->dtype == ffi::kF32 && c->dtype == ffi::kF32 && rank >= 2 && a->rank == rank &&
            b->rank == rank;
  Product p{};
  p.batch = 1;
  for (int64_t d = 0; ok && d < rank - 2; ++d) {
    ok = a->dims[d] == c->dims[d] && b->dims[d] == c->dims[d];
    p.batch *= c->dims[d];
  }
  if (ok) {
    p.m = c->dims[rank - 2], p.n = c->dims[rank - 1];
    p.k = a->dims[a_t ? rank - 2 : rank - 1];
    ok = a->dims[a_t ? rank - 1 : rank - 2] == p.m && b->dims[b_t ? rank - 2 : rank - 1] == p.n &&
         b->dims[b_t ? rank - 1 : rank - 2] == p.k;
  }
  if (!ok) return fail(f, std::string(name) + ": expected float32 a, b and result with the same batch dims and matching M, N, K");
  p.a = static_cast<const float*>(a->data), p.b = static_cast<const float*>(b->data), p.c = static_cast<float*>(c->data);
  p.a_t = a_t, p.b_t = b_t;
  if (p.batch == 0 || p.m == 0 || p.n == 0) return nullptr;
  if (p.k == 0) {
    std::fill(p.c, p.c + p.batch * p.m * p.n, 0.0f);
    return nullptr;
  }
  run(p);
  return nullptr;
}

}  // namespace

ffi::Error* matmul_nn(ffi::CallFrame* f) { return handle(f, false, false); }
ffi::Error* matmul_nt(ffi::CallFrame* f) { return handle(f, false, true); }
ffi::Error* matmul_tn(ffi::CallFrame* f) { return handle(f, true, false); }
ffi::Error* matmul_tt(ffi::CallFrame* f) { return handle(f, true, true); }

}  // namespace kernels
