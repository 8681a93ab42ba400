// The dispatcher kernel behind every lowering row: an ATen call becomes cache key -> executable ->
// execute. One boxed kernel serves the functional, in-place and out= overloads of a row.
//
// Hot path (a cache hit): walk the stack once to build a compact key of int64 words (dtypes, sizes,
// strides, offsets, storage forms, the scalar arguments that shape the program), find the entry, gather
// argument buffers (storage bases, run-time scalars from a small cache), execute, then wrap or swap the
// output buffers. No strings, no Python, no meta tensors.
//
// Miss: shape inference and argument checking run the same op on meta tensors (so bad input raises
// exactly what CPU raises, before any device work), the row lowers dense values to StableHLO, views
// are read from and written back to their storages' bases inside the same program, and the program is
// compiled through the program cache.
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "aten/checks.h"
#include "aten/compile_log.h"
#include "aten/errors.h"
#include "aten/execution.h"
#include "aten/fallback.h"
#include "aten/fused.h"
#include "aten/generator.h"
#include "aten/program_args.h"
#include "aten/shape_rules.h"
#include "aten/row_args.h"
#include "aten/storage.h"
#include "aten/table_entry.h"
#include "lowering/table.h"

namespace torch_pjrt {
namespace {

using lowering::Arg;
using pjrt::ElementType;

using Kind = ArgKind;

enum Tag : int64_t {
  kNoneTag = -1, kTensorTag = -2, kCpuScalarTag = -3, kScalarTag = -4, kListTag = -5,
  kDynTag = -6,       // a read of a growable storage: geometry at run time
  kCapacityTag = -7,  // a growable storage's base
  kGrowTag = -8,      // a growable concatenation
  kPresentTag = -9,   // an optional argument that is not None
  kDynOffsetTag = -10,  // a view whose storage offset is a run-time input (offset_is_dynamic)
};

// Per-call facts gathered while building the key.
struct Call {
  std::vector<c10::StorageImpl*> slots;
  std::vector<c10::Storage> storages;
  int device = -1;
  bool has_tpu_tensor = false;
};

struct Return {
  bool aliases_arg;  // returns an argument (in-place / out=) rather than a new tensor
  int index;         // argument index, or functional result index
  bool is_list;
  bool is_int = false;  // an int/SymInt result (attention's max_q): taken from shape inference
};

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

class TableKernel final : public c10::OperatorKernel {
 public:
  TableKernel(const lowering::Row* row, std::string name) : row_(row), name_(std::move(name)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    prepare(op);
    const size_t n = schema_args_;
    const size_t base = stack->size() - n;
    thread_local std::vector<int64_t> key;
    key.clear();
    Call call;
    const bool grow = row_->grow && !is_inplace_ && !is_out_ && (!fused::active() || fused::grows(*stack, base)) &&
                      grow_key(*stack, base, key, call);
    if (!grow) {
      key.clear();
      call = Call();
      build_key(*stack, base, key, call);
    }
    if (call.device < 0) call.device = current_device();
    uint64_t hash = 1469598103934665603ULL;
    for (int64_t w : key) hash = mix(hash, static_cast<uint64_t>(w));
    Entry* entry = find(hash, key);
    if (entry) metrics().cache_hits.fetch_add(1, std::memory_order_relaxed);
    if (!entry && grow) entry = build_grow_entry(*stack, base, call, hash);
    if (!entry) {
      bool restart = false;
      entry = build_entry(op, stack, base, call, hash, &restart);
      if (restart) return (*this)(op, c10::DispatchKeySet(), stack);  // out= tensors were resized
    }
    if (entry->fallback) {
      run_fallback(op, stack, entry->fallback_reason);
      return;
    }
    if (fused::active() && record(*entry, stack, base, call, grow)) return;
    if (!entry->exe && !compile_entry(*entry)) {
      run_fallback(op, stack, entry->fallback_reason);
      return;
    }
    execute(*entry, stack, base, call);
  }

