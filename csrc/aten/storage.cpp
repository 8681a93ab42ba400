#include "aten/storage.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "aten/errors.h"
#include "aten/execution.h"
#include "aten/fused.h"
#include "aten/program.h"
#include "pjrt/session.h"

namespace torch_pjrt {
namespace {

thread_local int tls_device = -1;  // -1: the process's device (process_device)

// Under torchrun (LOCAL_RANK and LOCAL_WORLD_SIZE set) a process starts on device LOCAL_RANK when it
// exists, as TorchTPU binds a process to its chip and as torch.cuda users do with set_device(LOCAL_RANK);
// elsewhere on device 0.
int process_device() {
  static const int device = [] {
    const char* rank = std::getenv("LOCAL_RANK");
    if (!rank || !std::getenv("LOCAL_WORLD_SIZE")) return 0;
    int r = std::atoi(rank);
    return r > 0 && r < device_count() ? r : 0;
  }();
  return device;
}

// Fake device addresses: unique, 256-byte aligned ranges in a part of the address space the host heap
// does not use. Only compared, never dereferenced.
void* fake_address(size_t nbytes) {
  static std::atomic<uint64_t> next{1ULL << 40};
  uint64_t span = ((std::max<size_t>(nbytes, 1) + 255) / 256) * 256 + 256;
  uint64_t p = next.fetch_add(span, std::memory_order_relaxed);
  if (p + span >= (1ULL << 46)) {  // 64 TiB of allocations later: start over
    next.store(1ULL << 40);
    p = next.fetch_add(span);
  }
  return reinterpret_cast<void*>(p);
}

void delete_handle(void* ctx) {
  auto* h = static_cast<StorageHandle*>(ctx);
  fused::detach(h);
  delete h;
}

c10::DataPtr make_data_ptr(StorageHandle* h, size_t nbytes) {
  return c10::DataPtr(fake_address(nbytes), h, &delete_handle,
                      c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(h->device)));
}

int64_t device_memory_limit(int device) {
  // A device's capacity does not change: asked once (every allocation checks against it)
  static std::atomic<int64_t> limits[pjrt::Buffer::kMaxDevices] = {};
  std::atomic<int64_t>& cached = limits[device % pjrt::Buffer::kMaxDevices];
  int64_t limit = cached.load(std::memory_order_relaxed);
  if (limit > 0) return limit;
  auto& s = pjrt::Session::get();
  auto stats = s.client().memory_stats(device);
  // The CPU plugin reports nothing: its memory is the host's.
  limit = stats.bytes_limit > 0 ? stats.bytes_limit
                                : static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  cached.store(limit, std::memory_order_relaxed);
  return limit;
}

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    int device = current_device();
    session_or_throw();
    int64_t limit = device_memory_limit(device);
    TORCH_CHECK_WITH(OutOfMemoryError, static_cast<int64_t>(nbytes) <= limit,
                     "tpu: out of memory: tried to allocate ", nbytes, " bytes on tpu:", device,
                     " whose capacity is ", limit, " bytes");
    return make_data_ptr(new StorageHandle{nullptr, device}, nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false, "tpu: raw copies of device memory are not supported");
  }
  bool initialized() override { return pjrt::Session::get_or_null() != nullptr; }
  void emptyCache(c10::MempoolId_t) override {}  // buffers are freed when their storages die
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto& agg = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    agg.current = pjrt::Buffer::live_bytes(device);
    agg.peak = pjrt::Buffer::peak_bytes(device);
    stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)] = agg;
    auto& count = stats.allocation[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    count.current = pjrt::Buffer::live_count(device);
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex device) override { pjrt::Buffer::reset_peak_bytes(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    auto& s = session_or_throw();
    auto stats = s.client().memory_stats(device);
    if (stats.bytes_limit > 0 && stats.bytes_in_use >= 0) {
      return {static_cast<size_t>(stats.bytes_limit - stats.bytes_in_use), static_cast<size_t>(stats.bytes_limit)};
    }
    size_t total = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    size_t avail = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    return {avail, total};
  }
};

TpuAllocator g_allocator;

}  // namespace

c10::Allocator* allocator() { return &g_allocator; }

StorageHandle& handle_of(const c10::Storage& storage) {
  void* ctx = storage.data_ptr().get_context();
  TORCH_CHECK(ctx && storage.data_ptr().get_deleter() == &delete_handle,
              "tpu: storage was not allocated by torch_pjrt");
  return *static_cast<StorageHandle*>(ctx);
}

bool is_pending(const StorageHandle& h) {
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  return h.pending != nullptr;
}

