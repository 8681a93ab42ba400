// The CPU fallback for ops without a native lowering: PyTorch's boxed CPU fallback, counted per op.
// TORCH_PJRT_FALLBACK=warn (default: warn once per op) | silent | error (tests of native coverage).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <map>
#include <string>

namespace torch_pjrt {

enum class FallbackPolicy { kWarn, kSilent, kError };
FallbackPolicy fallback_policy();
void set_fallback_policy(FallbackPolicy p);

// Runs `op` on CPU (counted; raises under the error policy). `reason` says why it was not native.
void run_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason = "");

std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();

}  // namespace torch_pjrt
