#include "distributed/staging.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "aten/storage.h"

namespace torch_pjrt::distributed {

namespace {

// The dtypes torch's gloo backend takes, for every collective (checked against torch 2.13).
bool gloo_takes(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kChar: case at::kByte: case at::kInt: case at::kLong: case at::kBool:
      return true;
    default:
      return false;
  }
}

// The dtype a reduction of `t` runs in on the host, where gloo lacks `t`; Undefined when none.
at::ScalarType widened(at::ScalarType t) {
  switch (t) {
    case at::kShort: return at::kInt;
    case at::kUInt16: case at::kUInt32: return at::kLong;
    case at::kFloat8_e4m3fn: case at::kFloat8_e5m2: case at::kFloat8_e4m3fnuz: case at::kFloat8_e5m2fnuz:
    case at::kFloat8_e8m0fnu:
      return at::kFloat;
    default:
      return at::ScalarType::Undefined;
  }
}

// [d0, rest] so that a byte view keeps dim 0 (alltoall's splits count rows).
at::Tensor rows(const at::Tensor& t) {
  int64_t d0 = t.dim() ? t.size(0) : 1;
  int64_t rest = 1;
  for (int64_t i = 1; i < t.dim(); ++i) rest *= t.size(i);
  return t.reshape({d0, rest});
}

}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}

std::string reduce_op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

Wire wire_of(const at::Tensor& t, Use use, c10d::ReduceOp op, const char* collective) {
  Wire w{t.scalar_type(), t.sizes().vec()};
  at::ScalarType d = t.scalar_type();
  if (use == Use::kMove) {
    w.kind = gloo_takes(d) ? Wire::kSame : Wire::kBytes;
    return w;
  }
  auto fail = [&](const char* why) {
    TORCH_CHECK(false, "tpu_dist: ", collective, " with ReduceOp.", reduce_op_name(op), " on a ", d, " tensor of shape ",
                t.sizes(), ": ", why);
  };
  bool bitwise = op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR || op.op_ == c10d::ReduceOp::BXOR;
  if (bitwise && (at::isFloatingType(d) || at::isComplexType(d))) fail("bitwise reductions need an integral or bool dtype");
  if (op.op_ == c10d::ReduceOp::AVG && d == at::kBool) fail("AVG has no meaning for bool");
  if (at::isComplexType(d)) {
    bool linear = op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::AVG || op.op_ == c10d::ReduceOp::PREMUL_SUM;
    if (!linear) fail("complex tensors reduce only with SUM, AVG or PREMUL_SUM");
    w.kind = Wire::kComplex;
    return w;
  }
  if (gloo_takes(d)) return w;
  if (widened(d) != at::ScalarType::Undefined) {
    w.kind = Wire::kWide;
    return w;
  }
  fail("this dtype cannot be reduced");
  return w;
}

at::Tensor host_buffer(const at::Tensor& t, const Wire& w) {
  auto opts = at::TensorOptions().device(at::kCPU);
  switch (w.kind) {
    case Wire::kSame: return at::empty(t.sizes(), opts.dtype(t.scalar_type()));
    case Wire::kBytes: return rows(at::empty(t.sizes(), opts.dtype(t.scalar_type()))).view(at::kByte);
    case Wire::kWide: return at::empty(t.sizes(), opts.dtype(widened(t.scalar_type())));
    case Wire::kComplex: return at::view_as_real(at::empty(t.sizes(), opts.dtype(t.scalar_type())));
  }
  return {};
}

at::Tensor to_host(const at::Tensor& t, const Wire& w) {
  // The one device-to-host copy: the plugin writes a new contiguous host tensor of the device tensor's dtype
  // (copy_ into a host tensor would copy it once more). A CPU tensor is copied, never aliased.
  at::Tensor host = t.is_cpu() ? t.clone(at::MemoryFormat::Contiguous) : download(t);
  counters().bytes_to_host += host.nbytes();
  switch (w.kind) {
    case Wire::kSame: return host;
    case Wire::kBytes: return rows(host).view(at::kByte);
    case Wire::kWide: return host.to(widened(t.scalar_type()));
    case Wire::kComplex: return at::view_as_real(host);
  }
  return host;
}

void to_device(const at::Tensor& host, const Wire& w, at::Tensor& dst) {
  at::Tensor h;
  switch (w.kind) {
    case Wire::kSame: h = host; break;
    case Wire::kBytes: h = host.reshape({-1}).view(w.dtype).reshape(w.sizes); break;
    case Wire::kWide: h = host.to(w.dtype); break;
    case Wire::kComplex: h = at::view_as_complex(host); break;
  }
  dst.copy_(h);
  counters().bytes_to_device += dst.nbytes();
}

c10d::ReduceOp gloo_op(c10d::ReduceOp op, at::ScalarType dtype) {
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM) return c10d::ReduceOp(c10d::ReduceOp::SUM);
  if (op.op_ == c10d::ReduceOp::AVG && !at::isFloatingType(dtype) && !at::isComplexType(dtype))
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  return c10d::ReduceOp(op.op_);
}

void premultiply(at::Tensor& host, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s, "tpu_dist: ReduceOp.PREMUL_SUM without its factor");
  // The factor in the tensor's dtype, as NCCL applies it (an integer tensor's factor is truncated).
  if (s->tensor_factor.defined())
    host.mul_(s->tensor_factor.to(at::kCPU).to(host.scalar_type()));
  else
    host.mul_(at::scalar_tensor(s->double_factor, host.options()));
}

void finish_average(at::Tensor& host, const c10d::ReduceOp& op, const Wire& w, int group_size) {
  if (op.op_ != c10d::ReduceOp::AVG || at::isFloatingType(w.dtype) || at::isComplexType(w.dtype)) return;
  host.copy_(at::div(host, group_size, "trunc"));
}

}  // namespace torch_pjrt::distributed
