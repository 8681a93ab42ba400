#include "pjrt/program_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace pjrt {
namespace {

void make_dirs(const std::string& path) {
  std::string partial;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '/');) {
    partial += part + "/";
    mkdir(partial.c_str(), 0755);
  }
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint64_t fingerprint(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

ProgramCache::ProgramCache(const Client& client, std::string dir) : client_(client) {
  if (dir.empty()) return;
  std::string identity = client.plugin().path() + "|" + std::to_string(client.plugin().api_minor()) + "|" +
                         client.platform_name() + "|" + client.platform_version();
  dir_ = dir + "/" + hex(fingerprint(identity));
  make_dirs(dir_);
}

ExecutablePtr ProgramCache::get(const std::string& mlir, const std::vector<TensorSpec>& inputs,
                                const std::vector<TensorSpec>& outputs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(mlir);
    if (it != programs_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  std::string file;
  if (!dir_.empty()) {
    // The text hash names the file; the file also holds the text, checked on load (no collisions).
    file = dir_ + "/" + hex(fingerprint(mlir)) + ".bin";
    std::ifstream in(file, std::ios::binary);
    if (in) {
      std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      size_t text_size = 0;
      if (blob.size() > sizeof text_size) {
        std::memcpy(&text_size, blob.data(), sizeof text_size);
        if (text_size + sizeof text_size <= blob.size() &&
            blob.compare(sizeof text_size, text_size, mlir) == 0) {
          try {
            auto exe = client_.deserialize(blob.substr(sizeof text_size + text_size), inputs, outputs);
            std::lock_guard<std::mutex> lock(mu_);
            ++stats_.disk_hits;
            programs_.emplace(mlir, exe);
            return exe;
          } catch (const Error&) {
            // stale or foreign entry: recompile below and overwrite it
          }
        }
      }
    }
  }
  auto start = std::chrono::steady_clock::now();
  ExecutablePtr exe = client_.compile(mlir, inputs, outputs);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!file.empty()) {
    try {
      std::string bytes = exe->serialize();
      // Write to a temporary name, then rename: concurrent processes never see a partial file.
      std::string tmp = file + "." + std::to_string(getpid()) + ".tmp";
      std::ofstream out(tmp, std::ios::binary);
      size_t text_size = mlir.size();
      out.write(reinterpret_cast<const char*>(&text_size), sizeof text_size);
      out << mlir << bytes;
      out.close();
      if (out) std::rename(tmp.c_str(), file.c_str());
      else std::remove(tmp.c_str());
    } catch (const Error&) {
      // plugins without serialization simply have no disk tier
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.compiles;
  stats_.compile_seconds += seconds;
  programs_.emplace(mlir, exe);
  return exe;
}

CacheStats ProgramCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ProgramCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mu_);
  programs_.clear();
}

}  // namespace pjrt
