// Argument checks that torch's CPU kernels make and its meta kernels (our shape inference) lack, so that
// bad input raises on "tpu" what it raises on the CPU instead of computing something: dtypes the CPU
// kernel refuses (bool relu, argmax of bool, bool matrix products), reductions without an identity over
// an empty dim, and the values of Scalar arguments (negative integer powers, fill values that overflow
// the dtype, uniform_'s range, bernoulli's p). Scalar values are run-time program inputs, not part of
// the program cache's key, so these checks run on every call: each checked overload gets a kernel of its
// own (registered instead of its table kernel) that checks the call's arguments on the host, before any
// device work, then runs the row through call_row(). Checks read only dtypes, sizes and Scalars: never
// device values (a check of tensor values would be a sync; docs/known-differences.md lists those).
#include "aten/checks.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/TypeProperties.h>
#include <c10/core/Scalar.h>
#include <torch/library.h>

#include "aten/errors.h"
#include "aten/table_kernel.h"
#include "lowering/table.h"

namespace torch_pjrt {
namespace {

using Stack = torch::jit::Stack;

// The arguments of one call: the stack's last `n` values, by position in the schema.
struct Args {
  const Stack& s;
  size_t base;
  const c10::IValue& operator[](size_t i) const { return s[base + i]; }
  bool tensor(size_t i) const { return base + i < s.size() && (*this)[i].isTensor(); }
  const at::Tensor& t(size_t i) const { return (*this)[i].toTensor(); }
  at::ScalarType type(size_t i) const { return t(i).scalar_type(); }
  c10::Scalar scalar(size_t i) const { return (*this)[i].toScalar(); }
};

using CheckFn = void (*)(const std::string& op, const Args& a);

[[noreturn]] void not_implemented(const std::string& op, at::ScalarType t) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "\"", op, "\" not implemented for '", c10::toString(t), "'");
}

// --------------------------------------------------------------------------------------- the checks

void relu(const std::string&, const Args& a) {
  TORCH_CHECK(a.type(0) != at::kBool, "Boolean inputs not supported for relu");
}

void arg_extremum(const std::string& op, const Args& a) {  // argmax, argmin
  TORCH_CHECK(a.type(0) != at::kBool, op, "(): does not support bool input");
  TORCH_CHECK(!at::isComplexType(a.type(0)), op, "(): does not support complex input");
}

// max(dim) / min(dim): no identity, so an empty reduction dim raises (the meta kernel returns -inf/inf)
void extremum_dim(const std::string& op, const Args& a) {
  const at::Tensor& x = a.t(0);
  if (x.dim() == 0) return;
  int64_t d = c10::maybe_wrap_dim(a[1].toInt(), x.dim());
  TORCH_CHECK_INDEX(x.size(d) != 0, op, "(): Expected reduction dim ", d, " to have non-zero size.");
}

void extremum_all(const std::string& op, const Args& a) {  // max(), min()
  TORCH_CHECK(a.t(0).numel() > 0, op,
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with "
              "the 'dim' argument.");
}

// pow(Tensor, Scalar): integer bases take no negative integer exponent; bool ** bool has no kernel
void pow_tensor_scalar(const std::string& op, const Args& a) {
  c10::Scalar e = a.scalar(1);
  TORCH_CHECK(!(at::isIntegralType(a.type(0), /*includeBool=*/true) && e.isIntegral(true) && e.toLong() < 0),
              "Integers to negative integer powers are not allowed.");
}

void pow_tensor_tensor(const std::string& op, const Args& a) {
  at::ScalarType r = at::result_type(a.t(0), a.t(1));
  if (r == at::kBool) not_implemented(op, r);
}

void pow_scalar(const std::string& op, const Args& a) {  // pow(Scalar self, Tensor exponent)
  at::ScalarType r = at::result_type(a.scalar(0), a.t(1));
  if (r == at::kBool) not_implemented(op, r);
}

// Subtraction with a bool operand (a tensor, a wrapped Python bool, or a bool Scalar), and add/sub's alpha.
void alpha_check(at::ScalarType r, const c10::Scalar& alpha) {
  TORCH_CHECK(!alpha.isBoolean() || r == at::kBool, "Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(at::isFloatingType(r) || at::isComplexType(r) || alpha.isIntegral(true),
              "For integral input tensors, argument alpha must not be a floating point number.");
}

void sub_operands(bool a_bool, bool b_bool) {
  TORCH_CHECK(!(a_bool && b_bool),
              "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or `logical_xor()` "
              "operator instead.");
  TORCH_CHECK(!(a_bool || b_bool),
              "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a mask, "
              "use the `~` or `logical_not()` operator instead.");
}

