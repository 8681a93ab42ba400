// Neural-network rows: normalization (layer, group), losses (nll, mse, bce, smooth l1, huber), convolution (1-d to 3-d, grouped, transposed) and 2-d pooling (max with indices, average, adaptive
// average), each with its backward. Half-precision inputs compute in float32, as torch's CPU kernels do;
// the aten layer converts results to the types shape inference promised.
#include <algorithm>
#include <cmath>
#include <string>

#include "lowering/helpers.h"
#include "lowering/view.h"
#include "lowering/windows.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

// ------------------------------------------------------------------------------------------ helpers
Value add(Builder& b, Value x, Value y) { return b.binary("add", x, y); }
Value sub(Builder& b, Value x, Value y) { return b.binary("subtract", x, y); }
Value mul(Builder& b, Value x, Value y) { return b.binary("multiply", x, y); }
Value div(Builder& b, Value x, Value y) { return b.binary("divide", x, y); }
Value maxv(Builder& b, Value x, Value y) { return nan_max(b, x, y); }
Value minv(Builder& b, Value x, Value y) { return nan_min(b, x, y); }
Value andv(Builder& b, Value x, Value y) { return b.binary("and", x, y); }
Value orv(Builder& b, Value x, Value y) { return b.binary("or", x, y); }

Dims iota_dims(int64_t lo, int64_t hi) {
  Dims d;
  for (int64_t i = lo; i < hi; ++i) d.push_back(i);
  return d;
}

int64_t product(const Dims& d, size_t lo = 0, size_t hi = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = lo; i < std::min(hi, d.size()); ++i) n *= d[i];
  return n;
}

// `v` (whose dims are the `kept` dims of `dims`) broadcast to `dims`.
Value bcast(Builder& b, Value v, const Dims& dims, const Dims& kept) { return b.broadcast_in_dim(v, dims, kept); }

// Tensor argument k converted to `t`.
Value arg_as(Ctx& c, size_t k, ElementType t) { return c.b.convert(c.t(k), t); }

// The float type a row computes in: f32 for half types (and for integers, which never reach these rows).
ElementType compute_type(ElementType t) {
  ElementType a = accumulation_type(t);
  return pjrt::is_float(a) ? a : ElementType::kF32;
}

// int[2] arguments may arrive with one element meaning "the same for every spatial dim".
Dims expand(const Dims& v, size_t n, int64_t dflt) {
  if (v.empty()) return Dims(n, dflt);
  if (v.size() == 1 && n > 1) return Dims(n, v[0]);
  if (v.size() != n) throw hlo::Error("expected " + std::to_string(n) + " values for a spatial argument");
  return v;
}