std::optional<lowering::BaseForm> pending_form(const StorageHandle& h) {
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  if (!h.pending) return std::nullopt;
  return h.pending->form;
}

pjrt::BufferPtr buffer_of(const StorageHandle& h) {
  if (is_pending(h)) fused::flush();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  return h.buffer;
}

std::shared_ptr<const DeferredError> error_of(const StorageHandle& h) {
  if (is_pending(h)) fused::flush();
  std::lock_guard<std::recursive_mutex> lock(h.mu);
  return h.error;
}

void StorageLock::lock() {
  std::sort(handles_.begin(), handles_.end());
  handles_.erase(std::unique(handles_.begin(), handles_.end()), handles_.end());
  for (const StorageHandle* h : handles_) h->mu.lock();
  locked_ = true;
}

StorageLock::~StorageLock() {
  if (!locked_) return;
  for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) (*it)->mu.unlock();
}

void raise_if_poisoned(const StorageHandle& h) {
  if (auto error = error_of(h)) raise_deferred(*error);
}

lowering::BaseForm base_form(const c10::Storage& storage) {
  lowering::BaseForm f;
  pjrt::BufferPtr buffer = buffer_of(handle_of(storage));
  f.nbytes = static_cast<int64_t>(storage.nbytes());
  if (buffer) {
    f.present = true;
    f.elem = buffer->type();
    f.dims = buffer->dims();
  }
  return f;
}

lowering::ViewForm view_form(const at::Tensor& t) {
  lowering::ViewForm v;
  v.elem = element_type(t.scalar_type());
  v.sizes.assign(t.sizes().begin(), t.sizes().end());
  v.strides.assign(t.strides().begin(), t.strides().end());
  v.offset = t.storage_offset();
  v.conj = t.is_conj();
  v.neg = t.is_neg();
  v.dynamic = offset_is_dynamic(t);
  return v;
}

bool offset_is_dynamic(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const int64_t n = impl->numel();
  if (n == 0) return false;  // reads nothing: the offset changes nothing
  const int64_t nbytes = static_cast<int64_t>(impl->unsafe_storage().nbytes());
  const int64_t width = static_cast<int64_t>(impl->itemsize());
  if (impl->storage_offset() != 0) return true;
  if (impl->is_contiguous()) return n * width != nbytes;
  int64_t extent = 1;
  for (int64_t d = 0; d < impl->dim(); ++d) extent += (impl->size(d) - 1) * impl->stride(d);
  return extent * width != nbytes;
}

bool covers_storage(const at::Tensor& t) {
  // with elements, torch's contiguity is the view form's (size-1 dims take any stride)
  if (t.numel() > 0 && t.is_contiguous())
    return t.storage_offset() == 0 && t.numel() * static_cast<int64_t>(t.element_size()) ==
                                          static_cast<int64_t>(t.storage().nbytes());
  return lowering::covers_storage(base_form(t.storage()), view_form(t));
}

int64_t growable_capacity(int64_t numel) {
  int64_t c = 64;
  while (c < numel) c *= 2;
  return c;
}

bool is_growable(const c10::Storage& storage) {
  // lowering::has_spare_capacity without building a BaseForm: this runs for every tensor of every op
  if (is_pending(handle_of(storage))) return false;  // stream results are never growable
  return is_growable(storage, buffer_of(handle_of(storage)));
}

bool is_growable(const c10::Storage& storage, const pjrt::BufferPtr& buffer) {
  if (!buffer || buffer->dims().size() != 1) return false;
  return buffer->dims()[0] * static_cast<int64_t>(pjrt::byte_size(buffer->type())) >
         static_cast<int64_t>(storage.nbytes());
}

bool reads_growable(const at::Tensor& t) {
  if (t.is_conj() || t.is_neg() || t.numel() == 0 || is_pending(handle_of(t.storage()))) return false;
  pjrt::BufferPtr buffer = buffer_of(handle_of(t.storage()));
  return is_growable(t.storage(), buffer) && buffer->type() == element_type(t.scalar_type());
}

int64_t geometry_part(const at::Tensor& t, int part) {
  if (part == 0) return t.storage_offset();
  return part > 0 ? t.stride(part - 1) : t.size(-part - 1);
}

