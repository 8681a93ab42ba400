// Host staging: a "tpu" tensor's trip through a host collective library (torch's gloo) and back.
// One device-to-host copy of each input, the collective on host tensors, one host-to-device copy of
// each output; nothing else is copied. gloo takes a fixed set of dtypes, so a tensor travels in a
// "wire" form: data that is only moved goes as its bytes when gloo lacks its dtype, data that is reduced
// goes widened (int16 -> int32, uint16/uint32 -> int64, float8 -> float32) or as real pairs (complex).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <string>

namespace torch_pjrt::distributed {

// Counts for torch_pjrt.metrics()["distributed"].
struct Counters {
  std::atomic<int64_t> collectives{0};
  std::atomic<int64_t> program_collectives{0};  // of which the program transport ran
  std::atomic<int64_t> bytes_to_host{0};
  std::atomic<int64_t> bytes_to_device{0};
};
Counters& counters();

enum class Use { kMove, kReduce };

// What travels for a tensor of this dtype and size: a host tensor and how to turn it back.
struct Wire {
  at::ScalarType dtype;            // the device tensor's dtype
  std::vector<int64_t> sizes;      // the device tensor's sizes
  enum Kind { kSame, kBytes, kWide, kComplex } kind = kSame;
};

// The wire form of `t` for `use`, or a RuntimeError naming `collective` when no form exists
// (a reduction gloo cannot do on this dtype).
Wire wire_of(const at::Tensor& t, Use use, c10d::ReduceOp op, const char* collective);
// A host copy of `t` in its wire form (one device-to-host copy).
at::Tensor to_host(const at::Tensor& t, const Wire& w);
// An uninitialized host tensor in `t`'s wire form (for outputs).
at::Tensor host_buffer(const at::Tensor& t, const Wire& w);
// Writes the host tensor `host` (wire form `w`) into the device tensor `dst` (one host-to-device copy).
void to_device(const at::Tensor& host, const Wire& w, at::Tensor& dst);

// The reduce op gloo runs for `op` on this dtype: AVG of integers and PREMUL_SUM run as SUM (the
// division and the premultiplication happen on the host around it).
c10d::ReduceOp gloo_op(c10d::ReduceOp op, at::ScalarType dtype);
// Before a reduction: PREMUL_SUM's factor applied to the host input.
void premultiply(at::Tensor& host, const c10d::ReduceOp& op);
// After a reduction: AVG of integers divides the summed host result by the group size (truncating, as
// NCCL does).
void finish_average(at::Tensor& host, const c10d::ReduceOp& op, const Wire& w, int group_size);

std::string reduce_op_name(const c10d::ReduceOp& op);

}  // namespace torch_pjrt::distributed
