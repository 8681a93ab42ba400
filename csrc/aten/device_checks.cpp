#include "aten/device_checks.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <deque>
#include <mutex>

#include "aten/errors.h"

namespace torch_pjrt {
namespace {

struct Kept {
  pjrt::BufferPtr codes;
  CheckInfos infos;
};

// A failure found while draining (below), raised at the next sync point.
struct Failure {
  std::string message;
  bool index_error = false;
};

struct DeviceChecks {
  std::deque<Kept> kept;
  std::unique_ptr<Failure> failed;
};

// Codes kept before a sync point reads them: past this many, the oldest half is read at a launch (its
// programs are long done), so that a loop that never syncs does not keep buffers without end.
constexpr size_t kMaxKept = 512;

std::mutex mu;
DeviceChecks devices[pjrt::Buffer::kMaxDevices];
std::atomic<int64_t> num_read{0}, num_failed{0};

std::string fill(const std::string& text, const char* key, int64_t v) {
  std::string s = text;
  const std::string k = key;
  for (size_t at = s.find(k); at != std::string::npos; at = s.find(k, at)) {
    s.replace(at, k.size(), std::to_string(v));
  }
  return s;
}

// The first failed check of `k`, if any.
std::unique_ptr<Failure> read(const Kept& k) {
  std::vector<int64_t> codes(2 * k.infos->size());
  guarded("device-side check", [&] { k.codes->to_host(codes.data()); });
  num_read.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < k.infos->size(); ++i) {
    if (codes[2 * i] == 0) continue;
    const CheckInfo& info = (*k.infos)[i];
    auto f = std::make_unique<Failure>();
    f->message = fill(fill(info.message, "{value}", codes[2 * i + 1]), "{position}", codes[2 * i] - 1) + " (" +
                 info.op + ", a device-side check reported at the next sync point; TORCH_PJRT_LAUNCH_BLOCKING=1 " +
                 "reports it at the op)";
    f->index_error = info.index_error;
    return f;
  }
  return nullptr;
}

[[noreturn]] void raise(const Failure& f) {
  num_failed.fetch_add(1, std::memory_order_relaxed);
  TORCH_CHECK_INDEX(!f.index_error, f.message);
  TORCH_CHECK(false, f.message);
}

// Reads `batch`; the first failure, if any.
std::unique_ptr<Failure> read_all(std::deque<Kept>& batch) {
  std::unique_ptr<Failure> first;
  for (const Kept& k : batch) {
    std::unique_ptr<Failure> f = read(k);
    if (f && !first) first = std::move(f);
  }
  return first;
}

}  // namespace

void note_checks(const hlo::Builder& b, size_t from, const std::string& op, std::vector<CheckInfo>& infos) {
  const auto& checks = b.checks();
  for (size_t i = from; i < checks.size(); ++i) infos.push_back({op, checks[i].message, checks[i].index_error});
}

hlo::Value check_codes(hlo::Builder& b) {
  std::vector<hlo::Value> codes;
  for (const auto& c : b.checks()) codes.push_back(c.code);
  if (codes.empty()) return hlo::Value{};
  return codes.size() == 1 ? codes[0] : b.concatenate(codes, 0);
}

void watch_checks(int device, pjrt::BufferPtr codes, const CheckInfos& infos, bool now) {
  Kept k{std::move(codes), infos};
  if (now) {
    std::unique_ptr<Failure> f = read(k);
    if (f) raise(*f);
    return;
  }
  std::deque<Kept> old;
  {
    std::lock_guard<std::mutex> lock(mu);
    DeviceChecks& d = devices[device % pjrt::Buffer::kMaxDevices];
    d.kept.push_back(std::move(k));
    if (d.kept.size() <= kMaxKept) return;
    for (size_t i = 0; i < kMaxKept / 2; ++i) {
      old.push_back(std::move(d.kept.front()));
      d.kept.pop_front();
    }
  }
  std::unique_ptr<Failure> f = read_all(old);
  if (!f) return;
  std::lock_guard<std::mutex> lock(mu);
  DeviceChecks& d = devices[device % pjrt::Buffer::kMaxDevices];
  if (!d.failed) d.failed = std::move(f);
}

void raise_failed_checks(int device) {
  std::deque<Kept> batch;
  std::unique_ptr<Failure> f;
  {
    std::lock_guard<std::mutex> lock(mu);
    DeviceChecks& d = devices[device % pjrt::Buffer::kMaxDevices];
    if (d.kept.empty() && !d.failed) return;
    batch.swap(d.kept);
    f = std::move(d.failed);
  }
  std::unique_ptr<Failure> later = read_all(batch);
  if (!f) f = std::move(later);
  if (f) raise(*f);
}

CheckCounts check_counts() {
  CheckCounts c;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& d : devices) c.pending += static_cast<int64_t>(d.kept.size());
  }
  c.read = num_read.load();
  c.failed = num_failed.load();
  return c;
}

}  // namespace torch_pjrt
