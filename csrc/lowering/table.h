// The op table (DESIGN.md layer 3): one row per ATen operator, mapping dense input values plus scalar
// arguments to result values through the builder. A row names the functional overload first; its
// in-place and out= variants reuse the same lowering (the aten layer writes the result back). The same
// rows serve eager execution, fused eager and torch.compile. No torch here: rows see Args and Values.
#pragma once

#include <complex>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "hlo/builder.h"
#include "pjrt/runtime.h"

namespace lowering {

using hlo::Builder;
using hlo::Dims;
using hlo::Type;
using hlo::Value;
using pjrt::ElementType;
using pjrt::TensorSpec;

// One schema argument as a lowering sees it.
struct Arg {
  enum Kind { kNone, kTensor, kTensorList, kInt, kInts, kDouble, kBool, kString, kDtype, kScalar };
  Kind kind = kNone;
  Value value;              // kTensor, and kScalar when passed at run time (a 0-d program input)
  // kTensor on the device: its dims from the slowest-varying in storage to the fastest ({0, 2, 1} for a
  // transposed [G, K, N] view of a [G, N, K] tensor; empty when unknown). A hint for rows whose cost
  // depends on it: transposing back to storage order cancels the view's transpose, so costs nothing.
  Dims layout;
  // kTensor: torch's is_contiguous() of the argument where ops' results depend on it (eager; a graph's
  // values are dense and taken as contiguous).
  bool contiguous = true;
  bool weak = false;        // a Python number (kScalar, or a wrapped-number tensor): weakest in promotion
  std::vector<Value> list;  // kTensorList (missing optional entries are invalid Values)
  int64_t i = 0;            // kInt, kBool
  std::vector<int64_t> ints;
  double d = 0;                // kDouble, and kScalar when baked into the program
  std::complex<double> c;      // kScalar baked, complex
  ElementType scalar_type = ElementType::kInvalid;  // kScalar: f64, s64, pred or c128; kDtype: the dtype
  std::string s;               // kString
  bool is_none() const { return kind == kNone; }
};

struct Ctx {
  Builder& b;
  std::vector<Arg> args;         // by position in the functional overload's schema
  std::vector<TensorSpec> outs;  // the functional overload's results (shape inference ran on meta)
  Value rng_state;               // ui64[2], for rows marked kRandom
  Value new_rng_state;           // set by random rows: the advanced state
  // Rows that draw only in some cases (attention with dropout > 0) ask for the state here: the aten
  // layer then adds it as a program argument, so the other cases neither consume the generator nor
  // pay for the argument. Invalid where the caller offers no generator.
  std::function<Value()> lazy_rng_state;
  Value random_state() {
    if (!rng_state.valid() && lazy_rng_state) rng_state = lazy_rng_state();
    return rng_state;
  }

  const Arg& arg(size_t i) const { return args.at(i); }
  const Value& t(size_t i) const;  // tensor (or run-time scalar) argument i
  int64_t i(size_t k) const { return args.at(k).i; }
  const std::vector<int64_t>& ints(size_t k) const { return args.at(k).ints; }
  double d(size_t k) const { return args.at(k).d; }
  bool has(size_t k) const { return k < args.size() && !args[k].is_none(); }
  ElementType out_type(size_t k = 0) const { return outs.at(k).type; }
  const Dims& out_dims(size_t k = 0) const { return outs.at(k).dims; }
  Type out(size_t k = 0) const { return Type{outs.at(k).type, outs.at(k).dims}; }
  // False for results the caller does not want (undefined in shape inference, e.g. by output_mask):
  // the row may return an invalid Value for them.
  bool wanted(size_t k) const { return outs.at(k).type != ElementType::kInvalid; }
};

using LowerFn = std::vector<Value> (*)(Ctx&);

enum RowFlags : unsigned {
  kNoFlags = 0,
  kRandom = 1,         // consumes the device generator: ctx.rng_state is set, ctx.new_rng_state returned
  kBakeScalars = 2,    // Scalar arguments are program constants (they decide shapes, e.g. arange)
  kRuntimeFloats = 4,  // float arguments are run-time inputs too (an optimizer's lr changes every step)
};

// One input of a growable concatenation: its storage's base as a flat array of the result's type, and
// the tensor's geometry as s64 scalars (program inputs, or constants for inputs of fixed shape).
struct GrowPart {
  Value flat;
  std::vector<Value> sizes, strides;
  Value offset;
};
// Concatenation whose lengths are run-time values (DESIGN.md, "growing shapes"): joins `parts` along
// `dim` into a flat, contiguous array of `capacity` elements (the result's storage, room to spare).
using GrowFn = Value (*)(Builder&, const std::vector<GrowPart>& parts, int64_t dim, int64_t capacity);

struct Row {
  std::vector<std::string> overloads;  // "add.Tensor", "add_.Tensor", "add.out"
  LowerFn fn;
  unsigned flags = kNoFlags;
  // Rows whose result is their tensor-list argument joined along their int argument (cat): the form
  // used when the result is small enough to live in a growable storage, so that a tensor grown by one
  // step at a time (generate's input_ids) reuses one program per capacity.
  GrowFn grow = nullptr;
};

// All rows, collected from the category files (pointwise.cpp, reduction.cpp, ...).
const std::vector<Row>& table();

// row.fn(c), lowered per target where the row's choices depend on the device (hlo::Builder::per_variant):
// what every caller of a row's lowering calls.
std::vector<Value> lower_row(const Row& row, Ctx& c);

struct Rows {
  Rows(std::initializer_list<Row> rows);  // a category file's static registration
};

}  // namespace lowering
