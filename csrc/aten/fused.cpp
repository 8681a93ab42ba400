#include "aten/fused.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "aten/compile_log.h"
#include "aten/errors.h"
#include "aten/execution.h"
#include "aten/generator.h"
#include "aten/graph.h"
#include "aten/storage.h"
#include "aten/table_entry.h"
#include "lowering/table.h"

namespace torch_pjrt {
namespace fused {

std::atomic<bool> g_active{false};
std::atomic<bool> g_used{false};  // the mode was ever on: storage deletions synchronize with streams

namespace {

using pjrt::ElementType;

constexpr size_t kMaxOps = 2000;  // a longer stream runs at once (memory of deferred values, compile time)
// A loop without sync points (steps that never read a value back) would be cut at the bound at a different
// place each time, and every cut would be a new program. Instead a stream of at least kMinCycle ops also runs
// when its first op comes round again (the same eager entry: the next step), so each repetition is one
// stream of the same structure.
constexpr size_t kMinCycle = 16;

// A stream value is an input (a storage's buffer when the stream first touched the storage), a result
// of an op, or -1 for a never-written storage (torch.empty). Value ids are numbered in order of
// appearance, so a repeated stream numbers its values alike and its key (Stream::key) repeats.
struct Read {  // a tensor argument: the view `view` of value `value` of form `form`
  int value;
  lowering::BaseForm form;
  lowering::ViewForm view;
};

struct Write {  // a written tensor (in-place, out=): its storage's value `from` becomes `to`
  int from, to;
  lowering::BaseForm form;
  lowering::ViewForm view;
  size_t result;  // the functional overload's result written
};

struct NewTensor {  // a functional result: value `value`, in memory order (`perm`, when not row-major)
  size_t result;
  int value;
  std::vector<int64_t> perm;
};

struct Op {
  const Entry* entry;
  const lowering::Row* row;
  const std::string* name;
  torch::jit::Stack args;  // the functional arguments; tpu tensors replaced by a placeholder
  const std::vector<OutSpec>* results;
  std::vector<Read> reads;  // in the order the row takes its tensors
  std::vector<NewTensor> news;
  std::vector<Write> writes;
  int rng = -1;  // a random row's generator state (an input)
};

struct Value {
  pjrt::BufferPtr input;  // an input's buffer (null: an op's result)
  bool donor = false;     // an input whose storage the stream writes: its buffer may be reused
};

struct Stream {
  int device = -1;
  std::vector<Value> values;
  std::unordered_map<const pjrt::Buffer*, int> input_of;
  std::vector<Op> ops;
  std::vector<std::shared_ptr<PendingValue>> pendings;  // every storage the stream made pending
  GraphProgram::Scalars scalars;                        // the run-time scalars of all ops, in order
  std::vector<int64_t> key;
};

struct Cached {
  std::vector<int64_t> key;
  std::shared_ptr<GraphProgram> program;
};

std::recursive_mutex g_mu;
std::atomic<int64_t> g_streams{0};

// Never destroyed: buffers must not outlive the PJRT client at exit.
Stream& stream() {
  static auto* s = new Stream;
  return *s;
}
std::unordered_map<uint64_t, std::vector<Cached>>& cache() {
  static auto* c = new std::unordered_map<uint64_t, std::vector<Cached>>;
  return *c;
}
const at::Tensor& placeholder() {  // any non-CPU tensor: GraphBuilder::apply takes values by id
  static auto* t = new at::Tensor(at::empty({0}, at::TensorOptions().device(c10::kMeta)));
  return *t;
}

uint64_t mix(uint64_t h, uint64_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

int input_value(Stream& s, const pjrt::BufferPtr& b) {
  auto [it, fresh] = s.input_of.emplace(b.get(), static_cast<int>(s.values.size()));
  if (fresh) s.values.push_back({b, false});
  return it->second;
}

// The storage's current value in the stream, and its form.
int value_of(Stream& s, const c10::Storage& st, lowering::BaseForm* form) {
  StorageHandle& h = handle_of(st);
  if (h.pending) {
    *form = h.pending->form;
    return h.pending->value;
  }
  pjrt::BufferPtr b = buffer_of(h);
  *form = lowering::BaseForm{};
  form->nbytes = static_cast<int64_t>(st.nbytes());
  if (!b) return -1;
  form->present = true;
  form->elem = b->type();
  form->dims = b->dims();
  return input_value(s, b);
}

int new_value(Stream& s) {
  s.values.push_back({});
  return static_cast<int>(s.values.size()) - 1;
}

std::string describe(const Stream& s) {
  std::string names;
  std::vector<const std::string*> seen;
  for (const Op& op : s.ops) {
    if (std::find(seen.begin(), seen.end(), op.name) != seen.end()) continue;
    if (seen.size() == 12) {
      names += ", ...";
      break;
    }
    names += (seen.empty() ? "" : ", ") + *op.name;
    seen.push_back(op.name);
  }
  return "a fused eager stream of " + std::to_string(s.ops.size()) + " ops (" + names + ")";
}

void poison(const std::vector<PendingValue*>& outs, const std::shared_ptr<const DeferredError>& error) {
  for (PendingValue* p : outs) {
    if (!p->handle) continue;
    StorageHandle& h = *p->handle;
    StorageLock lock(h);
    h.error = error;
    h.pending.reset();
  }
}

// A stream that failed to lower or compile ran nothing: the storages it wrote get their values from before
// the stream back (their buffers are still its inputs), as strict eager leaves a tensor its failed op would
// have written; the stream's own results report the error when read.
void restore_or_poison(Stream& s, const std::shared_ptr<const DeferredError>& error) {
  std::vector<PendingValue*> made;
  for (const auto& p : s.pendings) {
    if (!p->handle) continue;
    if (p->before == -2) {
      made.push_back(p.get());
      continue;
    }
    StorageHandle& h = *p->handle;
    StorageLock lock(h);
    h.buffer = p->before >= 0 ? s.values[p->before].input : nullptr;
    h.pending.reset();
  }
  poison(made, error);
}

// Compile reasons: a stream's key parts are its ops, each with the call that made its eager entry.
void note_stream(const Stream& s, const pjrt::Served& served) {
  KeyFields fields;
  for (size_t k = 0; k < s.ops.size(); ++k)
    fields.push_back({"op " + std::to_string(k + 1), *s.ops[k].name + "(" + s.ops[k].entry->signature + ")", "op"});
  note_program("fused eager stream", describe(s), std::move(fields), served);
}

std::shared_ptr<GraphProgram> build(const Stream& s, const std::vector<PendingValue*>& outs) {
  GraphBuilder gb("fused_eager");
  gb.runtime_scalars = true;
  std::vector<int> gid(s.values.size(), -1);
  for (size_t v = 0; v < s.values.size(); ++v) {
    const auto& in = s.values[v].input;
    if (in) gid[v] = gb.input(scalar_type(in->type()), in->dims(), s.values[v].donor);
  }
  for (size_t k = 0; k < s.ops.size(); ++k) {
    const Op& op = s.ops[k];
    try {
      std::vector<int> ids;
      for (const Read& r : op.reads) ids.push_back(gb.read(r.value < 0 ? -1 : gid[r.value], r.form, r.view));
      gb.rng_id = op.rng < 0 ? -1 : gid[op.rng];
      std::vector<int> res = gb.apply(op.row->overloads.front(), op.args, ids, *op.results);
      for (const NewTensor& n : op.news)
        gid[n.value] = n.perm.empty() ? res.at(n.result) : gb.transpose(res.at(n.result), n.perm);
      for (const Write& w : op.writes) {
        lowering::BaseForm form;
        gid[w.to] = gb.write(w.from < 0 ? -1 : gid[w.from], w.form, w.view, res.at(w.result), &form);
      }
    } catch (const std::exception& e) {
      std::string what = e.what();
      if (auto* ce = dynamic_cast<const c10::Error*>(&e)) what = ce->what_without_backtrace();
      throw std::runtime_error(*op.name + " (op " + std::to_string(k + 1) + " of " + describe(s) +
                               ") failed to lower: " + what);
    }
  }
  std::vector<int> ids;
  for (PendingValue* p : outs) ids.push_back(gid[p->value]);
  try {
    pjrt::Served served;
    std::shared_ptr<GraphProgram> program = gb.compile(ids, &served);
    note_stream(s, served);
    return program;
  } catch (const std::exception& e) {
    throw std::runtime_error(describe(s) + " failed to compile: " + e.what());
  }
}

void flush_locked() {
  Stream& g = stream();
  if (g.ops.empty()) return;
  Stream s = std::move(g);
  g = Stream();
  // the next stream is most likely this one again (a training or decode step): its lists start at this
  // one's sizes instead of growing by reallocation (each a large block: glibc consolidates its free lists)
  g.values.reserve(s.values.size());
  g.ops.reserve(s.ops.size());
  g.pendings.reserve(s.pendings.size());
  g.scalars.reserve(s.scalars.size());
  g.key.reserve(s.key.size() + 1);
  // Outputs: the values of the storages that outlive the stream (the handle holds its PendingValue too).
  std::vector<PendingValue*> outs;
  for (const auto& p : s.pendings)
    if (p.use_count() > 1 && p->handle) outs.push_back(p.get());
  // Nothing it computes is observable (the generator was advanced at recording), unless an op checks values
  // on the device: a bad index raises at the next sync point even where its result is never read.
  bool checks = false;
  for (const Op& op : s.ops) checks = checks || op.entry->checks;
  if (outs.empty() && !checks) return;
  std::vector<int64_t>& key = s.key;
  key.push_back(-1);
  for (PendingValue* p : outs) key.push_back(p->value);
  uint64_t hash = 1469598103934665603ULL;
  for (int64_t w : key) hash = mix(hash, static_cast<uint64_t>(w));
  std::shared_ptr<GraphProgram> program;
  for (const Cached& c : cache()[hash])
    if (c.key == key) program = c.program;
  if (!program) {
    try {
      program = build(s, outs);
      program->set_label(describe(s));  // an asynchronous failure names the stream's ops
    } catch (const std::exception& e) {
      restore_or_poison(s, std::make_shared<DeferredError>(DeferredError{describe(s), e.what()}));
      TORCH_CHECK(false, "tpu: ", e.what());
    }
    metrics().cache_misses.fetch_add(1, std::memory_order_relaxed);
    if (cache().size() > 4096) cache().clear();  // programs stay in the program cache; only the keys go
    cache()[hash].push_back({key, program});
  }
  std::vector<pjrt::BufferPtr> inputs;
  for (Value& v : s.values)
    if (v.input) inputs.push_back(std::move(v.input));
  s.input_of.clear();
  std::shared_ptr<const DeferredError> failure;
  std::vector<pjrt::BufferPtr> results;
  try {
    results = program->run_buffers(s.device, std::move(inputs), s.scalars, &failure);
  } catch (const std::exception& e) {
    poison(outs, std::make_shared<DeferredError>(DeferredError{describe(s), e.what()}));
    throw;
  }
  g_streams.fetch_add(1, std::memory_order_relaxed);
  if (failure) {
    // Named after the stream's ops, in place: synchronize reports the same object (once; raise_deferred
    // clears it by identity). run() made it non-const and nothing has read it yet.
    const_cast<DeferredError&>(*failure).op = describe(s);
    poison(outs, failure);
    return;
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    StorageHandle& h = *outs[k]->handle;
    StorageLock lock(h);
    h.buffer = std::move(results[k]);
    h.error.reset();
    h.pending.reset();
  }
  // The recorded stream (hundreds of ops' arguments, reads and forms) is freed by the dispatch thread, after
  // the launch, while this thread records the next one: freeing it here was ~4% of a training step's
  // recording thread. What it holds is the host's: CPU scalars, forms, its own references to pending values.
  auto done = std::make_shared<Stream>(std::move(s));
  pjrt::Executable::after_launches([done = std::move(done)]() mutable { done.reset(); });
}

}  // namespace

void set_active(bool on) {
  if (on) g_used.store(true);
  if (!on) flush();
  g_active.store(on, std::memory_order_relaxed);
}

void flush() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  flush_locked();
}

int64_t pending_ops() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return static_cast<int64_t>(stream().ops.size());
}

void detach(StorageHandle* h) {
  if (!g_used.load()) return;
  // under the stream's lock: a flush on another thread writes results through PendingValue::handle
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (h->pending) h->pending->handle = nullptr;
}

int64_t streams_run() { return g_streams.load(); }

bool grows(const torch::jit::Stack& stack, size_t base) {
  if (stack.size() < base + 2 || !stack[base].isTensorList() || !stack[base + 1].isInt()) return false;
  auto list = stack[base].toTensorList();
  if (list.size() < 2) return false;
  const at::Tensor first = list.get(0), last = list.get(list.size() - 1);
  if (!first.defined() || !last.defined() || first.dim() < 1 || last.dim() != first.dim()) return false;
  for (const at::Tensor& t : list)
    if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 && reads_growable(t)) return true;
  int64_t dim = stack[base + 1].toInt();
  if (dim < 0) dim += first.dim();
  return dim >= 0 && dim < first.dim() && last.size(dim) == 1 && first.size(dim) > 1;
}

