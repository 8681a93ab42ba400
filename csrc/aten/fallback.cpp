#include "aten/fallback.h"

#include "aten/errors.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>

namespace torch_pjrt {
namespace {

FallbackPolicy policy_from_env() {
  const char* v = std::getenv("TORCH_PJRT_FALLBACK");
  std::string s = v ? v : "warn";
  if (s == "error") return FallbackPolicy::kError;
  if (s == "silent") return FallbackPolicy::kSilent;
  return FallbackPolicy::kWarn;
}

std::atomic<FallbackPolicy>& policy() {
  static std::atomic<FallbackPolicy> p{policy_from_env()};
  return p;
}

std::mutex mu;
std::map<std::string, int64_t> counts;
std::set<std::string> warned;

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { run_fallback(op, stack); }

}  // namespace

FallbackPolicy fallback_policy() { return policy().load(); }
void set_fallback_policy(FallbackPolicy p) { policy().store(p); }

// Runs the op on CPU copies of its arguments, for its exception only: bad input must raise what the
// CPU raises even where the fallback is disabled. The caller's tensors are never touched.
void raise_cpu_error_if_any(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  torch::jit::Stack copy(stack.end() - n, stack.end());
  auto to_cpu = [](const at::Tensor& t) { return t.defined() && !t.device().is_cpu() ? t.cpu() : t; };
  for (auto& v : copy) {
    if (v.isTensor()) {
      v = to_cpu(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> l;
      for (const at::Tensor& t : v.toTensorList()) l.push_back(to_cpu(t));
      v = l;
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> l;
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList())
        l.push_back(t.has_value() ? std::optional<at::Tensor>(to_cpu(*t)) : std::nullopt);
      v = l;
    } else if (v.isDevice()) {
      v = c10::Device(c10::kCPU);
    }
  }
  op.callBoxed(&copy);  // throws the CPU's error for bad input
}

void run_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason) {
  const std::string name = c10::toString(op.operator_name());
  {  // views past the end of their storage (freed or shrunk through another alias) address nothing
    const size_t n = op.schema().arguments().size();
    for (auto it = stack->end() - n; it != stack->end(); ++it) {
      // (an absent optional tensor can arrive undefined rather than None: autograd passes those)
      auto on_tpu = [](const at::Tensor& t) { return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1; };
      if (it->isTensor() && on_tpu(it->toTensor()))
        check_view_in_storage(it->toTensor(), name.c_str());
      else if (it->isTensorList())
        for (const at::Tensor& t : it->toTensorList())
          if (on_tpu(t)) check_view_in_storage(t, name.c_str());
    }
  }
  const std::string why = reason.empty() ? "no native lowering" : reason;
  if (fallback_policy() == FallbackPolicy::kError) {
    raise_cpu_error_if_any(op, *stack);
    TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu: operator '", name, "' is not supported natively (", why,
                                ") and the CPU fallback is disabled (TORCH_PJRT_FALLBACK=error)");
  }
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++counts[name];
    warn = fallback_policy() == FallbackPolicy::kWarn && warned.insert(name).second;
  }
  if (warn) {
    TORCH_WARN("tpu: operator '", name, "' runs on the CPU (", why,
               "); this copies its inputs to the host and back. Set TORCH_PJRT_FALLBACK=silent to hide this.");
  }
  // Views must never come back as copies: view ops are all native, so this only guards mistakes.
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(mu);
  return counts;
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(mu);
  counts.clear();
  warned.clear();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>()); }

}  // namespace torch_pjrt
