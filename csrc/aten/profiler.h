// torch.profiler on "tpu" (docs/performance.md, "Profiling"): spans for what the backend does besides ops
// (program compiles, sync points), and PyTorch's PrivateUse1 profiler hooks (profiler.cpp) that give each op
// its device time under torch.autograd.profiler.profile(use_device="tpu").
#pragma once

#include <ATen/record_function.h>

#include <string>
#include <string_view>

namespace torch_pjrt {

// A span named "<kind> <what>" ("tpu.compile aten::mm(self: f32[4, 8], ...)") in the profiler's trace while a
// profiler is on, from construction to destruction; nothing otherwise (one check of a thread-local flag).
class ProfileSpan {
 public:
  ProfileSpan(std::string_view kind, std::string_view what);

 private:
  std::string name_;  // outlives guard_ (declared first, destroyed last)
  at::RecordFunction guard_;
};

}  // namespace torch_pjrt
