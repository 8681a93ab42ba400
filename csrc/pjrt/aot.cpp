#include "pjrt/aot.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string_view>

#include "pjrt/compile_options.h"
#include "pjrt/discovery.h"
#include "pjrt/program_cache.h"

namespace pjrt {

const std::vector<AotTargetInfo>& aot_targets() {
  static const std::vector<AotTargetInfo> targets = {
      {"h100", "cuda", "NVIDIA H100 80GB HBM3"},   {"h100-pcie", "cuda", "NVIDIA H100 PCIe"},
      {"h200", "cuda", "NVIDIA H200 141GB HBM3e"}, {"b200", "cuda", "NVIDIA B200"},
      {"b300", "cuda", "NVIDIA B300"},             {"gb200", "cuda", "NVIDIA GB200"},
      {"a100", "cuda", "NVIDIA A100-SXM4-80GB"},   {"rtx-pro-6000", "cuda", "NVIDIA RTX PRO 6000 Blackwell"},
      {"tpu-v4", "tpu", "v4:2x2x1"},               {"tpu-v5e", "tpu", "v5e:1x1"},
      {"tpu-v5p", "tpu", "v5p:2x2x1"},             {"tpu-v6e", "tpu", "v6e:1x1"},
      {"tpu-v7x", "tpu", "tpu7x:2x2x1"},
  };
  return targets;
}

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The CUDA plugin turns PTX into machine code with ptxas and links libdevice for math functions; it looks
// in the nvidia-cuda-nvcc / nvidia-nvvm wheels beside it, a CUDA toolkit, or PATH.
void require_cuda_tools(const std::vector<std::string>& roots) {
  std::vector<std::string> dirs;
  for (const auto& r : roots) dirs.push_back(r + "/nvidia/cu13");
  dirs.push_back("/usr/local/cuda");
  bool ptxas = false, libdevice = false;
  for (const auto& d : dirs) {
    ptxas |= exists(d + "/bin/ptxas");
    libdevice |= exists(d + "/nvvm/libdevice/libdevice.10.bc");
  }
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t at = 0; at <= p.size();) {
      size_t end = p.find(':', at);
      if (end == std::string::npos) end = p.size();
      ptxas |= end > at && exists(p.substr(at, end - at) + "/ptxas");
      at = end + 1;
    }
  }
  if (!ptxas || !libdevice)
    throw Error(Code::kNotFound, std::string("TORCH_PJRT_AOT_TARGETS: compiling for NVIDIA GPUs needs ") +
                                     (!ptxas ? "ptxas" : "libdevice") +
                                     ": pip install nvidia-cuda-nvcc nvidia-nvvm (or install a CUDA toolkit)");
}

}  // namespace

std::string Aot::gpu_target_spec(const std::string& plugin_path, const std::string& device) {
  int fd = open(plugin_path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(Code::kNotFound, "cannot open " + plugin_path);
  struct stat st;
  fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) throw Error(Code::kInternal, "cannot map " + plugin_path);
  const char* data = static_cast<const char*>(map);
  // Each spec is a NUL-terminated text proto ending in its device's name.
  const std::string tag = "device_description_str: \"" + device + "\"";
  std::string spec;
  const char* at = data;
  while (const char* hit = static_cast<const char*>(memmem(at, size - (at - data), tag.data(), tag.size()))) {
    const char* end = hit + tag.size();
    while (end < data + size && (*end == '\n' || *end == ' ')) ++end;
    if (end < data + size && *end == '\0') {
      const char* begin = hit;
      while (begin > data && begin[-1] != '\0') --begin;
      if (std::string_view(begin, hit - begin).find("gpu_device_info") != std::string_view::npos) {
        spec.assign(begin, end);
        break;
      }
    }
    at = hit + 1;
  }
  munmap(map, size);
  if (spec.empty()) throw Error(Code::kNotFound, "the CUDA plugin " + plugin_path + " has no target spec for " + device);
  return spec;
}

struct Aot::Target {
  AotTargetInfo info;
  std::shared_ptr<Plugin> plugin;
  abi::Topology* topology = nullptr;
  std::string platform, dir;
  AotStats stats;
  std::unordered_map<uint64_t, std::map<std::string, double>> costs;  // by program text
};

