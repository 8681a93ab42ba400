#include "distributed/programs.h"

#include <ATen/ATen.h>

#include "aten/errors.h"
#include "aten/storage.h"
#include "distributed/staging.h"
#include "hlo/builder.h"
#include "pjrt/compile_options.h"

namespace torch_pjrt::distributed {

namespace {

using hlo::Builder;
using hlo::Value;

// The reduction of two scalars for `op` on elements of type `t`, or nullptr where a program cannot do it.
// XLA's collectives take the reductions it recognises (add, multiply, minimum, maximum, and and or of
// booleans): bitwise reductions of integers (XLA:CPU: "Unsupported reduction computation") take the host.
const char* combiner(const c10d::ReduceOp& op, at::ScalarType t) {
  bool pred = t == at::kBool;
  bool complex = at::isComplexType(t);
  switch (op.op_) {
    case c10d::ReduceOp::SUM: case c10d::ReduceOp::AVG: return pred ? "or" : "add";
    case c10d::ReduceOp::PRODUCT: return complex ? nullptr : pred ? "and" : "multiply";
    case c10d::ReduceOp::MIN: return complex ? nullptr : pred ? "and" : "minimum";
    case c10d::ReduceOp::MAX: return complex ? nullptr : pred ? "or" : "maximum";
    case c10d::ReduceOp::BAND: return pred ? "and" : nullptr;
    case c10d::ReduceOp::BOR: return pred ? "or" : nullptr;
    default: return nullptr;  // PREMUL_SUM: the host transport
  }
}

Builder::Body body_of(const char* op) {
  return [op](Builder& b, const std::vector<Value>& v) { return std::vector<Value>{b.binary(op, v[0], v[1])}; };
}

hlo::Type type_of(const at::Tensor& t) { return hlo::Type{element_type(t.scalar_type()), t.sizes().vec()}; }

// AVG: the sum divided by the group size in the program (integers truncate, as NCCL's do).
Value average(Builder& b, Value sum, int64_t n, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::AVG) return sum;
  return b.binary("divide", sum, b.broadcast_to(b.scalar(static_cast<double>(n), sum.elem()), sum.dims()));
}

}  // namespace

ProgramTransport::ProgramTransport(std::vector<int> devices, int rank, uint64_t salt)
    : devices_(std::move(devices)), rank_(rank), salt_(salt) {
  auto& client = session_or_throw().client();
  for (int d : devices_) device_ids_.push_back(client.device(d).id);
}

void ProgramTransport::run(const std::string& mlir, const at::Tensor& in, at::Tensor& out, const char* name) {
  auto& session = session_or_throw();
  pjrt::CompileOptions options = pjrt::default_compile_options();
  options.replica_devices = device_ids_;
  pjrt::TensorSpec in_spec{element_type(in.scalar_type()), in.sizes().vec()};
  pjrt::TensorSpec out_spec{element_type(out.scalar_type()), out.sizes().vec()};
  auto exe = session.programs().get(mlir, {in_spec}, {out_spec}, options);
  // The input as a buffer of exactly its shape and type: a fresh contiguous copy on the device unless the
  // tensor already is its whole storage in its own shape and type (a dtype view, as view_as_real, is not).
  auto fits = [&](const pjrt::BufferPtr& b) { return b && b->dims() == in_spec.dims && b->type() == in_spec.type; };
  at::Tensor dense = in;
  pjrt::BufferPtr buffer;
  if (in.is_contiguous() && covers_storage(in)) buffer = buffer_of(handle_of(in));
  if (!fits(buffer)) {
    dense = in.clone(at::MemoryFormat::Contiguous);
    buffer = buffer_of(handle_of(dense));
  }
  raise_if_poisoned(handle_of(dense));
  TORCH_CHECK(fits(buffer), "tpu_dist: ", name,
              ": no dense buffer for the input ", in.scalar_type(), in.sizes(), " (buffer ",
              buffer ? c10::str(buffer->dims()) : std::string("none"), ")");
  // Every rank launches the same program with the same id; the plugin pairs the replicas by it.
  int launch_id = static_cast<int>((salt_ * 1000003 + seq_++) & 0x3fffffff);
  std::vector<pjrt::BufferPtr> result;
  try {
    result = exe->execute_collective(devices_[rank_], {buffer.get()}, launch_id, name);
  } catch (const pjrt::Error& e) {
    rethrow_pjrt(name, e);
  }
  at::Tensor r = wrap_buffer(result.at(0), out.sizes(), out.scalar_type());
  out.copy_(r);
}

