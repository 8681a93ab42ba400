// The process-wide PJRT state: which plugin was chosen, its client and the program cache. Created on
// first use; when no plugin can be loaded it records why, so callers can raise a clear error naming the
// wheel to install while `import` still works.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt/aot.h"
#include "pjrt/discovery.h"
#include "pjrt/program_cache.h"
#include "pjrt/runtime.h"

namespace pjrt {

class Session {
 public:
  // Where to look for plugin wheels (site-packages folders); call before first use.
  static void configure(std::vector<std::string> search_roots);
  static const std::vector<std::string>& search_roots();
  // The session, or nullptr when no plugin could be loaded (see unavailable_reason()).
  static Session* get_or_null();
  // The session; throws std::runtime_error with the reason when unavailable.
  static Session& get();
  static const std::string& unavailable_reason();
  // The session if it was started already, else nullptr (starts nothing).
  static Session* if_started();

  const PluginChoice& choice() const { return choice_; }
  Client& client() { return *client_; }
  ProgramCache& programs() { return *programs_; }
  // Whether torch-pjrt's host kernels (kernels/kernels.h) are registered as custom calls: XLA:CPU
  // plugins with an FFI extension. TORCH_PJRT_HOST_KERNELS=0 leaves them out.
  bool host_kernels() const { return host_kernels_; }
  // Gives the freed heap memory the session keeps (see keep_freed_memory in session.cpp) back to the
  // system: torch.tpu.empty_cache(). Nothing to do off the CPU plugin.
  void release_freed_memory() const;
  const std::string& host_kernels_reason() const { return host_kernels_reason_; }
  // The deviceless targets every program also compiles for (TORCH_PJRT_AOT_TARGETS), or nullptr.
  Aot* aot() const { return aot_.get(); }

 private:
  Session() = default;
  PluginChoice choice_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<ProgramCache> programs_;
  std::unique_ptr<Aot> aot_;
  bool host_kernels_ = false;
  std::string host_kernels_reason_;
};

}  // namespace pjrt