namespace {
// A cost analysis beside its executable on disk: "name value" lines.
void write_cost(const std::string& file, const std::map<std::string, double>& cost) {
  std::ofstream out(file + ".tmp");
  out.precision(17);
  for (const auto& [k, v] : cost) out << k << ' ' << v << '\n';
  out.close();
  if (!out || std::rename((file + ".tmp").c_str(), file.c_str()) != 0) std::remove((file + ".tmp").c_str());
}
std::map<std::string, double> read_cost(const std::string& file) {
  std::map<std::string, double> cost;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const size_t sp = line.rfind(' ');
    if (sp != std::string::npos) cost[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return cost;
}
}  // namespace

Aot::Aot(const std::string& setting, const std::vector<std::string>& roots, const std::string& cache_dir,
         const std::shared_ptr<Plugin>& own) {
  std::vector<std::string> names;
  for (size_t at = 0; at <= setting.size();) {
    size_t end = setting.find(',', at);
    if (end == std::string::npos) end = setting.size();
    std::string n = setting.substr(at, end - at);
    n.erase(0, n.find_first_not_of(" \t"));
    n.erase(n.find_last_not_of(" \t") + 1);
    if (!n.empty()) names.push_back(n);
    at = end + 1;
  }
  for (const std::string& name : names) {
    const AotTargetInfo* info = nullptr;
    for (const auto& t : aot_targets())
      if (name == t.name) info = &t;
    if (!info) {
      std::string known;
      for (const auto& t : aot_targets()) known += std::string(known.empty() ? "" : ", ") + t.name;
      throw std::invalid_argument("TORCH_PJRT_AOT_TARGETS: unknown target '" + name + "' (known: " + known + ")");
    }
    const bool cuda = std::string(info->plugin) == "cuda";
    const std::string path = find_plugin(info->plugin, roots);
    if (path.empty())
      throw Error(Code::kNotFound, "TORCH_PJRT_AOT_TARGETS=" + name + " needs the " + info->plugin + " plugin: pip install " +
                                       plugin_wheel(info->plugin) + (cuda ? " nvidia-cuda-nvcc nvidia-nvvm" : ""));
    if (cuda) require_cuda_tools(roots);
    if (!cuda) {
      // libtpu as a compiler only: no metadata server to ask, and no claim on the TPU (a lockfile that
      // would keep a second process, a test worker, from loading it)
      setenv("TPU_SKIP_MDS_QUERY", "1", 0);
      setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1", 0);
    }
    auto t = std::make_unique<Target>();
    t->info = *info;
    t->plugin = own && own->path() == path ? own : Plugin::load(path);
    // CUDA: the GPU's target spec and a topology of one device; TPU: the topology's name says it all.
    const std::string spec = cuda ? gpu_target_spec(path, info->device) : info->device;
    const std::string shape = "1x1x1";  // partitions x hosts per partition x devices per host
    abi::NamedValue opts[2] = {};
    const char* keys[2] = {"target_config", "topology"};
    const std::string* values[2] = {&spec, &shape};
    for (int i = 0; i < 2; ++i) {
      opts[i].struct_size = sizeof(abi::NamedValue);
      opts[i].name = keys[i];
      opts[i].name_size = std::strlen(keys[i]);
      opts[i].type = abi::kString;
      opts[i].string_value = values[i]->data();
      opts[i].value_size = values[i]->size();
    }
    abi::TopologyDescriptionCreateArgs create{};
    create.topology_name = cuda ? "" : info->device;
    create.topology_name_size = cuda ? 0 : std::strlen(info->device);
    create.create_options = cuda ? opts : nullptr;
    create.num_options = cuda ? 2 : 0;
    t->plugin->call(abi::kTopologyDescriptionCreate, create, "PJRT_TopologyDescription_Create");
    t->topology = create.topology;
    abi::TopologyDescriptionStringArgs platform{};
    platform.topology = t->topology;
    t->plugin->call(abi::kTopologyDescriptionPlatformName, platform, "PJRT_TopologyDescription_PlatformName");
    t->platform.assign(platform.value, platform.value_size);
    t->stats.target = name;
    t->stats.device = info->device;
    t->stats.platform = t->platform;
    if (!cache_dir.empty()) {
      // executables are valid for the plugin build and the target spec that made them
      t->dir = cache_dir + "/aot/" + name + "-" +
               hex(fingerprint(path + "\n" + std::to_string(t->plugin->api_minor()) + "\n" + spec));
      make_dirs(t->dir);
    }
    targets_.push_back(std::move(t));
  }
  options_ = encode_compile_options(default_compile_options());
  const char* threads = std::getenv("TORCH_PJRT_AOT_THREADS");
  const int n = std::max(1, threads ? std::atoi(threads) : 2);
  if (!targets_.empty())
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
}

Aot::~Aot() {
  for (auto& w : workers_)
    if (w.joinable()) w.detach();
}

void Aot::submit(std::string program, std::string mlir, const ExecutablePtr& executable,
                 std::map<std::string, std::string> by_plugin) {
  if (targets_.empty()) return;
  std::string all = mlir;
  for (const auto& [plugin, text] : by_plugin) all += "\n// for " + plugin + "\n" + text;
  const uint64_t key = fingerprint(all);
  std::lock_guard<std::mutex> lock(mu_);
  if (!seen_.insert(key).second) return;
  submitted_.push_back({program, key, executable});
  for (auto& t : targets_) ++t->stats.pending;
  queue_.push_back({std::move(program), std::move(mlir), key, std::move(by_plugin)});
  wake_.notify_one();
}

void Aot::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
}

