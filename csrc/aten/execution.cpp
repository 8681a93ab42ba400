#include "aten/execution.h"

#include <complex>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "aten/device_checks.h"
#include "aten/errors.h"
#include "aten/fused.h"
#include "aten/profiler.h"
#include "aten/storage.h"

namespace torch_pjrt {
namespace {

std::atomic<bool>& blocking() {
  static std::atomic<bool> b{[] {
    const char* v = std::getenv("TORCH_PJRT_LAUNCH_BLOCKING");
    return v && std::string(v) == "1";
  }()};
  return b;
}

struct ScalarKey {
  int device;
  int type;
  uint64_t lo, hi;
  bool operator==(const ScalarKey&) const = default;
};
struct ScalarKeyHash {
  size_t operator()(const ScalarKey& k) const {
    return std::hash<uint64_t>()(k.lo * 31 + k.hi) ^ (static_cast<size_t>(k.type) << 8) ^ k.device;
  }
};
std::mutex scalar_mu;
std::unordered_map<ScalarKey, pjrt::BufferPtr, ScalarKeyHash> scalar_cache;

template <class T>
void put(std::vector<char>& bytes, T v) {
  bytes.resize(sizeof(T));
  std::memcpy(bytes.data(), &v, sizeof(T));
}

}  // namespace

Metrics& metrics() {
  static Metrics m;
  return m;
}

bool launch_blocking() { return blocking().load(std::memory_order_relaxed); }
void set_launch_blocking(bool on) { blocking().store(on); }

std::mutex pending_mu;
std::shared_ptr<const DeferredError> pending[pjrt::Buffer::kMaxDevices];

void raise_deferred(const DeferredError& e) {
  {
    // reported now: the next synchronize need not report it again
    std::lock_guard<std::mutex> lock(pending_mu);
    for (auto& slot : pending)
      if (slot.get() == &e) slot.reset();
  }
  TORCH_CHECK_WITH(OutOfMemoryError, !e.out_of_memory, "tpu: out of memory in ", e.op,
                   " (an earlier asynchronous op; reported at this sync point): ", e.message);
  TORCH_CHECK(false, "tpu: ", e.op, " failed (an earlier asynchronous op; reported at this sync point): ", e.message);
}

namespace {

// A launch that failed at once: remembered for the next synchronize, returned to the caller.
void defer_failure(const char* op, const pjrt::Error& e, int device, std::shared_ptr<const DeferredError>* failure) {
  auto err = std::make_shared<DeferredError>(DeferredError{op, e.what(), e.code() == pjrt::Code::kResourceExhausted});
  {
    std::lock_guard<std::mutex> lock(pending_mu);
    auto& slot = pending[device % pjrt::Buffer::kMaxDevices];
    if (!slot) slot = err;
  }
  *failure = std::move(err);
}

}  // namespace

std::vector<pjrt::BufferPtr> run(const pjrt::Executable& exe, int device, const std::vector<const pjrt::Buffer*>& args,
                                 const char* op, std::shared_ptr<const DeferredError>* failure) {
  std::vector<pjrt::BufferPtr> outs;
  try {
    outs = exe.execute(device, args, op);
    if (launch_blocking()) {
      for (const auto& o : outs) o->await();
    }
  } catch (const pjrt::Error& e) {
    if (launch_blocking()) rethrow_pjrt(op, e);
    defer_failure(op, e, device, failure);
    return {};
  }
  metrics().executions.fetch_add(1, std::memory_order_relaxed);
  if (!outs.empty()) pjrt::Buffer::set_newest(outs.front());
  return outs;
}

std::vector<pjrt::BufferPtr> run_dispatched(const pjrt::ExecutablePtr& exe, int device, std::vector<pjrt::BufferPtr> args,
                                            std::vector<char> donated, const char* op,
                                            std::shared_ptr<const DeferredError>* failure) {
  if (launch_blocking() || !pjrt::Executable::dispatching()) {
    std::vector<pjrt::BufferPtr> outs = run(*exe, device, pjrt::pointers(args), op, failure);
    std::vector<pjrt::BufferPtr> gone;
    for (size_t i = 0; i < args.size() && i < donated.size(); ++i)
      if (donated[i]) gone.push_back(std::move(args[i]));
    args.clear();
    if (!outs.empty()) pjrt::Buffer::retire_after(std::move(gone), outs.front());
    return outs;
  }
  std::vector<pjrt::BufferPtr> outs;
  try {
    outs = pjrt::Executable::dispatch(exe, device, std::move(args), std::move(donated), op);
  } catch (const pjrt::Error& e) {
    defer_failure(op, e, device, failure);
    return {};
  }
  metrics().executions.fetch_add(1, std::memory_order_relaxed);
  return outs;
}

const char* intern_label(const std::string& label) {
  static std::mutex mu;
  static auto* labels = new std::unordered_set<std::string>;  // never freed: buffers keep the pointers
  std::lock_guard<std::mutex> lock(mu);
  return labels->insert(label).first->c_str();
}

void synchronize(int device) {
  ProfileSpan span("tpu.synchronize", "");
  fused::flush();  // a sync point of fused eager
  std::shared_ptr<const DeferredError> failed;
  {
    std::lock_guard<std::mutex> lock(pending_mu);
    failed = std::move(pending[device % pjrt::Buffer::kMaxDevices]);
  }
  if (failed) raise_deferred(*failed);
  raise_failed_checks(device);
  try {
    pjrt::Buffer::await_newest(device);
  } catch (const pjrt::Error& e) {
    rethrow_pjrt("an earlier op", e);
  }
}

pjrt::BufferPtr scalar_buffer(int device, pjrt::ElementType type, const c10::Scalar& value) {
  using E = pjrt::ElementType;
  std::vector<char> bytes;
  switch (type) {
    case E::kF64: put(bytes, value.toDouble()); break;
    case E::kF32: put(bytes, value.toFloat()); break;
    case E::kF16: put(bytes, value.toHalf()); break;
    case E::kBF16: put(bytes, value.toBFloat16()); break;
    case E::kS64: put(bytes, value.toLong()); break;
    case E::kS32: put(bytes, value.toInt()); break;
    case E::kS16: put(bytes, value.toShort()); break;
    case E::kS8: put(bytes, value.toChar()); break;
    case E::kU8: put(bytes, value.toByte()); break;
    case E::kU16: put(bytes, value.toUInt16()); break;
    case E::kU32: put(bytes, value.toUInt32()); break;
    case E::kU64: put(bytes, value.toUInt64()); break;
    case E::kPred: put(bytes, static_cast<uint8_t>(value.toBool() ? 1 : 0)); break;
    case E::kC64: put(bytes, value.toComplexFloat()); break;
    case E::kC128: put(bytes, value.toComplexDouble()); break;
    default: TORCH_CHECK(false, "tpu: unsupported scalar type");
  }
  ScalarKey key{device, static_cast<int>(type), 0, 0};
  std::memcpy(&key.lo, bytes.data(), std::min<size_t>(8, bytes.size()));
  if (bytes.size() > 8) std::memcpy(&key.hi, bytes.data() + 8, bytes.size() - 8);
  std::lock_guard<std::mutex> lock(scalar_mu);
  auto it = scalar_cache.find(key);
  if (it != scalar_cache.end()) return it->second;
  if (scalar_cache.size() > 4096) scalar_cache.clear();  // learning-rate schedules must not grow it forever
  auto& s = session_or_throw();
  auto buf = guarded("scalar_to_device", [&] { return s.client().from_host(bytes.data(), type, {}, device); });
  buf->untrack();  // an internal cache, not tensor memory: reported as scalar_cache_entries
  scalar_cache.emplace(key, buf);
  return buf;
}

int64_t scalar_cache_entries() {
  std::lock_guard<std::mutex> lock(scalar_mu);
  return static_cast<int64_t>(scalar_cache.size());
}

}  // namespace torch_pjrt
