// im2col / col2im, the kernels of nn.Unfold and nn.Fold: sliding blocks of a padded image as columns, and
// the columns added back into the image; unfold_backward, the same adding back for Tensor.unfold.
#include <utility>

#include "lowering/helpers.h"

namespace lowering {
namespace {

struct Im2col {
  int64_t kh, kw, dh, dw, ph, pw, sh, sw;
};

Im2col im2col_args(const Ctx& c, size_t first) {
  auto two = [&](size_t k) {
    const Dims& v = c.ints(k);
    if (v.size() == 1) return std::make_pair(v[0], v[0]);
    if (v.size() != 2) throw hlo::Error("im2col: expected two values");
    return std::make_pair(v[0], v[1]);
  };
  auto [kh, kw] = two(first);
  auto [dh, dw] = two(first + 1);
  auto [ph, pw] = two(first + 2);
  auto [sh, sw] = two(first + 3);
  return {kh, kw, dh, dw, ph, pw, sh, sw};
}

// im2col(self [N?, C, H, W], kernel_size, dilation, padding, stride) -> [N?, C*kh*kw, L]
Value im2col(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  const bool batched = x.rank() == 4;
  if (!batched) x = b.reshape(x, {1, x.dims()[0], x.dims()[1], x.dims()[2]});
  Im2col a = im2col_args(c, 1);
  int64_t N = x.dims()[0], C = x.dims()[1], H = x.dims()[2], W = x.dims()[3];
  int64_t OH = (H + 2 * a.ph - (a.dh * (a.kh - 1) + 1)) / a.sh + 1;
  int64_t OW = (W + 2 * a.pw - (a.dw * (a.kw - 1) + 1)) / a.sw + 1;
  if (numel(c.out_dims()) == 0) return b.constant(0, c.out());
  Value p = b.pad(x, b.scalar(0, x.elem()), {0, 0, a.ph, a.pw}, {0, 0, a.ph, a.pw}, {0, 0, 0, 0});
  V taps;
  for (int64_t i = 0; i < a.kh; ++i)
    for (int64_t j = 0; j < a.kw; ++j) {
      Dims start{0, 0, i * a.dh, j * a.dw};
      Dims limit{N, C, start[2] + (OH - 1) * a.sh + 1, start[3] + (OW - 1) * a.sw + 1};
      Value v = b.slice(p, start, limit, {1, 1, a.sh, a.sw});
      taps.push_back(b.reshape(v, {N, C, 1, OH * OW}));
    }
  Value r = b.concatenate(taps, 2);  // [N, C, kh*kw, L]
  return b.reshape(r, c.out_dims());
}

// col2im(self [N?, C*kh*kw, L], output_size, kernel_size, dilation, padding, stride) -> [N?, C, H, W]:
// every tap's column block added back at its (strided) place in the padded image.
Value col2im(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = b.convert(c.t(0), t);
  if (x.rank() == 2) x = b.reshape(x, {1, x.dims()[0], x.dims()[1]});
  const Dims& os = c.ints(1);
  if (os.size() != 2) throw hlo::Error("col2im: output_size must have two values");
  Im2col a = im2col_args(c, 2);
  int64_t H = os[0], W = os[1], N = x.dims()[0];
  int64_t C = x.dims()[1] / (a.kh * a.kw);
  int64_t OH = (H + 2 * a.ph - (a.dh * (a.kh - 1) + 1)) / a.sh + 1;
  int64_t OW = (W + 2 * a.pw - (a.dw * (a.kw - 1) + 1)) / a.sw + 1;
  if (numel(c.out_dims()) == 0) return b.constant(0, Type{t, c.out_dims()});
  if (OH * OW != x.dims()[2]) throw hlo::Error("col2im: block count mismatch");
  Value cols = b.reshape(x, {N, C, a.kh * a.kw, OH, OW});
  int64_t PH = H + 2 * a.ph, PW = W + 2 * a.pw;
  Value acc = b.constant(0, Type{t, {N, C, PH, PW}});
  for (int64_t i = 0; i < a.kh; ++i)
    for (int64_t j = 0; j < a.kw; ++j) {
      int64_t tap = i * a.kw + j;
      Value v = b.reshape(b.slice(cols, {0, 0, tap, 0, 0}, {N, C, tap + 1, OH, OW}, {1, 1, 1, 1, 1}), {N, C, OH, OW});
      int64_t lo_h = i * a.dh, lo_w = j * a.dw;
      int64_t span_h = (OH - 1) * a.sh + 1, span_w = (OW - 1) * a.sw + 1;
      Value placed = b.pad(v, b.scalar(0, t), {0, 0, lo_h, lo_w}, {0, 0, PH - lo_h - span_h, PW - lo_w - span_w},
                           {0, 0, a.sh - 1, a.sw - 1});
      acc = add(b, acc, placed);
    }
  Value r = b.slice(acc, {0, 0, a.ph, a.pw}, {N, C, a.ph + H, a.pw + W}, {1, 1, 1, 1});
  return b.reshape(r, c.out_dims());
}

// unfold_backward(grad_in, input_sizes, dim, size, step): the gradient of x.unfold(dim, size, step), whose
// grad_in has the windows along `dim` and each window's elements in a new last dim: element e of window w
// is added into position w * step + e along `dim`, by one scatter with the other dims as its window.
Value unfold_backward(Ctx& c) {
  Builder& b = c.b;
  Value g = c.t(0);
  const Dims& in = c.out_dims();
  const int64_t r = static_cast<int64_t>(in.size());
  const ElementType t = accumulation_type(c.out_type());
  g = b.convert(g, t);
  if (r == 0) return b.reshape(g, {});
  const int64_t dim = wrap_dim(c.i(2), r), size = c.i(3), step = c.i(4);
  const int64_t nw = g.dims()[dim];
  if (numel(in) == 0 || nw == 0 || size == 0) return b.constant(0, Type{t, in});
  Dims perm{dim, r}, rest;
  for (int64_t i = 0; i < r; ++i)
    if (i != dim) {
      perm.push_back(i);
      rest.push_back(g.dims()[i]);
    }
  Dims flat{nw * size};
  flat.insert(flat.end(), rest.begin(), rest.end());
  Value upd = b.reshape(b.transpose(g, perm), flat);
  Type it{ElementType::kS64, {nw, size}};
  Value pos = add(b, mul(b, b.iota(it, 0), b.constant_i(step, it)), b.iota(it, 1));
  Dims acc_dims{in[dim]};
  acc_dims.insert(acc_dims.end(), rest.begin(), rest.end());
  hlo::ScatterDims sd{iota_dims(1, r), {0}, {0}, 1};
  Value acc = b.scatter(b.constant(0, Type{t, acc_dims}), b.reshape(pos, {nw * size, 1}), upd, sd,
                        [](Builder& bb, const std::vector<Value>& a) { return std::vector<Value>{add(bb, a[0], a[1])}; });
  // acc is [in[dim], other dims in order]: move dim back into place
  Dims back(r);
  for (int64_t i = 0, k = 1; i < r; ++i) back[i] = i == dim ? 0 : k++;
  return b.transpose(acc, back);
}

const Rows rows = {
    {{"im2col", "im2col.out"}, [](Ctx& c) { return one(im2col(c)); }},
    {{"col2im", "col2im.out"}, [](Ctx& c) { return one(col2im(c)); }},
    {{"unfold_backward", "unfold_backward.out"}, [](Ctx& c) { return one(unfold_backward(c)); }},
};

}  // namespace
}  // namespace lowering
