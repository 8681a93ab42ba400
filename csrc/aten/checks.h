// Argument checks the CPU kernels make that torch's meta kernels lack (checks.cpp): the overloads that
// get a checking kernel in front of their table row.
#pragma once

#include <torch/library.h>

#include <set>
#include <string>
#include <vector>

namespace torch_pjrt {

// The table-row overloads that have checks, leaving out `other_custom` (overloads with kernels of their
// own elsewhere, which do their own checking).
std::set<std::string> checked_overloads(const std::set<std::string>& other_custom);
// Registers the checking kernels of checked_overloads(other_custom); each runs its row through call_row().
void register_checked_kernels(torch::Library& m, const std::set<std::string>& other_custom);

// The overlap checks torch's kernels make on the tensors an in-place or out= op writes (`written`: by
// schema position; `name`: "aten::overload"): no element written through two places (a stride-0 view
// of torch.zeros(4).expand(3, 4)), nor an element another argument reads unless it is the same element
// (x.add_(x), add(a, b, out=a)). Overloads whose CPU kernels skip the first check and whose result does
// not depend on the order of the writes (fill_ with a number, zero_: every place gets one value) skip it here too.
void check_write_overlap(const std::string& name, const torch::jit::Stack& stack, size_t base,
                         const std::vector<bool>& written);

}  // namespace torch_pjrt
