#include "aten/shape_rules.h"

#include <algorithm>
#include <set>

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

namespace torch_pjrt {
namespace {

// _grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None).
// The layouts: 2D x 3D (rows of self in groups: the MoE forward), 3D x 2D (columns of mat2 in groups),
// 2D x 2D (the contraction in groups: the weight gradient, one result per group), 3D x 3D (a bmm).
// The CPU's checks, without its 16-byte stride rule (a kernel constraint, not a semantic one).
void grouped_mm(torch::jit::Stack& s) {
  const at::Tensor a = s[0].toTensor(), b = s[1].toTensor();
  std::optional<at::Tensor> offs;
  if (!s[2].isNone()) offs = s[2].toTensor();
  const bool has_bias = !s[3].isNone();
  std::optional<at::ScalarType> out_dtype;
  if (!s[4].isNone()) out_dtype = static_cast<at::ScalarType>(s[4].toInt());
  auto float_type = [](at::ScalarType t) {
    return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
  };
  TORCH_CHECK(float_type(a.scalar_type()), "Expected mat_a to be Float32, BFloat16 or Float16 matrix, got ",
              a.scalar_type());
  TORCH_CHECK(float_type(b.scalar_type()), "Expected mat_b to be Float32, BFloat16 or Float16 matrix, got ",
              b.scalar_type());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
              a.scalar_type(), " != ", b.scalar_type());
  TORCH_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3),
              "Multiplicands must be 2D or 3D but got mat_a.dim()=", a.dim(), " and mat_b.dim()=", b.dim());
  const bool a2 = a.dim() == 2, b2 = b.dim() == 2;
  TORCH_CHECK(a.size(-1) == b.size(-2), "contraction dimension of mat_a and mat_b must match");
  TORCH_CHECK((a2 || b2) == offs.has_value(),
              "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d");
  if (offs) {
    TORCH_CHECK(offs->dim() == 1, "Offsets tensor must be 1D, but got offs.dim()=", offs->dim());
    TORCH_CHECK(offs->scalar_type() == at::kInt, "Offsets have to be int32");
  }
  TORCH_CHECK(!has_bias, "Bias not supported yet");
  TORCH_CHECK(!out_dtype || *out_dtype == a.scalar_type(), "Grouped gemm output dtype must match `mat_a` dtype");
  std::vector<int64_t> size;
  if (a2 && b2) {
    size = {offs->size(0), a.size(0), b.size(1)};
  } else if (a2) {
    TORCH_CHECK(offs->size(0) == b.size(0), "matrix batch sizes have to match");
    size = {a.size(0), b.size(-1)};
  } else if (b2) {
    TORCH_CHECK(offs->size(0) == a.size(0), "matrix batch sizes have to match");
    size = {a.size(1), b.size(1)};
  } else {
    TORCH_CHECK(a.size(0) == b.size(0), "batched dimension has to match");
    size = {a.size(0), a.size(1), b.size(-1)};
  }
  torch::jit::drop(s, 5);
  s.emplace_back(at::empty(size, a.options().device(c10::kMeta)));
}