bool is_bool(const Args& a, size_t i) {
  return a.tensor(i) ? a.type(i) == at::kBool : a.scalar(i).isBoolean();
}

at::ScalarType result_of(const Args& a) {
  if (a.tensor(1)) return at::result_type(a.t(0), a.t(1));
  return at::result_type(a.t(0), a.scalar(1));
}

void sub(const std::string&, const Args& a) {  // sub.Tensor/.Scalar, rsub.Tensor/.Scalar (self, other, alpha)
  sub_operands(is_bool(a, 0), is_bool(a, 1));
  alpha_check(result_of(a), a.scalar(2));
}

void add(const std::string&, const Args& a) {  // add.Tensor/.Scalar (self, other, alpha)
  alpha_check(result_of(a), a.scalar(2));
}

void no_bool(const std::string& op, const Args& a) {  // ops whose CPU kernel has no bool case
  if (a.type(0) == at::kBool) not_implemented(op, at::kBool);
}

// lerp: floating and complex only. (histc is not checked: integer histc is computed as torch's CUDA kernel
// does, which Transformers' grouped_mm experts path relies on; tests/python/test_moe.py)
void floating_only(const std::string& op, const Args& a) {
  at::ScalarType t = a.type(0);
  bool ok = at::isFloatingType(t) || (op == "lerp" && at::isComplexType(t));
  if (!ok) not_implemented(op, t);
}

void var_std(const std::string& op, const Args& a) {  // var, std, var_mean, std_mean
  at::ScalarType t = a.type(0);
  TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t),
              (op == "var" || op == "std") ? std::string("std and var") : op,
              " only support floating point and complex dtypes");
}

std::string type_name(const at::Tensor& t) { return std::string(t.dtype().name()); }

void mm(const std::string& op, const Args& a) {
  TORCH_CHECK(a.type(0) == a.type(1), "expected m1 and m2 to have the same dtype, but got: ", type_name(a.t(0)),
              " != ", type_name(a.t(1)));
  no_bool(op, a);
}

void addmm(const std::string& op, const Args& a) {  // addmm(self, mat1, mat2)
  TORCH_CHECK(a.type(0) == a.type(2), "self and mat2 must have the same dtype, but got ", a.type(0), " and ",
              a.type(2));
  TORCH_CHECK(a.type(1) == a.type(2), "mat1 and mat2 must have the same dtype, but got ", a.type(1), " and ",
              a.type(2));
  if (a.type(0) == at::kBool) not_implemented(op, at::kBool);
}

void mv(const std::string& op, const Args& a) {  // mv(self, vec): the CPU runs addmv(out, self, vec)
  TORCH_CHECK(a.type(0) == a.type(1), "addmv input tensors must have the same dtype, but got ", a.type(1), ", ",
              a.type(0), ", and ", a.type(1));
  no_bool(op, a);
}

void addmv(const std::string& op, const Args& a) {  // addmv(self, mat, vec)
  TORCH_CHECK(a.type(0) == a.type(1) && a.type(1) == a.type(2),
              "addmv input tensors must have the same dtype, but got ", a.type(0), ", ", a.type(1), ", and ",
              a.type(2));
  no_bool(op, a);
}

void baddbmm(const std::string& op, const Args& a) {  // baddbmm(self, batch1, batch2)
  TORCH_CHECK(a.type(0) == a.type(1) && a.type(1) == a.type(2), "Input dtypes must be the same, got: input ",
              type_name(a.t(0)), ", batch1: ", type_name(a.t(1)), ", batch2: ", type_name(a.t(2)));
  no_bool(op, a);
}

// clamp/clamp_min/clamp_max with Scalar bounds: the CPU has no bool kernel (a bool tensor clamped by
// numbers computes in their promoted type, which is fine)
void clamp_scalar(const std::string& op, const Args& a) {
  if (a.type(0) != at::kBool) return;
  at::native::ResultTypeState state;
  state = at::native::update_result_type_state(a.t(0), state);
  for (size_t i = 1; i < 3 && !a.tensor(i); ++i)
    if (a[i].isScalar()) state = at::native::update_result_type_state(a.scalar(i), state);
  if (at::native::result_type(state) == at::kBool) not_implemented(op, at::kBool);
}

// upsampling: floating dtypes; uint8 too except linear1d and trilinear3d
void upsample(const std::string& op, const Args& a) {
  at::ScalarType t = a.type(0);
  if (at::isFloatingType(t)) return;
  bool byte_ok = op.find("linear1d") == std::string::npos && op.find("trilinear") == std::string::npos;
  if (!(t == at::kByte && byte_ok)) not_implemented(op, t);
}

