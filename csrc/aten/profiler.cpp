#include "aten/profiler.h"

#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "aten/storage.h"
#include "pjrt/runtime.h"

namespace torch_pjrt {

ProfileSpan::ProfileSpan(std::string_view kind, std::string_view what) : guard_(at::RecordScope::USER_SCOPE) {
  if (!guard_.isActive()) return;
  name_.append(kind).append(what.empty() ? "" : " ").append(what);
  guard_.before(std::string_view(name_));
}

namespace {

// PyTorch's PrivateUse1 profiler hooks, called at each op's entry and exit under
// torch.autograd.profiler.profile(use_device="tpu") (state KINETO_PRIVATEUSE1_FALLBACK). Programs run
// asynchronously, so an event first waits for the work issued so far on the device: an op's device time is
// then from the end of the work before it to the end of its own program (its launch included). Profiling
// this way makes execution synchronous, as CUDA_LAUNCH_BLOCKING would. The hooks must never throw: a
// failure of the device is the op's to report, at its sync point.
struct Stubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    int d = 0;
    try {
      d = current_device();
      pjrt::Buffer::await_newest(d);
    } catch (...) {  // noqa: the op reports its own failure
    }
    if (device) *device = static_cast<c10::DeviceIndex>(d);
    *event = std::make_shared<int64_t>(c10::getTime());
    if (cpu_ns) *cpu_ns = c10::getTime();
  }
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    if (!start || !end || !*start || !*end) return 0;
    const int64_t ns = *static_cast<const int64_t*>(end->get()) - *static_cast<const int64_t*>(start->get());
    return static_cast<float>(ns) / 1000.0f;  // microseconds
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    for (int d = 0; d < pjrt::Buffer::kMaxDevices; ++d) {
      if (d >= device_count()) break;
      op(d);
    }
  }
  void synchronize() const override {
    try {
      for (int d = 0; d < device_count(); ++d) pjrt::Buffer::await_newest(d);
    } catch (...) {  // noqa: reported at the next sync point
    }
  }
};

Stubs stubs;
struct Register {
  Register() { torch::profiler::impl::registerPrivateUse1Methods(&stubs); }
} register_stubs;

}  // namespace

}  // namespace torch_pjrt
