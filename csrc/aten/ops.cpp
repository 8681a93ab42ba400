// The ops that are not lowering rows: allocation, host<->device copies, view metadata, set_ and
// resize_. View ops are metadata only (torch's own implementations over our storages); every other
// op goes through the table (table_kernel.cpp).
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_native_batch_norm_legit.h>
#include <ATen/ops/_native_batch_norm_legit_no_training.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/logspace.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/nonzero_static.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/checks.h"
#include "aten/device_checks.h"
#include "aten/errors.h"
#include "aten/fallback.h"
#include "aten/profiler.h"
#include "aten/program.h"
#include "aten/storage.h"
#include "aten/table_kernel.h"
#include "lowering/table.h"

namespace torch_pjrt {

at::Tensor download(const at::Tensor& t) {
  ProfileSpan span("tpu.sync_point", "copy to the host");  // .cpu(), .item(), printing
  raise_if_poisoned(handle_of(t));
  check_view_in_storage(t, "copy to the host");
  at::Tensor out = at::empty(t.sizes(), t.options().device(c10::kCPU).memory_format(c10::MemoryFormat::Contiguous));
  if (t.numel() == 0) return out;
  pjrt::BufferPtr buf = dense_buffer(t);
  raise_failed_checks(t.device().index());  // a sync point (after dense_buffer, which flushes fused eager)
  if (!buf) return out.zero_();  // never written: reads as zeros
  guarded(buf->producer(), [&] { buf->to_host(out.data_ptr()); });
  return out;
}

namespace {

c10::DispatchKeySet tpu_keys() { return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1); }


at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                               std::optional<c10::Device> device, std::optional<bool>,
                               std::optional<c10::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard g;
  if (device && device->has_index()) g.reset_device(*device);
  auto st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  element_type(st);  // unsupported dtypes fail here, not later
  return at::detail::empty_generic(size, allocator(), tpu_keys(), st, memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<c10::Device> device, std::optional<bool>) {
  c10::OptionalDeviceGuard g;
  if (device && device->has_index()) g.reset_device(*device);
  auto st = dtype.value_or(c10::get_default_dtype_as_scalartype());
  element_type(st);
  return at::detail::empty_strided_generic(size, stride, allocator(), tpu_keys(), st);
}

bool is_tpu(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// self <- src on one device, through the table row (dtype conversion, broadcasting, views).
void copy_on_device(const at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  torch::jit::Stack stack{self, src, non_blocking};
  call_row("copy_", &stack);
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.numel() == 0) return self;
  // torch's copy_ checks (TensorIterator): no writes through overlapping elements, no partial overlap
  at::assert_no_internal_overlap(self);
  if (is_tpu(self) && is_tpu(src)) {
    check_view_in_storage(self, "copy_");
    check_view_in_storage(src, "copy_");
    if (self.is_alias_of(src) && self.storage_offset() == src.storage_offset() && self.sizes() == src.sizes() &&
        self.strides() == src.strides() && self.scalar_type() == src.scalar_type() &&
        self.is_conj() == src.is_conj() && self.is_neg() == src.is_neg()) {
      return self;
    }
    at::assert_no_partial_overlap(self, src);
    if (self.device() == src.device()) {
      copy_on_device(self, src, non_blocking);
    } else {
      // across devices: a device-to-device transfer of the dense value, then a local copy
      pjrt::BufferPtr buf = dense_buffer(src);
      at::Tensor moved;
      if (buf) {
        auto& s = session_or_throw();
        moved = wrap_buffer(guarded("device_to_device", [&] { return s.client().copy_to_device(*buf, self.device().index()); }),
                            src.sizes(), src.scalar_type());
      } else {
        c10::DeviceGuard g(self.device());
        moved = at::empty(src.sizes(), src.options().device(self.device()));
      }
      copy_on_device(self, moved, non_blocking);
    }
    return self;
  }
  if (is_tpu(self)) {
    // host to device: convert and broadcast on the host, upload, then either take the buffer as the
    // storage's new base (the usual .to("tpu")) or copy it into the view on device
    TORCH_CHECK(src.device().is_cpu(), "tpu: cannot copy from ", src.device(), " to ", self.device());
    check_view_in_storage(self, "copy_");
    at::Tensor host = src.to(self.scalar_type());
    if (host.sizes() != self.sizes()) host = host.expand(self.sizes());
    if (covers_storage(self)) {
      pjrt::BufferPtr up = upload_buffer(host, self.device().index());  // the storage's new base
      StorageHandle& h = handle_of(self);
      StorageLock lock(h);
      h.buffer = std::move(up);
      h.error.reset();  // a whole new value heals a poisoned storage
    } else {
      copy_on_device(self, upload(host, self.device().index()), non_blocking);
    }
    return self;
  }
  // device to host
  TORCH_CHECK(self.device().is_cpu(), "tpu: cannot copy from ", src.device(), " to ", self.device());
  self.copy_(download(src));
  return self;
}

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return torch_pjrt::_copy_from(self, dst, false);  // (at::_copy_from is visible too)
}

