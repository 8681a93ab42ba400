// Device guard and PrivateUse1 hooks: what torch needs to treat "tpu" as an accelerator (autograd's
// device threads, torch.accelerator, generators, storage resizing). One default stream per device;
// PJRT orders a device's work itself.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "aten/errors.h"
#include "aten/execution.h"
#include "aten/generator.h"
#include "aten/storage.h"

namespace torch_pjrt {
namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::Stream;

class TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  Device exchangeDevice(Device d) const override {
    Device old = getDevice();
    if (d.index() != old.index()) set_current_device(d.index());
    return old;
  }
  Device getDevice() const override { return tpu_device(current_device()); }
  void setDevice(Device d) const override { set_current_device(d.index()); }
  void uncheckedSetDevice(Device d) const noexcept override {
    try {
      set_current_device(d.index());
    } catch (...) {
    }
  }
  Stream getStream(Device d) const override { return Stream(Stream::DEFAULT, d); }
  Stream getDefaultStream(Device d) const override { return Stream(Stream::DEFAULT, d); }
  Stream getNewStream(Device d, int) const override { return Stream(Stream::DEFAULT, d); }
  Stream getStreamFromGlobalPool(Device d, bool) const override { return Stream(Stream::DEFAULT, d); }
  Stream exchangeStream(Stream s) const override { return Stream(Stream::DEFAULT, s.device()); }
  DeviceIndex deviceCount() const noexcept override { return static_cast<DeviceIndex>(device_count()); }
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream& s) const override { synchronize(s.device_index()); }
  void synchronizeDevice(DeviceIndex d) const override { synchronize(d); }
  // Events: a device's work is ordered, so recording and waiting reduce to synchronizing when asked.
  void record(void** event, const Stream& stream, DeviceIndex, c10::EventFlag) const override {
    *event = reinterpret_cast<void*>(static_cast<intptr_t>(stream.device_index() + 1));
  }
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, DeviceIndex) const noexcept override {}
  void synchronizeEvent(void* event) const override {
    if (event) synchronize(static_cast<int>(reinterpret_cast<intptr_t>(event)) - 1);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

class TpuHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  void init() const override { session_or_throw(); }
  bool hasPrimaryContext(DeviceIndex) const override { return pjrt::Session::get_or_null() != nullptr; }
  const at::Generator& getDefaultGenerator(DeviceIndex device) const override {
    return default_generator(device < 0 ? current_device() : device);
  }
  at::Generator getNewGenerator(DeviceIndex device) const override { return new_generator(device); }
  Device getDeviceFromPtr(void*) const override { return tpu_device(current_device()); }
  bool isPinnedPtr(const void*) const override { return false; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetAllocator(c10::DeviceType::CPU); }
  DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(device_count()); }
  void setCurrentDevice(DeviceIndex d) const override { set_current_device(d); }
  DeviceIndex getCurrentDevice() const override { return static_cast<DeviceIndex>(current_device()); }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    int old = current_device();
    set_current_device(d);
    return static_cast<DeviceIndex>(old);
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override { return exchangeDevice(d); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage, nbytes);
  }
};

struct RegisterHooks {
  RegisterHooks() {
    at::RegisterPrivateUse1HooksInterface(new TpuHooks());
    c10::SetAllocator(c10::DeviceType::PrivateUse1, allocator());
  }
} register_hooks;

}  // namespace
}  // namespace torch_pjrt