 private:
  // ------------------------------------------------------------------------------- schema analysis
  void prepare(const c10::OperatorHandle& op) {
    std::call_once(prepared_, [&] {
      const auto& schema = op.schema();
      schema_args_ = schema.arguments().size();
      for (const auto& a : schema.arguments()) {
        kinds_.push_back(kind_of(a.real_type()));
        names_.push_back(a.name());
        optional_.push_back(a.type()->kind() == c10::TypeKind::OptionalType);
        bool w = a.alias_info() && a.alias_info()->isWrite();
        written_.push_back(w);
        if (w && a.kwarg_only()) is_out_ = true;
        if (w && !a.kwarg_only()) is_inplace_ = true;
      }
      functional_args_ = schema_args_;
      if (is_out_) {
        for (size_t i = 0; i < schema_args_; ++i)
          if (written_[i] && schema.arguments()[i].kwarg_only()) functional_args_ = std::min(functional_args_, i);
      }
      std::vector<int> written_args;
      for (size_t i = 0; i < schema_args_; ++i)
        if (written_[i]) written_args.push_back(static_cast<int>(i));
      int next_written = 0, next_result = 0;
      for (const auto& r : schema.returns()) {
        bool is_list = r.type()->kind() == c10::TypeKind::ListType;
        auto k = r.type()->kind();
        if (k == c10::TypeKind::IntType || k == c10::TypeKind::SymIntType) {
          returns_.push_back({false, -1, false, true});
        } else if (r.alias_info()) {
          returns_.push_back({true, written_args.at(next_written++), is_list});
        } else {
          returns_.push_back({false, next_result++, is_list});
        }
      }
      new_returns_ = static_cast<size_t>(next_result);
      const std::string& fname = row_->overloads.front();
      auto dot = fname.find('.');
      std::string base = "aten::" + fname.substr(0, dot);
      std::string overload = dot == std::string::npos ? "" : fname.substr(dot + 1);
      functional_ = c10::Dispatcher::singleton().findSchemaOrThrow(base.c_str(), overload.c_str());
      functional_returns_ = functional_->schema().returns().size();
    });
  }

  // Fused eager: records the call instead of running it; else runs the pending stream first when the
  // call reads a pending storage (execute reads buffers directly).
  bool record(const Entry& entry, torch::jit::Stack* stack, size_t base, const Call& call, bool grow) {
    std::vector<at::Tensor> results(entry.num_results);
    fused::OpInfo info{row_, name_, schema_args_, functional_args_, kinds_, written_, is_inplace_, is_out_,
                       new_returns_};
    if (!grow && fused::record(info, entry, *stack, base, call.device, call.storages, results)) {
      push_returns(entry, stack, base, results);
      return true;
    }
    for (const auto& st : call.storages)
      if (is_pending(handle_of(st))) fused::flush();
    return false;
  }

