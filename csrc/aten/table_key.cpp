// TableKernel's cache key (table_kernel_class.h): a compact key of int64 words from the call's stack: dtypes,
// sizes, strides, view and storage forms, the scalar arguments that shape the program; never a value that is
// a run-time input (a storage offset, a run-time scalar, a growable read's geometry).
#include "aten/table_kernel_class.h"

namespace torch_pjrt {
namespace table_kernel {

void TableKernel::tensor_key(const at::Tensor& t, std::vector<int64_t>& key, Call& call, bool written) {
  if (!t.defined()) {
    key.push_back(kNoneTag);
    return;
  }
  if (t.device().type() != c10::DeviceType::PrivateUse1) {
    TORCH_CHECK(t.device().is_cpu() && t.dim() == 0,
                "Expected all tensors to be on the same device, but found at least two devices, tpu and ",
                t.device(), "! (in ", name_, ")");
    key.push_back(kCpuScalarTag);
    key.push_back(static_cast<int64_t>(t.scalar_type()));
    key.push_back(t.unsafeGetTensorImpl()->is_wrapped_number());
    return;
  }
  int dev = t.device().index();
  if (call.device < 0) call.device = dev;
  TORCH_CHECK(dev == call.device, "Expected all tensors to be on the same device, but found at least two devices, tpu:",
              call.device, " and tpu:", dev, "! (in ", name_, ")");
  call.has_tpu_tensor = true;
  check_in_storage_fast(t, name_.c_str());  // a view past a storage shrunk through another alias
  if (!written && reads_growable(t)) {
    dynamic_key(t, key);
    slot_key(t, key, call);
    return;
  }
  key.push_back(kTensorTag);
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  const int64_t dim = t.dim();
  key.push_back(dim);
  for (int64_t d : t.sizes()) key.push_back(d);
  for (int64_t s : t.strides()) key.push_back(s);
  key.push_back(offset_is_dynamic(t) ? kDynOffsetTag : t.storage_offset());
  key.push_back((t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0));
  slot_key(t, key, call);
  // a write into a growable storage replaces it whole or not depending on its size
  if (written && is_growable(t.storage()))
    key.push_back(static_cast<int64_t>(t.storage().nbytes()));
}

// A read with run-time geometry: its sizes, and what of its strides decides the results' layout (the
// order of the strides, and the strides themselves when the tensor is dense: the CPU's results copy
// them), but not their values or the offset, which change as the storage's tensor grows.
void TableKernel::dynamic_key(const at::Tensor& t, std::vector<int64_t>& key) {
  key.push_back(kDynTag);
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(t.dim());
  for (int64_t d : t.sizes()) key.push_back(d);
  const bool dense = t.is_non_overlapping_and_dense();
  key.push_back(dense);
  key.push_back(static_cast<int64_t>(t.suggest_memory_format()));
  for (int64_t s : t.strides()) {
    if (dense) {
      key.push_back(s);
      continue;
    }
    const auto st = t.strides();
    int64_t rank = 0;  // how many distinct smaller strides
    for (size_t j = 0; j < st.size(); ++j)
      rank += st[j] < s && std::find(st.begin(), st.begin() + j, st[j]) == st.begin() + j;
    key.push_back(rank);
  }
}

// The tensor's storage: a slot index, and the first time, its base form.
void TableKernel::slot_key(const at::Tensor& t, std::vector<int64_t>& key, Call& call) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  int slot = -1;
  for (size_t i = 0; i < call.slots.size(); ++i)
    if (call.slots[i] == impl) slot = static_cast<int>(i);
  if (slot >= 0) {
    key.push_back(slot);
    return;
  }
  key.push_back(static_cast<int64_t>(call.slots.size()));
  call.slots.push_back(impl);
  call.storages.push_back(t.storage());
  // The storage's base form, once per storage (a pending one's without running the stream).
  const StorageHandle& h = handle_of(t.storage());
  if (std::optional<lowering::BaseForm> p = pending_form(h)) {
    key.push_back(static_cast<int64_t>(t.storage().nbytes()));
    key.push_back(static_cast<int64_t>(p->elem));
    key.push_back(static_cast<int64_t>(p->dims.size()));
    for (int64_t d : p->dims) key.push_back(d);
    return;
  }
  pjrt::BufferPtr buffer = buffer_of(h);
  if (is_growable(t.storage(), buffer)) {
    // growable: its capacity, not its current size (written tensors add the size, tensor_key)
    key.push_back(kCapacityTag);
    key.push_back(static_cast<int64_t>(buffer->type()));
    key.push_back(buffer->dims()[0]);
    return;
  }
  key.push_back(static_cast<int64_t>(t.storage().nbytes()));
  if (!buffer) {
    key.push_back(kNoneTag);
  } else {
    key.push_back(static_cast<int64_t>(buffer->type()));
    key.push_back(static_cast<int64_t>(buffer->dims().size()));
    for (int64_t d : buffer->dims()) key.push_back(d);
  }
}

void TableKernel::build_key(const torch::jit::Stack& stack, size_t base, std::vector<int64_t>& key, Call& call) {
  const bool bake = row_->flags & lowering::kBakeScalars;
  for (size_t i = 0; i < schema_args_; ++i) {
    const c10::IValue& v = stack[base + i];
    if (v.isNone()) {
      key.push_back(kNoneTag);
      continue;
    }
    // an optional argument that is present: marked, so that dim=-1 and dim=None differ
    if (optional_[i]) key.push_back(kPresentTag);
    switch (kinds_[i]) {
      case Kind::kTensor: tensor_key(v.toTensor(), key, call, written_[i]); break;
      case Kind::kTensorList: {
        key.push_back(kListTag);
        if (v.isTensorList()) {
          auto list = v.toTensorList();
          key.push_back(static_cast<int64_t>(list.size()));
          for (const at::Tensor& t : list) tensor_key(t, key, call, written_[i]);
        } else {
          auto list = v.toOptionalTensorList();
          key.push_back(static_cast<int64_t>(list.size()));
          for (const std::optional<at::Tensor> t : list)
            tensor_key(t.has_value() ? *t : at::Tensor(), key, call, written_[i]);
        }
        break;
      }
      case Kind::kScalar: {
        c10::Scalar s = v.toScalar();
        key.push_back(kScalarTag);
        key.push_back(scalar_kind(s));
        if (bake) {
          double d = s.isComplex() ? s.toComplexDouble().real() : s.toDouble();
          int64_t bits;
          std::memcpy(&bits, &d, sizeof bits);
          key.push_back(bits);
          if (s.isIntegral(false)) key.push_back(s.toLong());
        }
        break;
      }
      case Kind::kScalarList: {
        auto list = v.toListRef();
        key.push_back(kListTag);
        key.push_back(static_cast<int64_t>(list.size()));
        for (const auto& e : list) key.push_back(scalar_kind(e.toScalar()));
        break;
      }
      case Kind::kInt:
      case Kind::kBool:
      case Kind::kDtype: key.push_back(v.isBool() ? v.toBool() : v.toInt()); break;
      case Kind::kIntList: {
        auto list = v.toListRef();
        key.push_back(static_cast<int64_t>(list.size()));
        for (const auto& e : list) key.push_back(list_item(e));
        break;
      }
      case Kind::kDouble: {
        if (row_->flags & lowering::kRuntimeFloats) {
          key.push_back(kScalarTag);
          break;
        }
        double d = v.toDouble();
        int64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        key.push_back(bits);
        break;
      }
      case Kind::kString: {
        const std::string& s = v.toStringRef();
        key.push_back(static_cast<int64_t>(s.size()));
        for (char c : s) key.push_back(c);
        break;
      }
      case Kind::kDevice: {
        c10::Device d = v.toDevice();
        if (d.type() == c10::DeviceType::PrivateUse1 && call.device < 0)
          call.device = d.has_index() ? d.index() : current_device();
        key.push_back(d.has_index() ? d.index() : -7);
        break;
      }
      // memory_format and layout arrive as ints and decide the results' layout (clone(contiguous_format)
      // and clone(preserve_format) shared a program); other ignored kinds (generators) key as 0
      case Kind::kIgnored: key.push_back(v.isInt() ? v.toInt() : 0); break;
    }
  }
}

std::vector<int64_t> TableKernel::key_copy(const torch::jit::Stack& stack, size_t base, Call&) {
  std::vector<int64_t> key;
  Call scratch;
  build_key(stack, base, key, scratch);
  return key;
}

// cat of small tensors of one dtype (and a row-major result): the result lives in a growable storage,
// and inputs in growable storages enter with run-time geometry, so growing a tensor by a step
// (generate's input_ids) reuses one program until the result outgrows its capacity. Anything else takes
// the row's own path (which also raises the CPU's errors).
bool TableKernel::grow_key(const torch::jit::Stack& stack, size_t base, std::vector<int64_t>& key, Call& call) {
  if (schema_args_ != 2 || !stack[base].isTensorList() || !stack[base + 1].isInt()) return false;
  auto list = stack[base].toTensorList();
  if (list.empty()) return false;
  const at::Tensor first = list.get(0);
  if (!first.defined() || first.device().type() != c10::DeviceType::PrivateUse1 || first.dim() < 1) return false;
  const int64_t rank = first.dim();
  int64_t dim = stack[base + 1].toInt();
  if (dim < -rank || dim >= rank) return false;
  if (dim < 0) dim += rank;
  int64_t numel = 0;
  for (const at::Tensor& t : list) {
    if (!t.defined() || t.device() != first.device() || t.scalar_type() != first.scalar_type() ||
        t.dim() != rank || t.numel() == 0 || t.is_conj() || t.is_neg() ||
        t.suggest_memory_format() != c10::MemoryFormat::Contiguous)  // else cat's result is channels-last
      return false;
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && t.size(d) != first.size(d)) return false;
    numel += t.numel();
  }
  if (numel > kGrowableMaxElements) return false;
  key.push_back(kGrowTag);
  key.push_back(static_cast<int64_t>(first.scalar_type()));
  key.push_back(rank);
  key.push_back(dim);
  key.push_back(growable_capacity(numel));
  key.push_back(static_cast<int64_t>(list.size()));
  for (const at::Tensor& t : list) {
    if (reads_growable(t)) {
      check_in_storage_fast(t, name_.c_str());
      key.push_back(kDynTag);
      slot_key(t, key, call);
    } else {
      tensor_key(t, key, call);
    }
  }
  call.device = first.device().index();
  return true;
}

}  // namespace table_kernel

}  // namespace torch_pjrt
