// The host kernels' FFI handlers (registered by registry.cpp) and what they share.
#pragma once

#include <string>

#include "kernels/ffi_abi.h"

namespace kernels {

// An error result naming the kernel and what was wrong.
inline ffi::Error* fail(const ffi::CallFrame* f, const std::string& message) {
  ffi::ErrorCreateArgs a{sizeof a, nullptr, message.c_str(), ffi::kInvalidArgument};
  return f->api->error_create(&a);
}

// False for the calls a handler only answers: the metadata query (the API version it was built for) and
// the stages before execution.
inline bool executing(ffi::CallFrame* f) {
  if (f->extension_start && f->extension_start->type == ffi::kExtensionMetadata) {
    auto* meta = reinterpret_cast<ffi::MetadataExtension*>(f->extension_start)->metadata;
    meta->api_version.major_version = ffi::kApiMajor;
    meta->api_version.minor_version = ffi::kApiMinor;
    return false;
  }
  return f->stage == ffi::kExecute;
}

// attention.cpp
ffi::Error* attention(ffi::CallFrame* f);
ffi::Error* attention_backward(ffi::CallFrame* f);
// matmul.cpp
ffi::Error* matmul_nn(ffi::CallFrame* f);
ffi::Error* matmul_nt(ffi::CallFrame* f);
ffi::Error* matmul_tn(ffi::CallFrame* f);
ffi::Error* matmul_tt(ffi::CallFrame* f);
// ragged_dot.cpp
ffi::Error* ragged_rows_nt(ffi::CallFrame* f);
ffi::Error* ragged_rows_nn(ffi::CallFrame* f);
// reduce.cpp
ffi::Error* sum_middle(ffi::CallFrame* f);
// scan.cpp
ffi::Error* cumsum(ffi::CallFrame* f);
ffi::Error* cumprod(ffi::CallFrame* f);
// transpose.cpp
ffi::Error* transpose(ffi::CallFrame* f);
ffi::Error* copy(ffi::CallFrame* f);
// softmax.cpp
ffi::Error* softmax(ffi::CallFrame* f);
ffi::Error* log_softmax(ffi::CallFrame* f);
ffi::Error* softmax_backward(ffi::CallFrame* f);
ffi::Error* log_softmax_backward(ffi::CallFrame* f);
// sort.cpp
ffi::Error* sorted_prefix_descending(ffi::CallFrame* f);
ffi::Error* sorted_prefix_ascending(ffi::CallFrame* f);

}  // namespace kernels
