// Batch normalization: statistics over every dim but the channel dim (1). Half inputs compute in f32.
#include <cmath>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;

struct Shape {
  Dims reduce;  // all dims but 1
  int64_t count = 1;
  Dims channel_only;  // broadcast dims of a [C] value into the input: {1}
};

Shape shape_of(const Value& x) {
  Shape s;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d == 1) continue;
    s.reduce.push_back(d);
    s.count *= x.dims()[d];
  }
  s.channel_only = {1};
  return s;
}

Value per_channel(Builder& b, Value c, const Value& like_x) { return b.broadcast_in_dim(c, like_x.dims(), {1}); }

Value mean_over(Builder& b, Value x, const Shape& s) {
  Value sum = reduce_sum(b, x, s.reduce);
  return b.binary("divide", sum, b.constant(static_cast<double>(s.count), sum.type));
}

// out = x * alpha + beta, alpha = invstd * weight and beta = bias - mean * alpha per channel, in the
// accumulation type, as the CPU's kernel computes it. With `rounded`, mean and invstd are training
// statistics, which the CPU stores in the parameters' dtype (bfloat16 for a bfloat16 model) before using
// them: they are rounded to it first.
Value normalize(Ctx& c, Value x, Value mean, Value invstd, size_t weight, size_t bias, bool rounded = false) {
  Builder& b = c.b;
  if (rounded) {
    ElementType param = c.has(weight) ? c.t(weight).elem() : c.has(bias) ? c.t(bias).elem() : c.t(0).elem();
    mean = b.convert(b.convert(mean, param), mean.elem());
    invstd = b.convert(b.convert(invstd, param), invstd.elem());
  }
  Value alpha = invstd, beta = b.binary("multiply", mean, alpha);
  if (c.has(weight)) {
    alpha = b.binary("multiply", alpha, b.convert(c.t(weight), x.elem()));
    beta = b.binary("multiply", mean, alpha);
  }
  beta = c.has(bias) ? b.binary("subtract", b.convert(c.t(bias), x.elem()), beta) : b.unary("negate", beta);
  return b.binary("add", b.binary("multiply", x, per_channel(b, alpha, x)), per_channel(b, beta, x));
}

ElementType acc(Ctx& c) { return accumulation_type(c.t(0).elem()); }

// Training statistics: (mean, biased var, invstd).
std::tuple<Value, Value, Value> batch_stats(Ctx& c, Value x, double eps) {
  Builder& b = c.b;
  Shape s = shape_of(x);
  Value mean = mean_over(b, x, s);
  Value centered = b.binary("subtract", x, per_channel(b, mean, x));
  Value var = mean_over(b, b.binary("multiply", centered, centered), s);
  Value invstd = b.unary("rsqrt", b.binary("add", var, b.constant(eps, var.type)));
  return {mean, var, invstd};
}

// Training with running statistics: (out, save_mean, save_invstd, running_mean_out, running_var_out).
V train_and_update(Ctx& c, double momentum, double eps) {
  Builder& b = c.b;
  Value x = b.convert(c.t(0), acc(c));
  Value rm = b.convert(c.t(3), acc(c)), rv = b.convert(c.t(4), acc(c));
  auto [mean, var, invstd] = batch_stats(c, x, eps);
  Shape s = shape_of(x);
  double unbias = s.count > 1 ? static_cast<double>(s.count) / (s.count - 1) : 1.0;
  Value m = b.constant(momentum, rm.type), keep = b.constant(1 - momentum, rm.type);
  Value new_rm = b.binary("add", b.binary("multiply", keep, rm), b.binary("multiply", m, mean));
  Value new_rv = b.binary("add", b.binary("multiply", keep, rv),
                          b.binary("multiply", m, b.binary("multiply", var, b.constant(unbias, var.type))));
  return V{normalize(c, x, mean, invstd, 1, 2, true), mean, invstd, new_rm, new_rv};
}

