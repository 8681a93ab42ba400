#include "aten/program_args.h"

#include "aten/storage.h"

namespace torch_pjrt {

using pjrt::ElementType;

void storage_args(hlo::Builder& b, c10::ArrayRef<c10::Storage> storages, Entry& entry,
                  std::vector<pjrt::TensorSpec>& in_specs, std::vector<lowering::BaseForm>& forms,
                  std::vector<hlo::Value>& slot_values) {
  for (size_t s = 0; s < storages.size(); ++s) {
    const StorageHandle& h = handle_of(storages[s]);  // fused eager: a pending value's form
    std::optional<lowering::BaseForm> p = pending_form(h);
    lowering::BaseForm f = p ? std::move(*p) : base_form(storages[s]);
    forms.push_back(f);
    slot_values.push_back(f.present ? b.arg(hlo::Type{f.elem, f.dims}) : hlo::Value{});
    if (!f.present) continue;
    in_specs.push_back({f.elem, f.dims});
    entry.sources.push_back({Source::kStorage, static_cast<int>(s), 0, f.elem});
  }
}

hlo::Value geometry_input(hlo::Builder& b, int index, int item, int part, std::vector<pjrt::TensorSpec>& in_specs,
                          Entry& entry) {
  hlo::Value v = b.arg(hlo::Type{ElementType::kS64, {}});
  in_specs.push_back({ElementType::kS64, {}});
  Source src{Source::kGeometry, index, item, ElementType::kS64};
  src.part = part;
  entry.sources.push_back(src);
  return v;
}

hlo::Value read_dynamic(hlo::Builder& b, const hlo::Value& flat, const at::Tensor& t, int index, int item,
                        std::vector<pjrt::TensorSpec>& in_specs, Entry& entry) {
  hlo::Value offset = geometry_input(b, index, item, 0, in_specs, entry);
  std::vector<hlo::Value> strides(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) != 1) strides[d] = geometry_input(b, index, item, static_cast<int>(d) + 1, in_specs, entry);
  return lowering::read_view_dynamic(b, flat, hlo::Dims(t.sizes().begin(), t.sizes().end()), offset, strides);
}

}  // namespace torch_pjrt