// narrow_copy with the CPU kernel's checks and words (torch's composite narrows first, whose checks word
// a bad dim or a negative length differently), then a copy of the narrowed view.
at::Tensor narrow_copy(const at::Tensor& self, int64_t dim, c10::SymInt start_s, c10::SymInt length_s) {
  TORCH_CHECK(self.dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
  const int64_t rank = self.dim();
  if (dim < 0) dim = at::maybe_wrap_dim(dim, rank);
  TORCH_CHECK(dim < rank, "narrow_copy(): dim ", dim, " is out of range for a tensor of ", rank, " dims (sizes ",
              self.sizes(), ", ", self.scalar_type(), ")");
  int64_t start = start_s.expect_int(), length = length_s.expect_int();
  const int64_t cur_size = self.size(dim);
  TORCH_CHECK_INDEX(-cur_size <= start && start <= cur_size, "start out of range (expected to be in range of [",
                    -cur_size, ", ", cur_size, "], but got ", start, ")");
  if (start < 0) start += cur_size;
  TORCH_CHECK(length >= 0 && start <= cur_size - length, "start (", start, ") + length (", length,
              ") exceeds dimension size (", cur_size, ").");
  return self.narrow(dim, start, length).clone(at::MemoryFormat::Contiguous);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  return download(self).item();
}

void ensure_storage(const at::Tensor& self, int64_t nbytes) {
  if (static_cast<int64_t>(self.storage().nbytes()) < nbytes) resize_storage_bytes(self.storage(), nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> format) {
  at::detail::check_size_nonnegative(size);  // as the CPU's resize_: negative sizes, then byte-count overflow
  (void)at::detail::computeStorageNbytesContiguous(size, self.element_size(), self.storage_offset());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (format && *format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(*format);
  if (self.numel() > 0) {
    int64_t extent = 1;
    for (int64_t d = 0; d < self.dim(); ++d) extent += (self.size(d) - 1) * self.stride(d);
    ensure_storage(self, (self.storage_offset() + extent) * static_cast<int64_t>(self.element_size()));
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                        c10::SymIntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1 || source.nbytes() == 0,
              "tpu: set_ expects a tpu storage, got one on ", source.device());
  // the CPU's checks: offset, sizes and strides (negative strides overflow its byte count)
  at::native::checkSetStorage(self, source, offset, size, stride);
  if (!stride.empty()) {
    (void)at::detail::computeStorageNbytes(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           self.element_size(), offset.guard_int(__FILE__, __LINE__));
  } else {
    at::detail::check_size_nonnegative(C10_AS_INTARRAYREF_SLOW(size));
  }
  auto* impl = self.unsafeGetTensorImpl();
  if (!self.storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset.guard_int(__FILE__, __LINE__));
  std::vector<int64_t> sz = C10_AS_INTARRAYREF_SLOW(size).vec();
  if (stride.empty()) {
    impl->set_sizes_contiguous(sz);
  } else {
    impl->set_sizes_and_strides(sz, C10_AS_INTARRAYREF_SLOW(stride));
  }
  if (self.numel() > 0) {
    int64_t extent = 1;
    for (int64_t d = 0; d < self.dim(); ++d) extent += (self.size(d) - 1) * self.stride(d);
    ensure_storage(self, (self.storage_offset() + extent) * static_cast<int64_t>(self.element_size()));
  }
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return set_storage(self, std::move(source), std::move(offset), size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes()) / static_cast<int64_t>(self.element_size());
  std::vector<c10::SymInt> size{c10::SymInt(n)};
  return set_storage(self, std::move(source), 0, size, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  if (self.is_same(src)) return self;
  return set_storage(self, src.storage(), src.sym_storage_offset(), src.sym_sizes(), src.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage fresh(c10::Storage::use_byte_size_t(), 0, allocator(), true);
  std::vector<c10::SymInt> size{c10::SymInt(0)};
  return set_storage(self, std::move(fresh), 0, size, {});
}

// Whether `param.data = new` may swap a tensor's implementation in place (what Module._apply, e.g.
// `model.to("tpu")`, does for each parameter). c10's built-in answer lists only the in-tree dense
// backends, so for PrivateUse1 it says no and Module._apply wraps every converted tensor in a new
// Parameter instead: parameters shared by two modules (tied weights such as an LM head's bias or
// embedding) come out as two distinct Parameters, one of which then gets no gradient. Dense CPU and
// tpu tensors share the plain TensorImpl, so a shallow copy between them is as valid as CPU <-> CUDA.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  auto dense = [](const at::Tensor& t) {
    auto type = t.device().type();
    return t.layout() == at::kStrided && (type == c10::DeviceType::CPU || type == c10::DeviceType::PrivateUse1);
  };
  return dense(self) && dense(from);
}

// scaled_dot_product_attention asks the backend which kernel to use (through _fused_sdp_choice_stub,
// registered in register_aten_kernels). Ours is SDPBackend::overrideable: one fused row forward and one
// backward (lowering/attention.cpp), for 4-d query/key/value of one floating dtype, grouped or not. Other
// inputs, and sdpa_kernel contexts that disable it, get the math composition, which lowers op by op.
bool fused_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const std::optional<at::Tensor>& mask, bool enable_gqa) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (!is_tpu(*t) || t->dim() != 4 || t->is_nested() || t->unsafeGetTensorImpl()->has_symbolic_sizes_strides() ||
        t->numel() == 0 || t->scalar_type() != q.scalar_type())
      return false;
  }
  if (!at::isFloatingType(q.scalar_type())) return false;
  const int64_t hq = q.size(1), hkv = k.size(1);
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || v.size(1) != hkv || v.size(2) != k.size(2) ||
      k.size(3) != q.size(3) || hq % hkv != 0 || !(enable_gqa || hkv == hq || hkv == 1))
    return false;
  if (mask && mask->defined()) {
    const at::Tensor& m = *mask;
    if (!is_tpu(m) || m.dim() > 4 || m.unsafeGetTensorImpl()->has_symbolic_sizes_strides() ||
        !(m.scalar_type() == at::kBool || at::isFloatingType(m.scalar_type())))
      return false;
    const int64_t full[4] = {q.size(0), hq, q.size(2), k.size(2)};
    for (int64_t i = 0; i < m.dim(); ++i) {
      int64_t d = m.size(m.dim() - 1 - i), want = full[3 - i];
      if (d != 1 && d != want) return false;
    }
  }
  return true;
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double, bool, std::optional<double>, bool enable_gqa) {
  auto& ctx = at::globalContext();
  if (ctx.userEnabledOverrideableSDP() && fused_attention_fits(q, k, v, mask, enable_gqa))
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  TORCH_CHECK(ctx.userEnabledMathSDP(), "tpu: no available kernel for scaled_dot_product_attention: the fused kernel ",
              ctx.userEnabledOverrideableSDP() ? "does not take these inputs" : "is disabled", " and the math kernel is disabled");
  return static_cast<int64_t>(at::SDPBackend::math);
}

