#include "aten/graph.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>
#include <unordered_map>

#include "aten/aot.h"
#include "aten/compile_log.h"
#include "aten/errors.h"
#include "aten/execution.h"
#include "aten/generator.h"
#include "aten/profiler.h"
#include "aten/program.h"
#include "aten/row_args.h"
#include "aten/storage.h"
#include "lowering/table.h"

namespace torch_pjrt {
namespace {

const std::unordered_map<std::string, const lowering::Row*>& rows_by_overload() {
  static const auto* m = [] {
    auto* r = new std::unordered_map<std::string, const lowering::Row*>;
    for (const auto& row : lowering::table())
      for (const auto& o : row.overloads) r->emplace(o, &row);
    return r;
  }();
  return *m;
}

pjrt::TensorSpec spec_of(const OutSpec& o) {
  if (!o.defined) return {pjrt::ElementType::kInvalid, {}};
  return {element_type(o.dtype), o.sizes};
}

hlo::Value scalar_constant(hlo::Builder& b, pjrt::ElementType type, const c10::Scalar& v) {
  switch (type) {
    case pjrt::ElementType::kS64: return b.scalar_i(v.toLong(), type);
    case pjrt::ElementType::kPred: return b.scalar_i(v.toBool() ? 1 : 0, type);
    case pjrt::ElementType::kF64: return b.scalar(v.toDouble(), type);
    default: throw hlo::Error("complex Python numbers in a compiled graph are not supported");
  }
}

// `view` with its dims taken in `order`.
lowering::ViewForm permuted(const lowering::ViewForm& view, const hlo::Dims& order) {
  lowering::ViewForm p = view;
  for (size_t k = 0; k < order.size(); ++k) {
    p.sizes[k] = view.sizes[order[k]];
    p.strides[k] = view.strides[order[k]];
  }
  return p;
}

// The storage order of a dense tensor laid out in another order than row-major (a transpose); empty for a
// row-major view or one with gaps, overlaps or an offset.
hlo::Dims dense_order(const lowering::ViewForm& view) {
  if (view.offset != 0 || view.contiguous()) return {};
  hlo::Dims order = view.storage_order();
  return permuted(view, order).contiguous() ? order : hlo::Dims{};
}

// A buffer of no elements of `spec` on `device`, made once (an empty input, which has no storage buffer,
// costs no program per run; a donor gets a copy, as the cache holds it too).
pjrt::BufferPtr empty_input(int device, const pjrt::TensorSpec& spec) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<std::string, pjrt::BufferPtr>;  // never freed: outlives the client
  std::string key = std::to_string(device) + ":" + spec.str();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  pjrt::BufferPtr b = run_program("empty_graph_input", device, {}, [&](hlo::Builder& bb, const std::vector<hlo::Value>&) {
    return std::vector<hlo::Value>{bb.constant(0, hlo::Type{spec.type, spec.dims})};
  })[0];
  b->untrack();
  std::lock_guard<std::mutex> lock(mu);
  return cache->emplace(key, b).first->second;
}

// The input as a dense buffer of exactly `spec` (its storage's base when that already is one, or is one
// reshaped where buffers are linear and the input is not donated); with an `order`, of the tensor's dims
// taken in that order (its storage order: GraphBuilder::input).
pjrt::BufferPtr dense_input(const at::Tensor& t, const pjrt::TensorSpec& spec, const hlo::Dims& order, bool donor) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "torch.compile(backend=\"tpu\"): graph input on ",
              t.device(), " where a tpu tensor was expected");
  const StorageHandle& h = handle_of(t);
  {
    // the usual input, a whole dense storage as traced (a parameter, a cache): its buffer as it is, read
    // without building its forms (the general path below takes the same decision for it)
    StorageLock lock(h);
    const pjrt::BufferPtr& b = h.buffer;
    if (b && !h.pending && !h.error && order.empty() && t.storage_offset() == 0 && !t.is_conj() && !t.is_neg() &&
        b->type() == spec.type && element_type(t.scalar_type()) == spec.type && b->dims() == spec.dims &&
        t.sizes() == at::IntArrayRef(spec.dims) && t.is_contiguous())
      return b;
  }
  raise_if_poisoned(h);
  pjrt::BufferPtr buffer;
  lowering::BaseForm form;
  {
    StorageLock lock(h);  // the buffer and its form read together
    buffer = h.buffer;
    form = base_form(t.storage());
  }
  lowering::ViewForm view = order.empty() ? view_form(t) : permuted(view_form(t), order);
  // the base itself, or (where layouts are linear) the base as a reshape: the same bytes in the same order
  if (buffer && form.elem == view.elem && view.elem == spec.type && view.offset == 0 && view.contiguous() &&
      !view.conj && !view.neg &&
      (buffer->dims() == spec.dims ||
       (!donor && view.numel() == buffer->numel() && session_or_throw().client().linear_layouts()))) {
    return buffer;
  }
  if (view.numel() == 0) return empty_input(h.device, spec);
  return materialize("materialize_graph_input", h.device, buffer, form, view);
}