// numpy broadcast of two shapes.
Dims broadcast_shape(const Dims& a, const Dims& b) {
  size_t n = std::max(a.size(), b.size());
  Dims out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i + a.size() >= n ? a[i + a.size() - n] : 1;
    int64_t y = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (x != y && x != 1 && y != 1) throw hlo::Error("shapes do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// Applies a loss reduction to elementwise losses `l`.
Value reduce_loss(Builder& b, Value l, int64_t reduction) {
  if (reduction == kNone) return l;
  Value s = reduce_sum(b, l, iota_dims(0, l.rank()));
  if (reduction == kSum) return s;
  return div(b, s, b.constant(static_cast<double>(l.type.numel()), s.type));
}

// The incoming gradient of a reduced loss, broadcast to `dims` and scaled by 1/numel for mean.
Value loss_grad(Builder& b, Value g, const Dims& dims, int64_t reduction) {
  if (reduction == kNone) return b.broadcast_to(g, dims);
  g = b.broadcast_to(b.reshape(g, {}), dims);
  if (reduction == kMean) g = div(b, g, like(b, static_cast<double>(product(dims)), g));
  return g;
}

// --------------------------------------------------------------------------------------- layer norm
// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
V layer_norm(Ctx& c) {
  Builder& b = c.b;
  Value x = arg_as(c, 0, compute_type(c.t(0).elem()));
  int64_t r = x.rank(), axis = r - static_cast<int64_t>(c.ints(1).size());
  Dims norm = iota_dims(axis, r), outer = iota_dims(0, axis);
  double n = static_cast<double>(product(x.dims(), axis));
  Value sum = reduce_sum(b, x, norm);
  Value mean = div(b, sum, like(b, n, sum));
  Value xc = sub(b, x, bcast(b, mean, x.dims(), outer));
  Value var = div(b, reduce_sum(b, mul(b, xc, xc), norm), like(b, n, mean));
  Value rstd = b.unary("rsqrt", add(b, var, like(b, c.d(4), var)));
  Value y = mul(b, xc, bcast(b, rstd, x.dims(), outer));
  if (c.has(2)) y = mul(b, y, bcast(b, arg_as(c, 2, x.elem()), x.dims(), norm));
  if (c.has(3)) y = add(b, y, bcast(b, arg_as(c, 3, x.elem()), x.dims(), norm));
  return V{y, b.reshape(mean, c.out_dims(1)), b.reshape(rstd, c.out_dims(2))};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
V layer_norm_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  Value g = arg_as(c, 0, t), x = arg_as(c, 1, t);
  int64_t r = x.rank(), axis = r - static_cast<int64_t>(c.ints(2).size());
  Dims norm = iota_dims(axis, r), outer = iota_dims(0, axis);
  Dims outer_dims(x.dims().begin(), x.dims().begin() + axis);
  Value mean = b.reshape(arg_as(c, 3, t), outer_dims), rstd = b.reshape(arg_as(c, 4, t), outer_dims);
  Value rstd_b = bcast(b, rstd, x.dims(), outer);
  Value xhat = mul(b, sub(b, x, bcast(b, mean, x.dims(), outer)), rstd_b);
  V res(3);
  if (c.wanted(0)) {
    Value gw = c.has(5) ? mul(b, g, bcast(b, arg_as(c, 5, t), x.dims(), norm)) : g;
    Value n = b.constant(static_cast<double>(product(x.dims(), axis)), Type{t, outer_dims});
    Value m1 = div(b, reduce_sum(b, gw, norm), n);
    Value m2 = div(b, reduce_sum(b, mul(b, gw, xhat), norm), n);
    Value inner = sub(b, sub(b, gw, bcast(b, m1, x.dims(), outer)), mul(b, xhat, bcast(b, m2, x.dims(), outer)));
    res[0] = mul(b, rstd_b, inner);
  }
  if (c.wanted(1)) res[1] = b.reshape(reduce_sum(b, mul(b, g, xhat), outer), c.out_dims(1));
  if (c.wanted(2)) res[2] = b.reshape(reduce_sum(b, g, outer), c.out_dims(2));
  return res;
}

// --------------------------------------------------------------------------------------- group norm
// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean [N, G], rstd [N, G])
V group_norm(Ctx& c) {
  Builder& b = c.b;
  Value in = c.t(0);
  ElementType t = compute_type(in.elem());
  int64_t N = c.i(3), C = c.i(4), HW = c.i(5), G = c.i(6);
  if (G <= 0 || C % G != 0) throw hlo::Error("group_norm: unsupported sizes");
  Value x = b.reshape(b.convert(in, t), {N, G, C / G * HW});
  Value n = b.constant(static_cast<double>(C / G * HW), Type{t, {N, G}});
  // empty groups (HxW == 0): mean 0 and rstd NaN, as the CPU gives
  Value mean = C / G * HW == 0 ? like(b, 0, n) : div(b, reduce_sum(b, x, {2}), n);
  Value xc = sub(b, x, bcast(b, mean, x.dims(), {0, 1}));
  Value var = div(b, reduce_sum(b, mul(b, xc, xc), {2}), n);
  Value rstd = b.unary("rsqrt", add(b, var, like(b, c.d(7), var)));
  Value y = b.reshape(mul(b, xc, bcast(b, rstd, x.dims(), {0, 1})), {N, C, HW});
  if (c.has(1)) y = mul(b, y, bcast(b, arg_as(c, 1, t), y.dims(), {1}));
  if (c.has(2)) y = add(b, y, bcast(b, arg_as(c, 2, t), y.dims(), {1}));
  return V{b.reshape(y, in.dims()), b.reshape(mean, c.out_dims(1)), b.reshape(rstd, c.out_dims(2))};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
V group_norm_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  int64_t N = c.i(5), C = c.i(6), HW = c.i(7), G = c.i(8);
  if (G <= 0 || C % G != 0) throw hlo::Error("group_norm_backward: unsupported sizes");
  int64_t D = C / G;
  Dims d4{N, G, D, HW};
  Value g = b.reshape(arg_as(c, 0, t), d4), x = b.reshape(arg_as(c, 1, t), d4);
  Value mean = b.reshape(arg_as(c, 2, t), {N, G}), rstd = b.reshape(arg_as(c, 3, t), {N, G});
  Value rstd_b = bcast(b, rstd, d4, {0, 1});
  Value xhat = mul(b, sub(b, x, bcast(b, mean, d4, {0, 1})), rstd_b);
  V res(3);
  if (c.wanted(0)) {
    Value gw = c.has(4) ? mul(b, g, bcast(b, b.reshape(arg_as(c, 4, t), {G, D}), d4, {1, 2})) : g;
    Value n = b.constant(static_cast<double>(D * HW), Type{t, {N, G}});
    Value m1 = div(b, reduce_sum(b, gw, {2, 3}), n);
    Value m2 = div(b, reduce_sum(b, mul(b, gw, xhat), {2, 3}), n);
    Value inner = sub(b, sub(b, gw, bcast(b, m1, d4, {0, 1})), mul(b, xhat, bcast(b, m2, d4, {0, 1})));
    res[0] = b.reshape(mul(b, rstd_b, inner), c.out_dims(0));
  }
  if (c.wanted(1)) res[1] = b.reshape(reduce_sum(b, mul(b, g, xhat), {0, 3}), c.out_dims(1));
  if (c.wanted(2)) res[2] = b.reshape(reduce_sum(b, g, {0, 3}), c.out_dims(2));
  return res;
}

// ----------------------------------------------------------------------------------------- nll loss
// The class dim of nll_loss inputs: 1 for [N, C, ...], 0 for a single sample [C].
struct NllPick {
  Value hit;     // pred, input's shape: the target's class (and not ignore_index)
  Value weight;  // the class weight at each position of the input's shape (ones without weight)
  int64_t class_dim;
  Dims other;    // the input's dims other than the class dim (where the target's dims go)
};

NllPick nll_pick(Ctx& c, const Value& x, size_t target_arg, size_t weight_arg, size_t ignore_arg) {
  Builder& b = c.b;
  NllPick p;
  p.class_dim = x.rank() >= 2 ? 1 : 0;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != p.class_dim) p.other.push_back(i);
  Dims tdims;
  for (int64_t i : p.other) tdims.push_back(x.dims()[i]);
  Value target = b.reshape(b.convert(c.t(target_arg), ElementType::kS64), tdims);
  Value tb = bcast(b, target, x.dims(), p.other);
  Value cls = b.iota(Type{ElementType::kS64, x.dims()}, p.class_dim);
  Value keep = b.compare(Cmp::NE, tb, b.constant_i(c.i(ignore_arg), tb.type));
  p.hit = andv(b, b.compare(Cmp::EQ, cls, tb), keep);
  p.weight = c.has(weight_arg) ? bcast(b, arg_as(c, weight_arg, x.elem()), x.dims(), {p.class_dim}) : like(b, 1, x);
  return p;
}

// The input at each position's target class, and that class's weight (ones without weight), gathered:
// the target's shape, not the input's (a one-hot select would read the whole [N, C] input twice more).
struct NllGather {
  Value picked, weight;
  Value keep;  // pred: the target is not ignore_index
};

NllGather nll_gather(Ctx& c, const Value& x, size_t target_arg, size_t weight_arg, size_t ignore_arg) {
  Builder& b = c.b;
  int64_t class_dim = x.rank() >= 2 ? 1 : 0;
  Dims tdims, strides(x.rank(), 1);
  for (int64_t i = x.rank() - 2; i >= 0; --i) strides[i] = strides[i + 1] * x.dims()[i + 1];
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != class_dim) tdims.push_back(x.dims()[i]);
  Type idx_type{ElementType::kS64, tdims};
  Value target = b.reshape(b.convert(c.t(target_arg), ElementType::kS64), tdims);
  NllGather g;
  g.keep = b.compare(Cmp::NE, target, b.constant_i(c.i(ignore_arg), idx_type));
  Value out_of_range = orv(b, b.compare(Cmp::LT, target, b.constant_i(0, idx_type)),
                           b.compare(Cmp::GE, target, b.constant_i(x.dims()[class_dim], idx_type)));
  check(b, andv(b, g.keep, out_of_range), target, "Target {value} is out of bounds.", true);
  Value cls = b.clamp(b.constant_i(0, Type{ElementType::kS64, {}}), target,
                      b.constant_i(x.dims()[class_dim] - 1, Type{ElementType::kS64, {}}));
  Value linear = b.binary("multiply", cls, b.constant_i(strides[class_dim], idx_type));
  for (int64_t i = 0, k = 0; i < x.rank(); ++i) {
    if (i == class_dim) continue;
    linear = b.binary("add", linear, b.binary("multiply", b.iota(idx_type, k++), b.constant_i(strides[i], idx_type)));
  }
  g.picked = gather_flat(b, b.reshape(x, {x.type.numel()}), linear);
  g.weight = c.has(weight_arg) ? gather_flat(b, arg_as(c, weight_arg, x.elem()), cls) : like(b, 1, g.picked);
  return g;
}

// nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight)
V nll_loss_forward(Ctx& c) {
  Builder& b = c.b;
  Value x = arg_as(c, 0, compute_type(c.t(0).elem()));
  Value losses, total;
  if (x.type.numel() > 0) {
    NllGather g = nll_gather(c, x, 1, 2, 4);
    Value zero = like(b, 0, g.picked);
    losses = b.select(g.keep, b.unary("negate", mul(b, g.picked, g.weight)), zero);
    total = reduce_sum(b, b.select(g.keep, g.weight, zero), iota_dims(0, losses.rank()));
  } else {  // no classes or no samples: nothing to gather from
    NllPick p = nll_pick(c, x, 1, 2, 4);
    Value zero = like(b, 0, x);
    losses = reduce_sum(b, b.select(p.hit, b.unary("negate", mul(b, x, p.weight)), zero), {p.class_dim});
    total = reduce_sum(b, b.select(p.hit, p.weight, zero), iota_dims(0, x.rank()));
  }
  int64_t reduction = c.i(3);
  if (reduction == kNone) return V{b.reshape(losses, c.out_dims(0)), b.constant(0, c.out(1))};
  Value sum = reduce_sum(b, losses, iota_dims(0, losses.rank()));
  Value out = reduction == kMean ? div(b, sum, total) : sum;
  return V{b.reshape(out, c.out_dims(0)), b.reshape(total, c.out_dims(1))};
}

// nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight?, reduction, ignore_index,
// total_weight) -> grad_input
V nll_loss_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  Value x = arg_as(c, 1, t);
  NllPick p = nll_pick(c, x, 2, 3, 5);
  int64_t reduction = c.i(4);
  Value g = arg_as(c, 0, t);
  if (reduction == kNone) {
    Dims tdims;
    for (int64_t i : p.other) tdims.push_back(x.dims()[i]);
    g = bcast(b, b.reshape(g, tdims), x.dims(), p.other);
  } else {
    g = b.reshape(g, {});
    if (reduction == kMean) g = div(b, g, b.reshape(arg_as(c, 6, t), {}));
    g = b.broadcast_to(g, x.dims());
  }
  Value grad = b.unary("negate", mul(b, p.weight, g));
  return one(b.select(p.hit, grad, like(b, 0, x)));
}

// ------------------------------------------------------------------------------- elementwise losses
// The two operands of a pointwise loss in the compute type, broadcast together.
std::pair<Value, Value> loss_operands(Ctx& c, size_t a, size_t t, const Dims* dims = nullptr) {
  ElementType ct = compute_type(promote_types(c.t(a).elem(), c.t(t).elem()));
  Dims d = dims ? *dims : broadcast_shape(c.t(a).dims(), c.t(t).dims());
  return {c.b.broadcast_to(arg_as(c, a, ct), d), c.b.broadcast_to(arg_as(c, t, ct), d)};
}

V mse_loss(Ctx& c) {
  auto [x, y] = loss_operands(c, 0, 1);
  Value d = sub(c.b, x, y);
  return one(c.b.reshape(reduce_loss(c.b, mul(c.b, d, d), c.i(2)), c.out_dims()));
}

// mse_loss_backward(grad_output, self, target, reduction)
V mse_loss_backward(Ctx& c) {
  auto [x, y] = loss_operands(c, 1, 2, &c.out_dims());
  Value g = loss_grad(c.b, arg_as(c, 0, x.elem()), x.dims(), c.i(3));
  return one(mul(c.b, mul(c.b, like(c.b, 2, x), sub(c.b, x, y)), g));
}

