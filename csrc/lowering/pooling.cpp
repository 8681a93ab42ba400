// Pooling beyond nn.cpp's 2-d max/avg pooling: 3-d max pooling with indices, 3-d average pooling, adaptive
// average pooling in 3-d, adaptive max pooling in 2-d and 3-d, fractional max pooling in 2-d and 3-d, with
// their backwards, and max unpooling.
// Windows are visited tap by tap in torch's order; a larger value or a NaN replaces the best so far.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "lowering/helpers.h"
#include "lowering/windows.h"

namespace lowering {
namespace {

using hlo::Cmp;

// Scatters `vals` (each plane's values, flat) into zero planes of `plane` elements at `idx` (flat
// within the plane): `add` sums duplicates, else a later value replaces.
Value plane_scatter(Builder& b, Value vals, Value idx, int64_t planes, int64_t per_plane, int64_t plane, bool add_dups) {
  const int64_t k = planes * per_plane;
  Type it{ElementType::kS64, {planes, per_plane}};
  Value flat = b.reshape(b.convert(idx, ElementType::kS64), {planes, per_plane});
  flat = add(b, flat, mul(b, b.iota(it, 0), b.constant_i(plane, it)));
  hlo::ScatterDims s{{}, {0}, {0}, 1};
  Value res = b.scatter(b.constant(0, Type{vals.elem(), {planes * plane}}), b.reshape(flat, {k, 1}),
                        b.reshape(vals, {k}), s, [add_dups](Builder& bb, const V& a) {
                          return V{add_dups ? bb.binary("add", a[0], a[1]) : a[1]};
                        });
  return res;
}

// adaptive_max_pool2d_backward(grad_output, self, indices)
Value adaptive_max_pool2d_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  const Dims& xd = c.t(1).dims();
  int64_t r = static_cast<int64_t>(xd.size());
  if (r != 3 && r != 4) throw hlo::Error("adaptive_max_pool2d_backward: expected 3-d or 4-d input");
  int64_t planes = numel(Dims(xd.begin(), xd.end() - 2)), hw = xd[r - 2] * xd[r - 1];
  int64_t per = planes ? c.t(0).type.numel() / planes : 0;
  if (planes * per == 0 || hw == 0) return b.constant(0, Type{t, xd});
  Value g = b.convert(c.t(0), t);
  return b.reshape(plane_scatter(b, g, c.t(2), planes, per, hw, true), c.out_dims());
}

// max_unpool2d(self, indices, output_size) / max_unpool3d(self, indices, output_size, stride, padding)
Value max_unpool(Ctx& c, int spatial) {
  Builder& b = c.b;
  Value x = c.t(0);
  const Dims& od = c.out_dims();
  int64_t r = static_cast<int64_t>(od.size());
  if (r != spatial + 1 && r != spatial + 2) throw hlo::Error("max_unpool: unexpected rank");
  int64_t planes = numel(Dims(od.begin(), od.end() - spatial)), plane = numel(Dims(od.end() - spatial, od.end()));
  int64_t per = planes ? x.type.numel() / planes : 0;
  if (numel(od) == 0) return b.constant(0, c.out());
  if (planes * per == 0) return b.constant(0, c.out());
  return b.reshape(plane_scatter(b, x, c.t(1), planes, per, plane, false), od);
}

// int[S] arguments may hold one value meaning "the same for every spatial dim".
Dims expand(const Dims& v, size_t n, int64_t dflt) {
  if (v.empty()) return Dims(n, dflt);
  if (v.size() == 1 && n > 1) return Dims(n, v[0]);
  if (v.size() != n) throw hlo::Error("pooling: expected " + std::to_string(n) + " values");
  return v;
}

struct PoolNd {
  int S;          // spatial dims
  int64_t L;      // leading dims (1 or 2)
  Dims kernel, stride, padding, dilation, in, out;
};

PoolNd pool_nd(const Ctx& c, const Value& x, const Dims& out_dims, int S, size_t kernel_k, bool has_dilation) {
  if (x.rank() != S + 1 && x.rank() != S + 2) throw hlo::Error("pooling: unexpected rank");
  PoolNd p;
  p.S = S;
  p.L = x.rank() - S;
  p.kernel = expand(c.ints(kernel_k), S, 1);
  p.stride = c.ints(kernel_k + 1).empty() ? p.kernel : expand(c.ints(kernel_k + 1), S, 1);
  p.padding = expand(c.ints(kernel_k + 2), S, 0);
  p.dilation = has_dilation ? expand(c.ints(kernel_k + 3), S, 1) : Dims(S, 1);
  for (int i = 0; i < S; ++i) {
    p.in.push_back(x.dims()[p.L + i]);
    p.out.push_back(out_dims[p.L + i]);
  }
  return p;
}

// s64 over `od`: the input coordinate along spatial axis i of kernel tap `tap` at every output position.
// The running maximum over a window's taps: v where it is greater than `best` or NaN (the first of equal
// ones stays, as the CPU keeps it), with its flat index; the first tap starts it.
void keep_max(Builder& b, Value v, Value idx, Value& best, Value& best_idx) {
  if (!best.valid()) {
    best = v;
    best_idx = idx;
    return;
  }
  Value take = orv(b, b.compare(Cmp::GT, v, best), isnan(b, v));
  best = b.select(take, v, best);
  best_idx = b.select(take, idx, best_idx);
}

Value tap_coord(Builder& b, const PoolNd& p, int i, int64_t tap, const Dims& od) {
  Type it{ElementType::kS64, od};
  Value o = b.iota(it, p.L + i);
  Value start = sub(b, mul(b, o, b.constant_i(p.stride[i], it)), b.constant_i(p.padding[i], it));
  return add(b, start, b.constant_i(tap * p.dilation[i], it));
}

// All tap tuples of a kernel, the first axis outermost.
std::vector<Dims> taps_of(const Dims& kernel) {
  std::vector<Dims> taps{Dims{}};
  for (int64_t k : kernel) {
    std::vector<Dims> next;
    for (const Dims& t : taps)
      for (int64_t i = 0; i < k; ++i) {
        Dims u = t;
        u.push_back(i);
        next.push_back(u);
      }
    taps = next;
  }
  return taps;
}

// max_pool3d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices):
// taps visited in order over the (-inf) padded input; a larger value or a NaN replaces the best.
V max_pool_nd(Ctx& c, int S) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.elem() == ElementType::kPred || pjrt::is_complex(x.elem())) throw hlo::Error("max_pool: real non-bool inputs only");
  const Dims& od = c.out_dims(0);
  PoolNd p = pool_nd(c, x, od, S, 1, true);
  if (numel(od) == 0) return V{b.constant(0, c.out(0)), b.constant_i(0, c.out(1))};
  int64_t r = x.rank(), L = p.L;
  Dims lo(r, 0), hi(r, 0), interior(r, 0);
  for (int i = 0; i < S; ++i) {
    lo[L + i] = p.padding[i];
    hi[L + i] = std::max<int64_t>(0, (p.out[i] - 1) * p.stride[i] + p.dilation[i] * (p.kernel[i] - 1) + 1 - p.in[i] - p.padding[i]);
  }
  Value padded = b.pad(x, lowest(b, x.elem()), lo, hi, interior);  // padding taps are never valid
  Type it{ElementType::kS64, od};
  Value best, best_idx, best_valid;
  for (const Dims& t : taps_of(p.kernel)) {
    Dims start(r, 0), limit = od, strides(r, 1);
    Value valid, flat = b.constant_i(0, it);
    for (int i = 0; i < S; ++i) {
      start[L + i] = t[i] * p.dilation[i];
      limit[L + i] = start[L + i] + (p.out[i] - 1) * p.stride[i] + 1;
      strides[L + i] = p.stride[i];
      Value co = tap_coord(b, p, i, t[i], od);
      Value ok = andv(b, b.compare(Cmp::GE, co, b.constant_i(0, it)), b.compare(Cmp::LT, co, b.constant_i(p.in[i], it)));
      valid = valid.valid() ? andv(b, valid, ok) : ok;
      flat = add(b, mul(b, flat, b.constant_i(p.in[i], it)), co);
    }
    Value v = b.slice(padded, start, limit, strides);
    if (!best.valid()) {
      best = v;
      best_idx = flat;
      best_valid = valid;
      continue;
    }
    Value better = orv(b, orv(b, b.unary("not", best_valid), b.compare(Cmp::GT, v, best)), isnan(b, v));
    Value take = andv(b, valid, better);
    best = b.select(take, v, best);
    best_idx = b.select(take, flat, best_idx);
    best_valid = orv(b, best_valid, valid);
  }
  return V{best, best_idx};
}