// equal: the same sizes and every element equal (after promotion; NaN is not equal to itself). Its
// result is a Python bool, so it is a sync point: one eq + all program, then one read.
bool equal(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), "Expected all tensors to be on the same device, but found ", a.device(),
              " and ", b.device(), " (equal)");
  if (!a.sizes().equals(b.sizes())) return false;
  if (a.numel() == 0) return true;
  return at::eq(a, b).all().item<bool>();
}

// Ops whose result sizes depend on values, composed of native ops around one sync that reads the size.

// bincount(self, weights, minlength): the input's min and max are read in one sync.
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1 && at::isIntegralType(self.scalar_type(), /*includeBool=*/false),
              "bincount only supports 1-d non-negative integral inputs.");
  const bool weighted = weights && weights->defined();
  TORCH_CHECK(!weighted || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  const at::ScalarType t = !weighted ? at::kLong : weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  auto opts = self.options().dtype(t);
  if (self.numel() == 0) return at::zeros({minlength}, opts);
  at::Tensor range = at::stack({self.min(), self.max()}).to(at::kLong).cpu();  // the sync
  const int64_t lo = range[0].item<int64_t>(), hi = range[1].item<int64_t>();
  TORCH_CHECK(lo >= 0, "bincount only supports 1-d non-negative integral inputs.");
  at::Tensor w = weighted ? weights->to(t) : at::ones({self.size(0)}, opts);
  return at::zeros({std::max(hi + 1, minlength)}, opts).index_add_(0, self.to(at::kLong), w);
}

