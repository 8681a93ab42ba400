// How a row sees an ATen call's arguments: the schema kinds, and the Arg built for each argument. Shared
// by the eager dispatcher kernel (table_kernel.cpp, one op per program) and the graph builder
// (graph.cpp, a whole torch.compile graph per program), so both call a row the same way.
#pragma once

#include <ATen/core/ivalue.h>

#include <functional>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "lowering/table.h"

namespace torch_pjrt {

enum class ArgKind : uint8_t {
  kTensor,
  kTensorList,  // Tensor[] and Tensor?[]
  kScalar,
  kScalarList,
  kInt,
  kIntList,
  kDouble,
  kBool,
  kString,
  kDtype,
  kIgnored,  // Layout, MemoryFormat, Device, Generator: no effect on the program
  kDevice,
};

ArgKind kind_of(const c10::TypePtr& type);

// An argument for shape inference: tpu tensors become meta tensors of the same sizes, strides and offset
// over one meta base per (storage, dtype) in `bases` (so aliasing and overlap checks see what the real
// tensors share); devices become meta.
using MetaBases = std::map<std::pair<void*, int>, at::Tensor>;
c10::IValue to_meta(const c10::IValue& v, ArgKind kind, MetaBases& bases);
int64_t scalar_kind(const c10::Scalar& s);  // an ElementType: f64, s64, pred or c128
int64_t list_item(const c10::IValue& e);    // an int[]/SymInt[]/bool[]/float[] element as an int64 word

// Where the values of tensor and run-time scalar arguments come from.
struct ArgSources {
  // A tensor argument (item < 0) or an element of a tensor list; undefined tensors never reach it.
  std::function<lowering::Arg(const at::Tensor& t, int index, int item)> tensor;
  // A scalar the row reads as a Value: a Scalar (unless the row bakes scalars), a Scalar[] element, a
  // float under kRuntimeFloats. Eager makes it a program input; a graph makes it a constant.
  std::function<hlo::Value(pjrt::ElementType type, const c10::Scalar& value, int index, int item)> scalar;
};

// The Arg of schema argument `index` holding `v`.
lowering::Arg row_arg(const c10::IValue& v, ArgKind kind, unsigned row_flags, int index, const ArgSources& src);

// Checks a row's results against shape inference and converts them to the promised dtypes.
void convert_results(hlo::Builder& b, std::vector<hlo::Value>& results, const std::vector<pjrt::TensorSpec>& outs,
                     const std::string& name);

}  // namespace torch_pjrt
