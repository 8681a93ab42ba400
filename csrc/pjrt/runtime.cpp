#include "pjrt/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "pjrt/compile_options.h"

namespace pjrt {


// ---------------------------------------------------------------------------------------------- Plugin

std::shared_ptr<Plugin> Plugin::load(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    throw Error(Code::kNotFound, "PJRT plugin not found: " + path);
  }
  // RTLD_LOCAL: the plugin exports only GetPjrtApi and bundles its own LLVM/absl/protobuf.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) throw Error(Code::kNotFound, "cannot load PJRT plugin " + path + ": " + dlerror());
  using GetApi = const abi::Api* (*)();
  auto get_api = reinterpret_cast<GetApi>(dlsym(handle, "GetPjrtApi"));
  if (!get_api) throw Error(Code::kNotFound, path + " is not a PJRT plugin (no GetPjrtApi symbol)");
  const abi::Api* api = get_api();
  if (!api) throw Error(Code::kInternal, "GetPjrtApi returned null in " + path);
  if (api->version.major_version != 0) {
    throw Error(Code::kUnimplemented, "unsupported PJRT API major version " +
                                          std::to_string(api->version.major_version) + " in " + path);
  }
  // Every function we call unconditionally exists since 0.57; we declare 0.81 layouts.
  if (api->version.minor_version < 57) {
    throw Error(Code::kUnimplemented, "PJRT API 0." + std::to_string(api->version.minor_version) +
                                          " is too old (need 0.57 or later): " + path);
  }
  std::shared_ptr<Plugin> plugin(new Plugin(path, api));
  abi::PluginInitializeArgs init{};
  plugin->call(abi::kPluginInitialize, init, "PJRT_Plugin_Initialize");
  return plugin;
}

bool Plugin::has(abi::Fn fn) const {
  size_t end = abi::kApiFunctionsOffset + sizeof(void*) * (static_cast<size_t>(fn) + 1);
  if (api_->struct_size < end) return false;
  void* const* table =
      reinterpret_cast<void* const*>(reinterpret_cast<const char*>(api_) + abi::kApiFunctionsOffset);
  return table[fn] != nullptr;
}

abi::Error* Plugin::raw_call(abi::Fn fn, void* args) const {
  using F = abi::Error* (*)(void*);
  if (!has(fn)) throw pjrt::Error(Code::kUnimplemented, "PJRT function #" + std::to_string(fn) +
                                                            " is not provided by " + path_);
  auto table = reinterpret_cast<F const*>(reinterpret_cast<const char*>(api_) + abi::kApiFunctionsOffset);
  return table[fn](args);
}

const abi::ExtensionBase* Plugin::extension(int type) const {
  for (const abi::ExtensionBase* e = api_->extension_start; e; e = e->next)
    if (e->type == type) return e;
  return nullptr;
}

void Plugin::register_ffi_handler(const std::string& target, const std::string& platform, void* handler) const {
  auto* ffi = reinterpret_cast<const abi::FfiExtension*>(extension(abi::kExtensionFfi));
  if (!ffi || ffi->base.struct_size < sizeof(abi::FfiExtension) || !ffi->register_handler)
    throw pjrt::Error(Code::kUnimplemented, path_ + " cannot register custom calls (no FFI extension)");
  abi::FfiRegisterHandlerArgs args{sizeof args, target.data(), target.size(), handler,
                                   platform.data(), platform.size(), 0};
  check(ffi->register_handler(&args), ("registering custom call " + target).c_str());
}

pjrt::Error Plugin::take_error(abi::Error* error, const std::string& context) const {
  abi::ErrorMessageArgs msg{};
  msg.struct_size = sizeof msg;
  msg.error = error;
  raw_call(abi::kErrorMessage, &msg);
  std::string text(msg.message, msg.message_size);
  abi::ErrorGetCodeArgs code{};
  code.struct_size = sizeof code;
  code.error = error;
  abi::Error* code_error = raw_call(abi::kErrorGetCode, &code);
  Code c = code_error ? Code::kUnknown : static_cast<Code>(code.code);
  abi::ErrorDestroyArgs destroy{};
  destroy.struct_size = sizeof destroy;
  destroy.error = error;
  raw_call(abi::kErrorDestroy, &destroy);
  return pjrt::Error(c, context.empty() ? text : context + ": " + text);
}

void Plugin::check(abi::Error* error, const char* what) const {
  if (error) throw take_error(error, what);
}

