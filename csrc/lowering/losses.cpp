// Multi-class margin losses: multi_margin_loss and multilabel_margin_loss, forward and backward.
#include <algorithm>
#include <cmath>
#include <optional>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

// x[n, target[n]] for x [N, C] and target [N]: [N]
Value pick_target(Builder& b, Value x, Value target) {
  int64_t N = x.dims()[0], C = x.dims()[1];
  Value tb = b.broadcast_in_dim(b.convert(target, ElementType::kS64), {N, C}, {0});
  Value hit = b.compare(Cmp::EQ, b.iota(Type{ElementType::kS64, {N, C}}, 1), tb);
  return reduce(b, b.select(hit, x, b.constant(-INFINITY, x.type)), {1}, "maximum", b.scalar(-INFINITY, x.elem()));
}

Value reduce_loss(Builder& b, Value l, int64_t reduction) {
  if (reduction == 0) return l;
  Value s = reduce_sum(b, l, [&] {
    Dims d;
    for (int64_t i = 0; i < l.rank(); ++i) d.push_back(i);
    return d;
  }());
  if (reduction == 2) return s;
  return div(b, s, b.constant(static_cast<double>(l.type.numel()), s.type));
}

// A margin loss's input as rows of classes, in the compute type: x [N, C] (a 0-d or 1-d input is one row).
struct ClassRows {
  Value x;
  int64_t n, c;
};
ClassRows class_rows(Builder& b, Value in, ElementType t) {
  Value x = b.convert(in, t);
  const int64_t C = x.rank() == 0 ? 1 : x.dims().back();
  const int64_t N = x.type.numel() / std::max<int64_t>(C, 1);
  return {N * C != 0 ? b.reshape(x, {N, C}) : x, N, C};
}

// multi_margin_loss's terms: z = margin - x[y] + x[i] [N, C] and the classes i != y (`others`).
struct MarginTerms {
  Value z, others;
};
MarginTerms margin_terms(Builder& b, Value x, Value tg, Value margin) {
  const int64_t N = x.dims()[0], C = x.dims()[1];
  Value z = add(b, sub(b, margin, b.broadcast_in_dim(pick_target(b, x, tg), {N, C}, {0})), x);
  Value y = b.broadcast_in_dim(b.convert(tg, ElementType::kS64), {N, C}, {0});
  return {z, b.compare(Cmp::NE, b.iota(Type{ElementType::kS64, {N, C}}, 1), y)};
}

// weight[y] of each row as [N, C]
Value target_weight(Ctx& c, size_t k, Value tg, int64_t N, int64_t C, ElementType t) {
  Builder& b = c.b;
  Value w = b.convert(c.t(k), t);
  return b.broadcast_in_dim(pick_target(b, b.broadcast_in_dim(w, {N, C}, {1}), tg), {N, C}, {0});
}

// multi_margin_loss(self, target, p, margin, weight?, reduction):
// sum over classes i != y of max(0, margin - x[y] + x[i])^p (times weight[y]), divided by C.
Value multi_margin_loss(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  auto [x, N, C] = class_rows(b, c.t(0), t);
  if (N * C == 0) throw hlo::Error("multi_margin_loss: empty input");
  Value tg = b.reshape(c.t(1), {N});
  auto [z, others] = margin_terms(b, x, tg, operand(c, 3, t, {N, C}));
  Value p = operand(c, 2, t, {N, C});
  Value h = b.select(b.compare(Cmp::EQ, p, like(b, 1, p)), z, mul(b, z, z));
  if (c.has(4)) h = mul(b, h, target_weight(c, 4, tg, N, C, t));
  Value keep = andv(b, others, b.compare(Cmp::GT, z, like(b, 0, z)));
  Value l = div(b, reduce_sum(b, b.select(keep, h, like(b, 0, h)), {1}), b.constant(static_cast<double>(C), Type{t, {N}}));
  return b.reshape(reduce_loss(b, l, c.i(5)), c.out_dims());
}

// multilabel_margin_loss's terms for targets tg [N, C] (a row's targets are its entries before the first
// negative one): sel[n, j, d] (target j is class d), and z = 1 - x[y_j] + x[d] [N, C(j), C(d)] with the
// (j, d) that count: j a target, d not one (is_target [N, C], or from sel when null: `targets`), z > 0.
struct LabelTerms {
  Value sel, z, keep, targets;
};
LabelTerms label_terms(Builder& b, Value x, Value tg, std::optional<Value> is_target) {
  const int64_t N = x.dims()[0], C = x.dims()[1];
  Type it{ElementType::kS64, {N, C}}, it3{ElementType::kS64, {N, C, C}};
  // valid[n, j]: no negative target at or before j
  Value neg = b.convert(b.compare(Cmp::LT, tg, b.constant_i(0, it)), ElementType::kS64);
  Value upto = b.compare(Cmp::LE, b.iota(it3, 2), b.iota(it3, 1));  // [n, j, k]: k <= j
  Value negs = reduce_sum(b, b.select(upto, b.broadcast_in_dim(neg, {N, C, C}, {0, 2}), b.constant_i(0, it3)), {2});
  Value valid = b.broadcast_in_dim(b.compare(Cmp::EQ, negs, b.constant_i(0, it)), {N, C, C}, {0, 1});
  Value sel = andv(b, b.compare(Cmp::EQ, b.broadcast_in_dim(tg, {N, C, C}, {0, 1}), b.iota(it3, 2)), valid);
  Value targets = is_target ? *is_target : reduce(b, sel, {1}, "or", b.scalar(0, ElementType::kPred));
  Value xb = b.broadcast_in_dim(x, {N, C, C}, {0, 2});  // [n, j, d] = x[n, d]
  const ElementType t = x.elem();
  Value xy = reduce(b, b.select(sel, xb, b.constant(-INFINITY, xb.type)), {2}, "maximum", b.scalar(-INFINITY, t));
  Value z = add(b, sub(b, like(b, 1, xb), b.broadcast_in_dim(xy, {N, C, C}, {0, 1})), xb);
  Value keep = andv(b, andv(b, valid, notv(b, b.broadcast_in_dim(targets, {N, C, C}, {0, 2}))),
                    b.compare(Cmp::GT, z, like(b, 0, z)));
  return {sel, z, keep, targets};
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target): the sum over targets j
// and non-target classes d of max(0, 1 - x[y_j] + x[d]), divided by C.
V multilabel_margin_loss(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type(0));
  auto [x, N, C] = class_rows(b, c.t(0), t);
  if (N * C == 0) throw hlo::Error("multilabel_margin_loss: empty input");
  Value tg = b.reshape(b.convert(c.t(1), ElementType::kS64), {N, C});
  auto [sel, z, keep, is_target] = label_terms(b, x, tg, std::nullopt);
  Value l = reduce_sum(b, b.select(keep, z, like(b, 0, z)), {1, 2});
  l = div(b, l, b.constant(static_cast<double>(C), l.type));
  Value out = reduce_loss(b, l, c.i(2));
  return V{b.reshape(out, c.out_dims(0)), b.reshape(b.convert(is_target, t), c.out_dims(1))};
}