// repeat_interleave(repeats): position p holds the i with cum[i-1] <= p < cum[i]; the length and the
// sign check are read in one sync (also when output_size is given: it is checked against the length).
at::Tensor repeat_interleave(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK_NOT_IMPLEMENTED(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
                              "\"repeat_interleave_cpu\" not implemented for '", c10::toString(repeats.scalar_type()), "'");
  if (repeats.numel() == 0) return at::empty({0}, repeats.options());
  at::Tensor cum = at::cumsum(repeats, 0, at::kLong);
  at::Tensor facts = at::stack({repeats.min().to(at::kLong), cum[-1]}).cpu();  // the sync
  TORCH_CHECK(facts[0].item<int64_t>() >= 0, "repeats can not be negative");
  const int64_t total = facts[1].item<int64_t>();
  TORCH_CHECK(!output_size || output_size->guard_int(__FILE__, __LINE__) == total,
              "allocated size does not match required size");
  at::Tensor pos = at::arange(total, cum.options());
  return at::searchsorted(cum, pos, /*out_int32=*/false, /*right=*/true).to(repeats.scalar_type());
}

at::Tensor histogram_counts(const at::Tensor& x, const at::Tensor& edges, at::Tensor pos,
                            const std::optional<at::Tensor>& weight, bool density);
at::Tensor bin_positions(const at::Tensor& x, const at::Tensor& edges);

void histogram_checks(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"histogramdd\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  TORCH_CHECK(!weight || !weight->defined() || weight->sizes() == self.sizes(),
              "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor "
              "excluding its innermost dimension, but got input with shape ", self.sizes(), " and weight with shape ",
              weight && weight->defined() ? weight->sizes() : at::IntArrayRef());
}

// histogram(self, bins, range, weight, density): edges from the range or from the input's min and max
// (read in one sync, which also checks them as the CPU does), then each element's bin as the CPU's
// kernel finds it: a linear guess, corrected by a search of the neighbouring edges.
std::tuple<at::Tensor, at::Tensor> histogram(const at::Tensor& self, int64_t bins,
                                             std::optional<at::ArrayRef<double>> range,
                                             const std::optional<at::Tensor>& weight, bool density) {
  histogram_checks(self, weight);
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  at::Tensor x = self.reshape({-1});
  double lo = 0, hi = 1;
  if (range) {
    TORCH_CHECK(range->size() == 2, "torch.histogram(): range should have 2 elements");
    lo = (*range)[0];
    hi = (*range)[1];
  } else if (x.numel() > 0) {
    at::Tensor mm = at::stack({x.min(), x.max()}).to(at::kDouble).cpu();  // the sync
    lo = mm[0].item<double>();
    hi = mm[1].item<double>();
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histogramdd: dimension 0's range [", lo, ", ", hi,
              "] is not finite");
  TORCH_CHECK(lo <= hi, "torch.histogramdd: min should not exceed max, but got min ", lo, " max ", hi, " for dimension 0");
  if (lo == hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  at::Tensor edges = at::linspace(lo, hi, bins + 1, self.options());
  return {histogram_counts(x, edges, bin_positions(x, edges), weight, density), edges};
}

// Each element's bin among `edges` (bins + 1 of them) as the CPU's kernel finds it: a linear guess,
// corrected by a search of the neighbouring edges (upper_bound over edges[max(guess - 1, 0),
// min(guess + 2, bins + 1)), minus one).
at::Tensor bin_positions(const at::Tensor& x, const at::Tensor& edges) {
  const int64_t bins = edges.numel() - 1;
  at::Tensor left = edges[0], right = edges[bins];
  at::Tensor guess = x.sub(left).mul(static_cast<double>(bins)).div(right.sub(left)).to(at::kLong).clamp(0, bins);
  at::Tensor from = guess.sub(1).clamp_min(0), pos = from.sub(1);
  for (int64_t k = 0; k < 3; ++k) {
    at::Tensor j = from.add(k);
    at::Tensor in_window = j.lt(guess.add(2)).logical_and(j.le(bins));
    pos = pos.add(in_window.logical_and(edges.index_select(0, j.clamp_max(bins)).le(x)).to(at::kLong));
  }
  return pos;
}

// The input's checks (the CPU's) -> its number of dims D (the last dim's size).
int64_t histogramdd_dims(const at::Tensor& self, size_t bins) {
  TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions, but got ",
              self.dim());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"histogramdd\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
  const int64_t D = self.size(-1);
  TORCH_CHECK(static_cast<int64_t>(bins) == D, "torch.histogramdd: expected ", D, " sequences of bin edges for each of the ",
              D, " dimensions of the input, but got ", bins);
  return D;
}