// A Scalar stored into a tensor of dtype t: torch converts it with c10::checked_convert, which raises
// when the value does not fit (nan or 2**40 into int32, 1e10 into float16).
void check_fits(const c10::Scalar& v, at::ScalarType t) {
  switch (t) {
#define TORCH_PJRT_FITS(T, name) \
  case at::ScalarType::name:     \
    (void)v.to<T>();             \
    break;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX(TORCH_PJRT_FITS)
    case at::kUInt16: (void)v.to<uint16_t>(); break;
    case at::kUInt32: (void)v.to<uint32_t>(); break;
    case at::kUInt64: (void)v.to<uint64_t>(); break;
#undef TORCH_PJRT_FITS
    default: break;
  }
}

void fill(const std::string&, const Args& a) {  // fill_.Scalar / fill.Scalar (self, value)
  check_fits(a.scalar(1), a.type(0));
}

void index_fill(const std::string&, const Args& a) {  // index_fill.int_Scalar (self, dim, index, value)
  check_fits(a.scalar(3), a.type(0));
}

void full(const std::string&, const Args& a) {  // full(size, fill_value, *, dtype, ...), full.out(size, value, *, out)
  if (a.tensor(2)) return check_fits(a.scalar(1), a.type(2));
  if (a[2].isNone()) return;  // the dtype follows the value
  check_fits(a.scalar(1), static_cast<at::ScalarType>(a[2].toInt()));
}

void uniform(const std::string&, const Args& a) {  // uniform_(self, from, to, generator)
  double from = a[1].toDouble(), to = a[2].toDouble();
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
}

void bernoulli_p(const std::string&, const Args& a) {  // bernoulli_.float / bernoulli.p (self, p, generator)
  double p = a[1].toDouble();
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
}

void nll_target(const std::string&, const Args& a) {  // nll_loss{,2d}_forward(self, target, ...)
  at::ScalarType t = a.type(1);
  TORCH_CHECK(t == at::kLong || t == at::kByte, "expected target dtype to be Long or Byte, but got ", t);
}

void bce(const std::string&, const Args& a) {  // binary_cross_entropy(self, target, weight, reduction)
  TORCH_CHECK(a.type(1) == a.type(0), "Found dtype ", a.type(1), " but expected ", a.type(0));
}

void complex(const std::string&, const Args& a) {  // complex(real, imag[, out])
  auto floating = [](at::ScalarType t) { return t == at::kHalf || t == at::kFloat || t == at::kDouble; };
  TORCH_CHECK(floating(a.type(0)) && floating(a.type(1)), "Expected both inputs to be Half, Float or Double tensors but got ",
              a.type(0), " and ", a.type(1));
  TORCH_CHECK(a.type(0) == a.type(1), "Expected object of scalar type ", a.type(0), " but got scalar type ",
              a.type(1), " for second argument");
  if (a.tensor(2)) {
    at::ScalarType want = c10::toComplexType(a.type(0));
    TORCH_CHECK(a.type(2) == want, "Expected object of scalar type ", want, " but got scalar type ", a.type(2),
                " for argument 'out'");
  }
}

void masked_scatter(const std::string&, const Args& a) {
  TORCH_CHECK(a.type(1) == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              a.type(1));
}

void aminmax_out(const std::string&, const Args& a) {  // aminmax.out(self, dim, keepdim, min, max)
  for (size_t k : {size_t{3}, size_t{4}})
    TORCH_CHECK(!a.tensor(k) || a.type(k) == a.type(0), "Expected out tensor to have dtype ", a.t(0).dtype(),
                ", but got ", a.t(k).dtype(), " instead");
}