// _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var, training, momentum, eps)
//   -> (out, save_mean, save_invstd, running_mean_out, running_var_out)
V train_with_stats(Ctx& c) {
  Builder& b = c.b;
  const bool training = c.i(5);
  const double momentum = c.d(6), eps = c.d(7);
  if (!training) {
    Value x = b.convert(c.t(0), acc(c));
    Value rm = b.convert(c.t(3), acc(c)), rv = b.convert(c.t(4), acc(c));
    Value invstd = b.unary("rsqrt", b.binary("add", rv, b.constant(eps, rv.type)));
    return V{normalize(c, x, rm, invstd, 1, 2), b.constant(0, c.out(1)), b.constant(0, c.out(2)), rm, rv};
  }
  return train_and_update(c, momentum, eps);
}

// _batch_norm_with_update_functional(input, weight, bias, running_mean, running_var, momentum, eps)
//   -> (out, save_mean, save_invstd, reserve (empty), running_mean_out, running_var_out)
V train_with_update(Ctx& c) {
  V r = train_and_update(c, c.d(5), c.d(6));
  return V{r[0], r[1], r[2], c.b.constant(0, c.out(3)), r[3], r[4]};
}

// _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
V train_without_stats(Ctx& c) {
  Value x = c.b.convert(c.t(0), acc(c));
  auto [mean, var, invstd] = batch_stats(c, x, c.d(5));
  return V{normalize(c, x, mean, invstd, 1, 2, true), mean, invstd};
}

// _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps)
V inference(Ctx& c) {
  Builder& b = c.b;
  Value x = b.convert(c.t(0), acc(c));
  Value rm = b.convert(c.t(3), acc(c)), rv = b.convert(c.t(4), acc(c));
  Value invstd = b.unary("rsqrt", b.binary("add", rv, b.constant(c.d(6), rv.type)));
  return V{normalize(c, x, rm, invstd, 1, 2), b.constant(0, c.out(1)), b.constant(0, c.out(2))};
}

// native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
//                            train, eps, output_mask) -> (grad_input, grad_weight, grad_bias)
V backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = acc(c);
  Value g = b.convert(c.t(0), t), x = b.convert(c.t(1), t);
  Shape s = shape_of(x);
  const bool train = c.i(7);
  Value mean, invstd;
  if (train) {
    mean = b.convert(c.t(5), t);
    invstd = b.convert(c.t(6), t);
  } else {
    mean = b.convert(c.t(3), t);
    invstd = b.unary("rsqrt", b.binary("add", b.convert(c.t(4), t), b.constant(c.d(8), Type{t, {x.dims()[1]}})));
  }
  Value xhat = b.binary("multiply", b.binary("subtract", x, per_channel(b, mean, x)), per_channel(b, invstd, x));
  Value sum_g = reduce_sum(b, g, s.reduce);
  Value sum_gx = reduce_sum(b, b.binary("multiply", g, xhat), s.reduce);
  Value w = c.has(2) ? b.convert(c.t(2), t) : b.constant(1, Type{t, {x.dims()[1]}});
  V out(3);
  if (c.wanted(0)) {
    Value scale = b.binary("multiply", w, invstd);
    if (train) {
      Value n = b.constant(static_cast<double>(s.count), x.type);
      Value inner = b.binary("subtract", b.binary("subtract", b.binary("multiply", n, g), per_channel(b, sum_g, x)),
                             b.binary("multiply", xhat, per_channel(b, sum_gx, x)));
      out[0] = b.binary("multiply", b.binary("divide", per_channel(b, scale, x), n), inner);
    } else {
      out[0] = b.binary("multiply", g, per_channel(b, scale, x));
    }
  }
  if (c.wanted(1)) out[1] = sum_gx;
  if (c.wanted(2)) out[2] = sum_g;
  return out;
}

const Rows rows = {
    {{"_native_batch_norm_legit_functional", "_native_batch_norm_legit"}, train_with_stats},
    {{"_batch_norm_with_update_functional", "_batch_norm_with_update"}, train_with_update},
    {{"_native_batch_norm_legit.no_stats"}, train_without_stats},
    {{"_native_batch_norm_legit_no_training"}, inference},
    {{"native_batch_norm_backward"}, backward},
    // batch_norm_backward(..., update, eps, output_mask, reserve): the same arguments, `update` as `train`
    {{"batch_norm_backward"}, backward},
};

}  // namespace
}  // namespace lowering
