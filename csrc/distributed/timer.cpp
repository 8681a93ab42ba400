// DDP's reducer times each iteration's forward, backward and communication through a timer registered per
// device type; without one for "tpu" it warns every run ("Time stats are currently only collected for CPU
// and CUDA devices"). Ours reads the host clock, as torch's CPU timer does: the times are when the host
// issued the work (ops are asynchronous), which DDP's logging data reports as such.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace torch_pjrt::distributed {

class HostClockTimer final : public c10d::Timer {
 public:
  explicit HostClockTimer(c10::Device) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    int64_t a = getTimeRef(start), b = getTimeRef(end);
    // Unrecorded, or recorded in another order than asked (e.g. no communication in this iteration).
    if (a == c10d::kUnsetTime || b == c10d::kUnsetTime || b < a) return std::nullopt;
    return b - a;
  }
};

}  // namespace torch_pjrt::distributed

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, torch_pjrt::distributed::HostClockTimer);
}