// The gradient of a loss per row of [N, C] times grad_output: one value (a reduction, or a 0-d loss of
// a 1-d input) or one per row (reduction='none'), in the result's shape and type.
Value times_grad_output(Ctx& c, Value grad, ElementType t) {
  Builder& b = c.b;
  const int64_t N = grad.dims()[0], C = grad.dims()[1];
  Value go = b.convert(c.t(0), t);
  go = go.type.numel() == 1 ? b.broadcast_in_dim(b.reshape(go, {}), {N, C}, {})
                            : b.broadcast_in_dim(b.reshape(go, {N}), {N, C}, {0});
  return b.convert(b.reshape(mul(b, grad, go), c.out_dims()), c.out_type());
}

// 1 / C, or 1 / (N * C) for the mean: the factor of every term of the loss
Value term_scale(Builder& b, int64_t N, int64_t C, int64_t reduction, ElementType t) {
  return b.constant(1.0 / static_cast<double>(reduction == 1 ? N * C : C), Type{t, {N, C}});
}

// multi_margin_loss_backward(grad_output, self, target, p, margin, weight?, reduction): class i != y with
// z = margin - x[y] + x[i] > 0 gets g (p = 1) or 2 g z (p = 2), times weight[y]; class y minus their sum.
Value multi_margin_loss_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  auto [x, N, C] = class_rows(b, c.t(1), t);
  if (N * C == 0) return b.constant(0, c.out());
  Value tg = b.reshape(c.t(2), {N});
  auto [z, others] = margin_terms(b, x, tg, operand(c, 4, t, {N, C}));
  Value g = term_scale(b, N, C, c.i(6), t);
  Value p = operand(c, 3, t, {N, C});
  Value h = b.select(b.compare(Cmp::EQ, p, like(b, 1, p)), g, mul(b, mul(b, like(b, 2, g), g), z));
  if (c.has(5)) h = mul(b, h, target_weight(c, 5, tg, N, C, t));
  h = b.select(andv(b, others, b.compare(Cmp::GT, z, like(b, 0, z))), h, like(b, 0, h));
  Value gy = b.broadcast_in_dim(b.unary("negate", reduce_sum(b, h, {1})), {N, C}, {0});
  return times_grad_output(c, b.select(others, h, gy), t);
}

// multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target): every target y_j
// and non-target class d with z = 1 - x[y_j] + x[d] > 0 adds g to d and takes g from y_j.
Value multilabel_margin_loss_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  auto [x, N, C] = class_rows(b, c.t(1), t);
  if (N * C == 0) return b.constant(0, c.out());
  Value tg = b.reshape(b.convert(c.t(2), ElementType::kS64), {N, C});
  Value is_target = b.compare(Cmp::NE, b.reshape(b.convert(c.t(4), t), {N, C}), like(b, 0, x));
  auto [sel, z, keep, targets] = label_terms(b, x, tg, is_target);
  Value ones = b.select(keep, like(b, 1, z), like(b, 0, z));
  Value up = reduce_sum(b, ones, {1});          // [n, d]: terms that add to class d
  Value per_target = reduce_sum(b, ones, {2});  // [n, j]: terms of target j
  Value down = reduce_sum(b, b.select(sel, b.broadcast_in_dim(per_target, {N, C, C}, {0, 1}), like(b, 0, z)), {1});
  return times_grad_output(c, mul(b, sub(b, up, down), term_scale(b, N, C, c.i(3), t)), t);
}

const Rows rows = {
    {{"multi_margin_loss", "multi_margin_loss.out"}, [](Ctx& c) { return one(multi_margin_loss(c)); }},
    {{"multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output"}, multilabel_margin_loss},
    {{"multi_margin_loss_backward", "multi_margin_loss_backward.grad_input"},
     [](Ctx& c) { return one(multi_margin_loss_backward(c)); }},
    {{"multilabel_margin_loss_backward", "multilabel_margin_loss_backward.grad_input"},
     [](Ctx& c) { return one(multilabel_margin_loss_backward(c)); }},
};

}  // namespace
}  // namespace lowering
