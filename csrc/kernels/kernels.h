// torch-pjrt's own kernels, called from programs as typed-FFI custom calls where the device's compiler
// has no good lowering. Torch-free, like the rest of the core.
//
// XLA:CPU (the xla-cpu-pjrt plugin) gets them: the plugin's FFI extension registers each handler for the
// "Host" platform when the session starts, and a lowering row emits `stablehlo.custom_call @<target>`
// only where Session::host_kernels() says they were registered.
#pragma once

#include <string>

namespace pjrt {
class Plugin;
}

namespace kernels {

// Registers every host kernel with `plugin` (an XLA:CPU plugin). Returns false with the reason in
// `why` when the plugin cannot take them (then rows keep their pure-StableHLO lowerings).
bool register_host_kernels(const pjrt::Plugin& plugin, std::string* why);

// Grouped rows: y[M, N] (float32) = x[M, K] (float32, or bfloat16 with bfloat16 weights) times w[g] for the rows of group g, where group g
// is rows [end[g-1], end[g]) (group 0 from row 0; empty where end[g-1] >= end[g]; a later group writes
// the rows it shares with an earlier one, as torch's CPU kernel does) and rows of no group are zero.
// ends: s32[G], each within [0, M]. w: [G, N, K] (nt: w[g]
// is the transpose of the [K, N] factor, the storage order of a transposed view) or [G, K, N] (nn), in
// float32, bfloat16 or float16; products accumulate in float32.
inline constexpr const char* kRaggedRowsNt = "torch_pjrt_ragged_rows_nt";
inline constexpr const char* kRaggedRowsNn = "torch_pjrt_ragged_rows_nn";

// Sorted prefix: the first k (values f32[R, k], indices s64[R, k]) of each row of x f32[R, N] sorted
// stably, in descending (NaN first, as torch's topk and sort order NaN above every number) or ascending
// (NaN last) order; k is the results' width. Equal values keep their order, so the result is the stable
// sort's, as the StableHLO sort lowering gives.
inline constexpr const char* kSortedPrefixDescending = "torch_pjrt_sorted_prefix_desc";
inline constexpr const char* kSortedPrefixAscending = "torch_pjrt_sorted_prefix_asc";

// Running sum / product along the middle dim of x[outer, n, inner] (float32, float64 or int64), as
// torch's CPU kernel accumulates: float32 in double, each result rounded once; int64 wrapping.
inline constexpr const char* kCumsum = "torch_pjrt_cumsum";
inline constexpr const char* kCumprod = "torch_pjrt_cumprod";

// y f32[outer, inner] = x f32[outer, n, inner] summed along n (a sum over a run of adjacent dims): each
// sum in index order within a vector lane, float32 within blocks of rows whose sums add in double.
inline constexpr const char* kSumMiddle = "torch_pjrt_sum_middle";

// y[B, C, R] = x[B, R, C] with each matrix transposed, for element types of 2, 4 or 8 bytes (complex64
// included; not bool, 1-byte integers or complex128).
inline constexpr const char* kTranspose = "torch_pjrt_transpose";
// y = x (same type and shape, any element type but bool): a value made a buffer of its own, where XLA's
// fusion would compute it again for each element a broadcast makes of it (hlo::Builder::materialize).
inline constexpr const char* kCopy = "torch_pjrt_copy";

// Softmax / log-softmax of each row of x f32[R, N] -> y f32[R, N] (a row of -inf takes 0 as its maximum,
// a NaN makes its row NaN, as the StableHLO lowering); their gradients: g, y f32[R, N] -> dx, where y is
// the forward's result (softmax: y (g - sum(g y)); log-softmax: g - exp(y) sum(g)).
inline constexpr const char* kSoftmax = "torch_pjrt_softmax";
inline constexpr const char* kLogSoftmax = "torch_pjrt_log_softmax";
inline constexpr const char* kSoftmaxBackward = "torch_pjrt_softmax_backward";
inline constexpr const char* kLogSoftmaxBackward = "torch_pjrt_log_softmax_backward";

// Matrix products: c f32[..., M, N] = a b, a f32[..., M, K] (the "t" forms: a stored [..., K, M], its
// transpose) and b f32[..., K, N] (the "t" forms: b stored [..., N, K]), the same leading batch dims on
// all three; each element sums over k in float32, one multiply-add per term, in order within blocks of
// 256 terms whose sums are then added in order.
inline constexpr const char* kMatmulNN = "torch_pjrt_matmul_nn";
inline constexpr const char* kMatmulNT = "torch_pjrt_matmul_nt";
inline constexpr const char* kMatmulTN = "torch_pjrt_matmul_tn";
inline constexpr const char* kMatmulTT = "torch_pjrt_matmul_tt";

// Attention: q f32[B, Hq, L, E], k f32[B, Hkv, S, E], v f32[B, Hkv, S, Ev] (Hq a multiple of Hkv: query
// head h reads key/value head h / (Hq / Hkv)), params f32[2] = {scale, causal (0 or 1)}, an optional
// additive bias f32[B or 1, Hq or 1, L or 1, S] -> out f32[B, Hq, L, Ev], logsumexp f32[B, Hq, L] of
// softmax(scale * q k^T + bias) v with keys j > i masked under causal. A row whose keys are all masked
// gives 0 and logsumexp 0; a NaN score makes its row NaN.
inline constexpr const char* kAttention = "torch_pjrt_attention";
// Its gradients: q, k, v, dout f32[B, Hq, L, Ev], params[, bias] as above -> dq, dk, dv (shaped as q, k, v),
// the probabilities recomputed as the forward computes them (no bias gradient).
inline constexpr const char* kAttentionBackward = "torch_pjrt_attention_backward";

}  // namespace kernels