// The number of elements each output window averages (avg_pool's divisor), s64 over `od`.
Value avg_divisor(Builder& b, const PoolNd& p, const Dims& od, bool count_include_pad) {
  Type it{ElementType::kS64, od};
  Value n;
  for (int i = 0; i < p.S; ++i) {
    Value start = tap_coord(b, p, i, 0, od);
    Value end = b.binary("minimum", add(b, start, b.constant_i(p.kernel[i], it)), b.constant_i(p.in[i] + p.padding[i], it));
    Value size;
    if (count_include_pad) {
      size = sub(b, end, start);
    } else {
      size = sub(b, b.binary("minimum", end, b.constant_i(p.in[i], it)), b.binary("maximum", start, b.constant_i(0, it)));
    }
    n = n.valid() ? mul(b, n, size) : size;
  }
  return b.binary("maximum", n, b.constant_i(1, it));
}

// avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override?)
Value avg_pool_nd(Ctx& c, int S) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = b.convert(c.t(0), t);
  const Dims& od = c.out_dims();
  PoolNd p = pool_nd(c, x, od, S, 1, false);
  if (numel(od) == 0) return b.constant(0, Type{t, od});
  int64_t r = x.rank(), L = p.L;
  Dims window(r, 1), strides(r, 1);
  std::vector<std::pair<int64_t, int64_t>> pad(r, {0, 0});
  for (int i = 0; i < S; ++i) {
    window[L + i] = p.kernel[i];
    strides[L + i] = p.stride[i];
    pad[L + i] = {p.padding[i], std::max<int64_t>(0, (p.out[i] - 1) * p.stride[i] + p.kernel[i] - p.in[i] - p.padding[i])};
  }
  Value s = window_sum(b, x, window, strides, pad);
  if (s.dims() != od) throw hlo::Error("avg_pool: unexpected window count");
  Value d = c.has(6) ? b.constant(static_cast<double>(c.i(6)), s.type) : b.convert(avg_divisor(b, p, od, c.i(5) != 0), t);
  return div(b, s, d);
}

// avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override?): grad / divisor summed over every window holding each input element.
Value avg_pool_nd_backward(Ctx& c, int S) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  Value g = b.convert(c.t(0), t);
  const Dims& xd = c.t(1).dims();
  PoolNd p = pool_nd(c, c.t(1), g.dims(), S, 2, false);
  if (numel(xd) == 0) return b.constant(0, Type{t, xd});
  if (g.type.numel() == 0) return b.constant(0, Type{t, xd});
  Value d = c.has(7) ? b.constant(static_cast<double>(c.i(7)), g.type) : b.convert(avg_divisor(b, p, g.dims(), c.i(6) != 0), t);
  g = div(b, g, d);
  return b.reshape(avg_pool_backward_sum(b, g, p.L, p.kernel, p.stride, p.padding, p.in, p.out), c.out_dims());
}

// Adaptive bins along one axis: [floor(o*in/out), ceil((o+1)*in/out)).
void adaptive_bins(int64_t in, int64_t out, std::vector<int64_t>& s, std::vector<int64_t>& e) {
  for (int64_t o = 0; o < out; ++o) {
    s.push_back(o * in / out);
    e.push_back(((o + 1) * in + out - 1) / out);
  }
}

// x's `axis` replaced by m [out, in] applied along it (sum_i m[o, i] x[.., i, ..]).
Value apply_axis_matrix(Builder& b, Value x, int64_t axis, Value m) {
  Value y = b.dot_general(x, m, {}, {}, {axis}, {1}, x.elem());  // axis moved last
  Dims perm;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i == axis) perm.push_back(x.rank() - 1);
    else perm.push_back(i < axis ? i : i - 1);
  }
  return b.transpose(y, perm);
}

