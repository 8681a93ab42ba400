// Fused eager (DESIGN.md, Execution modes): table-row ops are recorded instead of run, and the pending
// stream becomes one program (graph.h's GraphBuilder, through the same rows) at a sync point: a read of a
// pending storage's buffer (buffer_of: .cpu(), .item(), printing, data-dependent ops, the CPU fallback),
// torch.tpu.synchronize(), leaving the mode, or a stream past kMaxOps. A stream's program is cached by
// its structure (each op's eager cache entry plus the wiring of values), so a repeated step compiles
// nothing. A storage only the stream references at the flush (a freed temporary) is no output.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <atomic>
#include <vector>

#include "aten/row_args.h"
#include "lowering/view.h"

namespace torch_pjrt {

struct Entry;
struct StorageHandle;

// What a pending storage holds: value `value` of the stream, of form `form`.
struct PendingValue {
  int value;
  lowering::BaseForm form;
  StorageHandle* handle;  // valid while the storage lives (the handle holds this object too)
  // The storage's value before the stream: a stream input (its buffer), -1 never written, -2 none (a new
  // tensor of the stream). A stream that fails to build gives written storages their old value back.
  int before = -2;
};

namespace fused {

extern std::atomic<bool> g_active;
inline bool active() { return g_active.load(std::memory_order_relaxed); }
void set_active(bool on);  // leaving the mode flushes
void flush();              // runs the pending stream, if any
int64_t pending_ops();
int64_t streams_run();
// A storage's handle is about to be deleted (its storage freed, on any thread): a stream that holds its
// pending value forgets it, after any flush in progress has finished writing through it.
void detach(StorageHandle* h);

// The schema facts of a table kernel's op that recording needs.
struct OpInfo {
  const lowering::Row* row;
  const std::string& name;  // "aten::overload"
  size_t schema_args, functional_args;
  const std::vector<ArgKind>& kinds;
  const std::vector<bool>& written;
  bool is_inplace, is_out;
  size_t new_returns;
};

// Whether a concatenation (cat's stack) takes the growable path (its result a growable storage, which the
// stream does not record) in fused mode: only when it extends a growable storage's tensor or appends one
// step (a last part of size 1 along the dimension, generate's input_ids and attention mask), since each new
// length would otherwise be a new stream. Other concatenations (rotary halves) are recorded.
bool grows(const torch::jit::Stack& stack, size_t base);

// Records one call whose eager cache entry is `entry` (a hit, not a fallback); `slots` are the call's
// storages in key order. Fills `results` (entry.num_results new tensors, pending) and returns true, or
// returns false when the call cannot be recorded (the caller runs it eagerly after flushing).
bool record(const OpInfo& op, const Entry& entry, const torch::jit::Stack& stack, size_t base, int device,
            c10::ArrayRef<c10::Storage> slots, std::vector<at::Tensor>& results);

}  // namespace fused
}  // namespace torch_pjrt
