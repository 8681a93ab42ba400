// TableKernel's results (table_kernel_class.h): the program's outputs become new tensors (in the CPU's layout)
// or storages' new bases (in-place, out=), or poisoned tensors after a failure; the returns replace the call's
// arguments on the stack.
#include "aten/table_kernel_class.h"

namespace torch_pjrt {
namespace table_kernel {

// The program's results become new tensors (functional) or storages' new bases (in-place, out=); after a
// failure, poisoned tensors and storages that report it when read.
void TableKernel::sink_results(const Entry& entry, const torch::jit::Stack& s, size_t base, const Call& call,
                  std::vector<pjrt::BufferPtr>& outs, const std::shared_ptr<const DeferredError>& failure,
                  std::vector<at::Tensor>& results) {
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
}

// Replaces the call's arguments on the stack by its returns.
void TableKernel::push_returns(const Entry& entry, torch::jit::Stack* stack, size_t base, std::vector<at::Tensor>& results) {
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

// The sizes of a growable concatenation's result.
std::vector<int64_t> TableKernel::grown_sizes(const torch::jit::Stack& s, size_t base) {
  auto list = s[base].toTensorList();
  std::vector<int64_t> sizes = list.get(0).sizes().vec();
  int64_t dim = s[base + 1].toInt();
  if (dim < 0) dim += static_cast<int64_t>(sizes.size());
  sizes[dim] = 0;
  for (const at::Tensor& t : list) sizes[dim] += t.size(dim);
  return sizes;
}

}  // namespace table_kernel

}  // namespace torch_pjrt
