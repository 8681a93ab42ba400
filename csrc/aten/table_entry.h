// The eager kernel's cache entry (table_kernel.cpp): one program per op key, with where its arguments
// come from and what its results become. Fused eager (fused.cpp) records calls by their entries.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "aten/compile_log.h"
#include "aten/device_checks.h"
#include "aten/graph.h"
#include "pjrt/runtime.h"

namespace torch_pjrt {

// Where a program argument comes from at run time.
struct Source {
  enum What : uint8_t { kStorage, kScalarArg, kScalarListItem, kCpuTensor, kCpuListItem, kRng, kGeometry } what;
  int index;  // storage slot, or stack argument
  int item;   // list element (-1: not a list, for kGeometry)
  pjrt::ElementType type;
  int part = 0;  // kGeometry: 0 the tensor's offset, 1 + d its stride d, -1 - d its size d
};

// What a program result becomes.
struct Sink {
  bool new_tensor;  // else: the new base of storage slot `index`
  int index;        // functional result index (new tensors), or storage slot
  std::vector<int64_t> sizes;
  at::ScalarType dtype;
  // New tensors laid out as the CPU lays them out (TensorIterator keeps its inputs' layout, e.g. x.t() + 1):
  // the program returns the value in memory order (`sizes` permuted), the tensor gets these strides.
  // Empty: contiguous.
  std::vector<int64_t> strides;
  bool grown = false;  // a growable concatenation's result: sizes from the call, storage with room to spare
};

// A program lowered on a miss but not compiled yet: compiled at its first launch (execute), so a call that
// fused eager records is lowered only into its stream's program and never compiled by itself.
struct Lowered {
  std::string module;  // StableHLO text
  std::vector<pjrt::TensorSpec> in_specs, out_specs;
  KeyFields fields;  // compile reasons: the call's key parts
  std::string targets_module;  // as lowered for the deviceless targets where it differs (aten/aot.h)
};

struct Entry {
  std::vector<int64_t> key;
  pjrt::ExecutablePtr exe;  // null until compile_entry (table_launch.cpp) has compiled `lowered`
  Lowered lowered;
  std::once_flag compile_once;
  std::vector<Source> sources;
  std::vector<Sink> sinks;
  size_t num_results = 0;
  std::vector<c10::IValue> int_returns;  // SymInt results, fixed by shape inference (sizes are in the key)
  std::vector<OutSpec> results;          // the functional overload's results (fused eager lowers it)
  std::atomic<bool> fallback{false};  // set at a compile failure too, after the entry was found
  std::string fallback_reason;
  std::string signature;  // the call that built it, for compile reasons ("self: f32[4, 8], other: f32[8]")
  CheckInfos checks;      // the row's device-side checks: the program's last output is their codes
};

}  // namespace torch_pjrt
