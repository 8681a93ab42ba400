// Storages on "tpu": a storage's DataPtr carries a StorageHandle, a swappable reference to one PJRT
// buffer (the base). Writes swap the handle's buffer; every alias of the storage sees the new value.
// Data pointers are fake, unique address ranges: torch compares them (aliasing, overlap checks) but
// never dereferences device memory.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/SmallVector.h>

#include <mutex>
#include <optional>

#include "lowering/view.h"
#include "pjrt/runtime.h"

namespace torch_pjrt {

// A failure of the op that was to compute a storage's value, kept until a sync point reports it
// (strict eager mode). Consumers of a poisoned storage are poisoned too instead of running.
struct DeferredError {
  std::string op;
  std::string message;
  bool out_of_memory = false;
};

struct PendingValue;  // fused eager (fused.h)

struct StorageHandle {
  pjrt::BufferPtr buffer;  // null until first written (torch.empty), and while pending
  int device = 0;
  std::shared_ptr<const DeferredError> error;
  // Fused eager: the value is a result of the recorded stream, not run yet (buffer null). Reading the
  // buffer (buffer_of, error_of) runs the stream first.
  std::shared_ptr<PendingValue> pending;
  // Guards `buffer` and `error`: ops on several threads may read and swap one storage's base. An op
  // holds it from reading the base to swapping in its result (StorageLock), so no update is lost and
  // no buffer is freed while another thread passes it to a program. Recursive: a locked op may read
  // the base again (base_form).
  mutable std::recursive_mutex mu;
};

// The handle's buffer and error, read under its lock (another thread may be swapping them). A pending
// value (fused eager) is materialized first: every read of a buffer is a sync point of the stream.
pjrt::BufferPtr buffer_of(const StorageHandle& h);
std::shared_ptr<const DeferredError> error_of(const StorageHandle& h);

// Fused eager: whether the storage's value is pending, and its pending form, read under its lock (a
// stream run by another thread clears `pending` and frees the PendingValue meanwhile).
bool is_pending(const StorageHandle& h);
std::optional<lowering::BaseForm> pending_form(const StorageHandle& h);

// Locks several storages' handles for an op's read-execute-swap, in address order so that two ops
// locking overlapping sets never deadlock.
class StorageLock {
 public:
  StorageLock() = default;
  explicit StorageLock(const StorageHandle& h) { add(h); lock(); }
  StorageLock(const StorageHandle& a, const StorageHandle& b) { add(a); add(b); lock(); }
  void add(const StorageHandle& h) { handles_.push_back(&h); }
  void reserve(size_t n) { handles_.reserve(n); }
  void lock();
  ~StorageLock();
  StorageLock(const StorageLock&) = delete;
  StorageLock& operator=(const StorageLock&) = delete;

 private:
  c10::SmallVector<const StorageHandle*, 8> handles_;
  bool locked_ = false;
};

// Raises the storage's deferred error, if any (called at sync points).
void raise_if_poisoned(const StorageHandle& h);

// The handle behind a tpu tensor's storage.
StorageHandle& handle_of(const c10::Storage& storage);
inline StorageHandle& handle_of(const at::Tensor& t) { return handle_of(t.storage()); }

// The storage's base form, as the lowering layer sees it.
lowering::BaseForm base_form(const c10::Storage& storage);
// The tensor's view form over its storage.
lowering::ViewForm view_form(const at::Tensor& t);
// True when programs take the tensor's storage offset at run time (lowering::ViewForm::dynamic): a view
// of at least one element that does not span its whole storage from its start. Program keys then hold
// no offset, so a view at any offset (t[i], x.narrow(0, i, n)) shares one program.
bool offset_is_dynamic(const at::Tensor& t);
// lowering::covers_storage of the tensor's forms (writing the tensor replaces its whole storage), without
// building them where the tensor alone says (a dense tensor of at least one element).
bool covers_storage(const at::Tensor& t);

// Growable storages (lowering/view.h): results of small concatenations live in flat buffers of
// growable_capacity(numel) elements, up to kGrowableMaxElements.
constexpr int64_t kGrowableMaxElements = int64_t{1} << 16;
int64_t growable_capacity(int64_t numel);
bool is_growable(const c10::Storage& storage);  // a flat base with room to spare
bool is_growable(const c10::Storage& storage, const pjrt::BufferPtr& buffer);  // with its buffer read
// True when `t` reads a growable storage in the storage's own type (no conj/neg bits): such reads take
// offset and strides at run time, so the program does not change as the storage's tensor grows.
bool reads_growable(const at::Tensor& t);
// Part of a tensor's geometry: 0 its offset, 1 + d its stride d, -1 - d its size d.
int64_t geometry_part(const at::Tensor& t, int part);

// A new tpu tensor (contiguous, sizes `sizes`) owning `buffer` as its storage's base.
at::Tensor wrap_buffer(pjrt::BufferPtr buffer, at::IntArrayRef sizes, at::ScalarType dtype);
// The same for a growable storage: `buffer` is a flat array with room to spare; the storage's size is
// the tensor's bytes.
at::Tensor wrap_growable(pjrt::BufferPtr buffer, at::IntArrayRef sizes, at::ScalarType dtype);

// A new tensor of a failed op: no buffer, the failure reported when it is read.
at::Tensor poisoned_tensor(at::IntArrayRef sizes, at::ScalarType dtype, int device,
                           std::shared_ptr<const DeferredError> error);

// Uploads a CPU tensor (any strides) as a new tpu tensor of the same dtype and shape; upload_buffer gives
// the buffer alone (its dims the tensor's sizes, row-major).
at::Tensor upload(const at::Tensor& cpu, int device);
pjrt::BufferPtr upload_buffer(const at::Tensor& cpu, int device);
// Copies a tpu tensor to a new contiguous CPU tensor; blocks (a sync point).
at::Tensor download(const at::Tensor& t);

// Grows or shrinks a storage to `nbytes`, keeping its contents (storage.resize_, tensor.resize_).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

c10::Allocator* allocator();
pjrt::ElementType element_type(at::ScalarType t);  // throws for dtypes PJRT cannot hold
at::ScalarType scalar_type(pjrt::ElementType t);

// The device index of the current "tpu" device (thread-local, as torch.cuda.current_device()).
int current_device();
void set_current_device(int index);
int device_count() noexcept;  // 0 when no plugin is available
c10::Device tpu_device(int index);

}  // namespace torch_pjrt