// A private copy of `buffer` (an input to donate that something else still holds).
pjrt::BufferPtr copy_buffer(const pjrt::Buffer& buffer, int device) {
  metrics().donation_copies.fetch_add(1, std::memory_order_relaxed);
  return run_program("copy_graph_input", device, {&buffer},
                     [](hlo::Builder& b, const std::vector<hlo::Value>& a) {
                       return std::vector<hlo::Value>{a[0]};  // XLA copies a returned argument
                     })[0];
}

}  // namespace

const hlo::Value& GraphBuilder::value(int id) const {
  TORCH_CHECK(id >= 0 && id < static_cast<int>(values_.size()) && values_[id].valid(), "graph value ", id,
              " is undefined");
  return values_[id];
}

int GraphBuilder::input(at::ScalarType dtype, const std::vector<int64_t>& sizes, bool donor,
                        const std::vector<int64_t>& strides) {
  pjrt::TensorSpec spec{element_type(dtype), sizes};
  hlo::Dims order;
  if (!donor && strides.size() == sizes.size())  // a donor is written back whole: it stays row-major
    order = dense_order(lowering::ViewForm{spec.type, sizes, strides});
  if (order.empty()) {
    inputs_.push_back({false, static_cast<int>(num_tensor_inputs_++), spec, donor});
    return add(b_.arg(hlo::Type{spec.type, spec.dims}, donor ? "jax.buffer_donor = true" : ""));
  }
  for (size_t k = 0; k < order.size(); ++k) spec.dims[k] = sizes[order[k]];
  inputs_.push_back({false, static_cast<int>(num_tensor_inputs_++), spec, false, -1, order});
  hlo::Dims inverse(order.size());
  for (size_t k = 0; k < order.size(); ++k) inverse[order[k]] = static_cast<int64_t>(k);
  int id = add(b_.transpose(b_.arg(hlo::Type{spec.type, spec.dims}), inverse));
  layouts_.resize(values_.size());
  layouts_[id] = order;  // as a view read of that storage order would be (rows' layout hint)
  return id;
}

bool GraphBuilder::has_row(const std::string& overload) { return rows_by_overload().count(overload) > 0; }

