// A whole torch.compile graph as one program (DESIGN.md: the same rows serve eager, fused eager and
// torch.compile). python/torch_pjrt/dynamo.py walks an AOTAutograd ATen graph and drives a GraphBuilder:
// graph inputs are dense values of their tensor's shape, each op node applies its lowering row through
// the same Arg construction as the eager kernel (row_args.h), view nodes read their view from the dense
// value with the view model, and the outputs are returned. The program is compiled through the program
// cache (memory and disk, keyed by its text); a GraphProgram runs it on tpu tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aten/device_checks.h"
#include "hlo/builder.h"
#include "lowering/view.h"
#include "pjrt/program_cache.h"
#include "pjrt/runtime.h"

namespace torch_pjrt {

struct DeferredError;

struct OutSpec {  // a node result as shape inference (the FX node's meta value) describes it
  bool defined = true;
  at::ScalarType dtype = at::ScalarType::Undefined;
  std::vector<int64_t> sizes;
};

class GraphProgram {
 public:
  // Runs on `inputs` (the graph's tensor inputs, in order); returns the outputs as new tpu tensors.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  // The same, then writes output `o` into input `p` for each (p, o) of `writes` by swapping the input's
  // storage base (swap_base), holding the storages' locks from reading the inputs to the swaps. Returns
  // the outputs (undefined for those swapped in) and the writes that could not swap (the caller copies).
  // A donor input's buffer is donated when only its storage holds it (else a private copy is).
  using Writes = std::vector<std::pair<int64_t, int64_t>>;
  std::pair<std::vector<at::Tensor>, Writes> run_writing(const std::vector<at::Tensor>& inputs,
                                                         const Writes& writes) const;
  size_t num_inputs() const { return num_tensor_inputs_; }
  // Names the program in its outputs' errors ("a fused eager stream of 3 ops (...)").
  void set_label(const std::string& label);
  // Fused eager: runs on `tensors` (tensor input i's buffer, exactly its spec; a donor's is donated when
  // the caller passed the only reference, else copied) and `scalars` (the run-time scalar inputs of a
  // builder with runtime_scalars, in order). Returns the output buffers, or none and sets `failure`.
  using Scalars = std::vector<std::pair<pjrt::ElementType, c10::Scalar>>;
  std::vector<pjrt::BufferPtr> run_buffers(int device, std::vector<pjrt::BufferPtr> tensors, const Scalars& scalars,
                                           std::shared_ptr<const DeferredError>* failure) const;