  // ---------------------------------------------------------------------------------------- the key
  void tensor_key(const at::Tensor& t, std::vector<int64_t>& key, Call& call, bool written = false) {
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
  void dynamic_key(const at::Tensor& t, std::vector<int64_t>& key) {
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
  void slot_key(const at::Tensor& t, std::vector<int64_t>& key, Call& call) {
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

  void build_key(const torch::jit::Stack& stack, size_t base, std::vector<int64_t>& key, Call& call) {
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

  Entry* find(uint64_t hash, const std::vector<int64_t>& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(hash);
    if (it == entries_.end()) return nullptr;
    for (auto& e : it->second)
      if (e->key == key) return e.get();
    return nullptr;
  }

  // ------------------------------------------------------------------------------------ miss: build
  Entry* build_entry(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t base, Call& call, uint64_t hash,
                     bool* restart) {
    auto entry = std::make_unique<Entry>();
    entry->key = key_copy(*stack, base, call);
    try {
      build_program(op, *stack, base, call, *entry, restart);
    } catch (const c10::NotImplementedError& e) {
      // no meta kernel (or an unsupported dtype): not a user error, so the CPU may still run it
      entry->fallback = true;
      entry->fallback_reason = std::string("shape inference failed: ") + e.what_without_backtrace();
    } catch (const hlo::Error& e) {
      entry->fallback = true;
      entry->fallback_reason = e.what();
    } catch (const pjrt::Error& e) {
      entry->fallback = true;
      entry->fallback_reason = std::string("compile failed: ") + e.what();
    } catch (const c10::Error&) {
      throw;  // bad input, found by shape inference: the same error the CPU raises
    } catch (const std::exception& e) {
      // a Python meta kernel that cannot infer this case; the CPU decides (and raises for bad input)
      entry->fallback = true;
      entry->fallback_reason = std::string("shape inference failed: ") + e.what();
    }
    if (*restart) return nullptr;
    if (!entry->fallback) entry->lowered.fields = fields(*stack, base, *entry);
    metrics().cache_misses.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    auto& bucket = entries_[hash];
    bucket.push_back(std::move(entry));
    return bucket.back().get();
  }

  // Compile reasons (compile_log.h): the call's key parts, by argument name (and the entry's signature).
  KeyFields fields(const torch::jit::Stack& stack, size_t base, Entry& entry) {
    return call_fields(stack, base, names_, kinds_, row_->flags & lowering::kBakeScalars,
                       row_->flags & lowering::kRuntimeFloats, &entry.signature);
  }

  // Compiles a lowered entry, once (threads may launch it together); false when the plugin cannot compile
  // it, and the entry now falls back to the CPU, as a failed compile on a miss always did.
  bool compile_entry(Entry& entry) {
    std::call_once(entry.compile_once, [&] {
      Lowered& l = entry.lowered;
      pjrt::Served served;
      try {
        entry.exe = session_or_throw().programs().get(l.module, l.in_specs, l.out_specs, &served);
      } catch (const pjrt::Error& e) {
        entry.fallback_reason = std::string("compile failed: ") + e.what();
        entry.fallback = true;
        return;
      }
      note_program(name_, entry.signature, std::move(l.fields), served);
      entry.lowered = Lowered();  // the text is the program cache's now
    });
    return !entry.fallback;
  }

  std::vector<int64_t> key_copy(const torch::jit::Stack& stack, size_t base, Call&) {
    std::vector<int64_t> key;
    Call scratch;
    build_key(stack, base, key, scratch);
    return key;
  }

  // The functional overload's results on meta tensors (their sizes and layout).
  std::vector<at::Tensor> functional_meta_results(const torch::jit::Stack& stack, size_t base) {
    MetaBases bases;
    torch::jit::Stack f;
    for (size_t i = 0; i < functional_args_; ++i) f.push_back(to_meta(stack[base + i], kinds_[i], bases));
    std::vector<at::Tensor> out;
    try {
      functional_->callBoxed(&f);
    } catch (const std::exception&) {
      return out;  // no functional meta kernel: keep the contiguous layout
    }
    for (const auto& v : f)
      if (v.isTensor()) out.push_back(v.toTensor());
    return out;
  }

  void build_program(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base, Call& call,
                     Entry& entry, bool* restart) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // 1. Shape inference and argument checks on meta tensors: the op itself (raises what CPU raises) ...
    MetaBases meta_bases;
    torch::jit::Stack meta;
    for (size_t i = 0; i < schema_args_; ++i) meta.push_back(to_meta(stack[base + i], kinds_[i], meta_bases));
    torch::jit::Stack variant_meta = meta;
    if (is_inplace_ || is_out_) {
      check_write_overlap(name_, stack, base, written_);
      if (is_out_ && out_dtype_must_match_input(op.schema().name())) {
        const at::Tensor* input = nullptr;
        for (size_t i = 0; i < functional_args_ && !input; ++i)
          if (stack[base + i].isTensor()) input = &stack[base + i].toTensor();
        for (size_t i = functional_args_; input && i < schema_args_; ++i) {
          if (!written_[i] || !stack[base + i].isTensor()) continue;
          const at::Tensor& out = stack[base + i].toTensor();
          TORCH_CHECK(out.scalar_type() == input->scalar_type(), "Found dtype ", out.scalar_type(),
                      " but expected ", input->scalar_type(), " (in ", name_, ")");
        }
      }
      op.callBoxed(&variant_meta);
      if (is_out_) {
        // out= tensors take the result's shape first (and, as torch's CPU kernels restride a resized
        // output, the functional result's layout: torch.add(x.t(), 2, out=empty(0)) is transposed like
        // x.t()); then the call starts over with the new key
        std::vector<at::Tensor> layouts;
        for (size_t i = functional_args_; i < schema_args_; ++i) {
          if (!written_[i] || !stack[base + i].isTensor()) continue;
          const at::Tensor& real = stack[base + i].toTensor();
          const at::Tensor& fake = meta[i].toTensor();
          if (real.sizes() == fake.sizes()) continue;
          at::native::resize_output(real, fake.sizes());
          *restart = true;
          if (layouts.empty()) layouts = functional_meta_results(stack, base);
          size_t r = i - functional_args_;
          if (r < layouts.size() && layouts[r].sizes() == fake.sizes() && layouts[r].strides() != real.strides() &&
              layouts[r].is_non_overlapping_and_dense())
            real.as_strided_(fake.sizes(), layouts[r].strides());
        }
        if (*restart) return;
      }
    }
    // ... and the functional overload, whose results the row computes.
    torch::jit::Stack fmeta(meta.begin(), meta.begin() + functional_args_);
    {
      MetaBases fresh_bases;
      for (size_t i = 0; i < functional_args_; ++i) fmeta[i] = to_meta(stack[base + i], kinds_[i], fresh_bases);
    }
    const auto& schema = functional_->schema();
    if (ShapeRule rule = shape_rule(schema.name(), schema.overload_name())) {
      rule(fmeta);  // the op's meta kernel is narrower than the op (aten/shape_rules.h)
    } else if (ResultFix fix = result_fix(schema.name(), schema.overload_name())) {
      const torch::jit::Stack args = fmeta;
      functional_->callBoxed(&fmeta);
      fix(args, fmeta);  // the meta kernel's sizes or dtypes are not the CPU's
    } else {
      functional_->callBoxed(&fmeta);
    }
    std::vector<pjrt::TensorSpec> outs;
    std::vector<at::ScalarType> out_dtypes;
    std::vector<std::vector<int64_t>> out_strides;  // non-contiguous dense layouts of the results
    for (const auto& r : fmeta) {
      auto add = [&](const at::Tensor& t) {
        out_strides.emplace_back();
        if (!t.defined()) {  // e.g. a backward op's output_mask said this gradient is not needed
          outs.push_back({ElementType::kInvalid, {}});
          out_dtypes.push_back(at::ScalarType::Undefined);
          return;
        }
        if (t.dim() > 0 && t.is_non_overlapping_and_dense()) {
          int64_t expect = 1;
          bool plain = true;  // literally the contiguous strides (torch reports size-1 dims' strides too)
          for (int64_t d = t.dim() - 1; d >= 0; --d) {
            plain = plain && t.stride(d) == expect;
            expect *= std::max<int64_t>(t.size(d), 1);
          }
          if (!plain) out_strides.back().assign(t.strides().begin(), t.strides().end());
        }
        outs.push_back({element_type(t.scalar_type()), std::vector<int64_t>(t.sizes().begin(), t.sizes().end())});
        out_dtypes.push_back(t.scalar_type());
      };
      if (r.isTensor()) add(r.toTensor());
      else if (r.isTensorList())
        for (const at::Tensor& t : r.toTensorList()) add(t);
      else if (r.isInt() || r.isSymInt()) entry.int_returns.push_back(r);
    }
    for (size_t r = 0; r < outs.size(); ++r)
      entry.results.push_back({outs[r].type != ElementType::kInvalid, out_dtypes[r], outs[r].dims});

    // 2. The program: storage bases and run-time scalars are arguments; views are read inside.
    hlo::Builder b;
    std::vector<pjrt::TensorSpec> in_specs;
    std::vector<lowering::BaseForm> forms;
    std::vector<hlo::Value> slot_values;
    storage_args(b, call.storages, entry, in_specs, forms, slot_values);
    auto slot_of = [&](const at::Tensor& t) {
      for (size_t s = 0; s < call.slots.size(); ++s)
        if (call.slots[s] == t.storage().unsafeGetStorageImpl()) return static_cast<int>(s);
      return -1;
    };
    auto add_input = [&](ElementType type, Source src) {
      hlo::Value v = b.arg(hlo::Type{type, {}});
      in_specs.push_back({type, {}});
      src.type = type;
      entry.sources.push_back(src);
      return v;
    };
    ArgSources sources;
    sources.tensor = [&](const at::Tensor& t, int index, int item) -> Arg {
      Arg a;
      a.kind = Arg::kTensor;
      if (t.device().type() != c10::DeviceType::PrivateUse1) {
        a.value = add_input(element_type(t.scalar_type()),
                            {item >= 0 ? Source::kCpuListItem : Source::kCpuTensor, index, std::max(item, 0),
                             ElementType::kInvalid});
        a.weak = t.unsafeGetTensorImpl()->is_wrapped_number();
        return a;
      }
      int s = slot_of(t);
      a.contiguous = t.is_contiguous();
      if (!written_[index] && reads_growable(t)) {
        a.value = read_dynamic(b, slot_values[s], t, index, item, in_specs, entry);
        return a;  // no layout hint: the strides are not part of the key
      }
      lowering::ViewForm view = view_form(t);
      if (view.dynamic) view.offset_value = geometry_input(b, index, item, 0, in_specs, entry);
      a.value = lowering::read_view(b, slot_values[s], forms[s], view);
      a.layout = view.storage_order();
      return a;
    };
    sources.scalar = [&](ElementType type, const c10::Scalar&, int index, int item) {
      return add_input(type, {item >= 0 ? Source::kScalarListItem : Source::kScalarArg, index, std::max(item, 0),
                              ElementType::kInvalid});
    };
    lowering::Ctx ctx{b, {}, outs, {}, {}};
    for (size_t i = 0; i < functional_args_; ++i)
      ctx.args.push_back(row_arg(stack[base + i], kinds_[i], row_->flags, static_cast<int>(i), sources));
    auto add_rng_state = [&] {
      hlo::Value v = b.arg(hlo::Type{ElementType::kU64, {2}});
      in_specs.push_back({ElementType::kU64, {2}});
      entry.sources.push_back({Source::kRng, 0, 0, ElementType::kU64});
      return v;
    };
    if (row_->flags & lowering::kRandom) ctx.rng_state = add_rng_state();
    ctx.lazy_rng_state = add_rng_state;

    // 3. Lower, then convert results to the types shape inference promised.
    std::vector<hlo::Value> results = row_->fn(ctx);
    convert_results(b, results, outs, name_);

    // 4. Outputs: new tensors (functional), or new bases for written storages (in-place, out=).
    std::vector<hlo::Value> program_outputs;
    std::vector<pjrt::TensorSpec> out_specs;
    // A new tensor's value in memory order: dims by decreasing stride (size-1 dims: any place will do)
    auto add_new_tensor = [&](size_t r) {
      const std::vector<int64_t>& st = out_strides[r];
      if (st.empty()) {
        program_outputs.push_back(results[r]);
        out_specs.push_back(outs[r]);
        entry.sinks.push_back({true, static_cast<int>(r), outs[r].dims, out_dtypes[r]});
        return;
      }
      std::vector<int64_t> perm(st.size());
      for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
      std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) { return st[x] > st[y]; });
      pjrt::TensorSpec spec{outs[r].type, {}};
      for (int64_t d : perm) spec.dims.push_back(outs[r].dims[d]);
      program_outputs.push_back(b.transpose(results[r], hlo::Dims(perm.begin(), perm.end())));
      out_specs.push_back(spec);
      entry.sinks.push_back({true, static_cast<int>(r), outs[r].dims, out_dtypes[r], st});
    };
    if (!is_inplace_ && !is_out_) {
      for (size_t r = 0; r < results.size(); ++r) {
        if (outs[r].type == ElementType::kInvalid) continue;  // returned as an undefined tensor
        add_new_tensor(r);
      }
    } else {
      // Ops that return new tensors and also update arguments (batch norm's running statistics): the
      // functional overload's first results are the new tensors, the rest the arguments' new values.
      size_t first_written = is_inplace_ ? new_returns_ : 0;
      for (size_t r = 0; r < first_written; ++r) {
        if (outs[r].type == ElementType::kInvalid) continue;
        add_new_tensor(r);
      }
      std::vector<at::Tensor> targets;
      std::vector<std::pair<int, int>> target_args;  // (stack argument, list item or -1)
      for (size_t i = 0; i < schema_args_; ++i) {
        if (!written_[i]) continue;
        const c10::IValue& v = stack[base + i];
        if (v.isTensor()) {
          targets.push_back(v.toTensor());
          target_args.emplace_back(static_cast<int>(i), -1);
        } else if (v.isTensorList()) {
          int item = 0;
          for (const at::Tensor& t : v.toTensorList()) {
            targets.push_back(t);
            target_args.emplace_back(static_cast<int>(i), item++);
          }
        }
      }
      if (targets.size() != results.size() - first_written)
        throw hlo::Error(name_ + ": " + std::to_string(targets.size()) + " written tensors for " +
                         std::to_string(results.size() - first_written) + " results");
      std::vector<bool> touched(call.slots.size(), false);
      for (size_t r = 0; r < targets.size(); ++r) {
        // TensorIterator's rule for in-place results (some meta kernels skip it: mul_, clamp_); out= variants
        // check it in their own meta kernels where it applies (reductions compute in the out dtype)
        at::ScalarType rt = out_dtypes[first_written + r];
        TORCH_CHECK(!is_inplace_ || rt == at::ScalarType::Undefined || at::canCast(rt, targets[r].scalar_type()),
                    "result type ", rt,
                    " can't be cast to the desired output type ", targets[r].scalar_type());
        int s = slot_of(targets[r]);
        lowering::ViewForm view = view_form(targets[r]);
        if (view.dynamic)
          view.offset_value = geometry_input(b, target_args[r].first, target_args[r].second, 0, in_specs, entry);
        hlo::Value value = b.convert(results[first_written + r], view.elem);
        lowering::BaseForm new_form;
        slot_values[s] = lowering::write_view(b, slot_values[s], forms[s], view, value, &new_form);
        forms[s] = new_form;
        touched[s] = true;
      }
      for (size_t s = 0; s < call.slots.size(); ++s) {
        if (!touched[s]) continue;
        program_outputs.push_back(slot_values[s]);
        out_specs.push_back({forms[s].elem, forms[s].dims});
        entry.sinks.push_back({false, static_cast<int>(s), forms[s].dims, scalar_type(forms[s].elem)});
      }
    }
    entry.num_results = is_inplace_ || is_out_ ? new_returns_ : results.size();
    b.ret(program_outputs);
    entry.lowered.module = b.module_text(name_for_module());
    entry.lowered.in_specs = std::move(in_specs);
    entry.lowered.out_specs = std::move(out_specs);
  }

  // --------------------------------------------------------------------- growable concatenation (cat)
  // cat of small tensors of one dtype (and a row-major result): the result lives in a growable storage,
  // and inputs in growable storages enter with run-time geometry, so growing a tensor by a step
  // (generate's input_ids) reuses one program until the result outgrows its capacity. Anything else takes
  // the row's own path (which also raises the CPU's errors).
  bool grow_key(const torch::jit::Stack& stack, size_t base, std::vector<int64_t>& key, Call& call) {
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

  Entry* build_grow_entry(const torch::jit::Stack& stack, size_t base, Call& call, uint64_t hash) {
    auto entry = std::make_unique<Entry>();
    {
      Call scratch;
      grow_key(stack, base, entry->key, scratch);
    }
    auto list = stack[base].toTensorList();
    const at::Tensor first = list.get(0);
    const int64_t rank = first.dim();
    const int64_t dim = stack[base + 1].toInt() < 0 ? stack[base + 1].toInt() + rank : stack[base + 1].toInt();
    int64_t numel = 0;
    for (const at::Tensor& t : list) numel += t.numel();
    const int64_t capacity = growable_capacity(numel);
    const ElementType elem = element_type(first.scalar_type());

    hlo::Builder b;
    std::vector<pjrt::TensorSpec> in_specs;
    std::vector<hlo::Value> slot_values;
    std::vector<lowering::BaseForm> forms;
    storage_args(b, call.storages, *entry, in_specs, forms, slot_values);
    const ElementType s64 = ElementType::kS64;
    std::vector<lowering::GrowPart> parts;
    for (size_t i = 0; i < list.size(); ++i) {
      const at::Tensor t = list.get(i);
      int s = 0;
      while (call.slots[s] != t.storage().unsafeGetStorageImpl()) ++s;
      lowering::GrowPart p;
      const int item = static_cast<int>(i);
      if (reads_growable(t)) {
        p.flat = slot_values[s];
        p.offset = geometry_input(b, 0, item, 0, in_specs, *entry);
        for (int64_t d = 0; d < rank; ++d) {
          p.strides.push_back(geometry_input(b, 0, item, static_cast<int>(d) + 1, in_specs, *entry));
          p.sizes.push_back(geometry_input(b, 0, item, -1 - static_cast<int>(d), in_specs, *entry));
        }
      } else {
        lowering::ViewForm view = view_form(t);
        if (view.dynamic) view.offset_value = geometry_input(b, 0, item, 0, in_specs, *entry);
        hlo::Value v = lowering::read_view(b, slot_values[s], forms[s], view);
        p.flat = b.reshape(v, {t.numel()});
        p.offset = b.scalar_i(0, s64);
        int64_t stride = 1;
        p.strides.assign(rank, hlo::Value{});
        for (int64_t d = rank - 1; d >= 0; --d) {
          p.strides[d] = b.scalar_i(stride, s64);
          stride *= t.size(d);
        }
        for (int64_t d = 0; d < rank; ++d) p.sizes.push_back(b.scalar_i(t.size(d), s64));
      }
      parts.push_back(std::move(p));
    }
    hlo::Value out = row_->grow(b, parts, dim, capacity);
    b.ret({out});
    Sink sink{true, 0, {}, first.scalar_type()};
    sink.grown = true;
    entry->sinks.push_back(sink);
    entry->num_results = 1;
    entry->lowered = {b.module_text(name_for_module()), in_specs, {{elem, {capacity}}}, fields(stack, base, *entry)};
    metrics().cache_misses.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    auto& bucket = entries_[hash];
    bucket.push_back(std::move(entry));
    return bucket.back().get();
  }

  // The sizes of a growable concatenation's result.
  static std::vector<int64_t> grown_sizes(const torch::jit::Stack& s, size_t base) {
    auto list = s[base].toTensorList();
    std::vector<int64_t> sizes = list.get(0).sizes().vec();
    int64_t dim = s[base + 1].toInt();
    if (dim < 0) dim += static_cast<int64_t>(sizes.size());
    sizes[dim] = 0;
    for (const at::Tensor& t : list) sizes[dim] += t.size(dim);
    return sizes;
  }

  std::string name_for_module() const {
    std::string s;
    for (char c : row_->overloads.front()) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return s;
  }

  // ------------------------------------------------------------------------------------ hit: execute
  void execute(const Entry& entry, torch::jit::Stack* stack, size_t base, Call& call) {
    const torch::jit::Stack& s = *stack;
    // From reading the storages' bases to swapping in the results (threads, StorageLock).
    StorageLock lock;
    lock.reserve(call.storages.size());
    for (const auto& st : call.storages) lock.add(handle_of(st));
    lock.lock();
    // An input computed by a failed op: this op fails the same way, without running.
    std::shared_ptr<const DeferredError> failure;
    for (const auto& st : call.storages)
      if (!failure) failure = handle_of(st).error;
    std::vector<const pjrt::Buffer*> args;
    args.reserve(entry.sources.size());
    pjrt::BufferPtr keep_small[8];
    std::vector<pjrt::BufferPtr> keep_large;
    size_t kept = 0;
    auto keep = [&](pjrt::BufferPtr p) {
      const pjrt::Buffer* raw = p.get();
      if (kept < 8) keep_small[kept++] = std::move(p);
      else keep_large.push_back(std::move(p));
      return raw;
    };
    for (const Source& src : entry.sources) {
      if (failure) break;
      switch (src.what) {
        case Source::kStorage:
          args.push_back(handle_of(call.storages[src.index]).buffer.get());
          break;
        case Source::kScalarArg:
          args.push_back(keep(scalar_buffer(call.device, src.type, s[base + src.index].toScalar())));
          break;
        case Source::kScalarListItem:
          args.push_back(keep(scalar_buffer(call.device, src.type, s[base + src.index].toListRef()[src.item].toScalar())));
          break;
        case Source::kCpuTensor:
          args.push_back(keep(scalar_buffer(call.device, src.type, s[base + src.index].toTensor().item())));
          break;
        case Source::kCpuListItem: {
          const c10::IValue& l = s[base + src.index];
          at::Tensor t = l.isTensorList() ? l.toTensorList().get(src.item) : *l.toOptionalTensorList().get(src.item);
          args.push_back(keep(scalar_buffer(call.device, src.type, t.item())));
          break;
        }
        case Source::kRng:
          args.push_back(keep(rng_state_buffer(call.device, s, base)));
          break;
        case Source::kGeometry: {
          const c10::IValue& v = s[base + src.index];
          at::Tensor t = src.item < 0 ? v.toTensor()
                         : v.isTensorList() ? v.toTensorList().get(src.item)
                                            : *v.toOptionalTensorList().get(src.item);
          args.push_back(keep(scalar_buffer(call.device, ElementType::kS64, geometry_part(t, src.part))));
          break;
        }
      }
    }
    std::vector<pjrt::BufferPtr> outs;
    if (!failure) outs = run(*entry.exe, call.device, args, name_.c_str(), &failure);

    // Results: functional ops return new tensors; in-place and out= ops swap storage bases.
    std::vector<at::Tensor> results(entry.num_results);
    for (size_t o = 0; o < entry.sinks.size(); ++o) {
      const Sink& sink = entry.sinks[o];
      if (failure) {  // poisoned results: they exist, and report the failure when read
        if (sink.new_tensor) {
          results[sink.index] = poisoned_tensor(sink.grown ? grown_sizes(s, base) : sink.sizes, sink.dtype,
                                                call.device, failure);
          if (!sink.strides.empty())
            results[sink.index].unsafeGetTensorImpl()->set_sizes_and_strides(sink.sizes, sink.strides);
        } else {
          handle_of(call.storages[sink.index]).error = failure;
        }
      } else if (sink.grown) {
        results[sink.index] = wrap_growable(std::move(outs[o]), grown_sizes(s, base), sink.dtype);
      } else if (sink.new_tensor && !sink.strides.empty()) {
        std::vector<int64_t> memory_order = outs[o]->dims();
        results[sink.index] = wrap_buffer(std::move(outs[o]), memory_order, sink.dtype);
        results[sink.index].unsafeGetTensorImpl()->set_sizes_and_strides(sink.sizes, sink.strides);
      } else if (sink.new_tensor) {
        results[sink.index] = wrap_buffer(std::move(outs[o]), sink.sizes, sink.dtype);
      } else {
        StorageHandle& h = handle_of(call.storages[sink.index]);
        h.buffer = std::move(outs[o]);
        h.error.reset();
      }
    }
    push_returns(entry, stack, base, results);
  }

  // Replaces the call's arguments on the stack by its returns.
  void push_returns(const Entry& entry, torch::jit::Stack* stack, size_t base, std::vector<at::Tensor>& results) {
    torch::jit::Stack args_saved;
    if (is_inplace_ || is_out_) args_saved.assign(stack->begin() + base, stack->end());
    torch::jit::drop(*stack, schema_args_);
    size_t next = 0, next_int = 0;
    for (const Return& r : returns_) {
      if (r.is_int) {
        stack->push_back(entry.int_returns.at(next_int++));
      } else if (r.aliases_arg) {
        stack->push_back(args_saved[r.index]);
      } else if (r.is_list) {
        c10::List<at::Tensor> list;
        for (; next < results.size(); ++next) list.push_back(results[next]);
        stack->push_back(std::move(list));
      } else {
        stack->push_back(results[next++]);
      }
    }
  }

  pjrt::BufferPtr rng_state_buffer(int device, const torch::jit::Stack& s, size_t base) {
    // An explicit Generator argument wins over the device's default generator.
    std::optional<at::Generator> gen;
    for (size_t i = 0; i < schema_args_; ++i) {
      const c10::IValue& v = s[base + i];
      if (v.isGenerator()) gen = v.toGenerator();
    }
    return next_rng_state(device, gen);
  }

  const lowering::Row* row_;
  std::string name_;
  std::once_flag prepared_;
  size_t schema_args_ = 0, functional_args_ = 0, functional_returns_ = 0;
  size_t new_returns_ = 0;  // returns that are new tensors (not aliases of arguments)
  std::vector<Kind> kinds_;
  std::vector<std::string> names_;
  std::vector<bool> optional_;
  std::vector<bool> written_;
  std::vector<Return> returns_;
  bool is_inplace_ = false, is_out_ = false;
  std::optional<c10::OperatorHandle> functional_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<Entry>>> entries_;
};

}  // namespace

namespace {

struct Unregistered {
  std::unique_ptr<TableKernel> kernel;
  std::optional<c10::OperatorHandle> op;
};
std::map<std::string, Unregistered>& unregistered() {
  static std::map<std::string, Unregistered> m;
  return m;
}

std::optional<c10::OperatorHandle> find_op(const std::string& overload) {
  auto dot = overload.find('.');
  std::string name = overload.substr(0, dot);
  std::string ov = dot == std::string::npos ? "" : overload.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchema({"aten::" + name, ov});
}

}  // namespace

void register_table_kernels(torch::Library& m, const std::set<std::string>& custom) {
  for (const auto& row : lowering::table()) {
    for (const auto& overload : row.overloads) {
      auto op = find_op(overload);
      if (!op) continue;  // not in this torch version
      auto kernel = std::make_unique<TableKernel>(&row, "aten::" + overload);
      // A backend kernel for a CompositeImplicitAutograd op (square, outer, where.ScalarSelf, ...) would
      // also replace its decomposition under autograd, where it has no formula: its gradient would be
      // silently lost. Such rows serve graphs only (call_row, GraphBuilder); eager decomposes.
      if (custom.count(overload) || op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
        unregistered().emplace(overload, Unregistered{std::move(kernel), op});
        continue;
      }
      m.impl(overload.c_str(), torch::CppFunction::makeFromBoxedFunctor<TableKernel>(std::move(kernel)));
    }
  }
}

void call_row(const std::string& overload, torch::jit::Stack* stack) {
  auto it = unregistered().find(overload);
  TORCH_INTERNAL_ASSERT(it != unregistered().end(), "no table row for ", overload);
  (*it->second.kernel)(*it->second.op, c10::DispatchKeySet(), stack);
}

}  // namespace torch_pjrt