std::vector<int> GraphBuilder::apply(const std::string& overload, const torch::jit::Stack& args,
                                     const std::vector<int>& tensor_ids, const std::vector<OutSpec>& outs) {
  auto it = rows_by_overload().find(overload);
  TORCH_CHECK(it != rows_by_overload().end(), "no lowering row for aten::", overload);
  const lowering::Row& row = *it->second;
  auto dot = overload.find('.');
  const auto& schema = c10::Dispatcher::singleton()
                           .findSchemaOrThrow(("aten::" + overload.substr(0, dot)).c_str(),
                                              dot == std::string::npos ? "" : overload.substr(dot + 1).c_str())
                           .schema();
  TORCH_CHECK(args.size() <= schema.arguments().size(), "aten::", overload, ": ", args.size(), " arguments for ",
              schema.arguments().size());
  size_t next_tensor = 0;
  ArgSources sources;
  sources.tensor = [&](const at::Tensor& t, int, int) {
    lowering::Arg a;
    a.kind = lowering::Arg::kTensor;
    if (t.device().is_cpu()) {  // a Python number where the schema takes a Tensor (add.Tensor(x, 1))
      if (runtime_scalars) {
        a.value = scalar_input(element_type(t.scalar_type()));
        a.weak = t.unsafeGetTensorImpl()->is_wrapped_number();
        return a;
      }
      a.value = b_.convert(scalar_constant(b_, static_cast<pjrt::ElementType>(scalar_kind(t.item())), t.item()),
                           element_type(t.scalar_type()));
      a.weak = t.unsafeGetTensorImpl()->is_wrapped_number();
      return a;
    }
    TORCH_CHECK(next_tensor < tensor_ids.size(), "aten::", overload, ": more tensor arguments than value ids");
    int id = tensor_ids[next_tensor++];
    a.value = value(id);
    if (id >= 0 && static_cast<size_t>(id) < layouts_.size()) a.layout = layouts_[id];  // as eager's hint
    return a;
  };
  sources.scalar = [&](pjrt::ElementType type, const c10::Scalar& v, int, int) {
    return runtime_scalars ? scalar_input(type) : scalar_constant(b_, type, v);
  };
  std::vector<pjrt::TensorSpec> specs;
  for (const auto& o : outs) specs.push_back(spec_of(o));
  lowering::Ctx ctx{b_, {}, specs, {}, {}};
  for (size_t i = 0; i < args.size(); ++i)
    ctx.args.push_back(row_arg(args[i], kind_of(schema.arguments()[i].real_type()), row.flags, static_cast<int>(i),
                               sources));
  TORCH_CHECK(next_tensor == tensor_ids.size(), "aten::", overload, ": ", tensor_ids.size(), " value ids for ",
              next_tensor, " tensor arguments");
  auto add_rng_state = [&] {  // rows that draw only in some cases (attention dropout) ask lazily
    hlo::Value state = b_.arg(hlo::Type{pjrt::ElementType::kU64, {2}});
    inputs_.push_back({true, -1, {pjrt::ElementType::kU64, {2}}});
    return state;
  };
  if (row.flags & lowering::kRandom) ctx.rng_state = rng_id >= 0 ? value(rng_id) : add_rng_state();
  ctx.lazy_rng_state = [&]() -> hlo::Value { return rng_id >= 0 ? value(rng_id) : add_rng_state(); };
  const size_t first_check = b_.checks().size();
  std::vector<hlo::Value> results = lowering::lower_row(row, ctx);
  note_checks(b_, first_check, "aten::" + overload, checks_);
  convert_results(b_, results, specs, "aten::" + overload);
  std::vector<int> ids;
  for (size_t r = 0; r < results.size(); ++r) ids.push_back(outs[r].defined ? add(results[r]) : -1);
  return ids;
}

lowering::ViewForm GraphBuilder::view_form(pjrt::ElementType elem, const std::vector<int64_t>& sizes,
                                           const std::vector<int64_t>& strides, int64_t offset, int offset_id) const {
  lowering::ViewForm view{elem, sizes, strides, offset};
  if (offset_id >= 0) {
    const hlo::Value& o = value(offset_id);
    TORCH_CHECK(o.elem() == pjrt::ElementType::kS64 && o.dims().empty(), name_, ": a view's run-time offset is an s64 scalar");
    view.dynamic = true;
    view.offset_value = o;
  }
  return view;
}

int GraphBuilder::view(int id, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int64_t offset,
                       at::ScalarType dtype, int offset_id) {
  const hlo::Value& v = value(id);
  lowering::BaseForm form{true, v.elem(), v.dims(),
                          v.type.numel() * static_cast<int64_t>(pjrt::byte_size(v.elem()))};
  lowering::ViewForm view = view_form(element_type(dtype), sizes, strides, offset, offset_id);
  int result = add(lowering::read_view(b_, v, form, view));
  hlo::Dims order = dense_order(view);
  if (!order.empty()) {
    layouts_.resize(values_.size());
    layouts_[result] = order;  // a transpose of a dense value (a weight's .t()): rows' layout hint, as in eager
  }
  return result;
}

