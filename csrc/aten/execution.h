// Executing programs: strict mode (asynchronous, the default) returns future buffers at once; debug
// mode (TORCH_PJRT_LAUNCH_BLOCKING=1) waits for every op and raises its failure at once. Also the
// counters behind torch_pjrt.metrics() and the cache of run-time scalar arguments.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <atomic>

#include "pjrt/runtime.h"

namespace torch_pjrt {

struct Metrics {
  std::atomic<int64_t> cache_hits{0};    // op calls served by a cached program
  std::atomic<int64_t> cache_misses{0};  // op calls that built a program entry
  std::atomic<int64_t> executions{0};
  // inputs a program updates in place (donates) that something else still held: copied before the run
  std::atomic<int64_t> donation_copies{0};
};
Metrics& metrics();

bool launch_blocking();
void set_launch_blocking(bool on);

struct DeferredError;

// Executes and, in debug mode, waits: a failure raises a torch error naming `op` at once. In strict mode
// a failure is returned instead (and remembered for the next synchronize): the caller poisons the
// op's outputs, and the failure surfaces at the next sync point.
std::vector<pjrt::BufferPtr> run(const pjrt::Executable& exe, int device, const std::vector<const pjrt::Buffer*>& args,
                                 const char* op, std::shared_ptr<const DeferredError>* failure);

// run() for a program of many ops, through the dispatch thread (pjrt::Executable::dispatch): returns at
// once. `args` are owned by the launch; those marked in `donated` are freed when the run is done. Without
// the dispatch thread (TORCH_PJRT_DISPATCH=0, or launch blocking) it is run() on this thread.
std::vector<pjrt::BufferPtr> run_dispatched(const pjrt::ExecutablePtr& exe, int device, std::vector<pjrt::BufferPtr> args,
                                            std::vector<char> donated, const char* op,
                                            std::shared_ptr<const DeferredError>* failure);

// A copy of `label` that lives as long as the process (an op name for buffers, which may outlive whoever
// named them); the same pointer for the same text.
const char* intern_label(const std::string& label);

// Waits for everything issued so far on `device` (torch.tpu.synchronize); raises a pending failure.
void synchronize(int device);
[[noreturn]] void raise_deferred(const DeferredError& e);

// A 0-d device buffer holding `value` as `type` (f64, s64, pred, c128 or a tensor dtype), cached.
pjrt::BufferPtr scalar_buffer(int device, pjrt::ElementType type, const c10::Scalar& value);
int64_t scalar_cache_entries();

}  // namespace torch_pjrt
