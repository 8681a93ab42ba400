// TableKernel's argument gathering (table_kernel_class.h): a launch's program arguments in the entry's order of
// sources: storage bases, run-time scalars (from a small cache of scalar buffers), geometry, generator states.
#include "aten/table_kernel_class.h"

namespace torch_pjrt {
namespace table_kernel {

// The program's arguments, in the entry's order of sources: storage bases, run-time scalars, geometry.
void TableKernel::gather_args(const Entry& entry, const torch::jit::Stack& s, size_t base, const Call& call, LaunchArgs& a) {
  a.args.reserve(entry.sources.size());
  for (const Source& src : entry.sources) {
    switch (src.what) {
      case Source::kStorage:
        a.args.push_back(handle_of(call.storages[src.index]).buffer.get());
        break;
      case Source::kScalarArg:
        a.args.push_back(a.keep(scalar_buffer(call.device, src.type, s[base + src.index].toScalar())));
        break;
      case Source::kScalarListItem:
        a.args.push_back(a.keep(scalar_buffer(call.device, src.type, s[base + src.index].toListRef()[src.item].toScalar())));
        break;
      case Source::kCpuTensor:
        a.args.push_back(a.keep(scalar_buffer(call.device, src.type, s[base + src.index].toTensor().item())));
        break;
      case Source::kCpuListItem: {
        const c10::IValue& l = s[base + src.index];
        at::Tensor t = l.isTensorList() ? l.toTensorList().get(src.item) : *l.toOptionalTensorList().get(src.item);
        a.args.push_back(a.keep(scalar_buffer(call.device, src.type, t.item())));
        break;
      }
      case Source::kRng:
        a.args.push_back(a.keep(rng_state_buffer(call.device, s, base)));
        break;
      case Source::kGeometry: {
        const c10::IValue& v = s[base + src.index];
        at::Tensor t = src.item < 0 ? v.toTensor()
                       : v.isTensorList() ? v.toTensorList().get(src.item)
                                          : *v.toOptionalTensorList().get(src.item);
        a.args.push_back(a.keep(scalar_buffer(call.device, ElementType::kS64, geometry_part(t, src.part))));
        break;
      }
    }
  }
}

pjrt::BufferPtr TableKernel::rng_state_buffer(int device, const torch::jit::Stack& s, size_t base) {
  // An explicit Generator argument wins over the device's default generator.
  std::optional<at::Generator> gen;
  for (size_t i = 0; i < schema_args_; ++i) {
    const c10::IValue& v = s[base + i];
    if (v.isGenerator()) gen = v.toGenerator();
  }
  return next_rng_state(device, gen);
}

}  // namespace table_kernel

}  // namespace torch_pjrt
