// Compiled programs keyed by their text, in memory and on disk. The disk tier stores the plugin's
// serialized executables under a folder named for the plugin build (its path, API version, platform
// version) and the compile options, since serialized executables are only valid for the build and the
// settings that made them.
//
// Disk entries survive crashes and sharing: each is written to a private temporary name and renamed
// into place (readers never see half a file, even with several processes on one folder), and carries a
// magic tag, its sizes and a checksum of text and payload, so a truncated or corrupt entry is detected,
// deleted and recompiled, never handed to the plugin. The folder has a size bound: past it, the least
// recently used entries (by modification time, refreshed on every hit) are evicted.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "pjrt/compile_options.h"
#include "pjrt/runtime.h"

namespace pjrt {

struct CacheStats {
  int64_t compiles = 0;          // programs compiled by the plugin
  double compile_seconds = 0;    // total time in those compiles
  int64_t disk_hits = 0;         // programs loaded from the disk tier instead
  int64_t memory_hits = 0;       // identical program text met again in this process
  int64_t disk_corrupt = 0;      // disk entries rejected (truncated, bad checksum, not loadable) and deleted
  int64_t disk_evictions = 0;    // disk entries deleted to keep the folder under its size bound
};

// How get() served a program: an identical text already in memory, the disk tier, or a plugin compile.
struct Served {
  enum From { kMemory, kDisk, kCompiled } from = kMemory;
  double seconds = 0;  // the compile's or the load's
};

class ProgramCache {
 public:
  // `dir` empty disables the disk tier. `max_disk_bytes` bounds the folder (0: no bound).
  ProgramCache(const Client& client, std::string dir, int64_t max_disk_bytes = kDefaultMaxDiskBytes);
  ExecutablePtr get(const std::string& mlir, const std::vector<TensorSpec>& inputs,
                    const std::vector<TensorSpec>& outputs, Served* served = nullptr);
  // A program compiled with its own options (a collective program's device assignment): kept in memory
  // only, keyed by text and options. Such executables are tied to this process's devices.
  ExecutablePtr get(const std::string& mlir, const std::vector<TensorSpec>& inputs,
                    const std::vector<TensorSpec>& outputs, const CompileOptions& options);
  CacheStats stats() const;
  void clear_memory();
  const std::string& dir() const { return dir_; }
  int64_t disk_bytes() const;

  static constexpr int64_t kDefaultMaxDiskBytes = int64_t{4} << 30;

 private:
  ExecutablePtr load(const std::string& file, const std::string& mlir, const std::vector<TensorSpec>& inputs,
                     const std::vector<TensorSpec>& outputs);
  void store(const std::string& file, const std::string& mlir, const std::string& payload);
  void evict_if_needed();

  const Client& client_;
  std::string dir_;
  int64_t max_disk_bytes_;
  int64_t disk_bytes_ = 0;  // approximate: other processes write too; rescanned on eviction
  mutable std::mutex mu_;
  std::unordered_map<std::string, ExecutablePtr> programs_;
  CacheStats stats_;
};

uint64_t fingerprint(const std::string& text);  // FNV-1a 64
std::string hex(uint64_t v);                     // 16 hex digits, for file names
void make_dirs(const std::string& path);         // mkdir -p
uint64_t fingerprint(const char* data, size_t size, uint64_t seed = 1469598103934665603ULL);

}  // namespace pjrt