void Aot::work() {
  // Below the run's own threads: the compiles are a check, not the run's work.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return !queue_.empty(); });
    Job job = std::move(queue_.front());
    queue_.pop_front();
    ++busy_;
    lock.unlock();
    for (auto& t : targets_) compile(*t, job);
    lock.lock();
    --busy_;
    if (queue_.empty() && busy_ == 0) idle_.notify_all();
  }
}

void Aot::compile(Target& t, const Job& job) {
  auto own = job.by_plugin.find(t.info.plugin);
  const std::string& mlir = own == job.by_plugin.end() ? job.mlir : own->second;
  const uint64_t key = job.key;
  const std::string file = t.dir.empty() ? "" : t.dir + "/" + hex(fingerprint(mlir)) + ".bin";
  if (!file.empty() && exists(file)) {
    std::map<std::string, double> cost = read_cost(file + ".cost");
    std::lock_guard<std::mutex> lock(mu_);
    --t.stats.pending;
    ++t.stats.cached;
    t.costs[key] = std::move(cost);
    return;
  }
  std::map<std::string, double> cost;
  auto start = std::chrono::steady_clock::now();
  std::string error, bytes;
  if (mlir.rfind(kNotLowered, 0) == 0) error = mlir.substr(3);
  else try {
    abi::Program program{};
    program.struct_size = sizeof program;
    program.code = mlir.data();
    program.code_size = mlir.size();
    program.format = "mlir";
    program.format_size = 4;
    abi::CompileArgs args{};
    args.topology = t.topology;
    args.program = &program;
    args.compile_options = options_.data();
    args.compile_options_size = options_.size();
    t.plugin->call(abi::kCompile, args, "PJRT_Compile");
    cost = cost_analysis(*t.plugin, args.executable);
    abi::ExecutableSerializeArgs ser{};
    ser.executable = args.executable;
    try {
      t.plugin->call(abi::kExecutableSerialize, ser, "PJRT_Executable_Serialize");
      bytes.assign(ser.serialized_bytes, ser.serialized_bytes_size);
      if (ser.serialized_executable_deleter) ser.serialized_executable_deleter(ser.serialized_executable);
    } catch (const Error& e) {
      error = e.what();
    }
    abi::ExecutableArgs destroy{};
    destroy.executable = args.executable;
    t.plugin->call(abi::kExecutableDestroy, destroy, "PJRT_Executable_Destroy");
  } catch (const Error& e) {
    error = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // A compile this slow costs CI minutes (one of XLA's GPU tiling searches has taken over 6): name the program.
  if (seconds > 60)
    std::fprintf(stderr, "torch_pjrt AOT %s: %.0f s to compile %s\n", t.stats.target.c_str(), seconds,
                 job.program.c_str());
  if (error.empty() && !file.empty()) {
    const std::string tmp = file + "." + std::to_string(getpid()) + ".tmp";
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out || std::rename(tmp.c_str(), file.c_str()) != 0) std::remove(tmp.c_str());
    write_cost(file + ".cost", cost);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (error.empty()) t.costs[key] = std::move(cost);
  --t.stats.pending;
  ++t.stats.compiles;
  t.stats.seconds += seconds;
  if (!error.empty()) {
    ++t.stats.failures;
    if (error.size() > 2000) error = error.substr(0, 2000) + " ...";
    failures_.push_back({t.stats.target, job.program, error});
  }
}

std::vector<AotStats> Aot::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AotStats> out;
  for (const auto& t : targets_) out.push_back(t->stats);
  return out;
}

std::vector<AotProgram> Aot::programs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AotProgram> out;
  for (const auto& s : submitted_) {
    AotProgram p{s.program, s.executable.lock(), {}};
    for (const auto& t : targets_) {
      auto it = t->costs.find(s.key);
      p.costs.push_back(it == t->costs.end() ? std::map<std::string, double>{} : it->second);
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<AotFailure> Aot::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

}  // namespace pjrt
