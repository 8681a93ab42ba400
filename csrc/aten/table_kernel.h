#pragma once

#include <ATen/core/stack.h>
#include <torch/library.h>

#include <set>
#include <string>

namespace torch_pjrt {

// Registers a TableKernel for every overload of every row, except `custom` ones: those get a kernel of
// their own in ops.cpp, which reaches the row through call_row().
void register_table_kernels(torch::Library& m, const std::set<std::string>& custom);
void call_row(const std::string& overload, torch::jit::Stack* stack);

// Registers every PrivateUse1 kernel of the aten namespace (rows and ops.cpp's own); once.
void register_aten_kernels();
void register_data_dependent_kernels(torch::Library& m);
const std::set<std::string>& data_dependent_overloads();  // custom kernels in data_dependent.cpp

}  // namespace torch_pjrt
