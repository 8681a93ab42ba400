// Compiled programs keyed by their text, in memory and on disk. The disk tier stores the plugin's
// serialized executables under a folder named for the plugin build (its path, API version, platform
// version), since serialized executables are only valid for the build that made them.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "pjrt/runtime.h"

namespace pjrt {

struct CacheStats {
  int64_t compiles = 0;          // programs compiled by the plugin
  double compile_seconds = 0;    // total time in those compiles
  int64_t disk_hits = 0;         // programs loaded from the disk tier instead
  int64_t memory_hits = 0;       // identical program text met again in this process
};

class ProgramCache {
 public:
  // `dir` empty disables the disk tier.
  ProgramCache(const Client& client, std::string dir);
  ExecutablePtr get(const std::string& mlir, const std::vector<TensorSpec>& inputs,
                    const std::vector<TensorSpec>& outputs);
  CacheStats stats() const;
  void clear_memory();
  const std::string& dir() const { return dir_; }

 private:
  const Client& client_;
  std::string dir_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, ExecutablePtr> programs_;
  CacheStats stats_;
};

uint64_t fingerprint(const std::string& text);  // FNV-1a 64

}  // namespace pjrt
