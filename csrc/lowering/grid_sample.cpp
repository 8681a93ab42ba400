// grid_sampler_2d (bilinear, nearest and bicubic forward; zeros/border/reflection padding) and its
// backward (bilinear, nearest); the forward of
// grid_sampler_3d (trilinear and nearest).
#include <tuple>
#include <utility>
#include <vector>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

// grid_sampler_2d(input [N, C, H, W], grid [N, OH, OW, 2], interpolation (0 bilinear, 1 nearest),
// padding (0 zeros, 1 border, 2 reflection), align_corners), following the CPU kernel's arithmetic.
// The source coordinate of normalized grid values `g` along an axis of `size`, and its derivative.
std::pair<Value, Value> grid_pad(Builder& b, Value x, Value d, int64_t size, int64_t padding, bool align);

std::pair<Value, Value> grid_coord(Builder& b, Value g, int64_t size, int64_t padding, bool align) {
  Value one_ = like(b, 1, g);
  double scale = align ? static_cast<double>(static_cast<float>(size - 1) / 2) : static_cast<double>(static_cast<float>(size) / 2);
  // (g + 1) * scale - 0.5 is one fused multiply-add in the CPU's vectorized kernel
  Value x = align ? mul(b, add(b, g, one_), like(b, scale, g)) : fused_mul_add(b, add(b, g, one_), like(b, scale, g), like(b, -0.5, g));
  return grid_pad(b, x, like(b, scale, g), size, padding, align);
}

// Padding applied to an unnormalized coordinate x (and its derivative d): clipped (border) or reflected
// then clipped (reflection), as the CPU's vectorized 2-d kernel.
std::pair<Value, Value> grid_pad(Builder& b, Value x, Value d, int64_t size, int64_t padding, bool align) {
  Value one_ = like(b, 1, x), zero = like(b, 0, x);
  double max_val = static_cast<double>(size - 1);
  auto clip = [&](Value v, Value dv) {
    Value inside = andv(b, b.compare(Cmp::GT, v, zero), b.compare(Cmp::LT, v, like(b, max_val, v)));
    Value cv = b.binary("minimum", like(b, max_val, v), b.binary("maximum", v, zero));
    return std::make_pair(cv, b.select(inside, dv, zero));
  };
  if (padding == 1) return clip(x, d);
  if (padding == 2) {
    double low = align ? 0.0 : -0.5, twice = align ? 2.0 * (size - 1) : 2.0 * size;
    if (twice <= 0) return {zero, zero};
    Value rel = sub(b, x, like(b, low, x));
    Value a = b.unary("abs", rel);
    Value tw = like(b, twice, a);
    Value flips = div(b, a, tw);
    flips = b.select(b.compare(Cmp::LT, flips, zero), b.unary("ceil", flips), b.unary("floor", flips));
    Value extra = fused_mul_add(b, b.unary("negate", flips), tw, a);  // a - flips * tw, rounded once
    Value back = sub(b, tw, extra);
    Value forward = b.compare(Cmp::LE, extra, back);
    Value rv = add(b, b.select(forward, extra, back), like(b, low, extra));
    Value sign = b.select(b.compare(Cmp::LT, rel, zero), like(b, -1, x), one_);
    Value dr = mul(b, mul(b, d, sign), b.select(forward, one_, like(b, -1, x)));
    return clip(rv, dr);
  }
  return {x, d};
}

struct GridSample {
  int64_t N, C, H, W, OH, OW, L, mode;
  Value x, y, dx, dy;  // source coordinates [N, L] and their derivatives
  Value batch;         // s64 [N, L, 1]: the batch index
  Type it;             // s64 [N, L]
};