// binary_cross_entropy(self, target, weight?, reduction)
V bce(Ctx& c) {
  Builder& b = c.b;
  auto [x, y] = loss_operands(c, 0, 1);
  Value floor = like(b, -100, x), one_ = like(b, 1, x);
  Value log_x = maxv(b, b.unary("log", x), floor);
  Value log_1mx = maxv(b, b.unary("log_plus_one", b.unary("negate", x)), floor);
  Value l = sub(b, mul(b, sub(b, y, one_), log_1mx), mul(b, y, log_x));
  if (c.has(2)) l = mul(b, l, b.broadcast_to(arg_as(c, 2, x.elem()), x.dims()));
  return one(b.reshape(reduce_loss(b, l, c.i(3)), c.out_dims()));
}

// binary_cross_entropy_backward(grad_output, self, target, weight?, reduction)
V bce_backward(Ctx& c) {
  Builder& b = c.b;
  auto [x, y] = loss_operands(c, 1, 2, &c.out_dims());
  Value g = loss_grad(b, arg_as(c, 0, x.elem()), x.dims(), c.i(4));
  Value denom = maxv(b, mul(b, sub(b, like(b, 1, x), x), x), like(b, 1e-12, x));
  Value grad = div(b, mul(b, g, sub(b, x, y)), denom);
  if (c.has(3)) grad = mul(b, grad, b.broadcast_to(arg_as(c, 3, x.elem()), x.dims()));
  return one(grad);
}

// binary_cross_entropy_with_logits(self, target, weight?, pos_weight?, reduction):
// (1 - y) x + (1 + (pos_weight - 1) y) softplus(-x), with softplus(-x) = log1p(exp(-|x|)) + max(-x, 0).
V bce_with_logits(Ctx& c) {
  Builder& b = c.b;
  auto [x, y] = loss_operands(c, 0, 1);
  Value one_ = like(b, 1, x), zero = like(b, 0, x);
  Value sp = add(b, b.unary("log_plus_one", b.unary("exponential", b.unary("negate", b.unary("abs", x)))),
                 maxv(b, b.unary("negate", x), zero));
  Value lw = one_;
  if (c.has(3)) {
    Value pw = b.broadcast_to(arg_as(c, 3, x.elem()), x.dims());
    lw = add(b, one_, mul(b, sub(b, pw, one_), y));
  }
  Value l = add(b, mul(b, sub(b, one_, y), x), mul(b, lw, sp));
  if (c.has(2)) l = mul(b, l, b.broadcast_to(arg_as(c, 2, x.elem()), x.dims()));
  return one(b.reshape(reduce_loss(b, l, c.i(4)), c.out_dims()));
}

// smooth_l1_loss(self, target, reduction, beta) and huber_loss(self, target, reduction, delta)
V smooth_l1(Ctx& c, bool huber) {
  Builder& b = c.b;
  auto [x, y] = loss_operands(c, 0, 1);
  double p = c.d(3);
  Value d = sub(b, x, y), a = b.unary("abs", d), pv = like(b, p, x), half = like(b, 0.5, x);
  Value quad = mul(b, mul(b, half, d), d);
  Value l;
  if (huber) {
    l = b.select(b.compare(Cmp::LT, a, pv), quad, mul(b, pv, sub(b, a, mul(b, half, pv))));
  } else {
    l = b.select(b.compare(Cmp::LT, a, pv), div(b, quad, pv), sub(b, a, mul(b, half, pv)));
  }
  return one(b.reshape(reduce_loss(b, l, c.i(2)), c.out_dims()));
}

// smooth_l1_loss_backward / huber_loss_backward(grad_output, self, target, reduction, beta | delta)
V smooth_l1_backward(Ctx& c, bool huber) {
  Builder& b = c.b;
  auto [x, y] = loss_operands(c, 1, 2, &c.out_dims());
  Value g = loss_grad(b, arg_as(c, 0, x.elem()), x.dims(), c.i(3));
  double p = c.d(4);
  Value d = sub(b, x, y), pv = like(b, p, x);
  Value outer = huber ? mul(b, g, pv) : g;
  Value inner = huber ? mul(b, d, g) : div(b, mul(b, d, g), pv);
  Value r = b.select(b.compare(Cmp::GE, d, pv), outer, inner);
  return one(b.select(b.compare(Cmp::LE, d, b.unary("negate", pv)), b.unary("negate", outer), r));
}

// -------------------------------------------------------------------------------------- convolution
// Convolutions here keep the two non-spatial dims first and the spatial dims after, in order. `lhs_fb`:
// the lhs is [feature, batch, ...] rather than [batch, feature, ...]; `rhs_io`: the kernel is
// [in, out, ...] rather than [out, in, ...]; `out_fb` likewise for the result.
struct ConvWindow {
  Dims strides, lhs_dilation, rhs_dilation;
  std::vector<std::pair<int64_t, int64_t>> padding;
};

std::string conv_spec(const char* a, const char* b, int64_t spatial) {
  std::string s = std::string("[") + a + ", " + b;
  for (int64_t i = 0; i < spatial; ++i) s += ", " + std::to_string(i);
  return s + "]";
}

Value conv(Builder& b, Value lhs, Value rhs, bool lhs_fb, bool rhs_io, bool out_fb, const ConvWindow& w,
           int64_t feature_groups, int64_t batch_groups) {
  int64_t s = lhs.rank() - 2;
  int64_t batch = lhs.dims()[lhs_fb ? 1 : 0] / batch_groups, feature = rhs.dims()[rhs_io ? 1 : 0];
  Dims out = out_fb ? Dims{feature, batch} : Dims{batch, feature};
  for (int64_t i = 0; i < s; ++i) {
    int64_t n = lhs.dims()[i + 2];
    int64_t dn = n > 0 ? (n - 1) * w.lhs_dilation[i] + 1 : 0;
    int64_t padded = dn + w.padding[i].first + w.padding[i].second;
    int64_t dk = (rhs.dims()[i + 2] - 1) * w.rhs_dilation[i] + 1;
    out.push_back(padded < dk ? 0 : (padded - dk) / w.strides[i] + 1);
  }
  std::string dn = conv_spec(lhs_fb ? "f" : "b", lhs_fb ? "b" : "f", s) + "x" +
                   conv_spec(rhs_io ? "i" : "o", rhs_io ? "o" : "i", s) + "->" +
                   conv_spec(out_fb ? "f" : "b", out_fb ? "b" : "f", s);
  return b.convolution(lhs, rhs, dn, w.strides, w.padding, w.lhs_dilation, w.rhs_dilation, feature_groups,
                       batch_groups, Type{lhs.elem(), out});
}

