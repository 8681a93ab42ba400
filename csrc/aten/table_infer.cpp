// TableKernel on a miss (table_kernel_class.h): shape inference and argument checks run the op on meta tensors
// (bad input raises what the CPU raises, before any device work), then the row lowers the call to StableHLO,
// views read from and written back to their storages' bases inside the program. The entry keeps the program's
// text; it is compiled at its first launch (table_launch.cpp), so a call fused eager records is never compiled
// by itself.
#include "aten/aot.h"
#include "aten/table_kernel_class.h"

namespace torch_pjrt {
namespace table_kernel {

Entry* TableKernel::build_entry(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t base, Call& call, uint64_t hash,
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
KeyFields TableKernel::fields(const torch::jit::Stack& stack, size_t base, Entry& entry) {
  return call_fields(stack, base, names_, kinds_, row_->flags & lowering::kBakeScalars,
                     row_->flags & lowering::kRuntimeFloats, &entry.signature);
}

// The functional overload's results on meta tensors (their sizes and layout).
std::vector<at::Tensor> TableKernel::functional_meta_results(const torch::jit::Stack& stack, size_t base) {
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

void TableKernel::build_program(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base, Call& call,
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
  std::vector<hlo::Value> results = lowering::lower_row(*row_, ctx);
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
  if (!b.checks().empty()) {  // device-side checks: their codes are the last output (aten/device_checks.h)
    auto infos = std::make_shared<std::vector<CheckInfo>>();
    note_checks(b, 0, name_, *infos);
    program_outputs.push_back(check_codes(b));
    out_specs.push_back({ElementType::kS64, program_outputs.back().dims()});
    entry.checks = std::move(infos);
  }
  b.ret(program_outputs);
  entry.lowered.module = b.module_text(name_for_module());
  entry.lowered.targets_module = aot_text(b, name_for_module());
  entry.lowered.in_specs = std::move(in_specs);
  entry.lowered.out_specs = std::move(out_specs);
}

Entry* TableKernel::build_grow_entry(const torch::jit::Stack& stack, size_t base, Call& call, uint64_t hash) {
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

std::string TableKernel::name_for_module() const {
  std::string s;
  for (char c : row_->overloads.front()) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

}  // namespace table_kernel

}  // namespace torch_pjrt
