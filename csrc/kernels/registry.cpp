// Registers every host kernel with the plugin's FFI extension (see kernels.h).
#include <exception>

#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "pjrt/runtime.h"

namespace kernels {

bool register_host_kernels(const pjrt::Plugin& plugin, std::string* why) {
  const struct {
    const char* target;
    ffi::Error* (*handler)(ffi::CallFrame*);
  } all[] = {
      {kRaggedRowsNt, ragged_rows_nt},
      {kRaggedRowsNn, ragged_rows_nn},
      {kSortedPrefixDescending, sorted_prefix_descending},
      {kSortedPrefixAscending, sorted_prefix_ascending},
      {kCumsum, cumsum},
      {kCumprod, cumprod},
      {kSumMiddle, sum_middle},
      {kTranspose, transpose},
      {kCopy, copy},
      {kAttention, attention},
      {kSoftmax, softmax},
      {kLogSoftmax, log_softmax},
      {kSoftmaxBackward, softmax_backward},
      {kLogSoftmaxBackward, log_softmax_backward},
      {kAttentionBackward, attention_backward},
      {kMatmulNN, matmul_nn},
      {kMatmulNT, matmul_nt},
      {kMatmulTN, matmul_tn},
      {kMatmulTT, matmul_tt},
  };
  try {
    for (const auto& k : all) plugin.register_ffi_handler(k.target, "Host", reinterpret_cast<void*>(k.handler));
    return true;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace kernels