// A kernel [A, B, k...] whose dim 0 holds `groups` groups, as [groups * B, A / groups, k...]: the
// kernel of the transposed convolution (in and out features swapped within each group).
Value swap_kernel_io(Builder& b, Value w, int64_t groups) {
  const Dims& d = w.dims();
  int64_t a = d[0], bb = d[1];
  Dims split{groups, a / groups, bb};
  Dims perm{0, 2, 1};
  Dims merged{groups * bb, a / groups};
  for (int64_t i = 2; i < w.rank(); ++i) {
    split.push_back(d[i]);
    perm.push_back(i + 1);
    merged.push_back(d[i]);
  }
  return b.reshape(b.transpose(b.reshape(w, split), perm), merged);
}

// The transposed convolution of x [N, C, ...] with a regular-layout kernel w [C, O/g, k...] (torch's
// ConvTranspose weight), producing spatial sizes `target`: x dilated by the stride, padded by
// dilation*(k-1) - padding, convolved with the flipped, io-swapped kernel.
Value conv_transpose(Builder& b, Value x, Value w, const Dims& stride, const Dims& padding, const Dims& dilation,
                     int64_t groups, const Dims& target) {
  int64_t s = x.rank() - 2;
  Value k = b.reverse(swap_kernel_io(b, w, groups), iota_dims(2, 2 + s));
  ConvWindow win{Dims(s, 1), stride, dilation, {}};
  for (int64_t i = 0; i < s; ++i) {
    int64_t ext = dilation[i] * (w.dims()[i + 2] - 1);
    int64_t lo = ext - padding[i];
    int64_t hi = target[i] - 1 + ext - (x.dims()[i + 2] - 1) * stride[i] - lo;
    win.padding.push_back({lo, hi});
  }
  return conv(b, x, k, false, false, false, win, groups, 1);
}

// The kernel gradient of a regular convolution: x [N, C, ...], grad_out [N, O, ...] -> [O, C/g, k...].
// The batch is the contracted dimension; the stride becomes the kernel's dilation and vice versa, and
// groups become batch groups over C.
Value conv_weight_grad(Builder& b, Value x, Value gy, const Dims& kernel, const Dims& stride, const Dims& padding,
                       const Dims& dilation, int64_t groups) {
  int64_t s = x.rank() - 2;
  ConvWindow win{dilation, Dims(s, 1), stride, {}};
  for (int64_t i = 0; i < s; ++i) {
    int64_t hi = (kernel[i] - 1) * dilation[i] + (gy.dims()[i + 2] - 1) * stride[i] + 1 - x.dims()[i + 2] - padding[i];
    win.padding.push_back({padding[i], hi});
  }
  return conv(b, x, gy, true, true, true, win, 1, groups);
}

struct ConvArgs {
  Dims stride, padding, dilation, output_padding;
  bool transposed;
  int64_t groups;
};

ConvArgs conv_args(const Ctx& c, size_t first, int64_t spatial) {
  ConvArgs a;
  a.stride = expand(c.ints(first), spatial, 1);
  a.padding = expand(c.ints(first + 1), spatial, 0);
  a.dilation = expand(c.ints(first + 2), spatial, 1);
  a.transposed = c.i(first + 3) != 0;
  a.output_padding = expand(c.ints(first + 4), spatial, 0);
  a.groups = c.i(first + 5);
  // what ATen's convolution rejects and its meta kernel does not check: the CPU raises its own error for them
  if (a.groups < 1) throw hlo::Error("convolution: groups must be positive");
  for (int64_t d : a.dilation)
    if (d < 1) throw hlo::Error("convolution: dilation must be positive");
  for (int64_t st : a.stride)
    if (st < 1) throw hlo::Error("convolution: stride must be positive");
  for (int64_t p : a.padding)
    if (p < 0) throw hlo::Error("convolution: padding must not be negative");
  return a;
}

Dims spatial_of(const Dims& d) { return Dims(d.begin() + 2, d.end()); }

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
V convolution(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = arg_as(c, 0, t), w = arg_as(c, 1, t);
  if (x.rank() < 3 || x.rank() != w.rank()) throw hlo::Error("convolution: expected batched input");
  int64_t s = x.rank() - 2;
  ConvArgs a = conv_args(c, 3, s);
  Value y;
  if (a.transposed) {
    y = conv_transpose(b, x, w, a.stride, a.padding, a.dilation, a.groups, spatial_of(c.out_dims()));
  } else {
    ConvWindow win{a.stride, Dims(s, 1), a.dilation, {}};
    for (int64_t p : a.padding) win.padding.push_back({p, p});
    y = conv(b, x, w, false, false, false, win, a.groups, 1);
  }
  if (c.has(2)) y = add(b, y, bcast(b, arg_as(c, 2, t), y.dims(), {1}));
  return one(b.reshape(y, c.out_dims()));
}

// convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation, transposed,
// output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
V convolution_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  Value gy = arg_as(c, 0, t), x = arg_as(c, 1, t), w = arg_as(c, 2, t);
  if (x.rank() < 3 || x.rank() != w.rank()) throw hlo::Error("convolution_backward: expected batched input");
  int64_t s = x.rank() - 2;
  ConvArgs a = conv_args(c, 4, s);
  V res(3);
  if (c.wanted(0)) {
    Value gx;
    if (a.transposed) {
      ConvWindow win{a.stride, Dims(s, 1), a.dilation, {}};
      for (int64_t p : a.padding) win.padding.push_back({p, p});
      gx = conv(b, gy, w, false, false, false, win, a.groups, 1);
      // output_padding added rows at the end of the output that no input position reaches: the
      // convolution back covers them too, past the input's size
      if (gx.dims() != x.dims()) gx = b.slice(gx, Dims(x.rank(), 0), x.dims(), Dims(x.rank(), 1));
    } else {
      gx = conv_transpose(b, gy, w, a.stride, a.padding, a.dilation, a.groups, spatial_of(x.dims()));
    }
    res[0] = b.reshape(gx, c.out_dims(0));
  }
  if (c.wanted(1)) {
    Dims kernel = spatial_of(w.dims());
    Value gw = a.transposed ? conv_weight_grad(b, gy, x, kernel, a.stride, a.padding, a.dilation, a.groups)
                            : conv_weight_grad(b, x, gy, kernel, a.stride, a.padding, a.dilation, a.groups);
    res[1] = b.reshape(gw, c.out_dims(1));
  }
  if (c.wanted(2)) {
    Dims dims{0};
    for (int64_t i = 2; i < gy.rank(); ++i) dims.push_back(i);
    res[2] = b.reshape(reduce_sum(b, gy, dims), c.out_dims(2));
  }
  return res;
}

// ------------------------------------------------------------------------------------------ pooling
struct Pool2d {
  int64_t lead;  // number of leading (batch, channel) dims: 1 or 2
  Dims kernel, stride, padding, dilation;
  int64_t in[2], out[2];
};

Pool2d pool2d(const Ctx& c, const Value& x, const Dims& out_dims, size_t kernel_arg, bool has_dilation) {
  if (x.rank() != 3 && x.rank() != 4) throw hlo::Error("pool2d: expected a 3-d or 4-d input");
  Pool2d p;
  p.lead = x.rank() - 2;
  p.kernel = expand(c.ints(kernel_arg), 2, 1);
  p.stride = c.ints(kernel_arg + 1).empty() ? p.kernel : expand(c.ints(kernel_arg + 1), 2, 1);
  p.padding = expand(c.ints(kernel_arg + 2), 2, 0);
  p.dilation = has_dilation ? expand(c.ints(kernel_arg + 3), 2, 1) : Dims{1, 1};
  for (int i = 0; i < 2; ++i) {
    p.in[i] = x.dims()[p.lead + i];
    p.out[i] = out_dims[p.lead + i];
  }
  return p;
}

// s64 [OH, OW] (or [OH] / [OW] with `dim`): the input coordinate of kernel tap `tap` at each output
// position along spatial dim `i`.
Value tap_coordinate(Builder& b, const Pool2d& p, int i, int64_t tap, const Dims& dims, int64_t dim) {
  Value o = b.iota(Type{ElementType::kS64, dims}, dim);
  Value start = sub(b, mul(b, o, b.constant_i(p.stride[i], o.type)), b.constant_i(p.padding[i], o.type));
  return add(b, start, b.constant_i(tap * p.dilation[i], o.type));
}

// max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices):
// the kernel's taps visited in order as strided slices of the padded input, keeping the first maximum
// (a NaN counts as the maximum) and its flat index in the input plane.
V max_pool2d(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.elem() == ElementType::kPred || pjrt::is_complex(x.elem())) throw hlo::Error("max_pool2d: real non-bool inputs only");
  Pool2d p = pool2d(c, x, c.out_dims(0), 1, true);
  int64_t r = x.rank(), L = p.lead;
  Dims lo(r, 0), hi(r, 0), interior(r, 0);
  for (int i = 0; i < 2; ++i) {
    lo[L + i] = p.padding[i];
    hi[L + i] = std::max<int64_t>(0, (p.out[i] - 1) * p.stride[i] + p.dilation[i] * (p.kernel[i] - 1) + 1 -
                                         p.in[i] - p.padding[i]);
  }
  Value padded = b.pad(x, lowest(b, x.elem()), lo, hi, interior);  // padding taps are never valid
  Dims plane{p.out[0], p.out[1]};
  const Dims& od = c.out_dims(0);
  Dims plane_bdims{L, L + 1};
  Value best, best_idx, best_valid;
  for (int64_t i = 0; i < p.kernel[0]; ++i) {
    Value h = tap_coordinate(b, p, 0, i, plane, 0);
    for (int64_t j = 0; j < p.kernel[1]; ++j) {
      Value w = tap_coordinate(b, p, 1, j, plane, 1);
      Dims start(r, 0), limit = od, strides(r, 1);
      start[L] = i * p.dilation[0];
      start[L + 1] = j * p.dilation[1];
      for (int k = 0; k < 2; ++k) {
        limit[L + k] = start[L + k] + (p.out[k] - 1) * p.stride[k] + 1;
        strides[L + k] = p.stride[k];
      }
      Value v = b.slice(padded, start, limit, strides);
      Value zero = b.constant_i(0, h.type);
      Value valid = andv(b, andv(b, b.compare(Cmp::GE, h, zero), b.compare(Cmp::LT, h, b.constant_i(p.in[0], h.type))),
                         andv(b, b.compare(Cmp::GE, w, zero), b.compare(Cmp::LT, w, b.constant_i(p.in[1], w.type))));
      Value idx = bcast(b, add(b, mul(b, h, b.constant_i(p.in[1], h.type)), w), od, plane_bdims);
      valid = bcast(b, valid, od, plane_bdims);
      if (!best.valid()) {
        best = v;
        best_idx = idx;
        best_valid = valid;
        continue;
      }
      Value better = orv(b, orv(b, b.unary("not", best_valid), b.compare(Cmp::GT, v, best)), b.compare(Cmp::NE, v, v));
      Value take = andv(b, valid, better);
      best = b.select(take, v, best);
      best_idx = b.select(take, idx, best_idx);
      best_valid = orv(b, best_valid, valid);
    }
  }
  return V{best, best_idx};
}

