// TableKernel (table_kernel.cpp's overview): the class, whose phases are defined each in a file of its own:
//   table_kernel.cpp  the entry point (key -> entry -> record, fall back or launch), schema analysis;
//   table_key.cpp     the cache key;
//   table_infer.cpp   a miss: shape inference on meta tensors, and the row lowered into the entry's program;
//   table_args.cpp    gathering a launch's arguments (storage bases, run-time scalars, geometry);
//   table_launch.cpp  compiling an entry at its first launch, and the launch;
//   table_sinks.cpp   the results: new tensors, storages' new bases, the returns on the stack.
// Fused eager's recording (fused.cpp) shares the key and the inference and skips the launch.
#pragma once

#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/SmallVector.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "aten/checks.h"
#include "aten/compile_log.h"
#include "aten/errors.h"
#include "aten/execution.h"
#include "aten/fallback.h"
#include "aten/fused.h"
#include "aten/generator.h"
#include "aten/program_args.h"
#include "aten/shape_rules.h"
#include "aten/row_args.h"
#include "aten/storage.h"
#include "aten/table_entry.h"
#include "lowering/table.h"

namespace torch_pjrt {
namespace table_kernel {


using lowering::Arg;
using pjrt::ElementType;

using Kind = ArgKind;

enum Tag : int64_t {
  kNoneTag = -1, kTensorTag = -2, kCpuScalarTag = -3, kScalarTag = -4, kListTag = -5,
  kDynTag = -6,       // a read of a growable storage: geometry at run time
  kCapacityTag = -7,  // a growable storage's base
  kGrowTag = -8,      // a growable concatenation
  kPresentTag = -9,   // an optional argument that is not None
  kDynOffsetTag = -10,  // a view whose storage offset is a run-time input (offset_is_dynamic)
};

// Per-call facts gathered while building the key.
struct Call {  // inline room for a few storages: a call allocates nothing for them
  c10::SmallVector<c10::StorageImpl*, 4> slots;
  c10::SmallVector<c10::Storage, 4> storages;
  int device = -1;
  bool has_tpu_tensor = false;
};

struct Return {
  bool aliases_arg;  // returns an argument (in-place / out=) rather than a new tensor
  int index;         // argument index, or functional result index
  bool is_list;
  bool is_int = false;  // an int/SymInt result (attention's max_q): taken from shape inference
};

// A launch's program arguments; the scalar buffers made for it live as long as it (most calls: a few).
struct LaunchArgs {
  std::vector<const pjrt::Buffer*> args;
  pjrt::BufferPtr small[8];
  std::vector<pjrt::BufferPtr> large;
  size_t kept = 0;
  const pjrt::Buffer* keep(pjrt::BufferPtr p) {
    const pjrt::Buffer* raw = p.get();
    if (kept < 8) small[kept++] = std::move(p);
    else large.push_back(std::move(p));
    return raw;
  }
};

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

class TableKernel final : public c10::OperatorKernel {
 public:
  TableKernel(const lowering::Row* row, std::string name) : row_(row), name_(std::move(name)) {}

  // entry point: the key, the entry, then record (fused eager), fall back or launch (table_kernel.cpp)
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack);

 private:
  void prepare(const c10::OperatorHandle& op);
  bool record(const Entry& entry, torch::jit::Stack* stack, size_t base, const Call& call, bool grow);
  Entry* find(uint64_t hash, const std::vector<int64_t>& key);

  // cache key (table_key.cpp)
  void tensor_key(const at::Tensor& t, std::vector<int64_t>& key, Call& call, bool written = false);
  void dynamic_key(const at::Tensor& t, std::vector<int64_t>& key);
  void slot_key(const at::Tensor& t, std::vector<int64_t>& key, Call& call);
  void build_key(const torch::jit::Stack& stack, size_t base, std::vector<int64_t>& key, Call& call);
  std::vector<int64_t> key_copy(const torch::jit::Stack& stack, size_t base, Call&);
  bool grow_key(const torch::jit::Stack& stack, size_t base, std::vector<int64_t>& key, Call& call);

  // miss: shape inference and the entry's program (table_infer.cpp)
  Entry* build_entry(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t base, Call& call, uint64_t hash,
                     bool* restart);
  KeyFields fields(const torch::jit::Stack& stack, size_t base, Entry& entry);
  std::vector<at::Tensor> functional_meta_results(const torch::jit::Stack& stack, size_t base);
  void build_program(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t base, Call& call,
                     Entry& entry, bool* restart);
  Entry* build_grow_entry(const torch::jit::Stack& stack, size_t base, Call& call, uint64_t hash);
  std::string name_for_module() const;

  // argument gathering (table_args.cpp)
  void gather_args(const Entry& entry, const torch::jit::Stack& s, size_t base, const Call& call, LaunchArgs& a);
  pjrt::BufferPtr rng_state_buffer(int device, const torch::jit::Stack& s, size_t base);

  // launch (table_launch.cpp)
  bool compile_entry(Entry& entry);
  void execute(const Entry& entry, torch::jit::Stack* stack, size_t base, Call& call);

  // result sinks (table_sinks.cpp)
  void sink_results(const Entry& entry, const torch::jit::Stack& s, size_t base, const Call& call,
                    std::vector<pjrt::BufferPtr>& outs, const std::shared_ptr<const DeferredError>& failure,
                    std::vector<at::Tensor>& results);
  void push_returns(const Entry& entry, torch::jit::Stack* stack, size_t base, std::vector<at::Tensor>& results);
  static std::vector<int64_t> grown_sizes(const torch::jit::Stack& s, size_t base);

  const lowering::Row* row_;
  std::string name_;
  std::once_flag prepared_;
  size_t schema_args_ = 0, functional_args_ = 0, functional_returns_ = 0;
  size_t new_returns_ = 0;  // returns that are new tensors (not aliases of arguments)
  std::vector<Kind> kinds_;
  std::vector<std::string> names_;
  std::vector<bool> optional_;
  std::vector<bool> written_;
  std::vector<Return> returns_;
  bool is_inplace_ = false, is_out_ = false;
  std::optional<c10::OperatorHandle> functional_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<Entry>>> entries_;
};

}  // namespace table_kernel
}  // namespace torch_pjrt
