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
#include "aten/table_kernel.h"

#include <map>

#include "aten/table_kernel_class.h"

namespace torch_pjrt {
namespace table_kernel {

void TableKernel::operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
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
  if (!compile_entry(*entry)) {  // once per entry; after that one atomic load (std::call_once)
    run_fallback(op, stack, entry->fallback_reason);
    return;
  }
  execute(*entry, stack, base, call);
}

void TableKernel::prepare(const c10::OperatorHandle& op) {
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
bool TableKernel::record(const Entry& entry, torch::jit::Stack* stack, size_t base, const Call& call, bool grow) {
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

Entry* TableKernel::find(uint64_t hash, const std::vector<int64_t>& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end()) return nullptr;
  for (auto& e : it->second)
    if (e->key == key) return e.get();
  return nullptr;
}

}  // namespace table_kernel

using table_kernel::TableKernel;

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