// max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
// indices): grad_output summed into the input plane at the indices.
V max_pool2d_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  const Dims& xd = c.t(1).dims();
  if (xd.size() != 3 && xd.size() != 4) throw hlo::Error("max_pool2d_backward: expected a 3-d or 4-d input");
  int64_t planes = product(xd, 0, xd.size() - 2), hw = product(xd, xd.size() - 2);
  int64_t ohw = c.t(0).type.numel() / std::max<int64_t>(planes, 1);
  int64_t k = planes * ohw;
  if (k == 0 || hw == 0) return one(b.constant(0, Type{t, xd}));
  Value g = b.reshape(arg_as(c, 0, t), {k});
  Value idx = b.reshape(b.convert(c.t(7), ElementType::kS64), {planes, ohw});
  Type it{ElementType::kS64, {planes, ohw}};
  Value base = mul(b, b.iota(it, 0), b.constant_i(hw, it));
  idx = b.reshape(add(b, idx, base), {k, 1});
  Value res = scatter_add_rows(b, b.constant(0, Type{t, {planes * hw}}), idx, g);
  return one(b.reshape(res, xd));
}

// s64 [OH, OW]: avg_pool2d's divisor at each output position.
Value avg_pool_divisor(Builder& b, const Pool2d& p, bool count_include_pad) {
  Dims plane{p.out[0], p.out[1]};
  Value size[2];
  for (int i = 0; i < 2; ++i) {
    Value start = tap_coordinate(b, p, i, 0, plane, i);
    Value end = minv(b, add(b, start, b.constant_i(p.kernel[i], start.type)),
                     b.constant_i(p.in[i] + p.padding[i], start.type));
    if (count_include_pad) {
      size[i] = sub(b, end, start);
    } else {
      Value zero = b.constant_i(0, start.type);
      size[i] = sub(b, minv(b, end, b.constant_i(p.in[i], start.type)), maxv(b, start, zero));
    }
  }
  Value n = mul(b, size[0], size[1]);
  return maxv(b, n, b.constant_i(1, n.type));  // an empty window sums to zero: any divisor will do
}

// avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override?)
V avg_pool2d(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = arg_as(c, 0, t);
  Pool2d p = pool2d(c, x, c.out_dims(), 1, false);
  int64_t r = x.rank(), L = p.lead;
  Dims window(r, 1), strides(r, 1);
  std::vector<std::pair<int64_t, int64_t>> pad(r, {0, 0});
  for (int i = 0; i < 2; ++i) {
    window[L + i] = p.kernel[i];
    strides[L + i] = p.stride[i];
    int64_t hi = std::max<int64_t>(0, (p.out[i] - 1) * p.stride[i] + p.kernel[i] - p.in[i] - p.padding[i]);
    pad[L + i] = {p.padding[i], hi};
  }
  Value s = window_sum(b, x, window, strides, pad);
  if (s.dims() != c.out_dims()) throw hlo::Error("avg_pool2d: unexpected window count");
  Value divisor;
  if (c.has(6)) {
    divisor = b.constant(static_cast<double>(c.i(6)), s.type);
  } else {
    divisor = bcast(b, b.convert(avg_pool_divisor(b, p, c.i(5) != 0), t), s.dims(), {L, L + 1});
  }
  return one(div(b, s, divisor));
}

// avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override?): each input element sums grad/divisor over the windows that contain it, a window
// sum over the stride-dilated gradient.
V avg_pool2d_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  Value g = arg_as(c, 0, t);
  Pool2d p = pool2d(c, c.t(1), c.t(0).dims(), 2, false);
  int64_t L = p.lead;
  Value divisor = c.has(7) ? b.constant(static_cast<double>(c.i(7)), g.type)
                           : bcast(b, b.convert(avg_pool_divisor(b, p, c.i(6) != 0), t), g.dims(), {L, L + 1});
  g = div(b, g, divisor);
  Value gx = avg_pool_backward_sum(b, g, L, p.kernel, p.stride, p.padding, {p.in[0], p.in[1]}, {p.out[0], p.out[1]});
  return one(b.reshape(gx, c.out_dims()));
}

// [out, in]: row i averages adaptive bin i, [floor(i*in/out), ceil((i+1)*in/out)).
Value adaptive_matrix(Builder& b, int64_t in, int64_t out, ElementType t) {
  Type it{ElementType::kS64, {out, in}};
  Value i = b.iota(it, 0), h = b.iota(it, 1);
  Value vin = b.constant_i(in, it), vout = b.constant_i(out, it), one_ = b.constant_i(1, it);
  Value start = div(b, mul(b, i, vin), vout);
  Value end = div(b, sub(b, add(b, mul(b, add(b, i, one_), vin), vout), one_), vout);
  Value inside = andv(b, b.compare(Cmp::GE, h, start), b.compare(Cmp::LT, h, end));
  Value n = b.convert(sub(b, end, start), t);
  return b.select(inside, div(b, b.constant(1, n.type), n), b.constant(0, n.type));
}

// _adaptive_avg_pool2d(self, output_size)
V adaptive_avg_pool2d(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = arg_as(c, 0, t);
  if (x.rank() != 3 && x.rank() != 4) throw hlo::Error("adaptive_avg_pool2d: expected a 3-d or 4-d input");
  const Dims& od = c.out_dims();
  int64_t r = x.rank(), P = product(x.dims(), 0, r - 2);
  int64_t H = x.dims()[r - 2], W = x.dims()[r - 1], OH = od[r - 2], OW = od[r - 1];
  if (P * OH * OW == 0) return one(b.constant(0, Type{t, od}));
  if (H == 0 || W == 0) throw hlo::Error("adaptive_avg_pool2d: empty input plane");
  x = b.reshape(x, {P, H, W});
  if (H % OH == 0 && W % OW == 0) {
    Value s = reduce_sum(b, b.reshape(x, {P, OH, H / OH, OW, W / OW}), {2, 4});
    return one(b.reshape(div(b, s, like(b, static_cast<double>(H / OH * (W / OW)), s)), od));
  }
  Value ph = adaptive_matrix(b, H, OH, t), pw = adaptive_matrix(b, W, OW, t);
  Value y = b.dot_general(x, ph, {}, {}, {1}, {1}, t);  // [P, W, OH]
  y = b.dot_general(y, pw, {}, {}, {1}, {1}, t);        // [P, OH, OW]
  return one(b.reshape(y, od));
}