// [out, in]: the averaging matrix of adaptive average pooling along one axis (transposed: [in, out]).
Value adaptive_avg_matrix(Builder& b, int64_t in, int64_t out, ElementType t, bool transposed) {
  std::vector<int64_t> s, e;
  adaptive_bins(in, out, s, e);
  std::vector<double> m(out * in, 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = s[o]; i < e[o]; ++i) m[transposed ? i * out + o : o * in + i] = 1.0 / static_cast<double>(e[o] - s[o]);
  Value v = b.convert(const_float(b, m, t), t);
  return transposed ? b.reshape(v, {in, out}) : b.reshape(v, {out, in});
}

// _adaptive_avg_pool3d(self, output_size): separable averages along each axis.
Value adaptive_avg_pool_nd(Ctx& c, int S) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = b.convert(c.t(0), t);
  const Dims& od = c.out_dims();
  if (x.rank() != S + 1 && x.rank() != S + 2) throw hlo::Error("adaptive_avg_pool: unexpected rank");
  if (numel(od) == 0) return b.constant(0, Type{t, od});
  int64_t L = x.rank() - S;
  for (int i = S - 1; i >= 0; --i) {
    int64_t in = x.dims()[L + i], out = od[L + i];
    if (in == 0) throw hlo::Error("adaptive_avg_pool: empty input");
    x = apply_axis_matrix(b, x, L + i, adaptive_avg_matrix(b, in, out, t, false));
  }
  return x;
}

// _adaptive_avg_pool3d_backward(grad_output, self)
Value adaptive_avg_pool_nd_backward(Ctx& c, int S) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  Value g = b.convert(c.t(0), t);
  const Dims& xd = c.t(1).dims();
  int64_t L = static_cast<int64_t>(xd.size()) - S;
  if (numel(xd) == 0 || g.type.numel() == 0) return b.constant(0, Type{t, xd});
  for (int i = 0; i < S; ++i) {
    int64_t in = xd[L + i], out = g.dims()[L + i];
    g = apply_axis_matrix(b, g, L + i, adaptive_avg_matrix(b, in, out, t, true));
  }
  return b.reshape(g, c.out_dims());
}

// adaptive_max_pool2d / adaptive_max_pool3d(self, output_size) -> (out, indices): every bin scanned in
// order, keeping the first maximum (a NaN always replaces), as the CPU kernel; positions past a bin's
// end repeat its last.
V adaptive_max_pool_nd(Ctx& c, int S) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() != S + 1 && x.rank() != S + 2) throw hlo::Error("adaptive_max_pool: unexpected rank");
  if (!pjrt::is_float(x.elem())) throw hlo::Error("adaptive_max_pool: floating-point only");
  const Dims& od = c.out_dims(0);
  int64_t L = x.rank() - S;
  if (numel(od) == 0) throw hlo::Error("adaptive_max_pool: empty output");
  std::vector<std::vector<int64_t>> s(S), e(S);
  Dims kmax(S, 0);
  for (int i = 0; i < S; ++i) {
    if (x.dims()[L + i] == 0) throw hlo::Error("adaptive_max_pool: empty input");
    adaptive_bins(x.dims()[L + i], od[L + i], s[i], e[i]);
    for (size_t o = 0; o < s[i].size(); ++o) kmax[i] = std::max(kmax[i], e[i][o] - s[i][o]);
  }
  Value best, best_idx;
  for (const Dims& t : taps_of(kmax)) {
    Value v = x, flat;
    for (int i = 0; i < S; ++i) {
      std::vector<int64_t> sel;
      for (size_t o = 0; o < s[i].size(); ++o) sel.push_back(std::min(s[i][o] + t[i], e[i][o] - 1));
      v = take_axis(b, v, L + i, sel);
      Value coord = b.broadcast_in_dim(const_i64(b, sel), od, {L + i});
      flat = flat.valid() ? add(b, mul(b, flat, b.constant_i(x.dims()[L + i], coord.type)), coord) : coord;
    }
    keep_max(b, v, flat, best, best_idx);
  }
  return V{best, best_idx};
}

