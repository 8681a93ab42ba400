// Deviceless compiles (TORCH_PJRT_AOT_TARGETS): every program the run compiles for its own device is also
// compiled for other devices that are not here, through their plugins' compile-only path (a topology made
// from options, then PJRT_Compile with no client): NVIDIA GPUs named by the target specs that the CUDA
// plugin embeds, and TPU topologies that libtpu knows. Programs are lowered for such a target as for its own plugin (hlo::Builder::per_variant:
// no CPU host kernels, chlo.ragged_dot). Compiles run on background threads at low priority
// (TORCH_PJRT_AOT_THREADS, default 2); each target's executables are kept on disk by program text, so a
// program compiles once per target.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "pjrt/runtime.h"

namespace pjrt {

struct AotTargetInfo {
  const char* name;    // what TORCH_PJRT_AOT_TARGETS takes: "h100", "tpu-v6e"
  const char* plugin;  // the plugin kind that compiles for it ("cuda" or "tpu", see discovery.h)
  // CUDA: the GPU's name in the plugin's target specs ("NVIDIA H100 80GB HBM3"). TPU: libtpu's topology
  // name ("v6e:1x1").
  const char* device;
};
const std::vector<AotTargetInfo>& aot_targets();

struct AotStats {
  std::string target, device, platform;
  int64_t compiles = 0;  // programs compiled for the target in this process
  int64_t failures = 0;
  int64_t cached = 0;    // programs whose executable for the target was on disk already
  int64_t pending = 0;   // programs queued, not compiled yet
  double seconds = 0;    // in those compiles
};

struct AotFailure {
  std::string target, program, error;
};

// A program handed to the targets, for estimates: how often this device ran it, and each target's cost
// analysis of it (XLA's: "flops", "bytes accessed", "transcendentals", "optimal_seconds", ...; empty
// where the compile failed or is pending).
struct AotProgram {
  std::string program;
  ExecutablePtr executable;  // this device's, while it lives (null once freed)
  std::vector<std::map<std::string, double>> costs;  // by target, in stats()' order
};

class Aot {
 public:
  // `setting`: target names, comma-separated. `roots`: site-packages folders to find the plugins in.
  // `cache_dir`: the program cache's folder ("" keeps nothing on disk). Throws Error naming the wheels to
  // install when a target's plugin or the files it needs are missing, std::invalid_argument for an
  // unknown name.
  // `own` is this process's device plugin: a target of the same plugin (compiling for a v5e on a v6e
  // host) uses it instead of loading and initializing the library a second time.
  Aot(const std::string& setting, const std::vector<std::string>& roots, const std::string& cache_dir,
      const std::shared_ptr<Plugin>& own = nullptr);
  Aot(const Aot&) = delete;
  ~Aot();  // never runs in practice: the session that holds it lives until the process ends

  // A text that starts so is no program but why the lowering for the targets failed: a failure as it is.
  static constexpr const char* kNotLowered = "// not lowered for the targets: ";
  // Queues `mlir` for every target; `program` names it in failures (the op or graph and its shapes);
  // `executable` is this device's program (its launches weigh the estimates).
  // `by_plugin` holds the program's text for the targets of one plugin kind ("cuda", "tpu") where it
  // differs from `mlir` (a JAX-lowered kernel, lowered by JAX for that platform: python/torch_pjrt/jax_ops.py).
  void submit(std::string program, std::string mlir, const ExecutablePtr& executable = nullptr,
              std::map<std::string, std::string> by_plugin = {});
  // Waits until every queued program is compiled.
  void drain();
  std::vector<AotStats> stats() const;
  std::vector<AotFailure> failures() const;
  std::vector<AotProgram> programs() const;

  // The target spec (text GpuTargetConfigProto) the CUDA plugin at `plugin_path` embeds for `device`.
  static std::string gpu_target_spec(const std::string& plugin_path, const std::string& device);

 private:
  struct Target;
  struct Job {
    std::string program, mlir;
    uint64_t key;  // the program's, as submitted (its costs are found by it)
    std::map<std::string, std::string> by_plugin;
  };
  struct Submitted {
    std::string program;
    uint64_t key;
    std::weak_ptr<Executable> executable;
  };
  void work();
  void compile(Target& t, const Job& job);

  std::vector<std::unique_ptr<Target>> targets_;
  std::string options_;  // the serialized compile options, as for this process's programs
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<Job> queue_;
  std::unordered_set<uint64_t> seen_;  // program texts already queued
  int busy_ = 0;  // workers compiling
  std::vector<AotFailure> failures_;
  std::vector<Submitted> submitted_;
  std::vector<std::thread> workers_;
};

}  // namespace pjrt