bool record(const OpInfo& info, const Entry& entry, const torch::jit::Stack& stack, size_t base, int device,
            c10::ArrayRef<c10::Storage> slots, std::vector<at::Tensor>& results) {
  if (launch_blocking()) return false;  // debug eager wins: each op runs, and raises, at once
  const unsigned flags = info.row->flags;
  std::vector<at::Tensor> targets;              // written tensors, as the eager program takes them
  for (size_t i = 0; i < info.schema_args; ++i) {
    if (!info.written[i]) continue;
    const c10::IValue& v = stack[base + i];
    if (v.isTensor()) targets.push_back(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList()) targets.push_back(t);
  }
  for (const at::Tensor& t : targets)
    if (t.is_conj() || t.is_neg()) return false;
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  Stream& s = stream();
  if (s.ops.size() >= kMinCycle && s.ops.front().entry == &entry) flush_locked();
  if (s.device != device) {
    flush_locked();
    s.device = device;
  }
  for (const c10::Storage& st : slots) {  // poisoned or growable storages take the eager path
    const StorageHandle& h = handle_of(st);
    if (h.pending) continue;
    pjrt::BufferPtr b = buffer_of(h);
    if (error_of(h) || (b && is_growable(st, b))) return false;
  }
  Op op{&entry, info.row, &info.name, {}, &entry.results, {}, {}, {}};
  op.args.reserve(info.functional_args);
  op.reads.reserve(info.functional_args);
  op.news.reserve(entry.sinks.size());
  s.key.push_back(reinterpret_cast<int64_t>(&entry));
  bool draws = flags & lowering::kRandom;  // or its eager program drew (attention's dropout)
  for (const Source& src : entry.sources) draws = draws || src.what == Source::kRng;
  if (draws) {  // the generator advances now, as when the op runs eagerly
    std::optional<at::Generator> gen;
    for (size_t i = 0; i < info.schema_args; ++i)
      if (stack[base + i].isGenerator()) gen = stack[base + i].toGenerator();
    op.rng = input_value(s, next_rng_state(device, gen));
  }
  // The program takes an op's run-time scalars in the order GraphBuilder makes them (fused::build): the
  // offsets of its dynamic reads, its arguments' scalars, the offsets of its dynamic writes.
  const size_t first_scalar = s.scalars.size();
  GraphProgram::Scalars read_offsets;
  auto tensor_arg = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined()) return t;
    if (t.device().type() != c10::DeviceType::PrivateUse1) {  // a Python number: a run-time scalar
      s.scalars.emplace_back(element_type(t.scalar_type()), t.item());
      return t;
    }
    Read r;
    r.value = value_of(s, t.storage(), &r.form);
    r.view = view_form(t);
    if (r.view.dynamic) read_offsets.emplace_back(ElementType::kS64, c10::Scalar(r.view.offset));
    s.key.push_back(r.value);
    op.reads.push_back(std::move(r));
    return placeholder();
  };
  for (size_t i = 0; i < info.functional_args; ++i) {
    const c10::IValue& v = stack[base + i];
    if (v.isNone()) {
      op.args.push_back(v);
      continue;
    }
    switch (info.kinds[i]) {
      case ArgKind::kTensor: op.args.push_back(tensor_arg(v.toTensor())); break;
      case ArgKind::kTensorList:
        if (v.isTensorList()) {
          c10::List<at::Tensor> list;
          for (const at::Tensor& t : v.toTensorList()) list.push_back(tensor_arg(t));
          op.args.push_back(std::move(list));
        } else {
          c10::List<std::optional<at::Tensor>> list;
          for (const std::optional<at::Tensor> t : v.toOptionalTensorList())
            list.push_back(t ? std::optional<at::Tensor>(tensor_arg(*t)) : std::nullopt);
          op.args.push_back(std::move(list));
        }
        break;
      case ArgKind::kScalar:
        if (!(flags & lowering::kBakeScalars)) {
          c10::Scalar sc = v.toScalar();
          s.scalars.emplace_back(static_cast<ElementType>(scalar_kind(sc)), sc);
        }
        op.args.push_back(v);
        break;
      case ArgKind::kScalarList:
        for (const auto& e : v.toListRef()) {
          c10::Scalar sc = e.toScalar();
          s.scalars.emplace_back(static_cast<ElementType>(scalar_kind(sc)), sc);
        }
        op.args.push_back(v);
        break;
      case ArgKind::kDouble:
        if (flags & lowering::kRuntimeFloats) s.scalars.emplace_back(ElementType::kF64, c10::Scalar(v.toDouble()));
        op.args.push_back(v);
        break;
      default: op.args.push_back(v); break;
    }
  }
  s.scalars.insert(s.scalars.begin() + static_cast<std::ptrdiff_t>(first_scalar), read_offsets.begin(),
                   read_offsets.end());
  // New tensors: pending storages of the results' memory-order values.
  for (const Sink& sink : entry.sinks) {
    if (!sink.new_tensor) continue;
    NewTensor n{static_cast<size_t>(sink.index), new_value(s), {}};
    lowering::BaseForm form{true, element_type(sink.dtype), sink.sizes, 0};
    if (!sink.strides.empty()) {
      n.perm.resize(sink.strides.size());
      std::iota(n.perm.begin(), n.perm.end(), 0);
      std::stable_sort(n.perm.begin(), n.perm.end(),
                       [&](int64_t x, int64_t y) { return sink.strides[x] > sink.strides[y]; });
      for (size_t d = 0; d < n.perm.size(); ++d) form.dims[d] = sink.sizes[n.perm[d]];
    }
    at::Tensor t = poisoned_tensor(sink.sizes, sink.dtype, device, nullptr);
    if (!sink.strides.empty()) t.unsafeGetTensorImpl()->set_sizes_and_strides(sink.sizes, sink.strides);
    form.nbytes = static_cast<int64_t>(t.storage().nbytes());
    StorageHandle& h = handle_of(t);
    h.pending = std::make_shared<PendingValue>(PendingValue{n.value, std::move(form), &h});
    s.pendings.push_back(h.pending);
    results.at(n.result) = std::move(t);
    op.news.push_back(std::move(n));
  }
  // Written tensors: their storages' values are replaced (their old buffers now belong to the stream).
  size_t result = info.is_inplace ? info.new_returns : 0;
  for (const at::Tensor& t : targets) {
    Write w;
    w.result = result++;
    w.view = view_form(t);
    if (w.view.dynamic) s.scalars.emplace_back(ElementType::kS64, c10::Scalar(w.view.offset));
    w.from = value_of(s, t.storage(), &w.form);
    w.to = new_value(s);
    s.key.push_back(w.from);
    if (w.from >= 0 && s.values[w.from].input) s.values[w.from].donor = true;
    size_t slot = 0;
    while (slot < slots.size() && slots[slot].unsafeGetStorageImpl() != t.storage().unsafeGetStorageImpl()) ++slot;
    lowering::BaseForm form{true, ElementType::kInvalid, {}, static_cast<int64_t>(t.storage().nbytes())};
    for (const Sink& sink : entry.sinks)
      if (!sink.new_tensor && sink.index == static_cast<int>(slot)) {
        form.elem = element_type(sink.dtype);
        form.dims = sink.sizes;
      }
    TORCH_INTERNAL_ASSERT(form.elem != ElementType::kInvalid, info.name, ": no new base for a written storage");
    StorageHandle& h = handle_of(t);
    StorageLock hl(h);
    if (h.pending) {
      h.pending->value = w.to;
      h.pending->form = std::move(form);
    } else {
      h.buffer.reset();
      h.pending = std::make_shared<PendingValue>(PendingValue{w.to, std::move(form), &h, w.from});
      s.pendings.push_back(h.pending);
    }
    op.writes.push_back(std::move(w));
  }
  s.key.push_back(-2);
  s.ops.push_back(std::move(op));
  if (s.ops.size() >= kMaxOps) flush_locked();
  return true;
}

}  // namespace fused

TORCH_LIBRARY(tpu_fused, m) {
  // torch_pjrt.set_eager_mode / fused() (python/torch_pjrt/__init__.py); returns the previous mode
  m.def("set_mode(bool fused) -> bool", [](bool on) {
    bool was = fused::active();
    fused::set_active(on);
    return was;
  });
  m.def("flush() -> ()", [] { fused::flush(); });
  m.def("stats() -> int[]", [] { return std::vector<int64_t>{fused::pending_ops(), fused::streams_run()}; });
}

}  // namespace torch_pjrt
