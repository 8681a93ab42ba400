// Shared helpers for rows: type promotion as torch does it, operand conversion and broadcasting, and
// the float32 accumulation that torch uses for half-precision reductions.
#pragma once

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
Value unary_op(Ctx& c, const char* op, size_t a = 0);  // float ops on ints compute in the output type

// Reductions with a scalar combiner ("add", "maximum", ...).
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

}  // namespace lowering
