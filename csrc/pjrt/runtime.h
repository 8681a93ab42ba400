// RAII wrappers over a loaded PJRT plugin: Plugin, Client, Buffer, Executable. No torch here.
//
// Every PJRT error becomes a pjrt::Error carrying the PJRT code and message. Buffers remember which op
// produced them, so an asynchronous failure that surfaces when the buffer is awaited names that op.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "pjrt/abi.h"
#include "pjrt/element_type.h"

namespace pjrt {

// absl status codes, as PJRT reports them.
enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kNotFound = 5,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kUnimplemented = 12,
  kInternal = 13,
};

class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

class Plugin {
 public:
  // dlopen()s the plugin (never closed: plugins own threads and static state), checks the API major
  // version and initializes it. Throws Error(kNotFound) when the file is missing or is no PJRT plugin.
  static std::shared_ptr<Plugin> load(const std::string& path);

  const std::string& path() const { return path_; }
  int api_major() const { return api_->version.major_version; }
  int api_minor() const { return api_->version.minor_version; }
  bool has(abi::Fn fn) const;

  // Calls function `fn`, setting args.struct_size; throws on error, naming `what`.
  template <class Args>
  void call(abi::Fn fn, Args& args, const char* what) const {
    args.struct_size = sizeof(Args);
    check(raw_call(fn, &args), what);
  }
  // Turns a returned PJRT_Error into an exception (and frees it); no-op for nullptr.
  void check(abi::Error* error, const char* what) const;
  // Reads code and message of an error and frees it.
  Error take_error(abi::Error* error, const std::string& context) const;

  // The extension of `type` in the plugin's chain, or nullptr.
  const abi::ExtensionBase* extension(int type) const;
  // Registers a typed-FFI custom-call handler for `platform`; throws Error when the plugin has no FFI
  // extension or refuses the handler.
  void register_ffi_handler(const std::string& target, const std::string& platform, void* handler) const;

  // Plugin attributes as text ("xla_version" -> "2", "stablehlo_current_version" -> "1.13.7").
  std::map<std::string, std::string> attributes() const;

 private:
  Plugin(std::string path, const abi::Api* api) : path_(std::move(path)), api_(api) {}
  abi::Error* raw_call(abi::Fn fn, void* args) const;

  std::string path_;
  const abi::Api* api_;
};

class Client;

class Buffer : public std::enable_shared_from_this<Buffer> {
 public:
  Buffer(const Client& client, abi::Buffer* handle, ElementType type, std::vector<int64_t> dims,
         int device, const char* producer);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  ElementType type() const { return type_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return numel_ * byte_size(type_); }
  int device() const { return device_; }
  const char* producer() const { return producer_; }
  // The PJRT buffer. An output of a dispatched launch (Executable::dispatch) gets it when the dispatch
  // thread has called Execute: this waits for that, and throws the launch's error if it failed.
  abi::Buffer* handle() const;

  // Copies the dense row-major contents into dst (nbytes() bytes); blocks until done.
  void to_host(void* dst) const;
  // Blocks until the value is computed; throws the asynchronous error of its producer, if any.
  void await() const;

  // Removes this buffer from the live statistics (internal caches, reported separately).
  void untrack();
  // An output of a dispatched launch that has not called Execute yet (or failed to): it has no handle.
  bool queued() const { return ticket_ && !handle_.load(std::memory_order_acquire); }

  // The references to `b` outside queued dispatched launches (which hold their arguments and outputs
  // until they have called Execute): what decides whether a launch may donate it. A launch queued
  // earlier runs earlier, so its reads are ordered before the donation.
  static long holders(const std::shared_ptr<Buffer>& b);

  // The newest program output of a device: PJRT runs a device's programs in order, so waiting for it
  // waits for everything issued before it. Only a weak reference is kept (it holds no memory); when
  // that buffer is freed before anyone waited, its ready event is kept instead, so await_newest still
  // waits for the work (and reports its failure, naming the producer).
  static void set_newest(const std::shared_ptr<Buffer>& buffer);
  static void await_newest(int device);

