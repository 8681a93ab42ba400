// Multi-class margin losses: multi_margin_loss and multilabel_margin_loss (forward).
#include <algorithm>
#include <cmath>

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

// multi_margin_loss(self, target, p, margin, weight?, reduction):
// sum over classes i != y of max(0, margin - x[y] + x[i])^p (times weight[y]), divided by C.
Value multi_margin_loss(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = b.convert(c.t(0), t);
  int64_t C = x.rank() == 0 ? 1 : x.dims().back();
  int64_t N = x.type.numel() / std::max<int64_t>(C, 1);
  if (N * C == 0) throw hlo::Error("multi_margin_loss: empty input");
  x = b.reshape(x, {N, C});
  Value tg = b.reshape(c.t(1), {N});
  Value xy = pick_target(b, x, tg);
  Value margin = operand(c, 3, t, {N, C}), p = operand(c, 2, t, {N, C});
  Value z = add(b, sub(b, margin, b.broadcast_in_dim(xy, {N, C}, {0})), x);
  Value h = b.select(b.compare(Cmp::EQ, p, like(b, 1, p)), z, mul(b, z, z));
  if (c.has(4)) {
    Value w = b.convert(c.t(4), t);
    Value wy = pick_target(b, b.broadcast_in_dim(w, {N, C}, {1}), tg);
    h = mul(b, h, b.broadcast_in_dim(wy, {N, C}, {0}));
  }
  Type it{ElementType::kS64, {N, C}};
  Value not_y = b.compare(Cmp::NE, b.iota(it, 1), b.broadcast_in_dim(b.convert(tg, ElementType::kS64), {N, C}, {0}));
  Value keep = andv(b, not_y, b.compare(Cmp::GT, z, like(b, 0, z)));
  Value l = div(b, reduce_sum(b, b.select(keep, h, like(b, 0, h)), {1}), b.constant(static_cast<double>(C), Type{t, {N}}));
  return b.reshape(reduce_loss(b, l, c.i(5)), c.out_dims());
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target): the targets of a
// row are its entries before the first negative one; sum over targets j and non-target classes d of
// max(0, 1 - x[y_j] + x[d]), divided by C.
V multilabel_margin_loss(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type(0));
  Value x = b.convert(c.t(0), t);
  int64_t C = x.rank() == 0 ? 1 : x.dims().back();
  int64_t N = x.type.numel() / std::max<int64_t>(C, 1);
  if (N * C == 0) throw hlo::Error("multilabel_margin_loss: empty input");
  x = b.reshape(x, {N, C});
  Value tg = b.reshape(b.convert(c.t(1), ElementType::kS64), {N, C});
  Type it{ElementType::kS64, {N, C}};
  // valid[n, j]: no negative target at or before j
  Value neg = b.convert(b.compare(Cmp::LT, tg, b.constant_i(0, it)), ElementType::kS64);
  Type it3{ElementType::kS64, {N, C, C}};
  Value upto = b.compare(Cmp::LE, b.iota(it3, 2), b.iota(it3, 1));  // [n, j, k]: k <= j
  Value negs = reduce_sum(b, b.select(upto, b.broadcast_in_dim(neg, {N, C, C}, {0, 2}), b.constant_i(0, it3)), {2});
  Value valid = b.compare(Cmp::EQ, negs, b.constant_i(0, it));  // [N, C] over j
  // is_target[n, d] = any_j valid[n, j] && tg[n, j] == d
  Value eq = b.compare(Cmp::EQ, b.broadcast_in_dim(tg, {N, C, C}, {0, 1}), b.iota(it3, 2));  // [n, j, d]
  Value hit = andv(b, eq, b.broadcast_in_dim(valid, {N, C, C}, {0, 1}));
  Value is_target = reduce(b, hit, {1}, "or", b.scalar(0, ElementType::kPred));  // [N, C]
  // x[n, y_j]: [N, C] over j
  Value xb = b.broadcast_in_dim(x, {N, C, C}, {0, 2});  // [n, j, d] = x[n, d]
  Value sel = b.compare(Cmp::EQ, b.broadcast_in_dim(tg, {N, C, C}, {0, 1}), b.iota(it3, 2));
  Value xy = reduce(b, b.select(sel, xb, b.constant(-INFINITY, xb.type)), {2}, "maximum", b.scalar(-INFINITY, t));
  Value z = add(b, sub(b, like(b, 1, xb), b.broadcast_in_dim(xy, {N, C, C}, {0, 1})), xb);  // [n, j, d]
  Value keep = andv(b, andv(b, b.broadcast_in_dim(valid, {N, C, C}, {0, 1}),
                            b.unary("not", b.broadcast_in_dim(is_target, {N, C, C}, {0, 2}))),
                    b.compare(Cmp::GT, z, like(b, 0, z)));
  Value l = reduce_sum(b, b.select(keep, z, like(b, 0, z)), {1, 2});
  l = div(b, l, b.constant(static_cast<double>(C), l.type));
  Value out = reduce_loss(b, l, c.i(2));
  return V{b.reshape(out, c.out_dims(0)), b.reshape(b.convert(is_target, t), c.out_dims(1))};
}

const Rows rows = {
    {{"multi_margin_loss", "multi_margin_loss.out"}, [](Ctx& c) { return one(multi_margin_loss(c)); }},
    {{"multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output"}, multilabel_margin_loss},
};

}  // namespace
}  // namespace lowering
