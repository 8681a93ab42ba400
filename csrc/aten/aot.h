// The deviceless targets' side of compiling (pjrt/aot.h): each driver (eager ops, graphs and fused
// streams, internal programs) hands over every program it compiles for this device, as lowered for the
// targets (hlo::Builder::module_text(name, 1)).
#pragma once

#include <string>

#include "hlo/builder.h"
#include "pjrt/runtime.h"

namespace torch_pjrt {

// Whether deviceless targets are configured (TORCH_PJRT_AOT_TARGETS), so that drivers keep the targets'
// text of a program until it compiles.
bool aot_active();
// The targets' text of the module `b` builds: variant 1 where its lowering differs per target, else "" (the
// program as this device runs it).
std::string aot_text(const hlo::Builder& b, const std::string& name);
// Queues `program` (named by `what`: the op or graph and its shapes) for the targets: `target_text`, or
// `module` where that is empty. `exe` is this device's executable of it (its launches weigh estimates).
// `b`, when given, is the builder of `module`: functions it holds as lowered per plugin kind (jax_op) go
// to that kind's targets in its texts.
void aot_submit(const std::string& what, const std::string& module, const std::string& target_text,
                const pjrt::ExecutablePtr& exe, const hlo::Builder* b = nullptr, const std::string& name = "");

}  // namespace torch_pjrt
