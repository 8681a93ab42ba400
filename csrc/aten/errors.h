// Turning runtime failures into the Python exceptions torch users expect: a missing plugin is a
// RuntimeError naming the wheel, device memory exhaustion is torch.OutOfMemoryError, and every other
// PJRT failure is a RuntimeError naming the op.
#pragma once

#include <c10/util/Exception.h>

#include "pjrt/session.h"

namespace torch_pjrt {

inline pjrt::Session& session_or_throw() {
  auto* s = pjrt::Session::get_or_null();
  TORCH_CHECK(s, "tpu: no usable PJRT device: ", pjrt::Session::unavailable_reason());
  return *s;
}

[[noreturn]] inline void rethrow_pjrt(const char* op, const pjrt::Error& e) {
  TORCH_CHECK_WITH(OutOfMemoryError, e.code() != pjrt::Code::kResourceExhausted, "tpu: out of memory in ", op, ": ",
                   e.what());
  TORCH_CHECK(false, "tpu: ", op, " failed: ", e.what());
}

// Runs f(), converting pjrt::Error into a torch error that names `op`.
template <class F>
auto guarded(const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const pjrt::Error& e) {
    rethrow_pjrt(op, e);
  }
}

}  // namespace torch_pjrt