int GraphBuilder::scatter_view(int base, int src, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides, int64_t offset, int offset_id) {
  hlo::Value v = value(base);
  lowering::BaseForm form{true, v.elem(), v.dims(),
                          v.type.numel() * static_cast<int64_t>(pjrt::byte_size(v.elem()))};
  lowering::ViewForm view = view_form(v.elem(), sizes, strides, offset, offset_id);
  lowering::BaseForm new_form;
  hlo::Value out = lowering::write_view(b_, v, form, view, b_.convert(value(src), v.elem()), &new_form);
  if (out.dims() != v.dims()) out = b_.reshape(out, v.dims());
  return add(out);
}

hlo::Value GraphBuilder::scalar_input(pjrt::ElementType type) {
  GraphProgram::Input in{false, -1, {type, {}}};
  in.scalar = num_scalar_inputs_++;
  inputs_.push_back(in);
  return b_.arg(hlo::Type{type, {}});
}

lowering::ViewForm GraphBuilder::with_offset_input(const lowering::ViewForm& view) {
  if (!view.dynamic) return view;
  TORCH_CHECK(runtime_scalars, name_, ": a view with a run-time offset needs run-time scalar inputs");
  lowering::ViewForm v = view;
  v.offset_value = scalar_input(pjrt::ElementType::kS64);
  return v;
}

int GraphBuilder::read(int base, const lowering::BaseForm& form, const lowering::ViewForm& view) {
  int id = add(lowering::read_view(b_, base < 0 ? hlo::Value{} : value(base), form, with_offset_input(view)));
  layouts_.resize(values_.size());
  layouts_[id] = view.storage_order();
  return id;
}

int GraphBuilder::write(int base, const lowering::BaseForm& form, const lowering::ViewForm& view, int src,
                        lowering::BaseForm* new_form) {
  hlo::Value update = b_.convert(value(src), view.elem);
  return add(lowering::write_view(b_, base < 0 ? hlo::Value{} : value(base), form, with_offset_input(view), update,
                                  new_form));
}

int GraphBuilder::transpose(int id, const std::vector<int64_t>& perm) {
  return add(b_.transpose(value(id), hlo::Dims(perm.begin(), perm.end())));
}

std::vector<int> GraphBuilder::call(const std::string& functions, const std::string& callee,
                                    const std::vector<int>& ids, const std::vector<OutSpec>& outs,
                                    const std::map<std::string, std::string>& by_plugin) {
  std::vector<hlo::Value> operands;
  for (int id : ids) operands.push_back(value(id));
  std::vector<hlo::Type> types;
  for (const auto& o : outs) {
    TORCH_CHECK(o.defined, callee, ": every result of a called function has a type");
    types.push_back(hlo::Type{element_type(o.dtype), o.sizes});
  }
  b_.add_functions(functions, by_plugin);
  std::vector<int> out;
  for (const hlo::Value& v : b_.call(callee, operands, types)) out.push_back(add(v));
  return out;
}

int GraphBuilder::full(at::ScalarType dtype, const std::vector<int64_t>& sizes, const c10::Scalar& v) {
  hlo::Type type{element_type(dtype), sizes};
  if (v.isIntegral(true) && !at::isFloatingType(dtype) && !at::isComplexType(dtype))
    return add(b_.constant_i(v.isBoolean() ? v.toBool() : v.toLong(), type));
  return add(b_.constant(v.toDouble(), type));
}

int GraphBuilder::cast(int id, const OutSpec& spec) {
  hlo::Value v = b_.convert(value(id), element_type(spec.dtype));
  if (v.dims() != spec.sizes) v = b_.broadcast_to(v, spec.sizes);
  return add(v);
}

