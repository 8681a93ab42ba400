#include "pjrt/session.h"

#include "hlo/builder.h"

#include <malloc.h>

#include "kernels/kernels.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace pjrt {
namespace {

std::vector<std::string>& roots() {
  static std::vector<std::string> r;
  return r;
}
std::string& reason() {
  static std::string r;
  return r;
}
std::once_flag& once() {
  static std::once_flag f;
  return f;
}
Session*& instance() {
  static Session* s = nullptr;
  return s;
}

std::string env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string default_cache_dir() {
  std::string dir = env("TORCH_PJRT_CACHE_DIR", "-");
  if (dir != "-") return dir;  // empty disables the disk cache
  std::string base = env("XDG_CACHE_HOME");
  if (base.empty()) base = env("HOME", "/tmp") + "/.cache";
  return base + "/torch_pjrt";
}

// The plugin logs informational lines to stderr while it starts (absl's "before InitializeLog" notice,
// device counts). Failures reach us as PJRT errors, so those lines are hidden unless
// TORCH_PJRT_VERBOSE=1.
class QuietStderr {
 public:
  QuietStderr() {
    if (env("TORCH_PJRT_VERBOSE") == "1") return;
    std::fflush(stderr);
    saved_ = dup(2);
    int null = open("/dev/null", O_WRONLY);
    if (saved_ >= 0 && null >= 0) dup2(null, 2);
    if (null >= 0) close(null);
  }
  ~QuietStderr() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
  }

 private:
  int saved_ = -1;
};

// On the CPU plugin device memory is the process's heap, and XLA:CPU allocates a program's temporaries
// for each execution. glibc returns freed memory at the top of a heap to the system (and maps large
// blocks afresh), so every execution faulted its temporaries' pages in again: a [1024, 1024] linear
// layer's 4 MiB temporary cost 3400 page faults and 11.6 ms against 7.7 ms without them. As a device
// allocator keeps its memory, up to 256 MiB freed at the top of a heap stays in the process, and blocks
// up to 32 MiB (glibc's most) come from the heap; torch.tpu.empty_cache() gives it back.
// TORCH_PJRT_KEEP_FREED_MEMORY=0 leaves glibc's defaults.
void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

// The CPU plugin sizes its thread pools (programs' intra-op work, asynchronous launches) from the
// environment variable PJRT_NPROC when the client is created, else from the cores. TORCH_PJRT_CPU_THREADS
// sets it for our client only: the variable is restored afterwards, so that another PJRT client in the
// process (jax's) keeps its own default.
class ScopedThreadCount {
 public:
  explicit ScopedThreadCount(const std::string& threads) : set_(!threads.empty()) {
    if (!set_) return;
    char* end = nullptr;
    const long n = std::strtol(threads.c_str(), &end, 10);
    if (*end || n < 1 || n > 4096)
      throw std::runtime_error("TORCH_PJRT_CPU_THREADS must be a whole number of threads from 1 to 4096, not '" +
                               threads + "'");
    const char* old = std::getenv("PJRT_NPROC");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("PJRT_NPROC", threads.c_str(), 1);
  }
  ~ScopedThreadCount() {
    if (!set_) return;
    if (had_) setenv("PJRT_NPROC", old_.c_str(), 1);
    else unsetenv("PJRT_NPROC");
  }

 private:
  bool set_, had_ = false;
  std::string old_;
};

}  // namespace

void Session::configure(std::vector<std::string> search_roots) { roots() = std::move(search_roots); }

Session* Session::get_or_null() {
  std::call_once(once(), [] {
    PluginChoice choice = choose_plugin(env("TORCH_PJRT_PLUGIN"), roots());
    if (choice.path.empty()) {
      reason() = choice.reason;
      return;
    }
    try {
      QuietStderr quiet;
      auto plugin = Plugin::load(choice.path);
      std::map<std::string, OptionValue> options;
      if (choice.kind == "cpu") {
        // The CPU plugin defaults to 4 devices; ours is a setting (default 1) so that
        // multi-device code can be tested on one machine. Under torchrun the default is one per local
        // process, so that every process's device LOCAL_RANK exists (each process has its own).
        options["cpu_device_count"] =
            int64_t{std::atoll(env("TORCH_PJRT_CPU_DEVICES", env("LOCAL_WORLD_SIZE", "1").c_str()).c_str())};
      }
      std::unique_ptr<Client> client;
      {
        ScopedThreadCount threads(choice.kind == "cpu" ? env("TORCH_PJRT_CPU_THREADS") : "");
        client = Client::create(plugin, options);
      }
      auto* s = new Session();
      s->choice_ = choice;
      s->client_ = std::move(client);
      if (s->client_->platform_name() == "cpu" && env("TORCH_PJRT_KEEP_FREED_MEMORY", "1") != "0") keep_freed_memory();
      if (s->client_->platform_name() != "cpu")
        s->host_kernels_reason_ = "the device is not the host";
      else if (env("TORCH_PJRT_HOST_KERNELS", "1") == "0")
        s->host_kernels_reason_ = "TORCH_PJRT_HOST_KERNELS=0";
      else
        s->host_kernels_ = kernels::register_host_kernels(*plugin, &s->host_kernels_reason_);
      int64_t max_mb = std::atoll(env("TORCH_PJRT_CACHE_MAX_MB", "4096").c_str());
      s->programs_ = std::make_unique<ProgramCache>(*s->client_, default_cache_dir(), max_mb << 20);
      const std::string targets = env("TORCH_PJRT_AOT_TARGETS");
      if (!targets.empty()) {
        try {
          s->aot_ = std::make_unique<Aot>(targets, roots(), default_cache_dir(), s->client_->plugin_ptr());
        } catch (const std::exception& e) {
          reason() = e.what();  // asked for, so not ignored: the device is unusable until the setting is fixed
          return;
        }
        // from now on, programs are lowered for this device and for the targets (hlo::Builder::per_variant)
        hlo::Builder::two_variants = true;
      }
      instance() = s;  // intentionally leaked: plugins must outlive every buffer and static destructor
    } catch (const std::exception& e) {
      reason() = std::string("cannot start PJRT plugin ") + choice.path + ": " + e.what();
    }
  });
  return instance();
}

void Session::release_freed_memory() const {
#ifdef __GLIBC__
  if (client_->platform_name() == "cpu") malloc_trim(0);
#endif
}

Session* Session::if_started() { return instance(); }

const std::vector<std::string>& Session::search_roots() { return roots(); }

Session& Session::get() {
  Session* s = get_or_null();
  if (!s) throw std::runtime_error("torch_pjrt: no usable PJRT device: " + reason());
  return *s;
}

const std::string& Session::unavailable_reason() {
  get_or_null();
  return reason();
}

}  // namespace pjrt