// torch.histogramdd's pieces. The input's last dim holds each sample's D coordinates. Edges per dim come
// from `range` (2 D values) or the samples' minima and maxima (one sync for every dim), checked as the
// CPU checks them; an empty input takes [0, 1].
std::vector<at::Tensor> histogramdd_bin_edges(const at::Tensor& self, at::IntArrayRef bins,
                                              std::optional<at::ArrayRef<double>> range,
                                              const std::optional<at::Tensor>&, bool) {
  const int64_t D = histogramdd_dims(self, bins.size());
  at::Tensor x = self.reshape({-1, D});
  std::vector<double> lo(D, 0.0), hi(D, 1.0);
  if (range) {
    TORCH_CHECK(static_cast<int64_t>(range->size()) == 2 * D, "torch.histogramdd: for a ", D, "-dimensional histogram",
                " range should have ", 2 * D, " elements, but got ", range->size());
    for (int64_t d = 0; d < D; ++d) lo[d] = (*range)[2 * d], hi[d] = (*range)[2 * d + 1];
  } else if (x.size(0) > 0) {
    at::Tensor mm = at::cat({at::amin(x, 0), at::amax(x, 0)}).to(at::kDouble).cpu();  // the sync
    for (int64_t d = 0; d < D; ++d) lo[d] = mm[d].item<double>(), hi[d] = mm[D + d].item<double>();
  }
  std::vector<at::Tensor> edges;
  for (int64_t d = 0; d < D; ++d) {
    TORCH_CHECK(bins[d] > 0, "torch.histogramdd(): bins must be > 0, but got ", bins[d], " for dimension ", d);
    TORCH_CHECK(std::isfinite(lo[d]) && std::isfinite(hi[d]), "torch.histogramdd: dimension ", d, "'s range [", lo[d],
                ", ", hi[d], "] is not finite");
    TORCH_CHECK(lo[d] <= hi[d], "torch.histogramdd: min should not exceed max, but got min ", lo[d], " max ", hi[d],
                " for dimension ", d);
    if (lo[d] == hi[d]) lo[d] -= 0.5, hi[d] += 0.5;
    edges.push_back(at::linspace(lo[d], hi[d], bins[d] + 1, self.options()));
  }
  return edges;
}

// The weighted counts of the samples (rows of x [M, D]) whose coordinate d falls in bin pos[d] of
// edges[d]: a sample outside the edges in any dim is not counted, the right edge belongs to the last bin;
// density divides by the total, then by each dim's bin widths (in that order, as the CPU).
at::Tensor histogramdd_counts(const at::Tensor& x, const std::vector<at::Tensor>& edges,
                              const std::vector<at::Tensor>& pos, const std::optional<at::Tensor>& weight, bool density) {
  const int64_t D = static_cast<int64_t>(edges.size());
  std::vector<int64_t> sizes;
  for (const at::Tensor& e : edges) sizes.push_back(e.numel() - 1);
  at::Tensor index = at::zeros({x.size(0)}, x.options().dtype(at::kLong));
  at::Tensor inside = at::ones({x.size(0)}, x.options().dtype(at::kBool));
  int64_t stride = 1;
  for (int64_t d = D - 1; d >= 0; --d) {
    at::Tensor xd = x.select(1, d), p = pos[d];
    p = at::where(p.eq(sizes[d]), p.sub(1), p);
    inside = inside.logical_and(xd.ge(edges[d][0])).logical_and(xd.le(edges[d][sizes[d]]));
    index = index.add(p.mul(stride));
    stride *= sizes[d];
  }
  at::Tensor w = weight && weight->defined() ? weight->reshape({-1}).to(x.scalar_type()) : at::ones({x.size(0)}, x.options());
  at::Tensor hist = at::zeros({stride}, x.options())
                        .index_add_(0, at::where(inside, index, at::zeros_like(index)), at::where(inside, w, at::zeros_like(w)))
                        .reshape(sizes);
  if (density) {
    hist = hist.div(hist.sum());
    for (int64_t d = 0; d < D; ++d) {
      std::vector<int64_t> shape(D, 1);
      shape[d] = sizes[d];
      hist = hist.div(edges[d].diff().reshape(shape));
    }
  }
  return hist;
}