// _adaptive_avg_pool2d_backward(grad_output, self)
V adaptive_avg_pool2d_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  const Dims& xd = c.t(1).dims();
  if (xd.size() != 3 && xd.size() != 4) throw hlo::Error("adaptive_avg_pool2d_backward: expected 3-d or 4-d input");
  int64_t r = static_cast<int64_t>(xd.size()), P = product(xd, 0, r - 2);
  const Dims& gd = c.t(0).dims();
  int64_t H = xd[r - 2], W = xd[r - 1], OH = gd[r - 2], OW = gd[r - 1];
  if (P * H * W == 0) return one(b.constant(0, Type{t, xd}));
  if (OH == 0 || OW == 0) return one(b.constant(0, Type{t, xd}));
  Value g = b.reshape(arg_as(c, 0, t), {P, OH, OW});
  if (H % OH == 0 && W % OW == 0) {
    int64_t kh = H / OH, kw = W / OW;
    g = div(b, g, like(b, static_cast<double>(kh * kw), g));
    Value e = bcast(b, g, {P, OH, kh, OW, kw}, {0, 1, 3});
    return one(b.reshape(e, xd));
  }
  Value ph = adaptive_matrix(b, H, OH, t), pw = adaptive_matrix(b, W, OW, t);
  Value y = b.dot_general(g, ph, {}, {}, {1}, {0}, t);  // [P, OW, H]
  y = b.dot_general(y, pw, {}, {}, {1}, {0}, t);        // [P, H, W]
  return one(b.reshape(y, xd));
}

// sgn (the gradient of l1_loss and abs): the sign of reals (0 for NaN, as torch), z / |z| of complex
// numbers (0 for 0).
V sgn(Ctx& c) {
  Builder& b = c.b;
  if (pjrt::is_complex(c.t(0).elem())) {
    Value z = operand(c, 0);
    const ElementType part = pjrt::real_type(z.elem());
    Value a = b.unary_to("abs", z, part);
    Value unit = b.complex(div(b, b.unary_to("real", z, part), a), div(b, b.unary_to("imag", z, part), a));
    return one(b.select(b.compare(Cmp::EQ, a, like(b, 0, a)), b.constant(0, unit.type), unit));
  }
  if (c.out_type() == ElementType::kPred) return one(operand(c, 0));
  Value x = operand(c, 0), r = c.b.unary("sign", x);
  if (pjrt::is_float(x.elem())) r = c.b.select(isnan(c.b, x), c.b.constant(0, x.type), r);  // torch: sgn(NaN) = 0
  return one(r);
}

const Rows rows = {
    {{"native_layer_norm", "native_layer_norm.out"}, layer_norm},
    {{"native_layer_norm_backward", "native_layer_norm_backward.out"}, layer_norm_backward},
    {{"native_group_norm", "native_group_norm.out"}, group_norm},
    {{"native_group_norm_backward", "native_group_norm_backward.out"}, group_norm_backward},

    {{"nll_loss_forward", "nll_loss_forward.output"}, nll_loss_forward},
    {{"nll_loss_backward", "nll_loss_backward.grad_input"}, nll_loss_backward},
    {{"nll_loss2d_forward", "nll_loss2d_forward.output"}, nll_loss_forward},
    {{"nll_loss2d_backward", "nll_loss2d_backward.grad_input"}, nll_loss_backward},
    {{"mse_loss", "mse_loss.out"}, mse_loss},
    {{"mse_loss_backward", "mse_loss_backward.grad_input"}, mse_loss_backward},
    {{"binary_cross_entropy", "binary_cross_entropy.out"}, bce},
    {{"binary_cross_entropy_backward", "binary_cross_entropy_backward.grad_input"}, bce_backward},
    {{"binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits.out"}, bce_with_logits},
    {{"smooth_l1_loss", "smooth_l1_loss.out"}, [](Ctx& c) { return smooth_l1(c, false); }},
    {{"smooth_l1_loss_backward", "smooth_l1_loss_backward.grad_input"},
     [](Ctx& c) { return smooth_l1_backward(c, false); }},
    {{"huber_loss", "huber_loss.out"}, [](Ctx& c) { return smooth_l1(c, true); }},
    {{"huber_loss_backward", "huber_loss_backward.out"}, [](Ctx& c) { return smooth_l1_backward(c, true); }},

    {{"convolution", "convolution.out"}, convolution},
    {{"convolution_backward", "convolution_backward.out"}, convolution_backward},

    {{"max_pool2d_with_indices", "max_pool2d_with_indices.out"}, max_pool2d},
    {{"max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward.grad_input"}, max_pool2d_backward},
    {{"avg_pool2d", "avg_pool2d.out"}, avg_pool2d},
    {{"avg_pool2d_backward", "avg_pool2d_backward.grad_input"}, avg_pool2d_backward},
    {{"_adaptive_avg_pool2d", "_adaptive_avg_pool2d.out"}, adaptive_avg_pool2d},
    {{"_adaptive_avg_pool2d_backward", "_adaptive_avg_pool2d_backward.out"}, adaptive_avg_pool2d_backward},

    {{"sgn", "sgn_", "sgn.out"}, sgn},
};

}  // namespace
}  // namespace lowering
