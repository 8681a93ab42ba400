#include "aten/generator.h"

#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>
#include <ATen/ops/empty.h>

#include <deque>
#include <mutex>
#include <random>

#include "aten/errors.h"
#include "aten/storage.h"

namespace torch_pjrt {
namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // torch's default_rng_seed_val

class TpuGenerator final : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(int device, uint64_t seed = kDefaultSeed)
      : c10::GeneratorImpl(tpu_device(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)), seed_(seed) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    set_current_seed(s);
    return s;
  }
  // State: 16 bytes, seed then offset (torch.tpu.get_rng_state / set_rng_state).
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16,
                "tpu: RNG state must be a uint8 tensor of 16 bytes");
    const uint8_t* p = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(t.data_ptr(), &seed_, 8);
    std::memcpy(static_cast<uint8_t*>(t.data_ptr()) + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  // (seed, offset) for one op; advances.
  std::pair<uint64_t, uint64_t> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {seed_, offset_++};
  }

 private:
  TpuGenerator* clone_impl() const override {
    auto* g = new TpuGenerator(device().index(), seed_);
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_;
  uint64_t offset_ = 0;
};

std::mutex defaults_mu;
std::deque<at::Generator> defaults;

}  // namespace

const at::Generator& default_generator(int device) {
  std::lock_guard<std::mutex> lock(defaults_mu);
  while (static_cast<int>(defaults.size()) <= device) {
    defaults.push_back(at::make_generator<TpuGenerator>(static_cast<int>(defaults.size())));
  }
  return defaults[device];
}

at::Generator new_generator(int device) { return at::make_generator<TpuGenerator>(device < 0 ? current_device() : device); }

pjrt::BufferPtr next_rng_state(int device, const std::optional<at::Generator>& gen) {
  at::Generator g = gen.has_value() && gen->defined() ? *gen : default_generator(device);
  auto* impl = dynamic_cast<TpuGenerator*>(g.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl, "tpu: expected a tpu generator, got one for ", g.device());
  auto [seed, offset] = impl->take();
  // Mix the offset so consecutive states are far apart in the generator's key space.
  uint64_t state[2] = {seed, offset * 0x9E3779B97F4A7C15ULL + 1};
  auto& s = session_or_throw();
  return guarded("rng_state", [&] { return s.client().from_host(state, pjrt::ElementType::kU64, {2}, device); });
}

}  // namespace torch_pjrt
