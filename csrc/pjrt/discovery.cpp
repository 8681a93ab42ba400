#include "pjrt/discovery.h"

#include <glob.h>
#include <sys/stat.h>

namespace pjrt {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

struct Known {
  const char* kind;
  std::vector<const char*> relative_paths;  // inside a site-packages folder
  const char* wheel;
};

const std::vector<Known>& known_plugins() {
  static const std::vector<Known> known = {
      {"tpu", {"libtpu/libtpu.so"}, "libtpu"},
      {"cuda",
       {"jax_plugins/xla_cuda13/xla_cuda_plugin.so", "jax_plugins/xla_cuda12/xla_cuda_plugin.so"},
       "jax-cuda13-pjrt"},
      {"cpu", {"xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"}, "xla-cpu-pjrt"},
  };
  return known;
}

std::string find(const Known& known, const std::vector<std::string>& roots) {
  for (const auto& root : roots) {
    for (const char* rel : known.relative_paths) {
      std::string path = root + "/" + rel;
      if (exists(path)) return path;
    }
  }
  return "";
}

bool has_glob(const char* pattern) {
  glob_t g;
  bool found = glob(pattern, 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  return found;
}

bool hardware_present(const std::string& kind) {
  if (kind == "tpu") return has_glob("/dev/accel*") || has_glob("/dev/vfio/[0-9]*");
  if (kind == "cuda") return exists("/dev/nvidia0") || exists("/dev/nvidiactl");
  return true;
}

}  // namespace

std::string find_plugin(const std::string& kind, const std::vector<std::string>& search_roots) {
  for (const auto& known : known_plugins())
    if (kind == known.kind) return find(known, search_roots);
  return "";
}

std::string plugin_wheel(const std::string& kind) {
  for (const auto& known : known_plugins())
    if (kind == known.kind) return known.wheel;
  return "";
}

PluginChoice choose_plugin(const std::string& setting, const std::vector<std::string>& search_roots) {
  PluginChoice choice;
  if (!setting.empty()) {
    for (const auto& known : known_plugins()) {
      if (setting != known.kind) continue;
      choice.kind = known.kind;
      choice.path = find(known, search_roots);
      if (choice.path.empty()) {
        choice.reason = std::string("TORCH_PJRT_PLUGIN=") + setting + " but its plugin is not installed: pip install " +
                        known.wheel;
      }
      return choice;
    }
    choice.kind = "custom";
    if (exists(setting)) {
      choice.path = setting;
    } else {
      choice.reason = "TORCH_PJRT_PLUGIN points at a missing PJRT plugin: " + setting;
    }
    return choice;
  }
  for (const auto& known : known_plugins()) {
    std::string path = find(known, search_roots);
    if (!path.empty() && hardware_present(known.kind)) {
      choice.kind = known.kind;
      choice.path = path;
      return choice;
    }
  }
  choice.reason = "no PJRT plugin found: pip install xla-cpu-pjrt (CPU), jax-cuda13-pjrt (NVIDIA GPU) or libtpu (TPU)";
  return choice;
}

}  // namespace pjrt
