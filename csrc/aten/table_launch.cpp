// TableKernel's launch (table_kernel_class.h): an entry's program is compiled at its first launch, then each
// call locks its storages, gathers its arguments, runs, and sinks its results.
#include "aten/aot.h"
#include "aten/profiler.h"
#include "aten/table_kernel_class.h"

namespace torch_pjrt {
namespace table_kernel {

// Compiles a lowered entry, once (threads may launch it together); false when the plugin cannot compile
// it, and the entry now falls back to the CPU, as a failed compile on a miss always did.
bool TableKernel::compile_entry(Entry& entry) {
  std::call_once(entry.compile_once, [&] {
    Lowered& l = entry.lowered;
    ProfileSpan span("tpu.compile", name_ + "(" + entry.signature + ")");
    pjrt::Served served;
    try {
      entry.exe = session_or_throw().programs().get(l.module, l.in_specs, l.out_specs, &served);
    } catch (const pjrt::Error& e) {
      entry.fallback_reason = std::string("compile failed: ") + e.what();
      entry.fallback = true;
      return;
    }
    aot_submit(name_ + "(" + entry.signature + ")", l.module, l.targets_module, entry.exe);
    note_program(name_, entry.signature, std::move(l.fields), served);
    entry.lowered = Lowered();  // the text is the program cache's now
  });
  return !entry.fallback;
}

void TableKernel::execute(const Entry& entry, torch::jit::Stack* stack, size_t base, Call& call) {
  // From reading the storages' bases to swapping in the results (threads, StorageLock).
  StorageLock lock;
  lock.reserve(call.storages.size());
  for (const auto& st : call.storages) lock.add(handle_of(st));
  lock.lock();
  // An input computed by a failed op: this op fails the same way, without running.
  std::shared_ptr<const DeferredError> failure;
  for (const auto& st : call.storages)
    if (!failure) failure = handle_of(st).error;
  std::vector<pjrt::BufferPtr> outs;
  if (!failure) {
    LaunchArgs args;
    gather_args(entry, *stack, base, call, args);
    outs = run(*entry.exe, call.device, args.args, name_.c_str(), &failure);
    if (entry.checks && !outs.empty()) {  // read now under launch blocking: a failed op swaps in nothing
      pjrt::BufferPtr codes = std::move(outs.back());
      outs.pop_back();
      watch_checks(call.device, std::move(codes), entry.checks, launch_blocking());
    }
  }
  std::vector<at::Tensor> results(entry.num_results);
  sink_results(entry, *stack, base, call, outs, failure, results);
  push_returns(entry, stack, base, results);
}

}  // namespace table_kernel

}  // namespace torch_pjrt