std::map<std::string, std::string> Plugin::attributes() const {
  std::map<std::string, std::string> out;
  if (!has(abi::kPluginAttributes)) return out;
  abi::PluginAttributesArgs args{};
  call(abi::kPluginAttributes, args, "PJRT_Plugin_Attributes");
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const abi::NamedValue& v = args.attributes[i];
    std::string name(v.name, v.name_size);
    std::string text;
    switch (v.type) {
      case abi::kString: text.assign(v.string_value, v.value_size); break;
      case abi::kInt64: text = std::to_string(v.int64_value); break;
      case abi::kInt64List:
        for (size_t j = 0; j < v.value_size; ++j) {
          if (j) text += ".";
          text += std::to_string(v.int64_array_value[j]);
        }
        break;
      case abi::kFloat: text = std::to_string(v.float_value); break;
      case abi::kBool: text = v.bool_value ? "true" : "false"; break;
    }
    out[name] = text;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------- Events

namespace {

// Awaits an event, destroys it, and throws its error (prefixed with `context`), if any.
void await_event(const Plugin& plugin, abi::Event* event, const std::string& context) {
  abi::EventArgs await{};
  await.event = event;
  await.struct_size = sizeof await;
  try {
    plugin.call(abi::kEventAwait, await, context.c_str());
  } catch (...) {
    abi::EventArgs destroy{};
    destroy.event = event;
    plugin.call(abi::kEventDestroy, destroy, "PJRT_Event_Destroy");
    throw;
  }
  abi::EventArgs destroy{};
  destroy.event = event;
  plugin.call(abi::kEventDestroy, destroy, "PJRT_Event_Destroy");
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------------- Buffer

Buffer::Stats Buffer::stats_[Buffer::kMaxDevices];

int64_t Buffer::live_count() {
  int64_t n = 0;
  for (auto& s : stats_) n += s.count.load(std::memory_order_relaxed);
  return n;
}
int64_t Buffer::live_bytes() {
  int64_t n = 0;
  for (auto& s : stats_) n += s.bytes.load(std::memory_order_relaxed);
  return n;
}
int64_t Buffer::live_count(int device) { return stats_[device % kMaxDevices].count.load(); }
int64_t Buffer::live_bytes(int device) { return stats_[device % kMaxDevices].bytes.load(); }
int64_t Buffer::peak_bytes(int device) { return stats_[device % kMaxDevices].peak.load(); }
void Buffer::reset_peak_bytes(int device) {
  auto& s = stats_[device % kMaxDevices];
  s.peak.store(s.bytes.load());
}

Buffer::Buffer(const Client& client, abi::Buffer* handle, ElementType type, std::vector<int64_t> dims,
               int device, const char* producer)
    : Buffer(client, Pending{}, type, std::move(dims), device, producer, 0) {
  handle_.store(handle, std::memory_order_relaxed);
}

Buffer::Buffer(const Client& client, Pending, ElementType type, std::vector<int64_t> dims, int device,
               const char* producer, uint64_t ticket)
    : client_(client),
      handle_(nullptr),
      ticket_(ticket),
      type_(type),
      dims_(std::move(dims)),
      numel_(product(dims_)),
      device_(device),
      producer_(producer) {
  auto& s = stats_[device_ % kMaxDevices];
  s.count.fetch_add(1, std::memory_order_relaxed);
  int64_t now = s.bytes.fetch_add(static_cast<int64_t>(nbytes()), std::memory_order_relaxed) + nbytes();
  int64_t peak = s.peak.load(std::memory_order_relaxed);
  while (now > peak && !s.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void Buffer::untrack() {
  if (!tracked_) return;
  tracked_ = false;
  auto& s = stats_[device_ % kMaxDevices];
  s.count.fetch_sub(1, std::memory_order_relaxed);
  s.bytes.fetch_sub(static_cast<int64_t>(nbytes()), std::memory_order_relaxed);
}

namespace {

struct Newest {
  std::mutex mu;
  std::weak_ptr<Buffer> buffer;
  std::atomic<const Buffer*> raw{nullptr};
  abi::Event* orphan = nullptr;  // ready event of the newest output, freed before anyone waited
  const char* orphan_producer = "";
  const Plugin* orphan_plugin = nullptr;
};
// [0]: launches from the calling threads, [1]: from the dispatch thread. Each list is in Execute order;
// between them the order is unknown, so a synchronize waits for the newest of both.
Newest newest[2][Buffer::kMaxDevices];

// The dispatch thread: runs launches in the order they were submitted. Started on first use, stopped
// (after the queued launches) at exit.
class Dispatcher {
 public:
  static Dispatcher& get() {
    static Dispatcher* d = [] {
      auto* p = new Dispatcher;  // never destroyed: launches may still be queued while statics go
      std::atexit([] { get().stop(); });
      // A forked child has no dispatch thread (nor the plugin's threads): it launches nothing through it
      pthread_atfork(nullptr, nullptr, [] { forked_.store(true); });
      return p;
    }();
    return *d;
  }
  static bool started() { return started_.load(std::memory_order_acquire); }
  // A launch is queued or being made (its Execute may be running the program: PJRT's CPU client lets a
  // device run one program at a time, so a launch from another thread would wait for it).
  bool busy() const { return done_.load(std::memory_order_acquire) < issued_.load(std::memory_order_acquire); }
  static bool forked() { return forked_.load(std::memory_order_relaxed); }

  uint64_t submit(std::function<void()> task) {
    uint64_t ticket;
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ticket = ++issued_;
      queue_.emplace_back(ticket, std::move(task));
      wake = idle_;
    }
    if (wake) work_cv_.notify_one();
    return ticket;
  }

  void wait(uint64_t ticket) {
    if (done_.load(std::memory_order_acquire) >= ticket) return;
    std::unique_lock<std::mutex> lock(mu_);
    ++waiters_;
    done_cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire) >= ticket; });
    --waiters_;
  }

  void drain() {
    uint64_t last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = issued_;
    }
    wait(last);
  }

 private:
  Dispatcher() {
    thread_ = std::thread([this] { loop(); });
    started_.store(true, std::memory_order_release);
  }

  // How long the thread waits for the next launch before it sleeps (TORCH_PJRT_DISPATCH_SPIN_US).
  static int64_t spin_ns() {
    static const int64_t ns = [] {
      const char* v = std::getenv("TORCH_PJRT_DISPATCH_SPIN_US");
      return (v && *v ? std::atoll(v) : 100) * 1000;
    }();
    return ns;
  }

  void loop() {
    for (;;) {
      std::pair<uint64_t, std::function<void()>> next;
      // A launch that finds this thread asleep pays to wake it (a futex call on the launching thread, then
      // the scheduler's latency before the program starts): wait a little for the next one first. The wait
      // yields the core at every turn: a program still running on the plugin's threads (or the kernels')
      // keeps both cores of a small machine.
      auto idle = [this] {
        return issued_.load(std::memory_order_acquire) == done_.load(std::memory_order_relaxed) &&
               !stop_.load(std::memory_order_relaxed);
      };
      if (spin_ns() > 0 && idle()) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns());
        while (idle() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      }
      {
        std::unique_lock<std::mutex> lock(mu_);
        while (queue_.empty() && !stop_) {
          idle_ = true;
          work_cv_.wait(lock);
          idle_ = false;
        }
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next.second();  // never throws: the task records its failure in its outputs
      next.second = nullptr;
      done_.store(next.first, std::memory_order_release);
      std::lock_guard<std::mutex> lock(mu_);
      if (waiters_) done_cv_.notify_all();
    }
  }

  void stop() {
    if (forked()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      stop_ = true;
    }
    work_cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::pair<uint64_t, std::function<void()>>> queue_;
  std::atomic<uint64_t> issued_{0};
  std::atomic<uint64_t> done_{0};
  int waiters_ = 0;
  bool idle_ = false;
  std::atomic<bool> stop_{false};  // written under mu_; read without it by the wait for the next launch
  std::thread thread_;
  static std::atomic<bool> started_, forked_;
};
std::atomic<bool> Dispatcher::started_{false};
std::atomic<bool> Dispatcher::forked_{false};

void destroy_event(const Plugin& plugin, abi::Event* event) {
  abi::EventArgs destroy{};
  destroy.event = event;
  try {
    plugin.call(abi::kEventDestroy, destroy, "PJRT_Event_Destroy");
  } catch (...) {
  }
}

struct Retired {
  const Plugin* plugin;
  int device;
  abi::Event* ready;  // an output of the run the buffers were donated to
  std::vector<BufferPtr> buffers;
};
std::mutex retired_mu;
std::deque<Retired>& retired() {  // never destroyed: buffers must not outlive the client at exit
  static auto* q = new std::deque<Retired>;
  return *q;
}

bool event_ready(const Plugin& plugin, abi::Event* event) {
  abi::EventIsReadyArgs args{};
  args.event = event;
  try {
    plugin.call(abi::kEventIsReady, args, "PJRT_Event_IsReady");
  } catch (...) {
    return true;  // an event we cannot query: the buffers' destroy waits, as it would have
  }
  return args.is_ready;
}

// Frees the buffers of the runs that are done, and with `device` >= 0 those of every run on that device
// (await_newest waited for them). Beyond kMaxRetired runs the oldest are freed anyway (waiting for
// them). The buffers are freed outside the lock.
void sweep_retired(int device) {
  std::vector<Retired> done;
  {
    std::lock_guard<std::mutex> lock(retired_mu);
    auto& q = retired();
    for (auto it = q.begin(); it != q.end();) {
      if (it->device == device || q.size() > Buffer::kMaxRetired || event_ready(*it->plugin, it->ready)) {
        done.push_back(std::move(*it));
        it = q.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : done) {
    destroy_event(*r.plugin, r.ready);
    r.buffers.clear();
  }
}

}  // namespace

namespace {
// Held while a dispatched launch drops its references (with their queued_ counts) and while holders()
// counts: a launch's reference is either counted in queued_ or gone, never half.
std::mutex holders_mu;
}  // namespace

long Buffer::holders(const std::shared_ptr<Buffer>& b) {
  std::lock_guard<std::mutex> lock(holders_mu);
  return b.use_count() - b->queued_.load(std::memory_order_relaxed);
}

abi::Buffer* Buffer::handle() const {
  abi::Buffer* h = handle_.load(std::memory_order_acquire);
  if (h || !ticket_) return h;
  Dispatcher::get().wait(ticket_);
  h = handle_.load(std::memory_order_acquire);
  if (!h) {
    std::string why = error_ ? error_->what() : "the launch did not run";
    throw Error(error_ ? error_->code() : Code::kInternal,
                std::string("asynchronous error in op '") + producer_ + "': " + why);
  }
  return h;
}

void Buffer::retire_after(std::vector<BufferPtr> donated, const BufferPtr& output) {
  if (donated.empty()) return;
  // The program owns their memory now: the live statistics stop counting them here, not when they go.
  // A donated buffer has no ready event any more; a newest output donated to this run is implied by it.
  for (const auto& b : donated) {
    b->untrack();
    for (auto& source : newest) {
      Newest& n = source[b->device_ % kMaxDevices];
      if (n.raw.load(std::memory_order_relaxed) != b.get()) continue;
      std::lock_guard<std::mutex> lock(n.mu);
      if (n.raw.load(std::memory_order_relaxed) == b.get()) {
        n.buffer.reset();
        n.raw.store(nullptr, std::memory_order_relaxed);
      }
    }
  }
  abi::BufferReadyEventArgs ready{};
  ready.buffer = output->handle();
  try {
    output->client_.plugin().call(abi::kBufferReadyEvent, ready, "PJRT_Buffer_ReadyEvent");
  } catch (...) {
    return;  // the buffers are freed here, waiting for the run as before
  }
  {
    std::lock_guard<std::mutex> lock(retired_mu);
    retired().push_back({&output->client_.plugin(), output->device_, ready.event, std::move(donated)});
  }
  sweep_retired(-1);
}

void Buffer::set_newest(const std::shared_ptr<Buffer>& buffer) { set_newest(buffer, 0); }

void Buffer::set_newest(const std::shared_ptr<Buffer>& buffer, int source) {
  Newest& n = newest[source][buffer->device_ % kMaxDevices];
  std::lock_guard<std::mutex> lock(n.mu);
  n.buffer = buffer;
  n.raw.store(buffer.get(), std::memory_order_relaxed);
  if (n.orphan) {  // older than this output, so implied by it
    destroy_event(buffer->client_.plugin(), n.orphan);
    n.orphan = nullptr;
  }
}

void Buffer::await_newest(int device) {
  Executable::drain();  // every dispatched launch has called Execute
  for (auto& source : newest) {
    Newest& n = source[device % kMaxDevices];
    std::shared_ptr<Buffer> last;
    abi::Event* orphan = nullptr;
    const char* producer = "";
    const Plugin* plugin = nullptr;
    {
      std::lock_guard<std::mutex> lock(n.mu);
      last = n.buffer.lock();
      if (!last) {
        std::swap(orphan, n.orphan);
        producer = n.orphan_producer;
        plugin = n.orphan_plugin;
      }
    }
    if (last) {
      last->await();
    } else if (orphan) {
      await_event(*plugin, orphan, std::string("asynchronous error in op '") + producer + "'");
    }
  }
  sweep_retired(device);  // every run issued on the device so far is done
}

Buffer::~Buffer() {
  untrack();
  abi::Buffer* handle = handle_.load(std::memory_order_acquire);
  if (!handle) return;  // its dispatched launch failed
  for (auto& source : newest) {
    Newest& n = source[device_ % kMaxDevices];
    if (n.raw.load(std::memory_order_relaxed) == this) {
      // The newest output dies unawaited: keep its ready event for the next synchronize.
      abi::BufferReadyEventArgs ready{};
      ready.buffer = handle;
      try {
        client_.plugin().call(abi::kBufferReadyEvent, ready, "PJRT_Buffer_ReadyEvent");
        std::lock_guard<std::mutex> lock(n.mu);
        if (n.raw.load(std::memory_order_relaxed) == this) {
          if (n.orphan) destroy_event(client_.plugin(), n.orphan);
          n.orphan = ready.event;
          n.orphan_producer = producer_;
          n.orphan_plugin = &client_.plugin();
          n.raw.store(nullptr, std::memory_order_relaxed);
        } else {
          destroy_event(client_.plugin(), ready.event);
        }
      } catch (...) {
      }
    }
  }
  abi::BufferArgs args{};
  args.buffer = handle;
  // PJRT delays the actual free until pending work that uses the buffer has finished.
  try {
    client_.plugin().call(abi::kBufferDestroy, args, "PJRT_Buffer_Destroy");
  } catch (...) {
  }
}

void Buffer::to_host(void* dst) const {
  abi::BufferToHostBufferArgs args{};
  args.src = handle();
  args.dst = dst;
  args.dst_size = nbytes();
  std::string context = std::string("asynchronous error in op '") + producer_ + "'";
  client_.plugin().call(abi::kBufferToHostBuffer, args, context.c_str());
  await_event(client_.plugin(), args.event, context);
}

void Buffer::await() const {
  abi::BufferReadyEventArgs args{};
  args.buffer = handle();
  std::string context = std::string("asynchronous error in op '") + producer_ + "'";
  client_.plugin().call(abi::kBufferReadyEvent, args, context.c_str());
  await_event(client_.plugin(), args.event, context);
}

// ------------------------------------------------------------------------------------------ Executable

std::string TensorSpec::str() const {
  std::string s(mlir_name(type));
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

Executable::Executable(const Client& client, abi::LoadedExecutable* handle, std::vector<TensorSpec> inputs,
                       std::vector<TensorSpec> outputs)
    : client_(client), handle_(handle), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {
  abi::LoadedExecutableGetExecutableArgs get{};
  get.loaded_executable = handle_;
  client_.plugin().call(abi::kLoadedExecutableGetExecutable, get, "PJRT_LoadedExecutable_GetExecutable");
  abi::ExecutableNumOutputsArgs num{};
  num.executable = get.executable;
  client_.plugin().call(abi::kExecutableNumOutputs, num, "PJRT_Executable_NumOutputs");
  abi::ExecutableArgs destroy{};
  destroy.executable = get.executable;
  client_.plugin().call(abi::kExecutableDestroy, destroy, "PJRT_Executable_Destroy");
  if (num.num_outputs != outputs_.size()) {
    throw Error(Code::kInternal, "executable has " + std::to_string(num.num_outputs) +
                                     " outputs, expected " + std::to_string(outputs_.size()));
  }
}

Executable::~Executable() {
  abi::LoadedExecutableArgs args{};
  args.executable = handle_;
  try {
    client_.plugin().call(abi::kLoadedExecutableDestroy, args, "PJRT_LoadedExecutable_Destroy");
  } catch (...) {
  }
}

bool Executable::fits(const Buffer& b, size_t i) const {
  const TensorSpec& in = inputs_[i];
  if (b.type() != in.type) return false;
  if (b.dims() == in.dims) return true;
  if (!client_.linear_layouts()) return false;
  int64_t n = 1;
  for (int64_t d : in.dims) n *= d;
  return n == b.numel();
}

void Executable::check_args(const std::vector<const Buffer*>& args, const char* op_name) const {
  if (args.size() != inputs_.size()) {
    throw Error(Code::kInvalidArgument, std::string(op_name) + ": program takes " +
                                            std::to_string(inputs_.size()) + " arguments, got " +
                                            std::to_string(args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const Buffer& b = *args[i];
    if (!fits(b, i)) {
      throw Error(Code::kInvalidArgument, std::string(op_name) + ": argument " + std::to_string(i) + " is " +
                                              TensorSpec{b.type(), b.dims()}.str() + ", the program expects " +
                                              inputs_[i].str());
    }
  }
}

void Executable::launch(int device, const std::vector<const Buffer*>& args, abi::Buffer** out,
                        const char* op_name, int launch_id) const {
  abi::Buffer* arg_small[16];
  std::vector<abi::Buffer*> arg_large;
  abi::Buffer** arg_handles = arg_small;
  if (args.size() > 16) {
    arg_large.resize(args.size());
    arg_handles = arg_large.data();
  }
  for (size_t i = 0; i < args.size(); ++i) arg_handles[i] = args[i]->handle();
  abi::Buffer* const* arg_list = arg_handles;
  abi::ExecuteOptions options{};
  options.struct_size = sizeof options;
  options.launch_id = launch_id;
  abi::LoadedExecutableExecuteArgs exec{};
  exec.executable = handle_;
  exec.options = &options;
  exec.argument_lists = &arg_list;
  exec.num_devices = 1;
  exec.num_args = args.size();
  exec.output_lists = &out;
  exec.execute_device = client_.device(device).handle;
  launches_.fetch_add(1, std::memory_order_relaxed);
  client_.plugin().call(abi::kLoadedExecutableExecute, exec, op_name);
}

std::map<std::string, double> cost_analysis(const Plugin& plugin, abi::Executable* executable) {
  std::map<std::string, double> out;
  if (!plugin.has(abi::kExecutableGetCostAnalysis)) return out;
  abi::ExecutableGetCostAnalysisArgs args{};
  args.executable = executable;
  try {
    plugin.call(abi::kExecutableGetCostAnalysis, args, "PJRT_Executable_GetCostAnalysis");
  } catch (const Error&) {
    return out;  // plugins that do not analyse (the CUDA plugin's executables compiled without a device)
  }
  for (size_t i = 0; i < args.num_properties; ++i) {
    const abi::NamedValue& v = args.properties[i];
    const std::string name(v.name, v.name_size);
    if (v.type == abi::kFloat) out[name] = v.float_value;
    else if (v.type == abi::kInt64) out[name] = static_cast<double>(v.int64_value);
  }
  return out;
}

std::map<std::string, double> Executable::cost_analysis() const {
  abi::LoadedExecutableGetExecutableArgs get{};
  get.loaded_executable = handle_;
  client_.plugin().call(abi::kLoadedExecutableGetExecutable, get, "PJRT_LoadedExecutable_GetExecutable");
  std::map<std::string, double> out = pjrt::cost_analysis(client_.plugin(), get.executable);
  abi::ExecutableArgs destroy{};
  destroy.executable = get.executable;
  client_.plugin().call(abi::kExecutableDestroy, destroy, "PJRT_Executable_Destroy");
  return out;
}

std::vector<BufferPtr> Executable::execute_collective(int device, const std::vector<const Buffer*>& args,
                                                      int launch_id, const char* op_name) const {
  check_args(args, op_name);  // waits for arguments that queued launches make
  std::vector<abi::Buffer*> out(outputs_.size());
  abi::Buffer** out_ptr = out.data();
  launch(device, args, out_ptr, op_name, launch_id);
  std::vector<BufferPtr> result;
  for (size_t i = 0; i < out.size(); ++i)
    result.push_back(std::make_shared<Buffer>(client_, out[i], outputs_[i].type, outputs_[i].dims, device, op_name));
  return result;
}

std::vector<BufferPtr> Executable::execute(int device, const std::vector<const Buffer*>& args,
                                           const char* op_name) const {
  if (dispatching() && Dispatcher::started() &&
      (Dispatcher::get().busy() || std::any_of(args.begin(), args.end(), [](const Buffer* a) { return a->queued(); }))) {
    std::vector<BufferPtr> held;
    held.reserve(args.size());
    for (const Buffer* a : args) held.push_back(std::const_pointer_cast<Buffer>(a->shared_from_this()));
    return dispatch(shared_from_this(), device, std::move(held), {}, op_name);
  }
  check_args(args, op_name);
  const size_t n_out = outputs_.size();
  abi::Buffer* out_small[8];
  std::vector<abi::Buffer*> out_large;
  abi::Buffer** out = out_small;
  if (n_out > 8) {
    out_large.resize(n_out);
    out = out_large.data();
  }
  launch(device, args, out, op_name);
  std::vector<BufferPtr> result;
  result.reserve(n_out);
  for (size_t i = 0; i < n_out; ++i) {
    result.push_back(std::make_shared<Buffer>(client_, out[i], outputs_[i].type, outputs_[i].dims,
                                              device, op_name));
  }
  return result;
}

bool Executable::dispatching() {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_PJRT_DISPATCH");
    return !(v && std::string(v) == "0");
  }();
  return on && !Dispatcher::forked();
}

void Executable::drain() {
  if (Dispatcher::started() && !Dispatcher::forked()) Dispatcher::get().drain();
}

void Executable::after_launches(std::function<void()> task) {
  if (!dispatching()) {
    task();
    return;
  }
  Dispatcher::get().submit(std::move(task));
}

std::vector<BufferPtr> Executable::dispatch(const std::shared_ptr<const Executable>& exe, int device,
                                            std::vector<BufferPtr> args, std::vector<char> donated,
                                            const char* op_name) {
  exe->check_args(pointers(args), op_name);
  // The donated inputs are the program's memory from here on (as retire_after counts them)
  for (size_t i = 0; i < args.size() && i < donated.size(); ++i)
    if (donated[i]) args[i]->untrack();
  std::vector<BufferPtr> outs;
  outs.reserve(exe->outputs_.size());
  for (const auto& spec : exe->outputs_) {
    outs.push_back(std::shared_ptr<Buffer>(
        new Buffer(exe->client_, Buffer::Pending{}, spec.type, spec.dims, device, op_name, 0)));
  }
  for (const auto& a : args) a->queued_.fetch_add(1, std::memory_order_relaxed);
  for (const auto& o : outs) o->queued_.fetch_add(1, std::memory_order_relaxed);
  Dispatcher& d = Dispatcher::get();
  uint64_t ticket = d.submit([exe, device, args = std::move(args), donated = std::move(donated), outs,
                              op_name]() mutable {
    std::shared_ptr<const Error> failed;
    try {
      std::vector<abi::Buffer*> handles(outs.size());
      exe->launch(device, pointers(args), handles.data(), op_name);
      for (size_t i = 0; i < outs.size(); ++i) outs[i]->handle_.store(handles[i], std::memory_order_release);
    } catch (const Error& e) {
      failed = std::make_shared<Error>(e);
    } catch (const std::exception& e) {
      failed = std::make_shared<Error>(Code::kInternal, e.what());
    }
    if (failed) {
      for (auto& o : outs) o->error_ = failed;
    } else if (!outs.empty()) {
      Buffer::set_newest(outs.front(), 1);
      std::vector<BufferPtr> gone;
      for (size_t i = 0; i < args.size(); ++i) {
        if (i < donated.size() && donated[i]) {
          std::lock_guard<std::mutex> lock(holders_mu);
          args[i]->queued_.fetch_sub(1, std::memory_order_relaxed);
          gone.push_back(std::move(args[i]));
        }
      }
      try {
        Buffer::retire_after(std::move(gone), outs.front());
      } catch (...) {
      }
    }
    // Drop the launch's references, each with its count; the last reference of a buffer is freed after
    // the lock (off the caller's thread either way).
    std::vector<BufferPtr> last;
    {
      std::lock_guard<std::mutex> lock(holders_mu);
      for (auto* list : {&args, &outs}) {
        for (auto& b : *list) {
          if (!b) continue;
          b->queued_.fetch_sub(1, std::memory_order_relaxed);
          if (b.use_count() == 1)
            last.push_back(std::move(b));
          else
            b.reset();
        }
      }
    }
  });
  for (auto& o : outs) o->ticket_ = ticket;
  return outs;
}

std::string Executable::serialize() const {
  abi::LoadedExecutableGetExecutableArgs get{};
  get.loaded_executable = handle_;
  client_.plugin().call(abi::kLoadedExecutableGetExecutable, get, "PJRT_LoadedExecutable_GetExecutable");
  abi::ExecutableSerializeArgs ser{};
  ser.executable = get.executable;
  std::string bytes;
  try {
    client_.plugin().call(abi::kExecutableSerialize, ser, "PJRT_Executable_Serialize");
    bytes.assign(ser.serialized_bytes, ser.serialized_bytes_size);
    if (ser.serialized_executable_deleter) ser.serialized_executable_deleter(ser.serialized_executable);
  } catch (...) {
    abi::ExecutableArgs destroy{};
    destroy.executable = get.executable;
    client_.plugin().call(abi::kExecutableDestroy, destroy, "PJRT_Executable_Destroy");
    throw;
  }
  abi::ExecutableArgs destroy{};
  destroy.executable = get.executable;
  client_.plugin().call(abi::kExecutableDestroy, destroy, "PJRT_Executable_Destroy");
  return bytes;
}

// ---------------------------------------------------------------------------------------------- Client

std::unique_ptr<Client> Client::create(std::shared_ptr<Plugin> plugin,
                                       std::map<std::string, OptionValue> options) {
  for (;;) {
    std::vector<abi::NamedValue> values;
    std::vector<std::string> names;
    names.reserve(options.size());
    for (auto& [name, value] : options) {
      abi::NamedValue v{};
      v.struct_size = sizeof v;
      names.push_back(name);
      v.name = names.back().c_str();
      v.name_size = name.size();
      if (auto* i = std::get_if<int64_t>(&value)) {
        v.type = abi::kInt64;
        v.int64_value = *i;
        v.value_size = 1;
      } else if (auto* s = std::get_if<std::string>(&value)) {
        v.type = abi::kString;
        v.string_value = s->c_str();
        v.value_size = s->size();
      } else if (auto* b = std::get_if<bool>(&value)) {
        v.type = abi::kBool;
        v.bool_value = *b;
        v.value_size = 1;
      } else {
        v.type = abi::kFloat;
        v.float_value = std::get<float>(value);
        v.value_size = 1;
      }
      values.push_back(v);
    }
    abi::ClientCreateArgs args{};
    args.create_options = values.data();
    args.num_options = values.size();
    args.struct_size = sizeof args;
    try {
      plugin->call(abi::kClientCreate, args, "PJRT_Client_Create");
    } catch (const Error& e) {
      // Plugins reject options they do not know; drop the named one and retry.
      std::string msg = e.what();
      bool dropped = false;
      for (auto it = options.begin(); it != options.end(); ++it) {
        if (msg.find("nexpected option") != std::string::npos &&
            msg.find(it->first) != std::string::npos) {
          options.erase(it);
          dropped = true;
          break;
        }
      }
      if (!dropped) throw;
      continue;
    }
    return std::unique_ptr<Client>(new Client(std::move(plugin), args.client));
  }
}

Client::Client(std::shared_ptr<Plugin> plugin, abi::Client* handle)
    : plugin_(std::move(plugin)), handle_(handle) {
  abi::ClientStringArgs name{};
  name.client = handle_;
  plugin_->call(abi::kClientPlatformName, name, "PJRT_Client_PlatformName");
  platform_name_.assign(name.value, name.value_size);
  abi::ClientStringArgs version{};
  version.client = handle_;
  plugin_->call(abi::kClientPlatformVersion, version, "PJRT_Client_PlatformVersion");
  platform_version_.assign(version.value, version.value_size);
  abi::ClientDevicesArgs devices{};
  devices.client = handle_;
  plugin_->call(abi::kClientAddressableDevices, devices, "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < devices.num_devices; ++i) {
    DeviceInfo info;
    info.handle = devices.devices[i];
    abi::DeviceGetDescriptionArgs desc{};
    desc.device = info.handle;
    plugin_->call(abi::kDeviceGetDescription, desc, "PJRT_Device_GetDescription");
    abi::DeviceDescriptionIdArgs id{};
    id.description = desc.description;
    plugin_->call(abi::kDeviceDescriptionId, id, "PJRT_DeviceDescription_Id");
    info.id = id.id;
    abi::DeviceDescriptionStringArgs kind{};
    kind.description = desc.description;
    plugin_->call(abi::kDeviceDescriptionKind, kind, "PJRT_DeviceDescription_Kind");
    info.kind.assign(kind.value, kind.value_size);
    abi::DeviceDescriptionStringArgs debug{};
    debug.description = desc.description;
    plugin_->call(abi::kDeviceDescriptionDebugString, debug, "PJRT_DeviceDescription_DebugString");
    info.description.assign(debug.value, debug.value_size);
    devices_.push_back(std::move(info));
  }
  compile_options_ = encode_compile_options(default_compile_options());
}

Client::~Client() {
  abi::ClientArgs args{};
  args.client = handle_;
  try {
    plugin_->call(abi::kClientDestroy, args, "PJRT_Client_Destroy");
  } catch (...) {
  }
}

MemoryStats Client::memory_stats(int device) const {
  MemoryStats stats;
  abi::DeviceMemoryStatsArgs args{};
  args.device = devices_.at(device).handle;
  try {
    plugin_->call(abi::kDeviceMemoryStats, args, "PJRT_Device_MemoryStats");
  } catch (const Error&) {
    return stats;  // the CPU plugin does not implement it
  }
  stats.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  return stats;
}

BufferPtr Client::from_host(const void* data, ElementType type, const std::vector<int64_t>& dims,
                            int device, const char* producer) const {
  abi::ClientBufferFromHostBufferArgs args{};
  args.client = handle_;
  args.data = data;
  args.type = static_cast<abi::BufferType>(type);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = abi::kImmutableOnlyDuringCall;
  args.device = devices_.at(device).handle;
  plugin_->call(abi::kClientBufferFromHostBuffer, args, "PJRT_Client_BufferFromHostBuffer");
  if (args.done_with_host_buffer) {
    abi::EventArgs destroy{};
    destroy.event = args.done_with_host_buffer;
    plugin_->call(abi::kEventDestroy, destroy, "PJRT_Event_Destroy");
  }
  return std::make_shared<Buffer>(*this, args.buffer, type, dims, device, producer);
}

BufferPtr Client::copy_to_device(const Buffer& buffer, int device) const {
  abi::BufferCopyToDeviceArgs args{};
  args.buffer = buffer.handle();
  args.dst_device = devices_.at(device).handle;
  plugin_->call(abi::kBufferCopyToDevice, args, "PJRT_Buffer_CopyToDevice");
  return std::make_shared<Buffer>(*this, args.dst_buffer, buffer.type(), buffer.dims(), device,
                                  buffer.producer());
}

ExecutablePtr Client::compile(const std::string& mlir, std::vector<TensorSpec> inputs,
                              std::vector<TensorSpec> outputs, const std::string* options) const {
  if (!options) options = &compile_options_;
  abi::Program program{};
  program.struct_size = sizeof program;
  program.code = mlir.data();
  program.code_size = mlir.size();
  program.format = "mlir";
  program.format_size = 4;
  abi::ClientCompileArgs args{};
  args.client = handle_;
  args.program = &program;
  args.compile_options = options->data();
  args.compile_options_size = options->size();
  plugin_->call(abi::kClientCompile, args, "PJRT_Client_Compile");
  return std::make_shared<Executable>(*this, args.executable, std::move(inputs), std::move(outputs));
}

ExecutablePtr Client::deserialize(const std::string& bytes, std::vector<TensorSpec> inputs,
                                  std::vector<TensorSpec> outputs) const {
  abi::ExecutableDeserializeAndLoadArgs args{};
  args.client = handle_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  plugin_->call(abi::kExecutableDeserializeAndLoad, args, "PJRT_Executable_DeserializeAndLoad");
  return std::make_shared<Executable>(*this, args.loaded_executable, std::move(inputs), std::move(outputs));
}

}  // namespace pjrt