std::shared_ptr<GraphProgram> GraphBuilder::compile(const std::vector<int>& ids, pjrt::Served* served) {
  auto p = std::make_shared<GraphProgram>();
  p->name_ = name_;
  p->label_ = intern_label(name_);
  std::vector<hlo::Value> results;
  std::vector<pjrt::TensorSpec> in_specs, out_specs;
  for (int id : ids) {
    const hlo::Value& v = value(id);
    results.push_back(v);
    out_specs.push_back({v.elem(), v.dims()});
    p->outputs_.push_back({true, scalar_type(v.elem()), v.dims()});
  }
  for (const auto& in : inputs_) in_specs.push_back(in.spec);
  if (!checks_.empty()) {  // device-side checks: their codes are the last output (aten/device_checks.h)
    results.push_back(check_codes(b_));
    out_specs.push_back({pjrt::ElementType::kS64, results.back().dims()});
    p->checks_ = std::make_shared<std::vector<CheckInfo>>(checks_);
  }
  b_.ret(results);
  p->inputs_ = inputs_;
  p->num_tensor_inputs_ = num_tensor_inputs_;
  pjrt::Served local;
  ProfileSpan span("tpu.compile", name_);
  const std::string module = b_.module_text(name_);
  p->exe_ = session_or_throw().programs().get(module, in_specs, out_specs, served ? served : &local);
  if (aot_active()) {
    std::string shapes;
    for (size_t i = 0; i < in_specs.size(); ++i) shapes += (i ? ", " : "") + in_specs[i].str();
    aot_submit(name_ + "(" + shapes + ")", module, aot_text(b_, name_), p->exe_, &b_, name_);
  }
  if (!served) {  // a torch.compile graph: its key parts are its inputs
    KeyFields fields;
    std::string sig;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const auto& in = inputs_[i];
      std::string text = in.rng ? "generator state" : in.spec.str();
      fields.push_back({"input " + std::to_string(i), text, "input"});
      sig += (i ? ", " : "") + text;
    }
    note_program(name_, sig, std::move(fields), local);
  }
  return p;
}

void GraphProgram::set_label(const std::string& label) { label_ = intern_label(label); }

std::vector<pjrt::BufferPtr> GraphProgram::launch(int device, std::vector<pjrt::BufferPtr> args,
                                                  std::shared_ptr<const DeferredError>* failure) const {
  std::vector<char> donated(inputs_.size(), 0);
  for (size_t i = 0; i < inputs_.size(); ++i) donated[i] = inputs_[i].donor;
  std::vector<pjrt::BufferPtr> outs = run_dispatched(exe_, device, std::move(args), std::move(donated), label_, failure);
  if (checks_ && !outs.empty()) {  // read at the next sync point (run_writing's end under launch blocking)
    watch_checks(device, std::move(outs.back()), checks_, false);
    outs.pop_back();
  }
  return outs;
}

std::vector<at::Tensor> GraphProgram::run(const std::vector<at::Tensor>& inputs) const {
  return run_writing(inputs, {}).first;
}