GridSample grid_setup(Builder& b, const Value& in, const Value& grid, int64_t mode, int64_t padding, bool align) {
  if (mode != 0 && mode != 1) throw hlo::Error("grid_sampler_2d: bicubic is not lowered");
  if (in.rank() != 4 || grid.rank() != 4) throw hlo::Error("grid_sampler_2d: expected 4-d input and grid");
  GridSample s;
  s.mode = mode;
  s.N = in.dims()[0];
  s.C = in.dims()[1];
  s.H = in.dims()[2];
  s.W = in.dims()[3];
  s.OH = grid.dims()[1];
  s.OW = grid.dims()[2];
  s.L = s.OH * s.OW;
  if (s.H == 0 || s.W == 0) throw hlo::Error("grid_sampler_2d: empty input");
  Value gx = b.reshape(b.slice(grid, {0, 0, 0, 0}, {s.N, s.OH, s.OW, 1}, {1, 1, 1, 1}), {s.N, s.L});
  Value gy = b.reshape(b.slice(grid, {0, 0, 0, 1}, {s.N, s.OH, s.OW, 2}, {1, 1, 1, 1}), {s.N, s.L});
  std::tie(s.x, s.dx) = grid_coord(b, gx, s.W, padding, align);
  std::tie(s.y, s.dy) = grid_coord(b, gy, s.H, padding, align);
  s.it = Type{ElementType::kS64, {s.N, s.L}};
  s.batch = b.reshape(b.iota(s.it, 0), {s.N, s.L, 1});
  return s;
}

// (indices [N, L, 2] into [N, H*W, C], in-bounds mask [N, L]) of integer coordinates (ix, iy).
std::pair<Value, Value> grid_where(Builder& b, const GridSample& s, Value ix, Value iy) {
  const Type& it = s.it;
  Value ok = andv(b, andv(b, b.compare(Cmp::GT, ix, b.constant_i(-1, it)), b.compare(Cmp::LT, ix, b.constant_i(s.W, it))),
                  andv(b, b.compare(Cmp::GT, iy, b.constant_i(-1, it)), b.compare(Cmp::LT, iy, b.constant_i(s.H, it))));
  Value cx = b.clamp(b.constant_i(0, it), ix, b.constant_i(s.W - 1, it));
  Value cy = b.clamp(b.constant_i(0, it), iy, b.constant_i(s.H - 1, it));
  Value flat = b.reshape(add(b, mul(b, cy, b.constant_i(s.W, it)), cx), {s.N, s.L, 1});
  return {b.concatenate({s.batch, flat}, 2), ok};
}

// The corners of each sample point: integer coordinates and (for bilinear) weights and their
// derivatives along x and y.
struct Corner {
  Value ix, iy, w, dwx, dwy;
};

std::vector<Corner> grid_corners(Builder& b, const GridSample& s) {
  std::vector<Corner> cs;
  if (s.mode == 1) {
    Value ix = b.convert(b.unary("round_nearest_even", s.x), ElementType::kS64);
    Value iy = b.convert(b.unary("round_nearest_even", s.y), ElementType::kS64);
    cs.push_back({ix, iy, Value{}, Value{}, Value{}});
    return cs;
  }
  Value xw = b.unary("floor", s.x), yn = b.unary("floor", s.y);
  Value w = sub(b, s.x, xw), e = sub(b, like(b, 1, w), w), n = sub(b, s.y, yn), so = sub(b, like(b, 1, n), n);
  Value ixw = b.convert(xw, ElementType::kS64), iyn = b.convert(yn, ElementType::kS64);
  Value ixe = add(b, ixw, b.constant_i(1, s.it)), iys = add(b, iyn, b.constant_i(1, s.it));
  cs.push_back({ixw, iyn, mul(b, so, e), b.unary("negate", so), b.unary("negate", e)});  // nw
  cs.push_back({ixe, iyn, mul(b, so, w), so, b.unary("negate", w)});                      // ne
  cs.push_back({ixw, iys, mul(b, n, e), b.unary("negate", n), e});                        // sw
  cs.push_back({ixe, iys, mul(b, n, w), n, w});                                           // se
  return cs;
}

hlo::GatherDims grid_gather_dims() { return hlo::GatherDims{{2}, {0, 1}, {0, 1}, 2}; }

// nw * v_nw + ne * v_ne + sw * v_sw + se * v_se rounded as the CPU's compiled kernel rounds it: its
// compiler contracts each product after the first into a fused multiply-add with the sum before it
// (found by matching the CPU's results bit for bit).
Value corner_sum(Builder& b, const V& vals, const V& weights) {
  Value out = mul(b, vals[0], weights[0]);
  for (size_t i = 1; i < vals.size(); ++i) out = fused_mul_add(b, vals[i], weights[i], out);
  return out;
}

