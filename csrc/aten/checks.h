// Argument checks the CPU kernels make that torch's meta kernels lack (checks.cpp): the overloads that
// get a checking kernel in front of their table row.
#pragma once

#include <torch/library.h>

#include <set>
#include <string>

namespace torch_pjrt {

// The table-row overloads that have checks, leaving out `other_custom` (overloads with kernels of their
// own elsewhere, which do their own checking).
std::set<std::string> checked_overloads(const std::set<std::string>& other_custom);
// Registers the checking kernels of checked_overloads(other_custom); each runs its row through call_row().
void register_checked_kernels(torch::Library& m, const std::set<std::string>& other_custom);

}  // namespace torch_pjrt