// fractional_max_pool2d / 3d(self, kernel_size, output_size, random_samples) -> (out, indices). Plane p's
// windows along a spatial dim of input size n, output size m and kernel k start at
// int((i + u) a) - int(u a), a = (n - k) / (m - 1), the last at n - k, with u the plane's sample for
// that dim ((W, H) in 2-d, (T, H, W) in 3-d) and the arithmetic in the input's type, as torch's CPU
// kernel; each window is scanned in order keeping the first maximum (a NaN replaces).
V fractional_max_pool(Ctx& c, int S) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() != S + 1 && x.rank() != S + 2) throw hlo::Error("fractional_max_pool: unexpected rank");
  if (!pjrt::is_float(x.elem())) throw hlo::Error("fractional_max_pool: floating-point only");
  const Dims& od = c.out_dims(0);
  if (numel(od) == 0) return V{b.constant(0, c.out(0)), b.constant_i(0, c.out(1))};
  const int64_t L = x.rank() - S;
  const int64_t planes = numel(Dims(x.dims().begin(), x.dims().begin() + L));
  Dims kernel = expand(c.ints(1), S, 1), in, out;
  for (int i = 0; i < S; ++i) {
    in.push_back(x.dims()[L + i]);
    out.push_back(od[L + i]);
  }
  const int64_t plane = numel(in);
  const ElementType t = x.elem(), s64 = ElementType::kS64;
  Dims pod{planes};  // [planes, out...]
  pod.insert(pod.end(), out.begin(), out.end());
  Value smp = b.reshape(c.t(3), {planes, S});
  // per spatial dim: the window starts, [planes, out_i] broadcast over pod
  std::vector<Value> start(S);
  for (int i = 0; i < S; ++i) {
    Type st{s64, {planes, out[i]}};
    Value last = b.constant_i(in[i] - kernel[i], st);
    if (out[i] > 1) {
      const int64_t col = S == 2 ? 1 - i : i;
      Value u = b.broadcast_in_dim(b.reshape(slice_at(b, smp, 1, col), {planes}), {planes, out[i]}, {0});
      Value alpha = div(b, b.constant(static_cast<double>(in[i] - kernel[i]), u.type),
                        b.constant(static_cast<double>(out[i] - 1), u.type));
      Value o = b.convert(b.iota(st, 1), t);
      Value v = sub(b, b.convert(mul(b, add(b, o, u), alpha), s64), b.convert(mul(b, u, alpha), s64));
      Value is_last = b.compare(Cmp::EQ, b.iota(st, 1), b.constant_i(out[i] - 1, st));
      last = b.select(is_last, last, v);
    }
    start[i] = b.broadcast_in_dim(last, pod, {0, static_cast<int64_t>(i) + 1});
  }
  Value xs = b.reshape(x, {planes * plane});
  Type pt{s64, pod};
  Value base = mul(b, b.iota(pt, 0), b.constant_i(plane, pt));
  const int64_t k = numel(pod);
  Value best, best_idx;
  for (const Dims& tap : taps_of(kernel)) {
    Value flat;
    for (int i = 0; i < S; ++i) {
      Value coord = add(b, start[i], b.constant_i(tap[i], pt));
      flat = flat.valid() ? add(b, mul(b, flat, b.constant_i(in[i], pt)), coord) : coord;
    }
    Value v = b.gather(xs, b.reshape(add(b, flat, base), {k, 1}), hlo::GatherDims{{}, {0}, {0}, 1}, {1}, {k});
    v = b.reshape(v, pod);
    keep_max(b, v, flat, best, best_idx);
  }
  return V{b.reshape(best, od), b.reshape(best_idx, c.out_dims(1))};
}

// Pooling backward through saved indices: grad summed into each plane at its index.
Value indices_backward(Ctx& c, int S, size_t indices_k) {
  Builder& b = c.b;
  ElementType t = compute_type(c.t(1).elem());
  const Dims& xd = c.t(1).dims();
  int64_t r = static_cast<int64_t>(xd.size());
  if (r != S + 1 && r != S + 2) throw hlo::Error("pooling backward: unexpected rank");
  int64_t planes = numel(Dims(xd.begin(), xd.end() - S)), plane = numel(Dims(xd.end() - S, xd.end()));
  int64_t per = planes ? c.t(0).type.numel() / planes : 0;
  if (planes * per == 0 || plane == 0) return b.constant(0, Type{t, xd});
  return b.reshape(plane_scatter(b, b.convert(c.t(0), t), c.t(indices_k), planes, per, plane, true), c.out_dims());
}

