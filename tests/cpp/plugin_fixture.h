// One CPU-plugin client shared by the C++ tests. The plugin is found like the Python package finds it:
// TORCH_PJRT_PLUGIN, else site-packages folders listed in TORCH_PJRT_SEARCH_PATH (set by CMake).
#pragma once

#include <cstdlib>
#include <sstream>

#include "pjrt/discovery.h"
#include "pjrt/runtime.h"

inline pjrt::Client& test_client() {
  static std::unique_ptr<pjrt::Client> client = [] {
    std::vector<std::string> roots;
    std::stringstream ss(std::getenv("TORCH_PJRT_SEARCH_PATH") ? std::getenv("TORCH_PJRT_SEARCH_PATH") : "");
    for (std::string item; std::getline(ss, item, ':');) roots.push_back(item);
    auto choice = pjrt::choose_plugin("cpu", roots);
    if (choice.path.empty()) throw std::runtime_error(choice.reason);
    return pjrt::Client::create(pjrt::Plugin::load(choice.path), {{"cpu_device_count", int64_t{2}}});
  }();
  return *client;
}