  // Inputs donated to a program that may still run: PJRT_Buffer_Destroy of a donated buffer waits for
  // the program (its donation hold lasts the run), so dropping the last reference at launch would make
  // every donating launch synchronous. They are kept until `output` (an output of that run) is ready,
  // checked without waiting at later retires and at await_newest; at most kMaxRetired runs are held.
  // They leave the live statistics at once (the program owns their memory).
  static void retire_after(std::vector<std::shared_ptr<Buffer>> donated, const std::shared_ptr<Buffer>& output);
  static constexpr size_t kMaxRetired = 64;

  // Live buffers and bytes, in total or on one device, and the peak of live bytes per device.
  static int64_t live_count();
  static int64_t live_bytes();
  static int64_t live_count(int device);
  static int64_t live_bytes(int device);
  static int64_t peak_bytes(int device);
  static void reset_peak_bytes(int device);
  static constexpr int kMaxDevices = 64;

 private:
  friend class Executable;
  struct Pending {};
  Buffer(const Client& client, Pending, ElementType type, std::vector<int64_t> dims, int device,
         const char* producer, uint64_t ticket);
  static void set_newest(const std::shared_ptr<Buffer>& buffer, int source);

  const Client& client_;
  std::atomic<abi::Buffer*> handle_;
  uint64_t ticket_ = 0;                 // the dispatched launch that sets handle_ (0: set at creation)
  std::atomic<int> queued_{0};          // references held by queued dispatched launches
  std::shared_ptr<const Error> error_;  // why that launch failed (set before it is marked done)
  ElementType type_;
  std::vector<int64_t> dims_;
  int64_t numel_;
  int device_;
  const char* producer_;  // static string: the op that computed this buffer
  bool tracked_ = true;
  struct Stats {
    std::atomic<int64_t> count{0}, bytes{0}, peak{0};
  };
  static Stats stats_[kMaxDevices];
};
using BufferPtr = std::shared_ptr<Buffer>;

// The buffers of `buffers`, as Executable::execute takes them.
inline std::vector<const Buffer*> pointers(const std::vector<BufferPtr>& buffers) {
  std::vector<const Buffer*> out;
  out.reserve(buffers.size());
  for (const auto& b : buffers) out.push_back(b.get());
  return out;
}

struct TensorSpec {
  ElementType type;
  std::vector<int64_t> dims;
  bool operator==(const TensorSpec&) const = default;
  std::string str() const;  // f32[2,3]
};

class Executable : public std::enable_shared_from_this<Executable> {
 public:
  Executable(const Client& client, abi::LoadedExecutable* handle, std::vector<TensorSpec> inputs,
             std::vector<TensorSpec> outputs);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Runs on `device` asynchronously; outputs are future buffers tagged with `op_name` (a static string).
  // Arguments are checked against the program's signature (the plugin checks sizes, not types). While
  // the dispatch thread has launches to make (or an argument is the output of one), this launch is
  // queued behind them (as dispatch does, nothing donated) rather than waiting here for their Execute:
  // the CPU client runs a device's programs one at a time, inside Execute.
  std::vector<BufferPtr> execute(int device, const std::vector<const Buffer*>& args,
                                 const char* op_name) const;
  // The same launch made by the dispatch thread: returns at once with outputs whose handles that thread
  // sets. PJRT's CPU client runs a small program inside Execute on the calling thread (when its inputs
  // are ready), so a launch from the Python thread waits for the whole run; from the dispatch thread
  // the run overlaps the host's next work. The arguments are checked here; `args` stay alive until the
  // launch, those marked in `donated` until the run is done (Buffer::retire_after). Launches keep their
  // order. A failure of Execute itself surfaces where an output is used (handle()).
  static std::vector<BufferPtr> dispatch(const std::shared_ptr<const Executable>& exe, int device,
                                         std::vector<BufferPtr> args, std::vector<char> donated,
                                         const char* op_name);
  // One participant's launch of a collective program (compiled with a replica per participant): from the
  // calling thread, never the dispatch thread, since it returns only once every participant has launched
  // with the same `launch_id` (one per collective of a group, the same on every participant).
  std::vector<BufferPtr> execute_collective(int device, const std::vector<const Buffer*>& args, int launch_id,
                                            const char* op_name) const;
  // Whether launches go through the dispatch thread (TORCH_PJRT_DISPATCH=0 turns it off).
  static bool dispatching();
  // Waits until every dispatched launch so far has called Execute.
  static void drain();
  // Runs `task` on the dispatch thread after the launches queued so far (at once, here, when launches are
  // not dispatched): host work the caller need not wait for, such as freeing what a launch was built from.
  // The task must not throw; it is destroyed on the thread that ran it.
  static void after_launches(std::function<void()> task);
  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  // The plugin's serialized form (for the disk cache).
  std::string serialize() const;
  abi::LoadedExecutable* handle() const { return handle_; }
  // How many times it was launched (every path: execute, dispatch, collective).
  int64_t launches() const { return launches_.load(std::memory_order_relaxed); }
  // XLA's cost analysis of the compiled program ("flops", "bytes accessed", ...; empty where the plugin
  // gives none).
  std::map<std::string, double> cost_analysis() const;