void multinomial(const std::string&, const Args& a) {  // multinomial(self, n, replacement, generator[, out])
  const at::Tensor& p = a.t(0);
  const int64_t n = a[1].toInt();
  TORCH_CHECK(p.dim() > 0 && p.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(p.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
              p.scalar_type());
  TORCH_CHECK(!a.tensor(4) || a.type(4) == at::kLong, "multinomial expects Long tensor out, got: ", a.type(4));
  TORCH_CHECK(n > 0, "cannot sample n_sample <= 0 samples");
  TORCH_CHECK(a[2].toBool() || n <= p.size(-1), "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(p.size(-1) <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
}

void bucketize(const std::string&, const Args& a) {  // bucketize(self, boundaries, ...)
  TORCH_CHECK(a.t(1).dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", a.t(1).dim(), ")");
}

void convolution(const std::string& op, const Args& a) {  // (input, weight, bias, stride, padding, ...)
  for (const c10::IValue& p : a[4].toListRef())
    TORCH_CHECK(p.toInt() >= 0, "negative padding is not supported");
  no_bool(op, a);
}

// -------------------------------------------------------------------------------------- registration

struct Check {
  std::vector<const char*> overloads;
  CheckFn fn;
};

// Checks the CPU makes before its shape checks (argmax: bool before an empty reduction dim); the others
// come after them, so where both fail the meta kernel's error is raised.
bool checks_first(CheckFn fn) {
  return fn == arg_extremum || fn == complex || fn == masked_scatter || fn == multinomial || fn == bucketize ||
         fn == convolution;
}

const std::vector<Check>& checks() {
  static const std::vector<Check> all = {
      {{"relu", "relu_"}, relu},
      {{"argmax", "argmax.out", "argmin", "argmin.out"}, arg_extremum},
      {{"max.dim", "max.dim_max", "min.dim", "min.dim_min"}, extremum_dim},
      {{"max", "min"}, extremum_all},
      {{"pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out"}, pow_tensor_scalar},
      {{"pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out"}, pow_tensor_tensor},
      {{"pow.Scalar", "pow.Scalar_out"}, pow_scalar},
      {{"sub.Tensor", "sub_.Tensor", "sub.out", "sub.Scalar", "sub_.Scalar", "rsub.Tensor", "rsub.Scalar"}, sub},
      {{"add.Tensor", "add_.Tensor", "add.out", "add.Scalar", "add_.Scalar"}, add},
      {{"threshold", "threshold_", "threshold.out"}, no_bool},
      {{"addcmul", "addcmul_", "addcmul.out"}, no_bool},
      {{"dot", "dot.out", "vdot", "vdot.out", "bmm", "bmm.out"}, no_bool},
      {{"lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out", "lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out"},
       floating_only},
      {{"var.correction", "var.correction_out", "std.correction", "std.correction_out", "var_mean.correction",
        "std_mean.correction"},
       var_std},
      {{"mm", "mm.out"}, mm},
      {{"addmm", "addmm_", "addmm.out"}, addmm},
      {{"mv", "mv.out"}, mv},
      {{"addmv", "addmv_", "addmv.out"}, addmv},
      {{"baddbmm", "baddbmm_", "baddbmm.out"}, baddbmm},
      {{"clamp", "clamp_", "clamp.out", "clamp_min", "clamp_min_", "clamp_min.out", "clamp_max", "clamp_max_",
        "clamp_max.out"},
       clamp_scalar},
      {{"convolution", "convolution.out"}, convolution},
      {{"complex", "complex.out"}, complex},
      {{"masked_scatter", "masked_scatter_", "masked_scatter.out"}, masked_scatter},
      {{"aminmax.out"}, aminmax_out},
      {{"multinomial", "multinomial.out"}, multinomial},
      {{"bucketize.Tensor", "bucketize.Tensor_out", "bucketize.Scalar", "bucketize.Scalar_out"}, bucketize},
      {{"upsample_nearest1d", "upsample_nearest1d.vec", "upsample_nearest2d", "upsample_nearest2d.vec",
        "upsample_nearest3d", "upsample_nearest3d.vec", "_upsample_nearest_exact1d", "_upsample_nearest_exact1d.vec",
        "_upsample_nearest_exact2d", "_upsample_nearest_exact2d.vec", "_upsample_nearest_exact3d",
        "_upsample_nearest_exact3d.vec", "upsample_linear1d", "upsample_linear1d.vec", "upsample_bilinear2d",
        "upsample_bilinear2d.vec", "upsample_bicubic2d", "upsample_bicubic2d.vec", "upsample_trilinear3d",
        "upsample_trilinear3d.vec", "_upsample_bilinear2d_aa", "_upsample_bilinear2d_aa.vec", "_upsample_bicubic2d_aa",
        "_upsample_bicubic2d_aa.vec"},
       upsample},
      {{"fill.Scalar", "fill_.Scalar"}, fill},
      {{"index_fill.int_Scalar", "index_fill_.int_Scalar"}, index_fill},
      {{"full", "full.out"}, full},
      {{"uniform_", "uniform", "uniform.out"}, uniform},
      {{"bernoulli_.float", "bernoulli.p"}, bernoulli_p},
      {{"nll_loss_forward", "nll_loss_forward.output", "nll_loss2d_forward", "nll_loss2d_forward.output"},
       nll_target},
      {{"binary_cross_entropy", "binary_cross_entropy.out"}, bce},
  };
  return all;
}

// "aten::max" of "max.dim" for messages: torch's checks name the op without its overload
std::string base_name(const std::string& overload) {
  std::string n = overload.substr(0, overload.find('.'));
  if (!n.empty() && n.back() == '_' && n != "uniform_" && n != "bernoulli_") n.pop_back();
  return n;
}

// Runs the op on meta tensors of the call's arguments (same sizes, strides, dtypes; no values): raises
// what torch's meta kernel raises for them, if anything.
void meta_call(const c10::OperatorHandle& op, const Stack& stack, size_t n) {
  auto meta = [](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
  };
  Stack copy(stack.end() - n, stack.end());
  for (auto& v : copy) {
    if (v.isTensor()) {
      v = meta(v.toTensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> l;
      for (const at::Tensor& t : v.toTensorList()) l.push_back(meta(t));
      v = l;
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> l;
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList())
        l.push_back(t.has_value() ? std::optional<at::Tensor>(meta(*t)) : std::nullopt);
      v = l;
    } else if (v.isDevice()) {
      v = c10::Device(c10::kMeta);
    }
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  op.callBoxed(&copy);
}

class CheckedKernel final : public c10::OperatorKernel {
 public:
  CheckedKernel(std::string overload, CheckFn fn) : overload_(std::move(overload)), name_(base_name(overload_)), fn_(fn) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
    const size_t n = op.schema().arguments().size();
    try {
      fn_(name_, Args{*stack, stack->size() - n});
    } catch (const c10::Error&) {
      // The CPU runs its meta checks (shapes, dtypes of the other arguments) before the kernel's: where
      // both fail, the meta kernel's error is the one to raise. Only on this failing path.
      if (!checks_first(fn_)) meta_call(op, *stack, n);
      throw;
    }
    call_row(overload_, stack);
  }

 private:
  std::string overload_, name_;
  CheckFn fn_;
};

// The checked overloads that are table rows (and not custom kernels of their own elsewhere).
std::vector<std::pair<std::string, CheckFn>> checked_rows(const std::set<std::string>& other_custom) {
  std::set<std::string> rows;
  for (const auto& row : lowering::table())
    for (const auto& o : row.overloads) rows.insert(o);
  std::vector<std::pair<std::string, CheckFn>> out;
  for (const auto& c : checks())
    for (const char* o : c.overloads)
      if (rows.count(o) && !other_custom.count(o)) out.emplace_back(o, c.fn);
  return out;
}

}  // namespace

std::set<std::string> checked_overloads(const std::set<std::string>& other_custom) {
  std::set<std::string> out;
  for (const auto& [o, fn] : checked_rows(other_custom)) out.insert(o);
  return out;
}

void check_view_in_storage_slow(const at::Tensor& t, const char* op) { check_view_in_storage(t, op); }

void check_write_overlap(const std::string& name, const torch::jit::Stack& stack, size_t base,
                         const std::vector<bool>& written) {
  static const std::set<std::string> same_value = {"aten::fill_.Scalar", "aten::zero_"};
  // out= overloads whose CPU kernels refuse any overlap of the result with an input, the same tensor too
  // (at::assert_no_overlap: their results are not elementwise in their inputs)
  static const std::set<std::string> no_overlap = {"aten::take.out", "aten::masked_select.out", "aten::cat.out",
                                                   "aten::kthvalue.values", "aten::index_select.out"};
  const bool internal = !same_value.count(name), any = no_overlap.count(name) > 0;
  auto check_pair = [any](const at::Tensor& out, const at::Tensor& in) {
    if (any) at::assert_no_overlap(out, in);
    else at::assert_no_partial_overlap(out, in);
  };
  for (size_t i = 0; i < written.size(); ++i) {
    if (!written[i]) continue;
    const c10::IValue& v = stack[base + i];
    if (internal && v.isTensor()) at::assert_no_internal_overlap(v.toTensor());
    else if (internal && v.isTensorList())
      for (const at::Tensor& t : v.toTensorList()) at::assert_no_internal_overlap(t);
    if (!v.isTensor()) continue;
    for (size_t j = 0; j < written.size(); ++j) {
      const c10::IValue& in = stack[base + j];
      if (written[j]) continue;
      if (in.isTensor() && in.toTensor().defined()) check_pair(v.toTensor(), in.toTensor());
      else if (in.isTensorList())
        for (const at::Tensor& t : in.toTensorList()) check_pair(v.toTensor(), t);
    }
  }
}

void register_checked_kernels(torch::Library& m, const std::set<std::string>& other_custom) {
  for (const auto& [o, fn] : checked_rows(other_custom))
    m.impl(o.c_str(), torch::CppFunction::makeFromBoxedFunctor<CheckedKernel>(std::make_unique<CheckedKernel>(o, fn)));
}

}  // namespace torch_pjrt
