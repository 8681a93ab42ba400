// _foreach_* rows (what torch.optim's foreach implementations and clip_grad_norm_ call): one program
// for the whole list. Each element is lowered by a per-element function on a sub-context whose list
// arguments are replaced by their i-th entries, so an element sees exactly what the single-tensor op
// would see.
#include <cmath>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

// Arguments of element i: Tensor[] -> its i-th tensor, Scalar[] -> its i-th scalar, others unchanged.
Ctx element(Ctx& c, size_t i) {
  Ctx e{c.b, {}, {c.outs.at(i)}, {}, {}};
  for (const Arg& a : c.args) {
    if (a.kind != Arg::kTensorList) {
      e.args.push_back(a);
      continue;
    }
    Arg x;
    x.value = a.list.at(i);
    x.weak = a.weak;
    if (a.weak) {  // a Scalar[] (run-time scalars)
      x.kind = Arg::kScalar;
      x.scalar_type = x.value.elem();
    } else {
      x.kind = x.value.valid() ? Arg::kTensor : Arg::kNone;
    }
    e.args.push_back(x);
  }
  return e;
}

template <Value (*F)(Ctx&)>
V each(Ctx& c) {
  V out;
  for (size_t i = 0; i < c.outs.size(); ++i) {
    Ctx e = element(c, i);
    out.push_back(F(e));
  }
  return out;
}

Value add(Ctx& c) { return add_alpha(c, 0, 1, 2, 1); }
Value sub(Ctx& c) { return add_alpha(c, 0, 1, 2, -1); }
Value mul(Ctx& c) { return binary_op(c, "multiply"); }
Value div(Ctx& c) { return binary_op(c, "divide"); }
Value maximum(Ctx& c) { return nan_max(c.b, operand(c, 0), operand(c, 1)); }
Value minimum(Ctx& c) { return nan_min(c.b, operand(c, 0), operand(c, 1)); }
Value pow(Ctx& c) { return binary_op(c, "power"); }
Value neg(Ctx& c) { return unary_op(c, "negate"); }
Value sqrt(Ctx& c) { return unary_op(c, "sqrt"); }
Value rsqrt(Ctx& c) { return unary_op(c, "rsqrt"); }
Value exp(Ctx& c) { return unary_op(c, "exponential"); }
Value expm1(Ctx& c) { return unary_op(c, "exponential_minus_one"); }
Value abs(Ctx& c) { return unary_op(c, "abs"); }
Value sign(Ctx& c) { return unary_op(c, "sign"); }
Value reciprocal(Ctx& c) {
  Value x = operand(c, 0);
  return c.b.binary("divide", like(c.b, 1, x), x);
}
Value zero(Ctx& c) { return c.b.constant(0, c.out()); }
Value copy(Ctx& c) { return operand(c, 1); }
Value norm(Ctx& c) {
  // ord is baked (it decides the program); the result is 0-d
  ElementType acc = accumulation_type(pjrt::real_type(c.out_type()));
  Value x = c.b.convert(c.t(0), acc);
  Value a = c.b.unary("abs", x);
  Dims all;
  for (int64_t d = 0; d < a.rank(); ++d) all.push_back(d);
  double ord = c.arg(1).d;
  Value r;
  if (std::isinf(ord)) {
    r = reduce(c.b, a, all, ord > 0 ? "maximum" : "minimum", c.b.scalar(ord > 0 ? 0 : INFINITY, acc));
  } else if (ord == 1) {
    r = reduce_sum(c.b, a, all);
  } else if (ord == 2) {
    r = c.b.unary("sqrt", reduce_sum(c.b, c.b.binary("multiply", a, a), all));
  } else if (ord == 0) {
    r = reduce_sum(c.b, c.b.convert(c.b.compare(Cmp::NE, a, like(c.b, 0, a)), acc), all);
  } else {
    Value s = reduce_sum(c.b, c.b.binary("power", a, c.b.constant(ord, a.type)), all);
    r = c.b.binary("power", s, c.b.scalar(1.0 / ord, acc));
  }
  return c.b.reshape(r, c.out_dims());
}