 private:
  friend class GraphBuilder;
  // Runs the program on `args` (one per program input) through the dispatch thread; the donated inputs
  // are freed when the run is done.
  std::vector<pjrt::BufferPtr> launch(int device, std::vector<pjrt::BufferPtr> args,
                                      std::shared_ptr<const DeferredError>* failure) const;
  struct Input {
    bool rng;   // the device generator's next state (one per random node)
    int index;  // tensor input index
    pjrt::TensorSpec spec;
    bool donor = false;  // a mutated input: its buffer is donated, so the program may update it in place
    int scalar = -1;     // a run-time scalar input (runtime_scalars): its index in run_buffers' scalars
    hlo::Dims order;     // a permuted input: the tensor's dims in storage order (spec has those sizes)
  };
  std::string name_;
  const char* label_ = "";  // what its outputs' errors name (interned): name_, or a fused stream's ops
  pjrt::ExecutablePtr exe_;
  std::vector<Input> inputs_;
  size_t num_tensor_inputs_ = 0;
  std::vector<OutSpec> outputs_;
  std::shared_ptr<std::vector<CheckInfo>> checks_;  // its rows' device-side checks: the last output's codes
};

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name) : name_(std::move(name)) {}
  // Python numbers (Scalar arguments, 0-d CPU tensors, run-time floats) become program inputs rather than
  // constants, as in eager programs (fused eager: a learning rate must not change the program).
  bool runtime_scalars = false;
  // The value a random row's apply() takes its generator state from, also for rows that draw only in some
  // cases (fused eager draws it when the op is recorded); -1: a program input drawn at each run.
  int rng_id = -1;
  // A graph input: a dense tensor of `sizes`. Returns its value id. A `donor` is written back by the
  // runner (run_writing): the program may reuse its buffer for an output of the same shape. `strides`
  // (optional) are the tensor's: a dense tensor in another storage order (a weight's transpose saved for
  // the backward) is passed as its storage, in storage order, and transposed in the program.
  int input(at::ScalarType dtype, const std::vector<int64_t>& sizes, bool donor = false,
            const std::vector<int64_t>& strides = {});
  // True when a lowering row serves `overload` ("add.Tensor", "relu").
  static bool has_row(const std::string& overload);
  // Applies the row of `overload` to its functional schema arguments `args`, whose tensors (meta
  // tensors, placeholders only) take the values `tensor_ids` in order of appearance (list items in
  // order, undefined entries skipped). Returns one value id per result (-1 for undefined ones).
  std::vector<int> apply(const std::string& overload, const torch::jit::Stack& args, const std::vector<int>& tensor_ids,
                         const std::vector<OutSpec>& outs);
  // The view (sizes, strides in elements, offset) of dense value `id`, as a dense value of dtype `dtype`.
  // `offset_id` >= 0: the offset is that value's (an s64 scalar known at run time: a view at a symbolic
  // index of a graph, whose host computes and checks it), and `offset` is ignored.
  int view(int id, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int64_t offset,
           at::ScalarType dtype, int offset_id = -1);
  // Dense value `base` with `src` written through its view (sizes, strides, offset; `offset_id` as for
  // view): the *_scatter nodes functionalization makes of writes into views.
  int scatter_view(int base, int src, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                   int64_t offset, int offset_id = -1);
  // Fused eager's storage reads and writes, exactly as eager programs make them: `base` is the storage's
  // base value of form `form` (-1 when the storage was never written), `view` a tensor over it. A dynamic
  // view's offset is the next run-time scalar input (a read's before its op's scalars, a write's after).
  int read(int base, const lowering::BaseForm& form, const lowering::ViewForm& view);
  // The new base value of that storage with `src` written through `view`; `new_form` its form.
  int write(int base, const lowering::BaseForm& form, const lowering::ViewForm& view, int src,
            lowering::BaseForm* new_form);
  int transpose(int id, const std::vector<int64_t>& perm);
  // A call of `callee`, one of `functions` (func.func definitions from another producer: a JAX-lowered
  // module, python/torch_pjrt/jax_ops.py), on the values `ids`; its results have the types `outs`.
  // `by_plugin`: those functions as lowered for another plugin kind's deviceless targets (aten/aot.h).
  std::vector<int> call(const std::string& functions, const std::string& callee, const std::vector<int>& ids,
                        const std::vector<OutSpec>& outs, const std::map<std::string, std::string>& by_plugin = {});
  // A constant of `sizes` filled with `v` (the graph's factory nodes: full, zeros_like, scalar_tensor).
  int full(at::ScalarType dtype, const std::vector<int64_t>& sizes, const c10::Scalar& v);
  // A dense value of `id` converted and broadcast to `spec` (copy_ into a differently typed input).
  int cast(int id, const OutSpec& spec);
  // Compiles the program returning `ids`. Without `served`, a program new to this process is noted with its
  // inputs as its key parts (compile_log.h); with it, the caller notes it.
  std::shared_ptr<GraphProgram> compile(const std::vector<int>& ids, pjrt::Served* served = nullptr);

 private:
  std::string name_;
  hlo::Builder b_;
  std::vector<CheckInfo> checks_;  // the applied rows' device-side checks, in b_'s order
  std::vector<hlo::Value> values_;
  std::vector<GraphProgram::Input> inputs_;
  size_t num_tensor_inputs_ = 0;
  int num_scalar_inputs_ = 0;
  hlo::Value scalar_input(pjrt::ElementType type);
  lowering::ViewForm view_form(pjrt::ElementType elem, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides, int64_t offset, int offset_id) const;
  // `view` with its run-time offset (a new scalar input) when it is dynamic.
  lowering::ViewForm with_offset_input(const lowering::ViewForm& view);
  // Storage orders of the values fused eager read through views (lowering::Arg::layout: the hint rows
  // such as _grouped_mm read transposed weights by), by id; empty for the others.
  std::vector<hlo::Dims> layouts_;
  int add(hlo::Value v) {
    values_.push_back(v);
    return static_cast<int>(values_.size()) - 1;
  }
  const hlo::Value& value(int id) const;
};

// Writes `buffer` (a fresh dense graph output of `dst`'s dtype and shape: the caller checks them) into
// `dst` by swapping its storage's base, when `dst` covers its storage densely; false otherwise (the
// caller copies).
bool swap_base(const at::Tensor& dst, pjrt::BufferPtr buffer);

}  // namespace torch_pjrt
