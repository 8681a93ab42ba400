#include "aten/program.h"

#include "aten/aot.h"
#include "aten/compile_log.h"
#include "aten/errors.h"
#include "aten/execution.h"

namespace torch_pjrt {

std::vector<pjrt::BufferPtr> run_program(
    const char* name, int device, const std::vector<const pjrt::Buffer*>& inputs,
    const std::function<std::vector<hlo::Value>(hlo::Builder&, const std::vector<hlo::Value>&)>& body) {
  auto& s = session_or_throw();
  hlo::Builder b;
  std::vector<hlo::Value> args;
  std::vector<pjrt::TensorSpec> in_specs, out_specs;
  for (const auto* in : inputs) {
    args.push_back(b.arg(hlo::Type{in->type(), in->dims()}));
    in_specs.push_back({in->type(), in->dims()});
  }
  auto results = body(b, args);
  for (const auto& r : results) out_specs.push_back({r.elem(), r.dims()});
  b.ret(results);
  return guarded(name, [&] {
    pjrt::Served served;
    const std::string module = b.module_text();
    auto exe = s.programs().get(module, in_specs, out_specs, &served);
    if (served.from != pjrt::Served::kMemory) {
      KeyFields fields;
      std::string sig;
      for (size_t i = 0; i < in_specs.size(); ++i) {
        fields.push_back({"input " + std::to_string(i), in_specs[i].str(), "input"});
        sig += (i ? ", " : "") + in_specs[i].str();
      }
      aot_submit(std::string(name) + "(" + sig + ")", module, aot_text(b, "op"), exe);
      note_program(name, sig, std::move(fields), served);
    }
    auto outs = exe->execute(device, inputs, name);
    metrics().executions.fetch_add(1, std::memory_order_relaxed);
    return outs;
  });
}

pjrt::BufferPtr dense_buffer(const at::Tensor& t) {
  const StorageHandle& h = handle_of(t);
  raise_if_poisoned(h);
  pjrt::BufferPtr buffer;
  lowering::BaseForm form;
  {
    StorageLock lock(h);  // the buffer and its form read together
    buffer = h.buffer;
    form = base_form(t.storage());
  }
  if (!buffer) return nullptr;
  lowering::ViewForm view = view_form(t);
  if (form.elem == view.elem && view.offset == 0 && view.contiguous() && view.numel() == buffer->numel() &&
      !view.conj && !view.neg) {
    return buffer;  // same bytes in the same order; dims do not matter to a download
  }
  return materialize("materialize_view", h.device, buffer, form, view);
}

pjrt::BufferPtr materialize(const char* name, int device, const pjrt::BufferPtr& buffer,
                            const lowering::BaseForm& form, const lowering::ViewForm& view) {
  std::vector<const pjrt::Buffer*> in;
  if (buffer) in.push_back(buffer.get());
  pjrt::BufferPtr offset;
  if (view.dynamic) {
    offset = scalar_buffer(device, pjrt::ElementType::kS64, c10::Scalar(view.offset));
    in.push_back(offset.get());
  }
  return run_program(name, device, in, [&](hlo::Builder& b, const std::vector<hlo::Value>& a) {
    lowering::ViewForm v = view;
    if (v.dynamic) v.offset_value = a.back();
    return std::vector<hlo::Value>{lowering::read_view(b, buffer ? a[0] : hlo::Value{}, form, v)};
  })[0];
}

pjrt::BufferPtr resized_base(const StorageHandle& h, const lowering::BaseForm& form, size_t nbytes) {
  size_t width = pjrt::byte_size(form.elem);
  pjrt::ElementType elem = nbytes % width == 0 && form.nbytes % width == 0 ? form.elem : pjrt::ElementType::kU8;
  int64_t w = static_cast<int64_t>(pjrt::byte_size(elem));
  int64_t old_n = form.nbytes / w, new_n = static_cast<int64_t>(nbytes) / w;
  return run_program("resize_storage", h.device, {h.buffer.get()},
                     [&](hlo::Builder& b, const std::vector<hlo::Value>& a) {
                       lowering::ViewForm flat{elem, {old_n}, {1}, 0};
                       hlo::Value v = lowering::read_view(b, a[0], form, flat);
                       if (new_n <= old_n) {
                         v = b.slice(v, {0}, {new_n}, {1});
                       } else {
                         v = b.pad(v, b.constant(0, hlo::Type{elem, {}}), {0}, {new_n - old_n}, {0});
                       }
                       return std::vector<hlo::Value>{v};
                     })[0];
}

}  // namespace torch_pjrt