// The CPU's cubic convolution coefficients (A = -0.75) of the fractional offsets t.
std::vector<Value> cubic_coefficients(Builder& b, Value t) {
  auto k = [&](double v) { return like(b, v, t); };
  const double A = -0.75;
  auto outer = [&](Value x) { return sub(b, mul(b, add(b, mul(b, sub(b, mul(b, k(A), x), k(5 * A)), x), k(8 * A)), x), k(4 * A)); };
  auto inner = [&](Value x) { return add(b, mul(b, mul(b, sub(b, mul(b, k(A + 2), x), k(A + 3)), x), x), k(1)); };
  return {outer(add(b, t, k(1))), inner(t), inner(sub(b, k(1), t)), outer(sub(b, k(2), t))};
}

// Bicubic grid_sampler_2d as the CPU's vectorized kernel: 4x4 taps around floor(x), floor(y) of the
// unnormalized coordinates, each padded on its own; rows interpolated along x, then along y.
Value grid_sampler_2d_bicubic(Ctx& c, Value in, Value grid) {
  Builder& b = c.b;
  const int64_t padding = c.i(3);
  const bool align = c.i(4) != 0;
  GridSample s = grid_setup(b, in, grid, 0, 0, align);
  Value src = b.reshape(b.transpose(in, {0, 2, 3, 1}), {s.N, s.H * s.W, s.C});
  Dims vd{s.N, s.L, s.C};
  Value fx = b.unary("floor", s.x), fy = b.unary("floor", s.y);
  std::vector<Value> cx = cubic_coefficients(b, sub(b, s.x, fx)), cy = cubic_coefficients(b, sub(b, s.y, fy));
  auto tap = [&](Value f, int64_t off, int64_t size) {
    Value v = grid_pad(b, add(b, f, like(b, static_cast<double>(off), f)), f, size, padding, align).first;
    return b.convert(v, ElementType::kS64);
  };
  auto weighted = [&](Value v, Value w) { return mul(b, b.broadcast_in_dim(w, vd, {0, 1}), v); };
  Value out;
  for (int64_t i = 0; i < 4; ++i) {
    Value iy = tap(fy, i - 1, s.H), row;
    for (int64_t j = 0; j < 4; ++j) {
      auto [idx, ok] = grid_where(b, s, tap(fx, j - 1, s.W), iy);
      Value v = b.gather(src, idx, grid_gather_dims(), {1, 1, s.C}, vd);
      v = weighted(b.select(b.broadcast_in_dim(ok, vd, {0, 1}), v, b.constant(0, v.type)), cx[j]);
      row = row.valid() ? add(b, row, v) : v;
    }
    row = weighted(row, cy[i]);
    out = out.valid() ? add(b, out, row) : row;
  }
  return b.reshape(b.transpose(out, {0, 2, 1}), c.out_dims());
}

Value grid_sampler_2d(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value in = b.convert(c.t(0), t), grid = b.convert(c.t(1), t);
  if (numel(c.out_dims()) == 0) return b.constant(0, Type{t, c.out_dims()});
  if (c.i(2) == 2) return grid_sampler_2d_bicubic(c, in, grid);
  GridSample s = grid_setup(b, in, grid, c.i(2), c.i(3), c.i(4) != 0);
  Value src = b.reshape(b.transpose(in, {0, 2, 3, 1}), {s.N, s.H * s.W, s.C});
  Dims vd{s.N, s.L, s.C};
  V vals, weights;
  for (const Corner& cr : grid_corners(b, s)) {
    auto [idx, ok] = grid_where(b, s, cr.ix, cr.iy);
    Value v = b.gather(src, idx, grid_gather_dims(), {1, 1, s.C}, vd);
    vals.push_back(b.select(b.broadcast_in_dim(ok, vd, {0, 1}), v, b.constant(0, Type{t, vd})));
    if (cr.w.valid()) weights.push_back(b.broadcast_in_dim(cr.w, vd, {0, 1}));
  }
  Value out = weights.empty() ? vals[0] : corner_sum(b, vals, weights);
  return b.reshape(b.transpose(out, {0, 2, 1}), c.out_dims());  // [N, C, L] -> [N, C, OH, OW]
}

