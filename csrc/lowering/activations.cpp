// Gated and shrinking activations and their backwards: glu, hardshrink, softshrink, log_sigmoid, prelu.
#include <utility>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

// The two halves of x along dim.
std::pair<Value, Value> halves(Builder& b, Value x, int64_t dim) {
  int64_t h = x.dims()[dim] / 2;
  Dims start(x.rank(), 0), mid = x.dims(), ones(x.rank(), 1);
  mid[dim] = h;
  Dims start2(x.rank(), 0);
  start2[dim] = h;
  return {b.slice(x, start, mid, ones), b.slice(x, start2, x.dims(), ones)};
}

Value sigmoid_of(Builder& b, Value x) {
  // 1 / (1 + exp(-x)), as the CPU kernel computes it
  return div(b, like(b, 1, x), add(b, like(b, 1, x), b.unary("exponential", b.unary("negate", x))));
}

Value glu(Ctx& c) {
  Builder& b = c.b;
  Value x = b.convert(c.t(0), compute_type(c.out_type()));
  int64_t dim = wrap_dim(c.i(1), x.rank());
  if (x.dims()[dim] % 2) throw hlo::Error("glu: odd dimension");
  auto [a, g] = halves(b, x, dim);
  return mul(b, a, sigmoid_of(b, g));
}

Value glu_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value go = b.convert(c.t(0), t), x = b.convert(c.t(1), t);
  int64_t dim = wrap_dim(c.i(2), x.rank());
  auto [a, g] = halves(b, x, dim);
  Value s = sigmoid_of(b, g);
  Value ga = mul(b, s, go);
  Value gb = mul(b, mul(b, mul(b, sub(b, like(b, 1, s), s), s), a), go);
  return b.concatenate({ga, gb}, dim);
}

// |x| <= lambd (both ends included)
Value in_band(Builder& b, Value x, Value l) {
  return andv(b, b.compare(Cmp::GE, x, b.unary("negate", l)), b.compare(Cmp::LE, x, l));
}

Value hardshrink(Ctx& c) {
  Value x = operand(c, 0), l = operand(c, 1);
  return c.b.select(in_band(c.b, x, l), like(c.b, 0, x), x);
}

Value softshrink(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 0), l = up(c, 1);
  Value r = b.select(b.compare(Cmp::LT, x, b.unary("negate", l)), add(b, x, l), mul(b, x, like(b, 0, x)));
  return b.select(b.compare(Cmp::GT, x, l), sub(b, x, l), r);
}

// hardshrink_backward / softshrink_backward(grad, self, lambd): 0 inside the band, grad outside.
Value shrink_backward(Ctx& c) {
  Value g = operand(c, 0), x = operand(c, 1), l = operand(c, 2);
  return c.b.select(in_band(c.b, x, l), like(c.b, 0, g), g);
}

// log_sigmoid_forward(self) -> (min(x, 0) - log1p(exp(-|x|)), buffer exp(-|x|))
V log_sigmoid_forward(Ctx& c) {
  Builder& b = c.b;
  Value x = b.convert(c.t(0), compute_type(c.out_type(0)));
  Value z = b.unary("exponential", b.unary("negate", b.unary("abs", x)));
  Value out = sub(b, b.binary("minimum", x, like(b, 0, x)), b.unary("log_plus_one", z));
  Value buf = numel(c.out_dims(1)) == numel(x.dims()) ? b.reshape(z, c.out_dims(1)) : b.constant(0, c.out(1));
  return V{out, buf};
}

// log_sigmoid_backward(grad, self, buffer): (max_deriv - sign * z / (1 + z)) * grad
Value log_sigmoid_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value g = operand(c, 0, t, c.out_dims()), x = operand(c, 1, t, c.out_dims());
  Value neg = b.compare(Cmp::LT, x, like(b, 0, x));
  Value max_deriv = b.select(neg, like(b, 1, x), like(b, 0, x));
  Value sign = b.select(neg, like(b, 1, x), like(b, -1, x));
  Value z = b.unary("exponential", b.unary("negate", b.unary("abs", x)));
  return mul(b, sub(b, max_deriv, mul(b, sign, div(b, z, add(b, like(b, 1, z), z)))), g);
}

Value prelu(Ctx& c) {
  Builder& b = c.b;
  Value x = operand(c, 0), w = operand(c, 1);
  return b.select(b.compare(Cmp::GT, x, like(b, 0, x)), x, mul(b, w, x));
}

// _prelu_kernel_backward(grad, self, weight) -> (grad_input, grad_weight), both elementwise.
V prelu_backward(Ctx& c) {
  Builder& b = c.b;
  const Dims& d = c.out_dims(0);
  ElementType t = c.out_type(0);
  Value g = operand(c, 0, t, d), x = operand(c, 1, t, d), w = operand(c, 2, t, d);
  Value pos = b.compare(Cmp::GT, x, like(b, 0, x));
  Value gi = b.select(pos, g, mul(b, w, g));
  Value gw = b.select(pos, like(b, 0, x), mul(b, x, g));
  if (c.out_dims(1) != d) throw hlo::Error("prelu_backward: unexpected weight gradient shape");
  return V{gi, gw};
}

const Rows rows = {
    {{"glu", "glu.out"}, [](Ctx& c) { return one(glu(c)); }},
    {{"glu_backward", "glu_backward.grad_input"}, [](Ctx& c) { return one(glu_backward(c)); }},
    {{"hardshrink", "hardshrink.out"}, [](Ctx& c) { return one(hardshrink(c)); }},
    {{"hardshrink_backward", "hardshrink_backward.grad_input"}, [](Ctx& c) { return one(shrink_backward(c)); }},
    {{"softshrink", "softshrink.out"}, [](Ctx& c) { return one(softshrink(c)); }},
    {{"softshrink_backward", "softshrink_backward.grad_input"}, [](Ctx& c) { return one(shrink_backward(c)); }},
    {{"log_sigmoid_forward", "log_sigmoid_forward.output"}, log_sigmoid_forward},
    {{"log_sigmoid_backward", "log_sigmoid_backward.grad_input"}, [](Ctx& c) { return one(log_sigmoid_backward(c)); }},
    {{"_prelu_kernel"}, [](Ctx& c) { return one(prelu(c)); }},
    {{"_prelu_kernel_backward"}, prelu_backward},
};

}  // namespace
}  // namespace lowering