std::pair<std::vector<at::Tensor>, GraphProgram::Writes> GraphProgram::run_writing(const std::vector<at::Tensor>& inputs,
                                                                                   const Writes& writes) const {
  TORCH_CHECK(inputs.size() == num_tensor_inputs_, name_, ": ", inputs.size(), " inputs, expected ",
              num_tensor_inputs_);
  int device = -1;
  for (const auto& t : inputs)
    if (device < 0 && t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) device = t.device().index();
  if (device < 0) device = current_device();
  // Every input storage, read through execution to the swaps: no other thread's op swaps an input's
  // base in between (one lock, in address order, as eager ops take theirs).
  StorageLock lock;
  if (!writes.empty()) {
    lock.reserve(inputs.size());
    for (const auto& t : inputs)
      if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 && t.has_storage()) lock.add(handle_of(t));
    lock.lock();
  }
  std::vector<char> written(inputs.size(), 0);
  for (const auto& w : writes)
    if (w.first >= 0 && w.first < static_cast<int64_t>(inputs.size())) written[w.first] = 1;
  std::vector<pjrt::BufferPtr> keep;
  keep.reserve(inputs_.size());
  for (const auto& in : inputs_) {
    TORCH_CHECK(in.scalar < 0, name_, ": run-time scalar inputs need run_buffers");
    keep.push_back(in.rng ? next_rng_state(device, std::nullopt)
                         : dense_input(inputs[in.index], in.spec, in.order, in.donor));
    // A donated buffer is gone after the run: donate the storage's base only when the storage alone
    // holds it and is written below (under the lock taken above), a fresh buffer as it is, else a copy.
    if (in.donor) {
      const pjrt::BufferPtr& b = keep.back();
      bool base = b == handle_of(inputs[in.index]).buffer;
      if (base ? !(written[in.index] && pjrt::Buffer::holders(b) == 2) : pjrt::Buffer::holders(b) != 1)
        keep.back() = copy_buffer(*b, device);
    }
  }
  std::shared_ptr<const DeferredError> failure;
  std::vector<pjrt::BufferPtr> outs = launch(device, std::move(keep), &failure);
  std::vector<char> swapped(outputs_.size(), 0);
  Writes unswapped;
  if (!failure) {
    for (const auto& [p, o] : writes) {
      TORCH_CHECK(p >= 0 && p < static_cast<int64_t>(inputs.size()) && o >= 0 &&
                      o < static_cast<int64_t>(outputs_.size()) && !swapped[o],
                  name_, ": bad write (", p, ", ", o, ")");
      const OutSpec& s = outputs_[o];
      const at::Tensor& dst = inputs[p];
      if (dst.device().type() == c10::DeviceType::PrivateUse1 && dst.device().index() == device &&
          dst.scalar_type() == s.dtype && dst.sizes() == at::IntArrayRef(s.sizes) && swap_base(dst, outs[o])) {
        swapped[o] = 1;
      } else {
        unswapped.emplace_back(p, o);
      }
    }
  } else {
    unswapped = writes;
  }
  std::vector<at::Tensor> results;
  results.reserve(outputs_.size());
  for (size_t o = 0; o < outputs_.size(); ++o) {
    const OutSpec& s = outputs_[o];
    if (swapped[o])
      results.emplace_back();
    else
      results.push_back(failure ? poisoned_tensor(s.sizes, s.dtype, device, failure)
                                : wrap_buffer(std::move(outs[o]), s.sizes, s.dtype));
  }
  if (checks_ && launch_blocking()) raise_failed_checks(device);  // debug mode: at the graph's call
  return {std::move(results), std::move(unswapped)};
}

std::vector<pjrt::BufferPtr> GraphProgram::run_buffers(int device, std::vector<pjrt::BufferPtr> tensors,
                                                      const Scalars& scalars,
                                                      std::shared_ptr<const DeferredError>* failure) const {
  TORCH_CHECK(tensors.size() == num_tensor_inputs_, name_, ": ", tensors.size(), " inputs, expected ",
              num_tensor_inputs_);
  std::vector<pjrt::BufferPtr> keep;
  keep.reserve(inputs_.size());
  for (const auto& in : inputs_) {
    if (in.rng) {
      keep.push_back(next_rng_state(device, std::nullopt));
    } else if (in.scalar >= 0) {
      TORCH_CHECK(in.scalar < static_cast<int>(scalars.size()) && scalars[in.scalar].first == in.spec.type, name_,
                  ": run-time scalar ", in.scalar, " missing or of another type");
      keep.push_back(scalar_buffer(device, in.spec.type, scalars[in.scalar].second));
    } else {
      keep.push_back(std::move(tensors[in.index]));
      if (in.donor && pjrt::Buffer::holders(keep.back()) != 1) keep.back() = copy_buffer(*keep.back(), device);
    }
  }
  return launch(device, std::move(keep), failure);
}

bool swap_base(const at::Tensor& dst, pjrt::BufferPtr buffer) {
  if (dst.is_conj() || dst.is_neg() || !covers_storage(dst)) return false;
  StorageHandle& h = handle_of(dst);
  StorageLock lock(h);
  h.buffer = std::move(buffer);
  h.error = nullptr;
  if (!dst.is_inference()) dst.unsafeGetTensorImpl()->bump_version();
  return true;
}

}  // namespace torch_pjrt
