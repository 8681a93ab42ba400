// The program transport: collectives as StableHLO programs (all_reduce, all_gather, reduce_scatter,
// all_to_all) over devices of this process's PJRT client, compiled with one replica per rank of the group
// and a device assignment of the ranks' devices, each rank launching its replica on its own device with the
// group's launch id. No host copy: the plugin's own collectives move the data (in-process on the CPU
// plugin; NCCL or ICI on plugins whose client spans processes).
//
// Taken where every rank of a group drives a device of this client (the Python creator finds out through
// the Store): ranks that are threads of one process, as with the CPU plugin's TORCH_PJRT_CPU_DEVICES=N.
// A call it cannot run (PREMUL_SUM, uneven splits, an op with no program form) returns false and takes the
// host transport; the choice depends only on the call, which every rank agreed on, so all ranks choose alike.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "hlo/builder.h"

namespace torch_pjrt::distributed {

class ProgramTransport {
 public:
  // `devices[r]`: the client's device index of group rank r; `rank`: this rank; `salt`: distinguishes this
  // group's launch ids from other groups' over the same devices.
  ProgramTransport(std::vector<int> devices, int rank, uint64_t salt);

  bool allreduce(at::Tensor& t, const c10d::ReduceOp& op);
  bool broadcast(at::Tensor& t, int root);
  bool allgather_into(at::Tensor& out, const at::Tensor& in);
  bool reduce_scatter_into(at::Tensor& out, const at::Tensor& in, const c10d::ReduceOp& op);
  bool alltoall_equal(at::Tensor& out, const at::Tensor& in);

 private:
  int64_t size() const { return static_cast<int64_t>(device_ids_.size()); }
  hlo::Builder::Groups groups() const;  // one group of every replica
  // Runs `mlir` (argument `in`, one result of `out`'s shape) as this rank's replica; writes `out`.
  void run(const std::string& mlir, const at::Tensor& in, at::Tensor& out, const char* name);
  std::vector<int> devices_;
  std::vector<int64_t> device_ids_;
  int rank_;
  uint64_t salt_;
  uint64_t seq_ = 0;
};

}  // namespace torch_pjrt::distributed
