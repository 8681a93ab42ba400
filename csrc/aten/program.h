// Small internal programs that are not ATen ops (materializing a view for a download, resizing a
// storage), compiled through the text-keyed program cache and run at once.
#pragma once

#include <functional>

#include "aten/storage.h"

namespace torch_pjrt {

// Builds a program whose arguments are `inputs` (in order) via `body`, runs it on `device`.
std::vector<pjrt::BufferPtr> run_program(
    const char* name, int device, const std::vector<const pjrt::Buffer*>& inputs,
    const std::function<std::vector<hlo::Value>(hlo::Builder&, const std::vector<hlo::Value>&)>& body);

// View `view` of a storage's base `buffer` (of form `form`; null when never written) as a dense buffer, by a
// program that takes a dynamic view's offset at run time (one program for a view at any offset).
pjrt::BufferPtr materialize(const char* name, int device, const pjrt::BufferPtr& buffer,
                            const lowering::BaseForm& form, const lowering::ViewForm& view);

// The tensor's value as a dense buffer of its own dtype and shape (its base when that already is).
// Null when the storage was never written.
pjrt::BufferPtr dense_buffer(const at::Tensor& t);

// The base of a storage resized to `nbytes` (kept contents, zero-filled growth).
pjrt::BufferPtr resized_base(const StorageHandle& h, const lowering::BaseForm& form, size_t nbytes);

}  // namespace torch_pjrt
