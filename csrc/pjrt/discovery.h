// Which PJRT plugin to load: TORCH_PJRT_PLUGIN=cpu|cuda|tpu|/path/to/plugin.so, else a TPU if libtpu is
// installed and a TPU is present, else CUDA if a GPU and its plugin are present, else the CPU plugin.
#pragma once

#include <string>
#include <vector>

namespace pjrt {

struct PluginChoice {
  std::string path;    // empty when nothing was found
  std::string kind;    // "cpu", "cuda", "tpu" or "custom"
  std::string reason;  // why nothing was found: names the wheel to install
};

// `search_roots` are site-packages folders (Python passes sys.path); `setting` is TORCH_PJRT_PLUGIN.
PluginChoice choose_plugin(const std::string& setting, const std::vector<std::string>& search_roots);

// The installed plugin of `kind` ("cpu", "cuda", "tpu") under `search_roots`, or "" (whether or not
// its hardware is here: deviceless compiles need the plugin only); and the wheel that provides it.
std::string find_plugin(const std::string& kind, const std::vector<std::string>& search_roots);
std::string plugin_wheel(const std::string& kind);

}  // namespace pjrt