 private:
  void check_args(const std::vector<const Buffer*>& args, const char* op_name) const;
  // Whether `b` can be argument `i`: its type and dims, or (Client::linear_layouts) its type and count.
  bool fits(const Buffer& b, size_t i) const;
  // Calls Execute; fills `out` (outputs_.size() handles).
  void launch(int device, const std::vector<const Buffer*>& args, abi::Buffer** out, const char* op_name,
              int launch_id = 0) const;

  const Client& client_;
  abi::LoadedExecutable* handle_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
  mutable std::atomic<int64_t> launches_{0};
};
// The cost analysis of an (unloaded) executable of `plugin`: property name -> value.
std::map<std::string, double> cost_analysis(const Plugin& plugin, abi::Executable* executable);
using ExecutablePtr = std::shared_ptr<Executable>;

struct DeviceInfo {
  abi::Device* handle = nullptr;
  int id = 0;
  std::string kind;
  std::string description;
};

struct MemoryStats {
  int64_t bytes_in_use = -1;  // -1: not reported by the plugin
  int64_t peak_bytes_in_use = -1;
  int64_t bytes_limit = -1;
};

using OptionValue = std::variant<int64_t, std::string, bool, float>;

class Client {
 public:
  // Creates a client; options the plugin rejects as unknown are dropped (plugins differ in what they
  // accept), every other failure throws.
  static std::unique_ptr<Client> create(std::shared_ptr<Plugin> plugin,
                                        std::map<std::string, OptionValue> options);
  ~Client();

  const Plugin& plugin() const { return *plugin_; }
  const std::shared_ptr<Plugin>& plugin_ptr() const { return plugin_; }
  const std::string& platform_name() const { return platform_name_; }
  const std::string& platform_version() const { return platform_version_; }
  // Whether a buffer's bytes are the same for any dims of the same element count (dense row-major, no
  // tiling: the CPU client, which checks an argument's size in bytes, not its dims): a buffer may then be
  // a program's argument of another shape with the same type and element count (a reshape, uncopied).
  bool linear_layouts() const { return platform_name_ == "cpu"; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  const DeviceInfo& device(int index) const { return devices_.at(index); }
  MemoryStats memory_stats(int device) const;

  // Copies dense row-major host data to a device buffer; the host memory may be reused on return.
  BufferPtr from_host(const void* data, ElementType type, const std::vector<int64_t>& dims, int device,
                      const char* producer = "host_to_device") const;
  BufferPtr copy_to_device(const Buffer& buffer, int device) const;

  // Compiles StableHLO text for one device (portable: runs on any device of this client), or with
  // `options` (serialized CompileOptionsProto) when given.
  ExecutablePtr compile(const std::string& mlir, std::vector<TensorSpec> inputs, std::vector<TensorSpec> outputs,
                        const std::string* options = nullptr) const;
  ExecutablePtr deserialize(const std::string& bytes, std::vector<TensorSpec> inputs,
                            std::vector<TensorSpec> outputs) const;
  // The serialized CompileOptionsProto every compile passes (part of the disk cache's identity).
  const std::string& compile_options() const { return compile_options_; }

 private:
  Client(std::shared_ptr<Plugin> plugin, abi::Client* handle);
  std::shared_ptr<Plugin> plugin_;
  abi::Client* handle_;
  std::string platform_name_;
  std::string platform_version_;
  std::vector<DeviceInfo> devices_;
  std::string compile_options_;
};

}  // namespace pjrt