// geqrf(Tensor self) -> (a, tau): torch has no meta kernel for it. `a` in LAPACK's column-major layout, as
// the CPU returns it.
void geqrf(torch::jit::Stack& s) {
  const at::Tensor a = s[0].toTensor();
  TORCH_CHECK(a.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  TORCH_CHECK(at::isFloatingType(a.scalar_type()) || at::isComplexType(a.scalar_type()),
              "torch.geqrf: Expected a floating point or complex tensor as input. Got ", a.scalar_type());
  std::vector<int64_t> t = a.sizes().vec(), tau(t.begin(), t.end() - 1);
  tau.back() = std::min(a.size(-2), a.size(-1));
  std::swap(t[t.size() - 1], t[t.size() - 2]);
  torch::jit::drop(s, 1);
  s.emplace_back(at::empty(t, a.options().device(c10::kMeta)).mT());
  s.emplace_back(at::empty(tau, a.options().device(c10::kMeta)));
}

// multi_margin_loss_backward and multilabel_margin_loss_backward (grad_output, self, ...): torch has no
// meta kernels for them; the gradient has self's size and dtype (the forward checked the arguments).
template <int Args>
void margin_loss_backward(torch::jit::Stack& s) {
  const at::Tensor self = s[1].toTensor();
  torch::jit::drop(s, Args);
  s.emplace_back(at::empty(self.sizes(), self.options().device(c10::kMeta)));
}

// multi_margin_loss (with a 0-d target) and multilabel_margin_loss_forward, reduction='none', on a 0-d or
// 1-d input: the CPU gives a 0-d loss, torch's meta kernels a [1] one.
void multi_margin_loss(const torch::jit::Stack& args, torch::jit::Stack& results) {
  if (args[0].toTensor().dim() <= 1 && args[1].toTensor().dim() == 0 && args[5].toInt() == 0)
    results[0] = results[0].toTensor().reshape({});
}

void multilabel_margin_loss(const torch::jit::Stack& args, torch::jit::Stack& results) {
  if (args[0].toTensor().dim() <= 1 && args[2].toInt() == 0) results[0] = results[0].toTensor().reshape({});
}

// Batch norm statistics (save_mean, save_invstd: results 1 and 2) as the CPU returns them: empty (0,)
// when not training (torch's meta kernels say [C]), else in the parameters' dtype (the weight's, or the
// input's without one; the meta kernels say float32 for float16). `Training`: the index of the training
// flag among the arguments, or kTraining / kNotTraining for the overloads that fix it.
constexpr int kTraining = -1, kNotTraining = -2;
template <int Training>
void batch_norm_stats(const torch::jit::Stack& args, torch::jit::Stack& results) {
  const bool training = Training == kTraining || (Training >= 0 && args[Training].toBool());
  const auto weight = args[1].toOptional<at::Tensor>();
  const at::ScalarType param = weight && weight->defined() ? weight->scalar_type() : args[0].toTensor().scalar_type();
  for (size_t i : {1, 2}) {
    const at::Tensor r = results[i].toTensor();
    if (!training) results[i] = at::empty({0}, r.options().dtype(param));
    else if (r.scalar_type() != param) results[i] = at::empty(r.sizes(), r.options().dtype(param));
  }
}

// _scaled_dot_product_fused_attention_overrideable_backward: its meta kernel defines all four gradients
// (the bias's whenever there is a bias); grad_input_mask (argument 5) says which were asked for, and the
// rest are undefined, as the CPU's backward leaves them, so the row computes only those.
void attention_backward_grads(const torch::jit::Stack& args, torch::jit::Stack& results) {
  const auto mask = args[5].toBoolList();
  for (size_t i = 0; i < results.size() && i < mask.size(); ++i)
    if (!mask.get(i)) results[i] = at::Tensor();
}

}  // namespace

ShapeRule shape_rule(const std::string& name, const std::string& overload) {
  if (name == "aten::_grouped_mm" && overload.empty()) return grouped_mm;
  if (name == "aten::geqrf" && overload.empty()) return geqrf;
  if (name == "aten::multi_margin_loss_backward" && overload.empty()) return margin_loss_backward<7>;
  if (name == "aten::multilabel_margin_loss_backward" && overload.empty()) return margin_loss_backward<5>;
  return nullptr;
}

ResultFix result_fix(const std::string& name, const std::string& overload) {
  if (name == "aten::_native_batch_norm_legit_functional" && overload.empty()) return batch_norm_stats<5>;
  if (name == "aten::_native_batch_norm_legit" && overload == "no_stats") return batch_norm_stats<3>;
  if (name == "aten::_batch_norm_with_update_functional" && overload.empty()) return batch_norm_stats<kTraining>;
  if (name == "aten::_native_batch_norm_legit_no_training" && overload.empty()) return batch_norm_stats<kNotTraining>;
  if (name == "aten::multi_margin_loss" && overload.empty()) return multi_margin_loss;
  if (name == "aten::multilabel_margin_loss_forward" && overload.empty()) return multilabel_margin_loss;
  if (name == "aten::_scaled_dot_product_fused_attention_overrideable_backward" && overload.empty())
    return attention_backward_grads;
  return nullptr;
}

bool out_dtype_must_match_input(const std::string& name) {
  // found by comparing every single-result out= overload's CPU and meta behaviour (python/torch_pjrt/fuzz.py
  // found the first, neg)
  static const std::set<std::string> ops = {
      "aten::binary_cross_entropy", "aten::bitwise_not", "aten::conj_physical", "aten::elu", "aten::gelu",
      "aten::hardshrink", "aten::hardsigmoid", "aten::hardswish", "aten::hardtanh", "aten::leaky_relu",
      "aten::mish", "aten::neg", "aten::negative", "aten::round", "aten::rrelu_with_noise",
      "aten::soft_margin_loss", "aten::softplus", "aten::softshrink"};
  return ops.count(name) > 0;
}

}  // namespace torch_pjrt