hlo::Builder::Groups ProgramTransport::groups() const {
  hlo::Dims all;
  for (size_t r = 0; r < device_ids_.size(); ++r) all.push_back(static_cast<int64_t>(r));
  return {all};
}

bool ProgramTransport::allreduce(at::Tensor& t, const c10d::ReduceOp& op) {
  const char* c = combiner(op, t.scalar_type());
  if (!c || (op.op_ == c10d::ReduceOp::AVG && t.scalar_type() == at::kBool)) return false;
  Builder b;
  Value x = b.arg(type_of(t));
  b.ret({average(b, b.all_reduce(x, groups(), body_of(c)), size(), op)});
  run(b.module_text("all_reduce"), t, t, "allreduce");
  return true;
}

bool ProgramTransport::broadcast(at::Tensor& t, int root) {
  // Every rank's tensor gathered along a new leading dim; the root's row kept.
  Builder b;
  Value x = b.arg(type_of(t));
  hlo::Dims one = t.sizes().vec(), start(t.dim() + 1, 0), limit = t.sizes().vec(), strides(t.dim() + 1, 1);
  one.insert(one.begin(), 1);
  Value all = b.all_gather(b.reshape(x, one), 0, groups());
  start[0] = root;
  limit.insert(limit.begin(), root + 1);
  b.ret({b.reshape(b.slice(all, start, limit, strides), t.sizes().vec())});
  run(b.module_text("broadcast"), t, t, "broadcast");
  return true;
}

bool ProgramTransport::allgather_into(at::Tensor& out, const at::Tensor& in) {
  Builder b;
  Value x = b.arg(type_of(in));
  Value all = b.all_gather(b.reshape(x, {in.numel()}), 0, groups());
  b.ret({b.reshape(all, out.sizes().vec())});
  run(b.module_text("all_gather"), in, out, "all_gather_into_tensor");
  return true;
}

bool ProgramTransport::reduce_scatter_into(at::Tensor& out, const at::Tensor& in, const c10d::ReduceOp& op) {
  const char* c = combiner(op, in.scalar_type());
  if (!c || (op.op_ == c10d::ReduceOp::AVG && in.scalar_type() == at::kBool)) return false;
  Builder b;
  Value x = b.arg(type_of(in));
  Value part = b.reduce_scatter(b.reshape(x, {in.numel()}), 0, groups(), body_of(c));
  b.ret({b.reshape(average(b, part, size(), op), out.sizes().vec())});
  run(b.module_text("reduce_scatter"), in, out, "reduce_scatter_tensor");
  return true;
}

bool ProgramTransport::alltoall_equal(at::Tensor& out, const at::Tensor& in) {
  // Rows [r*m, (r+1)*m) of the flat input go to rank r; the received parts are concatenated in rank order.
  int64_t n = size();
  if (in.numel() % n != 0 || out.numel() != in.numel()) return false;
  Builder b;
  Value x = b.arg(type_of(in));
  Value parts = b.all_to_all(b.reshape(x, {n, in.numel() / n}), 0, 0, groups());
  b.ret({b.reshape(parts, out.sizes().vec())});
  run(b.module_text("all_to_all"), in, out, "all_to_all_single");
  return true;
}

}  // namespace torch_pjrt::distributed
