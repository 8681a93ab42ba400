// Turning runtime failures into the Python exceptions torch users expect: a missing plugin is a
// RuntimeError naming the wheel, device memory exhaustion is torch.OutOfMemoryError, and every other
// PJRT failure is a RuntimeError naming the op.
#pragma once

#include <ATen/core/Tensor.h>
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

// Raises (naming `op`) where a tpu tensor's view reaches past the end of its storage: a storage resized
// or freed through another alias (`x.untyped_storage().resize_(0)`) leaves views that address nothing.
// The CPU reads freed memory there; "tpu" refuses.
inline void check_view_in_storage(const at::Tensor& t, const char* op) {
  if (!t.defined() || t.numel() == 0) return;
  int64_t extent = t.storage_offset() + 1;
  for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * t.stride(d);
  int64_t need = extent * static_cast<int64_t>(t.element_size());
  TORCH_CHECK(need <= static_cast<int64_t>(t.storage().nbytes()), op, ": the tensor (sizes ", t.sizes(),
              ", strides ", t.strides(), ", storage offset ", t.storage_offset(), ", ", t.scalar_type(), ") needs ",
              need, " bytes of its storage, which has ", t.storage().nbytes(),
              " (was the storage resized or freed through another tensor?)");
}

// check_view_in_storage, out of line (checks.cpp): the slow path of check_in_storage_fast.
void check_view_in_storage_slow(const at::Tensor& t, const char* op);

// check_view_in_storage for the hot path (every tensor argument of a table row), inlined: a contiguous
// view needs only cached fields; the extent of any other view is computed when that test does not settle it.
C10_ALWAYS_INLINE void check_in_storage_fast(const at::Tensor& t, const char* op) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const int64_t n = impl->numel();
  if (n == 0) return;
  const int64_t nbytes = static_cast<int64_t>(impl->unsafe_storage().nbytes());
  if (C10_LIKELY(impl->is_contiguous() &&
                 (impl->storage_offset() + n) * static_cast<int64_t>(impl->itemsize()) <= nbytes))
    return;
  check_view_in_storage_slow(t, op);
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