const Rows rows = {
    {{"adaptive_max_pool2d", "adaptive_max_pool2d.out"}, [](Ctx& c) { return adaptive_max_pool_nd(c, 2); }},
    {{"adaptive_max_pool2d_backward", "adaptive_max_pool2d_backward.grad_input"}, [](Ctx& c) { return one(adaptive_max_pool2d_backward(c)); }},
    {{"max_unpool2d", "max_unpool2d.out"}, [](Ctx& c) { return one(max_unpool(c, 2)); }},
    {{"max_unpool3d", "max_unpool3d.out"}, [](Ctx& c) { return one(max_unpool(c, 3)); }},
    {{"max_pool3d_with_indices", "max_pool3d_with_indices.out"}, [](Ctx& c) { return max_pool_nd(c, 3); }},
    {{"max_pool3d_with_indices_backward", "max_pool3d_with_indices_backward.grad_input"}, [](Ctx& c) { return one(indices_backward(c, 3, 7)); }},
    {{"avg_pool3d", "avg_pool3d.out"}, [](Ctx& c) { return one(avg_pool_nd(c, 3)); }},
    {{"avg_pool3d_backward", "avg_pool3d_backward.grad_input"}, [](Ctx& c) { return one(avg_pool_nd_backward(c, 3)); }},
    {{"_adaptive_avg_pool3d", "_adaptive_avg_pool3d.out"}, [](Ctx& c) { return one(adaptive_avg_pool_nd(c, 3)); }},
    {{"_adaptive_avg_pool3d_backward", "_adaptive_avg_pool3d_backward.grad_input"}, [](Ctx& c) { return one(adaptive_avg_pool_nd_backward(c, 3)); }},
    {{"adaptive_max_pool3d", "adaptive_max_pool3d.out"}, [](Ctx& c) { return adaptive_max_pool_nd(c, 3); }},
    {{"fractional_max_pool2d", "fractional_max_pool2d.output"}, [](Ctx& c) { return fractional_max_pool(c, 2); }},
    {{"fractional_max_pool2d_backward", "fractional_max_pool2d_backward.grad_input"}, [](Ctx& c) { return one(indices_backward(c, 2, 4)); }},
    {{"fractional_max_pool3d", "fractional_max_pool3d.output"}, [](Ctx& c) { return fractional_max_pool(c, 3); }},
    {{"adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input"}, [](Ctx& c) { return one(indices_backward(c, 3, 2)); }},
};

}  // namespace

// ------------------------------------------------------------------ window sums (lowering/windows.h)
Value window_sum(Builder& b, Value x, const Dims& window, const Dims& strides,
                 const std::vector<std::pair<int64_t, int64_t>>& padding) {
  Dims ones(x.rank(), 1);
  return b.reduce_window(x, b.scalar(0, x.elem()), window, strides, ones, ones, padding,
                         [](Builder& bb, const V& a) { return V{bb.binary("add", a[0], a[1])}; });
}

Value avg_pool_backward_sum(Builder& b, Value g, int64_t lead, const Dims& kernel, const Dims& stride,
                            const Dims& padding, const Dims& in, const Dims& out) {
  const int64_t r = g.rank();
  Dims lo(r, 0), hi(r, 0), interior(r, 0), window(r, 1), ones(r, 1);
  for (size_t i = 0; i < kernel.size(); ++i) {
    const int64_t a = lead + static_cast<int64_t>(i);
    int64_t len = out[i] > 0 ? (out[i] - 1) * stride[i] + 1 : 0;
    lo[a] = kernel[i] - 1 - padding[i];
    hi[a] = in[i] + kernel[i] - 1 - len - lo[a];
    interior[a] = stride[i] - 1;
    window[a] = kernel[i];
  }
  Value padded = b.pad(g, b.scalar(0, g.elem()), lo, hi, interior);
  std::vector<std::pair<int64_t, int64_t>> none(r, {0, 0});
  return window_sum(b, padded, window, ones, none);
}

}  // namespace lowering