// _fused_adamw(self[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[], state_steps[], lr, beta1,
// beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)
//   -> (self_out[], grads_out[], exp_avgs_out[], exp_avg_sqs_out[], max_exp_avg_sqs_out[])
// torch.optim increments state_steps before calling it. The float hyper-parameters are run-time inputs.
V fused_adam(Ctx& c, bool decoupled) {
  Builder& b = c.b;
  if (c.has(13) || c.has(14)) throw hlo::Error("_fused_adam: grad_scale/found_inf are not lowered");
  const auto& params = c.arg(0).list;
  const size_t n = params.size();
  const bool amsgrad = c.i(11), maximize = c.i(12);
  V p_out, g_out, m_out, v_out, vmax_out;
  for (size_t i = 0; i < n; ++i) {
    ElementType t = accumulation_type(params[i].elem());
    auto f = [&](size_t k) { return b.convert(c.t(k), t); };  // a run-time float hyper-parameter
    auto bc = [&](const Value& v) { return b.broadcast_to(v, params[i].dims()); };
    Value p = b.convert(params[i], t), g = b.convert(c.arg(1).list[i], t);
    Value m = b.convert(c.arg(2).list[i], t), v = b.convert(c.arg(3).list[i], t);
    Value step = b.reshape(b.convert(c.arg(5).list[i], t), {});
    Value lr = f(6), beta1 = f(7), beta2 = f(8), wd = f(9), eps = f(10);
    Value one = b.scalar(1, t);
    if (maximize) g = b.unary("negate", g);
    if (decoupled) {
      p = b.binary("multiply", p, bc(b.binary("subtract", one, b.binary("multiply", lr, wd))));
    } else {
      g = b.binary("add", g, b.binary("multiply", p, bc(wd)));
    }
    m = b.binary("add", m, b.binary("multiply", bc(b.binary("subtract", one, beta1)), b.binary("subtract", g, m)));
    v = b.binary("add", b.binary("multiply", bc(beta2), v),
                 b.binary("multiply", bc(b.binary("subtract", one, beta2)), b.binary("multiply", g, g)));
    Value bias1 = b.binary("subtract", one, b.binary("power", beta1, step));
    Value bias2 = b.binary("subtract", one, b.binary("power", beta2, step));
    Value second = v;
    if (amsgrad) {
      Value vmax = nan_max(b, b.convert(c.arg(4).list[i], t), v);
      vmax_out.push_back(vmax);
      second = vmax;
    }
    Value denom = b.binary("add", b.binary("divide", b.unary("sqrt", second), bc(b.unary("sqrt", bias2))), bc(eps));
    Value step_size = b.binary("divide", lr, bias1);
    p = b.binary("subtract", p, b.binary("multiply", bc(step_size), b.binary("divide", m, denom)));
    p_out.push_back(p);
    g_out.push_back(b.convert(c.arg(1).list[i], t));
    m_out.push_back(m);
    v_out.push_back(v);
  }
  V out = p_out;
  for (auto* part : {&g_out, &m_out, &v_out, &vmax_out}) out.insert(out.end(), part->begin(), part->end());
  if (!amsgrad) {  // max_exp_avg_sqs may be an empty list, or unchanged entries
    for (size_t i = 0; i < c.arg(4).list.size(); ++i) out.push_back(c.arg(4).list[i]);
  }
  return out;
}

// Rows for a binary op in its Scalar, List, ScalarList (and optionally Tensor) forms.
#define BINARY_ROWS(NAME, FN)                                                                                      \
  {{"_foreach_" NAME ".Scalar", "_foreach_" NAME "_.Scalar", "_foreach_" NAME ".Scalar_out"}, each<FN>},             \
      {{"_foreach_" NAME ".List", "_foreach_" NAME "_.List", "_foreach_" NAME ".List_out"}, each<FN>},               \
      {{"_foreach_" NAME ".ScalarList", "_foreach_" NAME "_.ScalarList", "_foreach_" NAME ".ScalarList_out"}, each<FN>}
#define TENSOR_ROW(NAME, FN) \
  {{"_foreach_" NAME ".Tensor", "_foreach_" NAME "_.Tensor", "_foreach_" NAME ".Tensor_out"}, each<FN>}
#define UNARY_ROW(NAME, FN) {{"_foreach_" NAME, "_foreach_" NAME "_", "_foreach_" NAME ".out"}, each<FN>}

const Rows rows = {
    BINARY_ROWS("add", add),
    TENSOR_ROW("add", add),
    BINARY_ROWS("sub", sub),
    BINARY_ROWS("mul", mul),
    TENSOR_ROW("mul", mul),
    BINARY_ROWS("div", div),
    TENSOR_ROW("div", div),
    BINARY_ROWS("maximum", maximum),
    BINARY_ROWS("minimum", minimum),
    BINARY_ROWS("clamp_min", maximum),
    BINARY_ROWS("clamp_max", minimum),
    BINARY_ROWS("pow", pow),
    {{"_foreach_pow.ScalarAndTensor"}, each<pow>},
    BINARY_ROWS("lerp", lerp),
    {{"_foreach_addcmul.Scalar", "_foreach_addcmul_.Scalar", "_foreach_addcmul.Scalar_out"}, each<addcmul>},
    {{"_foreach_addcmul.ScalarList", "_foreach_addcmul_.ScalarList", "_foreach_addcmul.ScalarList_out"}, each<addcmul>},
    {{"_foreach_addcdiv.Scalar", "_foreach_addcdiv_.Scalar", "_foreach_addcdiv.Scalar_out"}, each<addcdiv>},
    {{"_foreach_addcdiv.ScalarList", "_foreach_addcdiv_.ScalarList", "_foreach_addcdiv.ScalarList_out"}, each<addcdiv>},
    UNARY_ROW("neg", neg),
    UNARY_ROW("sqrt", sqrt),
    UNARY_ROW("rsqrt", rsqrt),
    UNARY_ROW("exp", exp),
    UNARY_ROW("expm1", expm1),
    UNARY_ROW("abs", abs),
    UNARY_ROW("sign", sign),
    UNARY_ROW("reciprocal", reciprocal),
    UNARY_ROW("zero", zero),
    {{"_foreach_copy", "_foreach_copy_", "_foreach_copy.out"}, each<copy>},
    {{"_foreach_norm.Scalar", "_foreach_norm.Scalar_out"}, each<norm>, kBakeScalars},
    {{"_fused_adamw", "_fused_adamw_"}, [](Ctx& c) { return fused_adam(c, true); }, kRuntimeFloats},
    {{"_fused_adam", "_fused_adam_"}, [](Ctx& c) { return fused_adam(c, false); }, kRuntimeFloats},
};

}  // namespace
}  // namespace lowering