// grid_sampler_2d_backward(grad_output, input, grid, interpolation, padding, align_corners, output_mask)
// -> (grad_input, grad_grid)
V grid_sampler_2d_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  Value go = b.convert(c.t(0), t), in = b.convert(c.t(1), t), grid = b.convert(c.t(2), t);
  GridSample s = grid_setup(b, in, grid, c.i(3), c.i(4), c.i(5) != 0);
  Dims vd{s.N, s.L, s.C};
  Value g = b.transpose(b.reshape(go, {s.N, s.C, s.L}), {0, 2, 1});  // [N, L, C]
  Value src = b.reshape(b.transpose(in, {0, 2, 3, 1}), {s.N, s.H * s.W, s.C});
  Value gin = b.constant(0, src.type), gx = b.constant(0, Type{t, {s.N, s.L}}), gy = gx;
  hlo::ScatterDims sd{{2}, {0, 1}, {0, 1}, 2};
  for (const Corner& cr : grid_corners(b, s)) {
    auto [idx, ok] = grid_where(b, s, cr.ix, cr.iy);
    Value okb = b.broadcast_in_dim(ok, vd, {0, 1});
    Value zero = b.constant(0, Type{t, vd});
    if (c.wanted(0)) {
      Value u = cr.w.valid() ? mul(b, g, b.broadcast_in_dim(cr.w, vd, {0, 1})) : g;
      u = b.select(okb, u, zero);
      gin = b.scatter(gin, idx, u, sd, [](Builder& bb, const V& a) { return V{bb.binary("add", a[0], a[1])}; });
    }
    if (c.wanted(1) && cr.w.valid()) {
      Value v = b.gather(src, idx, grid_gather_dims(), {1, 1, s.C}, vd);
      Value vg = reduce_sum(b, b.select(okb, mul(b, v, g), zero), {2});  // [N, L]
      gx = add(b, gx, mul(b, vg, cr.dwx));
      gy = add(b, gy, mul(b, vg, cr.dwy));
    }
  }
  V res(2);
  if (c.wanted(0)) res[0] = b.reshape(b.transpose(b.reshape(gin, {s.N, s.H, s.W, s.C}), {0, 3, 1, 2}), c.out_dims(0));
  if (c.wanted(1)) {
    gx = mul(b, gx, s.dx);
    gy = mul(b, gy, s.dy);
    Value gg = b.concatenate({b.reshape(gx, {s.N, s.L, 1}), b.reshape(gy, {s.N, s.L, 1})}, 2);
    res[1] = b.reshape(gg, c.out_dims(1));
  }
  return res;
}

// The source coordinate along an axis of `size` as torch's scalar (3-d) CPU kernel computes it
// (grid_sampler_compute_source_index): unnormalize, then clip or reflect.
Value grid_coord_3d(Builder& b, Value g, int64_t size, int64_t padding, bool align) {
  Value one_ = like(b, 1, g), zero = like(b, 0, g);
  Value x = align ? mul(b, div(b, add(b, g, one_), like(b, 2, g)), like(b, static_cast<double>(size - 1), g))
                  : div(b, sub(b, mul(b, add(b, g, one_), like(b, static_cast<double>(size), g)), one_), like(b, 2, g));
  auto clip = [&](Value v) { return b.binary("minimum", like(b, static_cast<double>(size - 1), v), b.binary("maximum", v, zero)); };
  if (padding == 1) return clip(x);
  if (padding == 2) {
    const double twice_low = align ? 0 : -1, twice_high = align ? 2.0 * (size - 1) : 2.0 * size - 1;
    if (twice_low == twice_high) return zero;
    Value lo = like(b, twice_low / 2, x), span = like(b, (twice_high - twice_low) / 2, x);
    Value in = b.unary("abs", sub(b, x, lo));
    Value extra = b.binary("remainder", in, span);
    Value flips = b.unary("floor", div(b, in, span));
    Value even = b.compare(Cmp::EQ, b.binary("remainder", flips, like(b, 2, flips)), zero);
    return clip(b.select(even, add(b, extra, lo), add(b, sub(b, span, extra), lo)));
  }
  return x;
}

