// "tpu_dist": torch.distributed's c10d backend for "tpu" tensors (DESIGN.md, layers; docs/distributed.md).
//
// Two transports. Programs (programs.h) where every rank of the group drives a device of this process's
// client, for the calls they can run. Host staging otherwise: every collective copies its inputs to the host
// once, runs the collective there with torch's own gloo backend (made by the Python creator from the group's
// c10d Store, handed in as `host`), and copies its outputs back once; the transport of ranks in several
// processes (the CPU plugin ignores the key-value callbacks a multi-process client needs).
// The Work returned is asynchronous: its future completes, with the output tensors, when gloo's work
// and the copy back are done (on gloo's thread), so DDP's comm hooks chain on it as on NCCL's; wait()
// raises a failure.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <functional>

#include "distributed/agreement.h"
#include "distributed/group.h"
#include "distributed/programs.h"
#include "distributed/staging.h"

namespace torch_pjrt::distributed {

class TpuBackend final : public c10d::Backend {
 public:
  // `devices` (the client's device of each group rank) when every rank drives a device of this process's
  // client: collectives then run as programs where they can (programs.h); empty: host staging only.
  TpuBackend(Group group, c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Backend> host,
             std::vector<int> devices = {});
  ~TpuBackend() override;

  const std::string getBackendName() const override { return "tpu_dist"; }
  const Group& group() const { return group_; }
  const char* transport() const { return programs_ ? "programs" : "host"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void setTimeout(std::chrono::milliseconds timeout) override;

 private:
  // Work on the host: `start` runs gloo's calls on host tensors staged beforehand; `finish` writes the
  // host results back into the device outputs once every gloo work has completed.
  c10::intrusive_ptr<c10d::Work> run(const char* collective, std::vector<at::Tensor> outputs,
                                     const std::function<std::vector<c10::intrusive_ptr<c10d::Work>>()>& start,
                                     std::function<void()> finish);
  void before(const char* collective, const std::string& call);
  // A Work already completed with `outputs` (a collective the program transport ran).
  c10::intrusive_ptr<c10d::Work> done(std::vector<at::Tensor> outputs);
  void check_tensors(const char* collective, const std::vector<at::Tensor>& tensors) const;

  Group group_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> host_;
  Agreement agreement_;
  std::unique_ptr<ProgramTransport> programs_;
};

}  // namespace torch_pjrt::distributed