void histogramdd_weight_check(const at::Tensor& self, const std::optional<at::Tensor>& weight) {
  if (!weight || !weight->defined()) return;
  at::IntArrayRef s = self.sizes();
  TORCH_CHECK(weight->sizes() == s.slice(0, s.size() - 1), "torch.histogramdd: if weight tensor is provided it should have the same ",
              "shape as the input tensor excluding its innermost dimension, but got input with shape ", s,
              " and weight with shape ", weight->sizes());
}

at::Tensor histogramdd_from_bin_cts(const at::Tensor& self, at::IntArrayRef bins, std::optional<at::ArrayRef<double>> range,
                                    const std::optional<at::Tensor>& weight, bool density) {
  std::vector<at::Tensor> edges = histogramdd_bin_edges(self, bins, range, weight, density);
  histogramdd_weight_check(self, weight);
  at::Tensor x = self.reshape({-1, self.size(-1)});
  std::vector<at::Tensor> pos;
  for (size_t d = 0; d < edges.size(); ++d) pos.push_back(bin_positions(x.select(1, d), edges[d]));
  return histogramdd_counts(x, edges, pos, weight, density);
}

// With given edges: each coordinate's bin by binary search, as the CPU.
at::Tensor histogramdd_from_bin_tensors(const at::Tensor& self, at::TensorList bins, const std::optional<at::Tensor>& weight,
                                        bool density) {
  const int64_t D = histogramdd_dims(self, bins.size());
  for (int64_t d = 0; d < D; ++d) {
    TORCH_CHECK(bins[d].scalar_type() == self.scalar_type(), "torch.histogramdd: input tensor and bins tensors should",
                " have the same dtype, but got input with dtype ", self.scalar_type(), " and bins for dimension ", d,
                " with dtype ", bins[d].scalar_type());
    TORCH_CHECK(bins[d].dim() == 1, "torch.histogramdd: bins tensor should have one dimension, but got ", bins[d].dim(),
                " dimensions in the bins tensor for dimension ", d);
    TORCH_CHECK(bins[d].numel() > 0, "torch.histogramdd: bins tensor should have at least 1 element, but got ",
                bins[d].numel(), " elements in the bins tensor for dimension ", d);
  }
  histogramdd_weight_check(self, weight);
  at::Tensor x = self.reshape({-1, D});
  std::vector<at::Tensor> edges(bins.begin(), bins.end()), pos;
  for (int64_t d = 0; d < D; ++d)
    pos.push_back(at::searchsorted(bins[d], x.select(1, d).contiguous(), false, true).sub(1).clamp_min(0));
  return histogramdd_counts(x, edges, pos, weight, density);
}

// The weighted counts of the elements of x in bins `pos` (edges: the bins' boundaries): elements outside
// the edges are not counted, the right edge belongs to the last bin; density divides by the total and
// the bins' widths (in that order, as the CPU).
at::Tensor histogram_counts(const at::Tensor& x, const at::Tensor& edges, at::Tensor pos,
                            const std::optional<at::Tensor>& weight, bool density) {
  const int64_t bins = edges.numel() - 1;
  pos = at::where(pos.eq(bins), pos.sub(1), pos);
  at::Tensor inside = x.ge(edges[0]).logical_and(x.le(edges[bins]));
  at::Tensor w = weight && weight->defined() ? weight->reshape({-1}).to(x.scalar_type()) : at::ones_like(x);
  at::Tensor hist = at::zeros({bins}, x.options())
                        .index_add_(0, at::where(inside, pos, at::zeros_like(pos)), at::where(inside, w, at::zeros_like(w)));
  if (density) hist = hist.div(hist.sum()).div(edges.diff());
  return hist;
}