// grid_sampler_3d(input [N, C, D, H, W], grid [N, OD, OH, OW, 3], interpolation, padding, align_corners)
// as the CPU's kernel: corner weights (hi - x or x - lo per axis, multiplied x, y, z), corners summed in
// the order tnw, tne, tsw, tse, bnw, bne, bsw, bse.
Value grid_sampler_3d(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value in = b.convert(c.t(0), t), grid = b.convert(c.t(1), t);
  if (numel(c.out_dims()) == 0) return b.constant(0, Type{t, c.out_dims()});
  const int64_t mode = c.i(2), padding = c.i(3);
  if (mode != 0 && mode != 1) throw hlo::Error("grid_sampler_3d: bicubic is not lowered");
  if (in.rank() != 5 || grid.rank() != 5) throw hlo::Error("grid_sampler_3d: expected 5-d input and grid");
  const int64_t N = in.dims()[0], C = in.dims()[1];
  const int64_t size[3] = {in.dims()[4], in.dims()[3], in.dims()[2]};  // along x, y, z
  const int64_t L = grid.dims()[1] * grid.dims()[2] * grid.dims()[3];
  if (size[0] * size[1] * size[2] == 0) throw hlo::Error("grid_sampler_3d: empty input");
  Type it{ElementType::kS64, {N, L}};
  Value g = b.reshape(grid, {N, L, 3});
  Value lo[3], hi[3], coord[3];
  for (int a = 0; a < 3; ++a) {
    coord[a] = grid_coord_3d(b, b.reshape(b.slice(g, {0, 0, a}, {N, L, a + 1}, {1, 1, 1}), {N, L}), size[a], padding, c.i(4) != 0);
    lo[a] = b.unary(mode == 1 ? "round_nearest_even" : "floor", coord[a]);
    hi[a] = add(b, lo[a], like(b, 1, lo[a]));
  }
  Value src = b.reshape(b.transpose(in, {0, 2, 3, 4, 1}), {N, size[0] * size[1] * size[2], C});
  Value batch = b.reshape(b.iota(it, 0), {N, L, 1});
  Dims vd{N, L, C};
  Value out;
  for (int corner = 0; corner < (mode == 1 ? 1 : 8); ++corner) {
    Value w, ok, flat = b.constant_i(0, it);
    for (int a = 2; a >= 0; --a) {  // flat index: z outermost
      const bool up = (corner >> a) & 1;
      Value ia = b.convert(up ? hi[a] : lo[a], ElementType::kS64);
      Value in_a = andv(b, b.compare(Cmp::GT, ia, b.constant_i(-1, it)), b.compare(Cmp::LT, ia, b.constant_i(size[a], it)));
      ok = ok.valid() ? andv(b, ok, in_a) : in_a;
      flat = add(b, mul(b, flat, b.constant_i(size[a], it)), b.clamp(b.constant_i(0, it), ia, b.constant_i(size[a] - 1, it)));
    }
    for (int a = 0; a < 3 && mode == 0; ++a) {
      Value wa = ((corner >> a) & 1) ? sub(b, coord[a], lo[a]) : sub(b, hi[a], coord[a]);
      w = w.valid() ? mul(b, w, wa) : wa;
    }
    Value idx = b.concatenate({batch, b.reshape(flat, {N, L, 1})}, 2);
    Value v = b.gather(src, idx, grid_gather_dims(), {1, 1, C}, vd);
    v = b.select(b.broadcast_in_dim(ok, vd, {0, 1}), v, b.constant(0, Type{t, vd}));
    if (w.valid()) v = mul(b, v, b.broadcast_in_dim(w, vd, {0, 1}));
    out = out.valid() ? add(b, out, v) : v;
  }
  return b.reshape(b.transpose(out, {0, 2, 1}), c.out_dims());
}

const Rows rows = {
    {{"grid_sampler_3d", "grid_sampler_3d.out"}, [](Ctx& c) { return one(grid_sampler_3d(c)); }},
    {{"grid_sampler_2d", "grid_sampler_2d.out"}, [](Ctx& c) { return one(grid_sampler_2d(c)); }},
    {{"grid_sampler_2d_backward", "grid_sampler_2d_backward.out"}, grid_sampler_2d_backward},
};

}  // namespace
}  // namespace lowering
