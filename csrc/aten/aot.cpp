#include "aten/aot.h"

#include <cstdlib>

#include "pjrt/session.h"

namespace torch_pjrt {

bool aot_active() {
  pjrt::Session* s = pjrt::Session::get_or_null();
  return s && s->aot();
}

std::string aot_text(const hlo::Builder& b, const std::string& name) {
  // TORCH_PJRT_AOT_LOWERING=device hands the targets this device's programs as they are: what another
  // plugin makes of them (the CPU's host kernels are not registered there), and a check that they differ.
  static const bool as_device = [] {
    const char* e = std::getenv("TORCH_PJRT_AOT_LOWERING");
    return e && std::string(e) == "device";
  }();
  if (as_device || !aot_active()) return std::string();
  if (!b.variant_error().empty()) return std::string(pjrt::Aot::kNotLowered) + b.variant_error();
  return b.has_variants() ? b.module_text(name, 1) : std::string();
}

void aot_submit(const std::string& what, const std::string& module, const std::string& target_text,
                const pjrt::ExecutablePtr& exe, const hlo::Builder* b, const std::string& name) {
  pjrt::Session* s = pjrt::Session::get_or_null();
  if (!s || !s->aot()) return;
  std::map<std::string, std::string> by_plugin;
  if (b && target_text.rfind(pjrt::Aot::kNotLowered, 0) != 0)
    for (const auto& plugin : b->function_plugins()) {
      std::string text = b->module_text(name, b->has_variants() ? 1 : 0, plugin);
      // functions that could not be lowered for that plugin (jax_op): the targets' failure is that reason
      const size_t at = text.find(pjrt::Aot::kNotLowered);
      if (at != std::string::npos) text = text.substr(at, text.find('\n', at) - at);
      by_plugin[plugin] = std::move(text);
    }
  s->aot()->submit(what, target_text.empty() ? module : target_text, exe, std::move(by_plugin));
}

}  // namespace torch_pjrt