// histogram(self, bins: edges, weight, density): each element's bin by binary search, as the CPU.
std::tuple<at::Tensor, at::Tensor> histogram_edges(const at::Tensor& self, const at::Tensor& bins,
                                                   const std::optional<at::Tensor>& weight, bool density) {
  histogram_checks(self, weight);
  TORCH_CHECK(bins.dim() == 1, "torch.histogramdd(): bins tensor should have one dimension, but got ",
              bins.dim(), " dimensions in the bins tensor for dimension 0");
  TORCH_CHECK(bins.scalar_type() == self.scalar_type(), "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got input ",
              self.scalar_type(), " and bins for dimension 0 with dtype ", bins.scalar_type());
  at::Tensor x = self.reshape({-1});
  TORCH_CHECK(bins.numel() > 1, "torch.histogram(): bins must be > 0, but got 0 for dimension 0");
  at::Tensor pos = at::searchsorted(bins, x, /*out_int32=*/false, /*right=*/true).sub(1);
  return {histogram_counts(x, bins, pos.clamp_min(0), weight, density), bins.clone()};
}

// Unique runs of `seq` [n] or [n, m] (slices along dim 0) whose equal values are adjacent, `order`
// mapping its positions back to the input's (undefined: the identity): the count of runs is the one
// sync. The inverse takes `inverse_sizes`.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_runs(const at::Tensor& seq, const at::Tensor& order,
                                                           bool return_inverse, bool return_counts,
                                                           at::IntArrayRef inverse_sizes) {
  const int64_t n = seq.size(0);
  auto longs = seq.options().dtype(at::kLong);
  if (n == 0) {
    return {seq, return_inverse ? at::zeros(inverse_sizes, longs) : at::empty({0}, longs), at::empty({0}, longs)};
  }
  at::Tensor first = at::ones({1}, seq.options().dtype(at::kBool));
  at::Tensor step = at::ne(seq.slice(0, 1), seq.slice(0, 0, n - 1));
  if (seq.dim() == 2) step = step.any(1);
  at::Tensor fresh = at::cat({first, step});  // a run starts here
  const int64_t k = fresh.sum().item<int64_t>();  // the sync
  at::Tensor starts = at::nonzero_static(fresh, k, -1).reshape({k});
  at::Tensor values = seq.index_select(0, starts);
  at::Tensor inverse = at::empty({0}, longs), counts = at::empty({0}, longs);
  if (return_inverse) {
    at::Tensor run = at::cumsum(fresh, 0, at::kLong).sub_(1);
    inverse = (order.defined() ? at::empty({n}, longs).scatter_(0, order, run) : run).reshape(inverse_sizes);
  }
  if (return_counts) {
    at::Tensor ends = at::cat({starts.slice(0, 1), at::full({1}, n, longs)});
    counts = ends.sub(starts);
  }
  return {values, inverse, counts};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool /*sorted: always*/,
                                                       bool return_inverse, bool return_counts) {
  at::Tensor flat = self.reshape({-1});
  auto [sorted, order] = at::sort(flat, /*stable=*/true, 0, false);
  return unique_runs(sorted, order, return_inverse, return_counts, self.sizes());
}

// _unique (the older overload autograd's formulas call): unique2 without counts.
std::tuple<at::Tensor, at::Tensor> unique1(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto [values, inverse, counts] = unique2(self, sorted, return_inverse, false);
  return {values, inverse};
}

// Unique slices along `dim` (dim moved first, slices flattened), sorted lexicographically as the CPU's
// kernel sorts them (stable sorts by each column, last column first), or only consecutive runs.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_slices(const at::Tensor& self, int64_t dim, bool sorted,
                                                             bool return_inverse, bool return_counts) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.size(dim);
  at::Tensor moved = self.movedim(dim, 0);
  at::Tensor rows = moved.reshape({n, -1});
  at::Tensor order;
  if (sorted && n > 1) {
    order = at::arange(n, self.options().dtype(at::kLong));
    for (int64_t j = rows.size(1) - 1; j >= 0; --j) {
      at::Tensor key = rows.select(1, j).index_select(0, order);
      order = order.index_select(0, std::get<1>(at::sort(key, /*stable=*/true, 0, false)));
    }
    rows = rows.index_select(0, order);
  }
  auto [values, inverse, counts] = unique_runs(rows, order, return_inverse, return_counts, {n});
  std::vector<int64_t> sizes = moved.sizes().vec();
  sizes[0] = values.size(0);
  return {values.reshape(sizes).movedim(0, dim), inverse, counts};
}

