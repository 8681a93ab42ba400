#include "aten/aot.h"

#include "pjrt/session.h"

namespace torch_pjrt {

bool aot_active() {
  pjrt::Session* s = pjrt::Session::get_or_null();
  return s && s->aot();
}

std::string aot_text(const hlo::Builder& b, const std::string& name) {
  return b.has_variants() && aot_active() ? b.module_text(name, 1) : std::string();
}

void aot_submit(const std::string& what, const std::string& module, const std::string& target_text) {
  pjrt::Session* s = pjrt::Session::get_or_null();
  if (!s || !s->aot()) return;
  s->aot()->submit(what, target_text.empty() ? module : target_text);
}

}  // namespace torch_pjrt
