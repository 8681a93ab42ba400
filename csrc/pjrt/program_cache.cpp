#include "pjrt/program_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace pjrt {
namespace {

// Entry layout: magic, text size, payload size, checksum of text and payload, text, payload.
constexpr char kMagic[8] = {'T', 'P', 'J', 'R', 'T', 'C', '2', '\n'};
struct Header {
  char magic[8];
  uint64_t text_size;
  uint64_t payload_size;
  uint64_t checksum;
};

// Lines of a /proc file (-1 when it cannot be read).
int64_t count_lines(const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  char buf[65536];
  int64_t lines = 0;
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) lines += std::count(buf, buf + n, '\n');
  close(fd);
  return lines;
}

// XLA:CPU maps every program's machine code into the process (a few memory mappings each); once the
// process reaches the kernel's limit (vm.max_map_count) the plugin's JIT linker aborts the process. A
// compile or load is refused with this error while fewer than kHeadroom mappings are left, so a process
// that keeps making new programs gets an exception (and eager ops their CPU fallback) instead. The maps
// are counted every 128 programs while below half the limit, then before every program.
// TORCH_PJRT_MAP_LIMIT replaces the kernel's limit (tests, or a tighter bound).
void check_map_headroom() {
  constexpr int64_t kHeadroom = 4096;
  static const int64_t limit = [] {
    if (const char* v = std::getenv("TORCH_PJRT_MAP_LIMIT")) return static_cast<int64_t>(std::atoll(v));
    std::ifstream in("/proc/sys/vm/max_map_count");
    int64_t v = -1;
    return (in >> v) ? v : int64_t{-1};
  }();
  static std::atomic<int64_t> calls{0}, last{0};
  if (limit <= 0) return;
  if (last.load() < limit / 2 && calls.fetch_add(1) % 128 != 0) return;
  int64_t maps = count_lines("/proc/self/maps");
  if (maps < 0) return;
  last.store(maps);
  if (maps + kHeadroom > limit)
    throw Error(Code::kResourceExhausted,
                "too many programs in this process: " + std::to_string(maps) + " memory mappings of the kernel's "
                "limit of " + std::to_string(limit) + " (vm.max_map_count), and XLA:CPU maps every program's code; "
                "raise the limit (sysctl vm.max_map_count=262144) or use fewer distinct shapes");
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

struct DiskEntry {
  std::string path;
  int64_t bytes;
  int64_t mtime_ns;
};

// Entries of the folder; temporary files left by killed writers (older than an hour) are removed.
std::vector<DiskEntry> scan(const std::string& dir) {
  std::vector<DiskEntry> entries;
  DIR* d = opendir(dir.c_str());
  if (!d) return entries;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    std::string path = dir + "/" + name;
    struct stat st;
    if (name[0] == '.' || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (ends_with(name, ".tmp")) {
      if (now_s - st.st_mtim.tv_sec > 3600) unlink(path.c_str());
      continue;
    }
    if (!ends_with(name, ".bin")) continue;
    entries.push_back({path, static_cast<int64_t>(st.st_size),
                       static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  closedir(d);
  return entries;
}

}  // namespace

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

uint64_t fingerprint(const char* data, size_t size, uint64_t h) {
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ULL;
  }
  return h;
}

uint64_t fingerprint(const std::string& text) { return fingerprint(text.data(), text.size()); }

ProgramCache::ProgramCache(const Client& client, std::string dir, int64_t max_disk_bytes)
    : client_(client), max_disk_bytes_(max_disk_bytes) {
  if (dir.empty()) return;
  std::string identity = client.plugin().path() + "|" + std::to_string(client.plugin().api_minor()) + "|" +
                         client.platform_name() + "|" + client.platform_version() + "|" +
                         hex(fingerprint(client.compile_options()));
  dir_ = dir + "/" + hex(fingerprint(identity));
  make_dirs(dir_);
  for (const auto& e : scan(dir_)) disk_bytes_ += e.bytes;
}

ExecutablePtr ProgramCache::load(const std::string& file, const std::string& mlir,
                                 const std::vector<TensorSpec>& inputs, const std::vector<TensorSpec>& outputs) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return nullptr;
  std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  Header h;
  bool ok = blob.size() >= sizeof h;
  if (ok) {
    std::memcpy(&h, blob.data(), sizeof h);
    ok = std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.text_size <= blob.size() &&
         h.payload_size <= blob.size() && sizeof h + h.text_size + h.payload_size == blob.size() &&
         fingerprint(blob.data() + sizeof h, blob.size() - sizeof h) == h.checksum;
  }
  if (ok && blob.compare(sizeof h, h.text_size, mlir) != 0) return nullptr;  // a hash collision: not ours
  if (ok) {
    try {
      auto exe = client_.deserialize(blob.substr(sizeof h + h.text_size), inputs, outputs);
      utimensat(AT_FDCWD, file.c_str(), nullptr, 0);  // recently used: evicted last
      return exe;
    } catch (const Error&) {
      // written by another plugin build that shares the folder name, or damaged in a way the
      // checksum cannot see: treat as corrupt
    }
  }
  std::remove(file.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.disk_corrupt;
  disk_bytes_ = std::max<int64_t>(0, disk_bytes_ - static_cast<int64_t>(blob.size()));
  return nullptr;
}

void ProgramCache::store(const std::string& file, const std::string& mlir, const std::string& payload) {
  static std::atomic<uint64_t> counter{0};
  Header h;
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.text_size = mlir.size();
  h.payload_size = payload.size();
  h.checksum = fingerprint(payload.data(), payload.size(), fingerprint(mlir));
  // A private temporary name, then rename: concurrent readers never see a partial file.
  std::string tmp = file + "." + std::to_string(getpid()) + "." + std::to_string(counter++) + ".tmp";
  std::ofstream out(tmp, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&h), sizeof h);
  out << mlir << payload;
  out.close();
  if (!out || std::rename(tmp.c_str(), file.c_str()) != 0) {
    std::remove(tmp.c_str());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    disk_bytes_ += static_cast<int64_t>(sizeof h + mlir.size() + payload.size());
  }
  evict_if_needed();
}

void ProgramCache::evict_if_needed() {
  std::lock_guard<std::mutex> lock(mu_);
  if (max_disk_bytes_ <= 0 || disk_bytes_ <= max_disk_bytes_) return;
  auto entries = scan(dir_);
  std::sort(entries.begin(), entries.end(), [](const DiskEntry& a, const DiskEntry& b) { return a.mtime_ns < b.mtime_ns; });
  int64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  const int64_t target = max_disk_bytes_ - max_disk_bytes_ / 4;  // evict down to 75%: not on every write
  for (const auto& e : entries) {
    if (total <= target) break;
    if (std::remove(e.path.c_str()) == 0) {
      total -= e.bytes;
      ++stats_.disk_evictions;
    }
  }
  disk_bytes_ = total;
}

ExecutablePtr ProgramCache::get(const std::string& mlir, const std::vector<TensorSpec>& inputs,
                                const std::vector<TensorSpec>& outputs, const CompileOptions& options) {
  std::string encoded = encode_compile_options(options);
  std::string key = mlir + "\n// compile options " + hex(fingerprint(encoded));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(key);
    if (it != programs_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  auto start = std::chrono::steady_clock::now();
  ExecutablePtr exe = client_.compile(mlir, inputs, outputs, &encoded);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.compiles;
  stats_.compile_seconds += seconds;
  return programs_.emplace(key, exe).first->second;
}

ExecutablePtr ProgramCache::get(const std::string& mlir, const std::vector<TensorSpec>& inputs,
                                const std::vector<TensorSpec>& outputs, Served* served) {
  Served local;
  if (!served) served = &local;
  *served = Served{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(mlir);
    if (it != programs_.end()) {
      ++stats_.memory_hits;
      return it->second;
    }
  }
  check_map_headroom();
  std::string file;
  auto start = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (!dir_.empty()) {
    file = dir_ + "/" + hex(fingerprint(mlir)) + ".bin";
    if (ExecutablePtr exe = load(file, mlir, inputs, outputs)) {
      *served = Served{Served::kDisk, since()};
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.disk_hits;
      programs_.emplace(mlir, exe);
      return exe;
    }
  }
  start = std::chrono::steady_clock::now();
  ExecutablePtr exe = client_.compile(mlir, inputs, outputs);
  double seconds = since();
  *served = Served{Served::kCompiled, seconds};
  if (!file.empty()) {
    try {
      store(file, mlir, exe->serialize());
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

int64_t ProgramCache::disk_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return disk_bytes_;
}

void ProgramCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mu_);
  programs_.clear();
}

}  // namespace pjrt