// unique with dim= over a tensor without elements: the CPU's checks, then empty results.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_of_empty(const at::Tensor& self, int64_t dim) {
  int64_t zeros = 0;
  for (int64_t s : self.sizes()) zeros += s == 0;
  TORCH_CHECK(zeros <= 1, "Number of zero sized dimensions is more than one, so unique cannot be applied ");
  TORCH_CHECK(self.size(dim) == 0, "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  auto longs = self.options().dtype(at::kLong);
  return {at::empty(self.sizes(), self.options()), at::empty({0}, longs), at::empty({0}, longs)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self, bool return_inverse,
                                                                  bool return_counts, std::optional<int64_t> dim) {
  if (!dim.has_value() || self.dim() <= 1)
    return unique_runs(self.reshape({-1}), at::Tensor(), return_inverse, return_counts, self.sizes());
  if (self.numel() == 0) return unique_of_empty(self, c10::maybe_wrap_dim(*dim, self.dim()));
  return unique_slices(self, *dim, false, return_inverse, return_counts);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim, bool /*sorted*/,
                                                          bool return_inverse, bool return_counts) {
  dim = c10::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/false);
  if (self.numel() == 0) return unique_of_empty(self, dim);
  return unique_slices(self, dim, true, return_inverse, return_counts);
}

// native_batch_norm updates running statistics without saying so in its schema; route it to the
// overloads that do say so (rows in batch_norm.cpp), as torch's own decompositions do.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  bool stats = running_mean && running_mean->defined() && running_var && running_var->defined();
  if (!stats) return at::_native_batch_norm_legit(input, weight, bias, training, momentum, eps);
  at::Tensor rm = *running_mean, rv = *running_var;
  if (!training) {
    // like the CPU kernel: no saved statistics in eval mode ([0]-shaped), though the meta function says [C]
    auto r = at::_native_batch_norm_legit_no_training(input, weight, bias, rm, rv, momentum, eps);
    return {std::get<0>(r), at::empty({0}, std::get<1>(r).options()), at::empty({0}, std::get<2>(r).options())};
  }
  return at::_native_batch_norm_legit(input, weight, bias, rm, rv, true, momentum, eps);
}

// Factory out= overloads: the functional row computes the value in out's dtype, then out is resized
// (when its element count differs, as the CPU's kernels do) and written.
at::Tensor& write_factory_out(const at::Tensor& value, at::Tensor& out) {
  if (out.numel() != value.numel()) out.resize_({value.numel()});
  out.copy_(value.reshape(out.sizes()));
  return out;
}

at::Tensor& arange_start_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  return write_factory_out(at::arange(start, end, step, out.options()), out);
}

at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  return write_factory_out(at::linspace(start, end, steps, out.options()), out);
}

at::Tensor& logspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, double base, at::Tensor& out) {
  return write_factory_out(at::logspace(start, end, steps, base, out.options()), out);
}

}  // namespace

// Called from the Python module's init, after every static initializer (the lowering rows register
// themselves statically, so a static TORCH_LIBRARY_IMPL could run before the table is complete).
void register_aten_kernels() {
  static torch::Library m(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  std::set<std::string> custom = data_dependent_overloads();
  custom.insert("copy_");
  std::set<std::string> not_table = custom;
  for (const auto& o : checked_overloads(custom)) not_table.insert(o);
  register_table_kernels(m, not_table);
  register_checked_kernels(m, custom);  // argument checks the meta kernels lack, then the row (checks.cpp)
  register_data_dependent_kernels(m);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("copy_", copy_);
  m.impl("_copy_from", _copy_from);
  m.impl("_copy_from_and_resize", _copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("narrow_copy", narrow_copy);
  m.impl("_fused_sdp_choice", fused_sdp_choice);
  at::native::_fused_sdp_choice_stub.set_privateuse1_dispatch_ptr(fused_sdp_choice);  // what sdpa consults
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("native_batch_norm", native_batch_norm);
  m.impl("equal", equal);
  m.impl("arange.start_out", arange_start_out);
  m.impl("linspace.out", linspace_out);
  m.impl("logspace.out", logspace_out);
  m.impl("bincount", bincount);
  m.impl("_unique", unique1);
  m.impl("_unique2", unique2);
  m.impl("unique_consecutive", unique_consecutive);
  m.impl("unique_dim", unique_dim);
  m.impl("repeat_interleave.Tensor", repeat_interleave);
  m.impl("histogram.bin_ct", histogram);
  m.impl("histogram.bins_tensor", histogram_edges);
  m.impl("_histogramdd_bin_edges", histogramdd_bin_edges);
  m.impl("_histogramdd_from_bin_cts", histogramdd_from_bin_cts);
  m.impl("_histogramdd_from_bin_tensors", histogramdd_from_bin_tensors);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  // Views: metadata only, exactly as on CPU.
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
}

}  // namespace torch_pjrt