namespace {

at::Tensor tensor_over(StorageHandle* h, size_t nbytes, at::IntArrayRef sizes, at::ScalarType dtype) {
  auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                    make_data_ptr(h, nbytes), allocator(), /*resizable=*/true);
  auto t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(std::move(impl)),
                                                    c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                    caffe2::TypeMeta::fromScalarType(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

}  // namespace

at::Tensor wrap_buffer(pjrt::BufferPtr buffer, at::IntArrayRef sizes, at::ScalarType dtype) {
  size_t nbytes = buffer->nbytes();
  int device = buffer->device();
  return tensor_over(new StorageHandle{std::move(buffer), device}, nbytes, sizes, dtype);
}

at::Tensor wrap_growable(pjrt::BufferPtr buffer, at::IntArrayRef sizes, at::ScalarType dtype) {
  size_t nbytes = c10::multiply_integers(sizes) * c10::elementSize(dtype);
  TORCH_INTERNAL_ASSERT(nbytes <= buffer->nbytes());
  int device = buffer->device();
  return tensor_over(new StorageHandle{std::move(buffer), device}, nbytes, sizes, dtype);
}

at::Tensor poisoned_tensor(at::IntArrayRef sizes, at::ScalarType dtype, int device,
                           std::shared_ptr<const DeferredError> error) {
  size_t nbytes = c10::multiply_integers(sizes) * c10::elementSize(dtype);
  return tensor_over(new StorageHandle{nullptr, device, std::move(error)}, nbytes, sizes, dtype);
}

pjrt::BufferPtr upload_buffer(const at::Tensor& cpu, int device) {
  at::Tensor src = cpu.contiguous();
  pjrt::ElementType type = element_type(src.scalar_type());
  std::vector<int64_t> dims(src.sizes().begin(), src.sizes().end());
  auto& s = session_or_throw();
  return guarded("host_to_device", [&] { return s.client().from_host(src.data_ptr(), type, dims, device); });
}

at::Tensor upload(const at::Tensor& cpu, int device) {
  return wrap_buffer(upload_buffer(cpu, device), cpu.sizes(), cpu.scalar_type());
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  StorageHandle& h = handle_of(storage);
  auto* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "tpu: trying to resize storage that is not resizable");
  if (is_pending(h)) fused::flush();
  StorageLock lock(h);
  if (h.buffer && nbytes != storage.nbytes()) {
    h.buffer = resized_base(h, base_form(storage), nbytes);
  }
  // A new address range: the old one may be too short for the new size.
  c10::DataPtr old = impl->set_data_ptr(make_data_ptr(&h, nbytes));
  (void)old.release_context();  // the handle lives on in the new DataPtr
  impl->set_nbytes(nbytes);
}

pjrt::ElementType element_type(at::ScalarType t) {
  using E = pjrt::ElementType;
  switch (t) {
    case at::kBool: return E::kPred;
    case at::kByte: return E::kU8;
    case at::kChar: return E::kS8;
    case at::kShort: return E::kS16;
    case at::kInt: return E::kS32;
    case at::kLong: return E::kS64;
    case at::kUInt16: return E::kU16;
    case at::kUInt32: return E::kU32;
    case at::kUInt64: return E::kU64;
    case at::kHalf: return E::kF16;
    case at::kBFloat16: return E::kBF16;
    case at::kFloat: return E::kF32;
    case at::kDouble: return E::kF64;
    case at::kComplexFloat: return E::kC64;
    case at::kComplexDouble: return E::kC128;
    default: TORCH_CHECK_TYPE(false, "tpu: dtype ", t, " is not supported on tpu devices");
  }
}

at::ScalarType scalar_type(pjrt::ElementType t) {
  using E = pjrt::ElementType;
  switch (t) {
    case E::kPred: return at::kBool;
    case E::kU8: return at::kByte;
    case E::kS8: return at::kChar;
    case E::kS16: return at::kShort;
    case E::kS32: return at::kInt;
    case E::kS64: return at::kLong;
    case E::kU16: return at::kUInt16;
    case E::kU32: return at::kUInt32;
    case E::kU64: return at::kUInt64;
    case E::kF16: return at::kHalf;
    case E::kBF16: return at::kBFloat16;
    case E::kF32: return at::kFloat;
    case E::kF64: return at::kDouble;
    case E::kC64: return at::kComplexFloat;
    case E::kC128: return at::kComplexDouble;
    default: TORCH_CHECK(false, "tpu: no torch dtype for PJRT type ", static_cast<int>(t));
  }
}

int current_device() { return tls_device >= 0 ? tls_device : process_device(); }

void set_current_device(int index) {
  TORCH_CHECK(index >= 0 && index < std::max(device_count(), 1), "tpu: invalid device index ", index,
              " (device count is ", device_count(), ")");
  tls_device = index;
}

int device_count() noexcept {
  try {
    auto* s = pjrt::Session::get_or_null();
    return s ? s->client().device_count() : 0;
  } catch (...) {
    return 0;
  }
}

c10::Device tpu_device(int index) {
  return c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
}

}  // namespace torch_pjrt
