// Shared helpers for rows: type promotion as torch does it, operand conversion and broadcasting, and
// the float32 accumulation that torch uses for half-precision reductions.
#pragma once

#include <string>
#include <vector>

#include "lowering/table.h"

namespace lowering {

// torch.promote_types for two dtypes.
ElementType promote_types(ElementType a, ElementType b);
// torch.result_type over the given arguments (tensors, 0-d tensors and Python numbers, as torch ranks them).
ElementType result_type(const Ctx& c, std::initializer_list<size_t> args);

// Argument k (tensor or scalar) converted to `type` and broadcast to `dims`.
Value operand(Ctx& c, size_t k, ElementType type, const Dims& dims);
// Argument k converted to the output type and broadcast to the output shape: the common case.
inline Value operand(Ctx& c, size_t k) { return operand(c, k, c.out_type(), c.out_dims()); }

// The type torch accumulates in: f32 for f16/bf16, the type itself otherwise.
ElementType accumulation_type(ElementType t);
inline bool is_float_or_complex(ElementType t) { return pjrt::is_float(t) || pjrt::is_complex(t); }

// Normalizes a possibly negative dim against `rank`.
int64_t wrap_dim(int64_t dim, int64_t rank);
// dims argument (int[]? / int[1]?) of reductions: empty or absent means all.
Dims reduction_dims(const Ctx& c, size_t k, int64_t rank);

// Elementwise op on operands converted to the output type.
Value binary_op(Ctx& c, const char* op, size_t a = 0, size_t b = 1);
// op on operand a in the output type (float ops on ints too), in float32 for half-precision results:
// torch's CPU kernels compute half math in float32 and round once (XLA:CPU's own float16 math is a few
// ulps off: log2, expm1, acosh, sigmoid differed in one element of 1,000-3,000); the caller's result
// is rounded to the output type.
Value unary_op(Ctx& c, const char* op, size_t a = 0);

// max / min as torch computes them: a NaN operand gives NaN (XLA:CPU's maximum/minimum drop it). Every
// row uses these (or reduce(), whose "maximum"/"minimum" combiners use them) instead of the raw ops.
Value nan_max(Builder& b, Value x, Value y);
Value nan_min(Builder& b, Value x, Value y);

// Reductions with a scalar combiner ("add", "maximum", ...); "maximum"/"minimum" propagate NaN.
Value reduce(Builder& b, Value x, const Dims& dims, const char* combiner, Value init);
Value reduce_sum(Builder& b, Value x, const Dims& dims);

// The identity of max (lowest value: -inf for floats) and of min (highest value), as 0-d constants.
Value lowest(Builder& b, ElementType t);
Value highest(Builder& b, ElementType t);

// Uniform floats in [0, 1) (f32) from random u32 bits: the top 23 bits become the mantissa (random.cpp).
Value unit_f32(Builder& b, Value bits);

// A scalar constant of the type of `like`.
inline Value like(Builder& b, double v, const Value& like) { return b.constant(v, like.type); }
inline Value scalar_like(Builder& b, double v, const Value& like) { return b.constant(v, Type{like.elem(), {}}); }

// ------------------------------------------------------------------------------ device-side checks
// A check (hlo::Builder::add_check) of `bad` (pred, any shape): where some element holds, the op failed
// with `message` ("{value}": the matching element of `values`, an integer tensor of bad's shape, or invalid
// for none; "{position}": its flat position). Returns a 0-d pred, true where the check failed, or an invalid
// Value when checks are off (or inside a region).
Value check(Builder& b, Value bad, Value values, const std::string& message, bool index_error);
// How an index tensor's range is checked (checked_index).
struct IndexCheck {
  int64_t dim = 0;           // the indexed dim, for the message
  bool wrap = true;          // negative entries count from the end (torch's indexing), else they are invalid
  bool index_error = true;   // an IndexError (else a RuntimeError)
  bool write = false;        // the index addresses a scatter's updates (below)
  std::string message;       // the CPU's words; default "index {value} is out of bounds for dimension D with size S"
  std::string prefix;        // before the default message ("index_copy_(): ")
};
// An integer index tensor as s64, its negative entries wrapped by `size` (how.wrap), checked on the device:
// an entry outside [-size, size) ([0, size) without wrap) fails the op. For a write, every entry is then
// out of range, so that the scatter drops all its updates: a failed op changes nothing, as on the CPU,
// which raises before writing. With checks off, out-of-range entries are left to XLA (gathers clamp them,
// scatters drop their updates).
Value checked_index(Builder& b, Value idx, int64_t size, const IndexCheck& how);

// ------------------------------------------------------------------------------- row shorthands
using V = std::vector<Value>;
inline V one(Value v) { return V{v}; }

inline Value add(Builder& b, Value x, Value y) { return b.binary("add", x, y); }
inline Value sub(Builder& b, Value x, Value y) { return b.binary("subtract", x, y); }
inline Value mul(Builder& b, Value x, Value y) { return b.binary("multiply", x, y); }
inline Value div(Builder& b, Value x, Value y) { return b.binary("divide", x, y); }
// x * y + z rounded once, as a CPU kernel compiled with FMA contraction computes it. float32 goes through
// float64, where the product is exact, so it differs from a true fused multiply-add only where rounding
// twice does (rarer than 1 in 2^29); other types round twice.
Value fused_mul_add(Builder& b, Value x, Value y, Value z);
// A value XLA must not treat as a constant: it rewrites x / c with a constant c into x * (1 / c), which
// is not the correctly rounded quotient the CPU computes (linspace's (1 - 50) / 49 became -0.99999...).
inline Value opaque(Builder& b, Value v) { return b.unary("optimization_barrier", v); }
inline Value andv(Builder& b, Value x, Value y) { return b.binary("and", x, y); }
inline Value orv(Builder& b, Value x, Value y) { return b.binary("or", x, y); }
inline Value notv(Builder& b, Value x) { return b.unary("not", x); }
inline Value isnan(Builder& b, Value x) { return b.compare(hlo::Cmp::NE, x, x); }
Value is_inf(Builder& b, Value x);     // |x| == inf
Value is_finite(Builder& b, Value x);  // |x| < inf (false for NaN)

// Whether the session registered torch-pjrt's host kernels (kernels/kernels.h: XLA:CPU, unless
// TORCH_PJRT_HOST_KERNELS=0), so that a row may emit their custom calls.
bool host_kernels();
// x [..., R, C] as [..., C, R]: by the host kernel where host_kernels() and the elements have 2, 4 or 8
// bytes (XLA:CPU's own copy of a transpose, and its dots that read one, are several times slower;
// kernels/transpose.cpp), a transpose otherwise.
Value swap_last_two(Builder& b, Value x);
// Argument k (a tensor) in its own layout: where it is a view whose storage order swaps its last two dims
// (a matrix transpose, x.t()) of 64K elements or more, the transpose is made by swap_last_two from the
// storage order. For rows whose result is the argument itself (clone, copy_): an op reading it keeps the
// transpose XLA folds into it (a dot of a transposed factor, for one).
Value transposed_copy(Ctx& c, size_t k);

// Argument k converted to the accumulation type of the output and broadcast to the output's shape.
inline Value up(Ctx& c, size_t k) { return operand(c, k, accumulation_type(c.out_type()), c.out_dims()); }
// Pointwise arithmetic the pointwise and _foreach_ rows share, with the CPU kernels' order and rounding:
// a + alpha * b from arguments a, b and the optional alpha (sign -1: a - alpha * b); for f16/bf16 alpha is
// rounded to the result type and x + alpha * y computed in f32, rounded once (bf16 a - b * 0.1 differed in
// the last bit for a quarter of the elements).
Value add_alpha(Ctx& c, size_t a, size_t b, size_t alpha, double sign);
// torch's lerp of arguments 0 (start), 1 (end), 2 (weight): start + w * (end - start) for |w| < 0.5, else
// end - (end - start) * (1 - w) (exact at w = 1, and lerp(inf, 0, 0.5) is inf, not inf - inf), in f32 for
// f16/bf16 with the weight at its own precision.
Value lerp(Ctx& c);
// addcmul and addcdiv of arguments 0 (self), 1 (tensor1), 2 (tensor2), 3 (value).
Value addcmul(Ctx& c);
Value addcdiv(Ctx& c);
// The float type an nn row computes in: f32 for half types and integers, the type itself otherwise.
ElementType compute_type(ElementType t);

int64_t numel(const Dims& d);
Dims iota_dims(int64_t lo, int64_t hi);  // {lo, ..., hi - 1}
// Sums rows of `updates` [K, ...] into `zeros` at `idx` [K, 1] along dim 0.
Value scatter_add_rows(Builder& b, Value zeros, Value idx, Value updates);

// 1-d constants: s64 values, and f32/f64 values written exactly (as bit patterns).
Value const_i64(Builder& b, const std::vector<int64_t>& v);
Value const_float(Builder& b, const std::vector<double>& v, ElementType t);

// `v` (whose dims are all of `dims` but those in `reduced`) broadcast to `dims`.
Value bcast_kept(Builder& b, Value v, const Dims& dims, const Dims& reduced);
// x.narrow(dim, i, len), keeping the dim.
Value slice_at(Builder& b, Value x, int64_t dim, int64_t i, int64_t len = 1);
// x.index_select(axis, idx) for host-known indices.
Value take_axis(Builder& b, Value x, int64_t axis, const std::vector<int64_t>& idx);
// `acc` plus, at acc[idx[j]] along axis, upd[j] (upd's axis has size idx.size()).
Value scatter_add_axis(Builder& b, Value acc, int64_t axis, const std::vector<int64_t>& idx, Value upd);

}  // namespace lowering
