// The arguments of an eager op's program (table_kernel.cpp) beyond its row's own: the bases of the call's
// storages, and the parts of a tensor's geometry taken at run time (a view's offset, a growable read's
// offset and strides). Each adds a program input and the Source execute() fills it from.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "aten/table_entry.h"
#include "hlo/builder.h"
#include "lowering/view.h"

namespace torch_pjrt {

// Program arguments for the call's storages (their bases; none for a never-written storage): their forms
// and values by slot.
void storage_args(hlo::Builder& b, c10::ArrayRef<c10::Storage> storages, Entry& entry,
                  std::vector<pjrt::TensorSpec>& in_specs, std::vector<lowering::BaseForm>& forms,
                  std::vector<hlo::Value>& slot_values);

// A program input holding part of a tensor's geometry (Source::part) of stack argument `index`, list
// element `item` (-1: not a list).
hlo::Value geometry_input(hlo::Builder& b, int index, int item, int part, std::vector<pjrt::TensorSpec>& in_specs,
                          Entry& entry);

// Reads tensor `t` (stack argument `index`, list element `item`) from its growable storage's flat base.
hlo::Value read_dynamic(hlo::Builder& b, const hlo::Value& flat, const at::Tensor& t, int index, int item,
                        std::vector<pjrt::TensorSpec>& in_specs, Entry& entry);

}  // namespace torch_pjrt
