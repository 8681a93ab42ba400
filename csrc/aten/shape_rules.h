// Shape inference for ops whose torch meta kernel is narrower than the op itself. aten::_grouped_mm's
// meta kernel accepts bfloat16 only (it mirrors the CUDA kernel), while torch's CPU kernel and our row
// take float32, bfloat16 and float16. A rule stands in for the meta call of the functional overload:
// it checks the arguments as the CPU does (raising its errors) and leaves the results, as meta
// tensors, on the stack.
#pragma once

#include <ATen/core/stack.h>

#include <string>

namespace torch_pjrt {

using ShapeRule = void (*)(torch::jit::Stack&);

// The rule for an operator ("aten::_grouped_mm", overload name ""), or nullptr: run it on meta tensors.
ShapeRule shape_rule(const std::string& name, const std::string& overload);

// Where the meta kernel's results differ from the CPU's in size or dtype only: a fix-up of the results
// (`results`, meta tensors) given the call's arguments (`args`, as passed to the meta kernel), run after
// the meta kernel, or nullptr.
using ResultFix = void (*)(const torch::jit::Stack& args, torch::jit::Stack& results);
ResultFix result_fix(const std::string& name, const std::string& overload);

// out= overloads whose CPU kernels demand a result of exactly the input's dtype (their TensorIterator
// wants all dtypes equal: "Found dtype BFloat16 but expected Float") where torch's meta kernels accept
// any dtype the result can be cast to. Takes the operator's name ("aten::neg").
bool out_dtype_must_match_input(const std::string& name);

}  // namespace torch_pjrt
