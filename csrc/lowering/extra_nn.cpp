// More neural-network rows: gated and shrinking activations (glu, hardshrink, softshrink, logsigmoid,
// prelu) with their backwards; upsampling (nearest, nearest-exact, linear, bilinear, trilinear,
// bicubic, antialiased bilinear/bicubic) and its backward; reflection and replication padding and
// their backwards; 3-d pooling (max with indices, average, adaptive average and max) and adaptive max
// pooling in 2-d, with backwards; max unpooling; im2col / col2im (unfold / fold); grid_sampler_2d
// (bilinear and nearest, all padding modes) and its backward; multi-class margin losses.
//
// Upsampling and padding are separable: along each spatial axis an output position reads one or more
// input positions with fixed weights. Those positions and weights are computed here, on the host, with
// the same float arithmetic as torch's CPU kernels (so the same source pixels and the same weights),
// and become gathers (forward) and scatter-adds (backward) along that axis.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }

Value add(Builder& b, Value x, Value y) { return b.binary("add", x, y); }
Value sub(Builder& b, Value x, Value y) { return b.binary("subtract", x, y); }
Value mul(Builder& b, Value x, Value y) { return b.binary("multiply", x, y); }
Value div(Builder& b, Value x, Value y) { return b.binary("divide", x, y); }
Value andv(Builder& b, Value x, Value y) { return b.binary("and", x, y); }
Value orv(Builder& b, Value x, Value y) { return b.binary("or", x, y); }
Value isnan(Builder& b, Value x) { return b.compare(Cmp::NE, x, x); }
Value k(Builder& b, double v, const Value& like_v) { return b.constant(v, like_v.type); }

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// The float type a row computes in: f32 for half types (and integers), the type itself otherwise.
ElementType compute_type(ElementType t) {
  ElementType a = accumulation_type(t);
  return pjrt::is_float(a) ? a : ElementType::kF32;
}

Value up(Ctx& c, size_t k) { return operand(c, k, compute_type(c.out_type()), c.out_dims()); }

// ----------------------------------------------------------------------------------- constants
Value const_i64(Builder& b, const std::vector<int64_t>& v) {
  if (v.empty()) return b.constant_i(0, Type{ElementType::kS64, {0}});
  std::string s = "value = dense<[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  s += "]> : tensor<" + std::to_string(v.size()) + "xi64>";
  return b.raw("stablehlo.constant", s, {}, Type{ElementType::kS64, {static_cast<int64_t>(v.size())}});
}

// A 1-d f32 or f64 constant holding `v` exactly (as bit patterns).
Value const_float(Builder& b, const std::vector<double>& v, ElementType t) {
  const bool dbl = t == ElementType::kF64;
  ElementType ft = dbl ? ElementType::kF64 : ElementType::kF32;
  if (v.empty()) return b.constant(0, Type{ft, {0}});
  std::string s = "value = dense<[";
  char hex[32];
  for (size_t i = 0; i < v.size(); ++i) {
    if (dbl) {
      uint64_t bits;
      std::memcpy(&bits, &v[i], sizeof bits);
      std::snprintf(hex, sizeof hex, "0x%016llX", static_cast<unsigned long long>(bits));
    } else {
      float f = static_cast<float>(v[i]);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      std::snprintf(hex, sizeof hex, "0x%08X", bits);
    }
    s += (i ? ", " : "");
    s += hex;
  }
  s += "]> : tensor<" + std::to_string(v.size()) + "x" + (dbl ? "f64" : "f32") + ">";
  return b.raw("stablehlo.constant", s, {}, Type{ft, {static_cast<int64_t>(v.size())}});
}

// x.index_select(axis, idx) for host-known indices.
Value take_axis(Builder& b, Value x, int64_t axis, const std::vector<int64_t>& idx) {
  const int64_t n = static_cast<int64_t>(idx.size());
  Dims out = x.dims();
  out[axis] = n;
  if (numel(out) == 0) return b.constant(0, Type{x.elem(), out});
  hlo::GatherDims g;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != axis) g.offset_dims.push_back(i);
  g.collapsed_slice_dims = {axis};
  g.start_index_map = {axis};
  g.index_vector_dim = 1;
  Dims sizes = x.dims();
  sizes[axis] = 1;
  return b.gather(x, b.reshape(const_i64(b, idx), {n, 1}), g, sizes, out);
}

// `acc` (axis of size m) plus, at acc[idx[j]] along axis, upd[j] (upd's axis has size idx.size()).
Value scatter_add_axis(Builder& b, Value acc, int64_t axis, const std::vector<int64_t>& idx, Value upd) {
  const int64_t n = static_cast<int64_t>(idx.size());
  if (n == 0 || upd.type.numel() == 0 || acc.type.numel() == 0) return acc;
  hlo::ScatterDims s;
  for (int64_t i = 0; i < upd.rank(); ++i)
    if (i != axis) s.update_window_dims.push_back(i);
  s.inserted_window_dims = {axis};
  s.scatter_dims_to_operand_dims = {axis};
  s.index_vector_dim = 1;
  return b.scatter(acc, b.reshape(const_i64(b, idx), {n, 1}), upd, s, [](Builder& bb, const V& a) {
    return V{bb.binary("add", a[0], a[1])};
  });
}

// A per-position weight vector along `axis`, broadcast to `dims`.
Value axis_weights(Builder& b, const std::vector<double>& w, ElementType t, const Dims& dims, int64_t axis) {
  return b.broadcast_in_dim(const_float(b, w, t), dims, {axis});
}

// ----------------------------------------------------------------------------- separable resampling
// Along one axis: output position o reads taps idx[t][o] with weights w[t][o] (empty w: weight 1).
struct AxisMap {
  std::vector<std::vector<int64_t>> idx;
  std::vector<std::vector<double>> w;
};

// x [.., in, ..] -> [.., out, ..]: sum over taps of w * x[idx], in tap order.
Value resample_axis(Builder& b, Value x, int64_t axis, const AxisMap& m) {
  Value r;
  for (size_t t = 0; t < m.idx.size(); ++t) {
    Value v = take_axis(b, x, axis, m.idx[t]);
    if (!m.w.empty()) v = mul(b, v, axis_weights(b, m.w[t], x.elem(), v.dims(), axis));
    r = r.valid() ? add(b, r, v) : v;
  }
  return r;
}

// The adjoint of resample_axis: g [.., out, ..] -> [.., in, ..].
Value resample_axis_backward(Builder& b, Value g, int64_t axis, int64_t in, const AxisMap& m) {
  Dims d = g.dims();
  d[axis] = in;
  Value acc = b.constant(0, Type{g.elem(), d});
  for (size_t t = 0; t < m.idx.size(); ++t) {
    Value u = m.w.empty() ? g : mul(b, g, axis_weights(b, m.w[t], g.elem(), g.dims(), axis));
    acc = scatter_add_axis(b, acc, axis, m.idx[t], u);
  }
  return acc;
}

enum class Mode { kNearest, kNearestExact, kLinear, kCubic, kLinearAA, kCubicAA };

// torch's compute_scales_value: 1/scale when a positive scale is given, else in/out.
template <typename T>
T scales_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / static_cast<T>(out);
}

template <typename T>
T area_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : static_cast<T>(0);
  return scales_value<T>(scale, in, out);
}

template <typename T>
T source_index(T scale, int64_t dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<T>(dst);
  T src = scale * (static_cast<T>(dst) + static_cast<T>(0.5)) - static_cast<T>(0.5);
  return (!cubic && src < static_cast<T>(0)) ? static_cast<T>(0) : src;
}

template <typename T>
void guard_index_and_lambda(T real, int64_t in, int64_t& index, T& lambda) {
  index = std::min(static_cast<int64_t>(std::floor(static_cast<float>(real))), in - 1);
  lambda = std::min(std::max(real - static_cast<T>(index), static_cast<T>(0)), static_cast<T>(1));
}

template <typename T>
T cubic1(T x, T a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
template <typename T>
T cubic2(T x, T a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

// Antialiased resampling (torch's separable AA kernels, after PIL): output i averages the inputs within
// `support` of its center with a triangle (linear) or Keys cubic (a = -0.5) filter stretched by the
// downscaling factor, normalized to sum 1.
template <typename T>
T aa_filter(T x, bool cubic) {
  x = std::abs(x);
  if (!cubic) return x < 1 ? 1 - x : 0;
  const T a = static_cast<T>(-0.5);
  if (x < 1) return cubic1<T>(x, a);
  if (x < 2) return cubic2<T>(x, a);
  return 0;
}

template <typename T>
AxisMap axis_map_aa(bool cubic, int64_t in, int64_t out, bool align_corners, std::optional<double> scale_opt) {
  T scale = area_scale<T>(in, out, align_corners, scale_opt);
  const int interp_size = cubic ? 4 : 2;
  T support = scale >= 1.0 ? static_cast<T>((interp_size * 0.5) * scale) : static_cast<T>(interp_size * 0.5);
  const int64_t max_size = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  T invscale = scale >= 1.0 ? static_cast<T>(1.0 / scale) : static_cast<T>(1.0);
  AxisMap m;
  m.idx.assign(max_size, std::vector<int64_t>(out));
  m.w.assign(max_size, std::vector<double>(out));
  std::vector<T> w(max_size);
  for (int64_t i = 0; i < out; ++i) {
    T center = static_cast<T>(scale * (i + 0.5));
    int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), static_cast<int64_t>(0));
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    xsize = std::clamp<int64_t>(xsize, 0, max_size);
    T total = 0;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = aa_filter<T>(static_cast<T>((j + xmin - center + 0.5) * invscale), cubic);
      total += w[j];
    }
    for (int64_t j = 0; j < max_size; ++j) {
      T v = j < xsize ? (total != 0 ? w[j] / total : w[j]) : static_cast<T>(0);
      m.idx[j][i] = std::min(xmin + std::min(j, std::max<int64_t>(xsize - 1, 0)), in - 1);
      m.w[j][i] = v;
    }
  }
  return m;
}

template <typename T>
AxisMap axis_map_t(Mode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (mode == Mode::kLinearAA || mode == Mode::kCubicAA) return axis_map_aa<T>(mode == Mode::kCubicAA, in, out, align_corners, scale);
  AxisMap m;
  if (mode == Mode::kNearest || mode == Mode::kNearestExact) {
    m.idx.assign(1, std::vector<int64_t>(out));
    float s = scales_value<float>(scale, in, out);
    for (int64_t o = 0; o < out; ++o) {
      int64_t i;
      if (mode == Mode::kNearest) {
        if (out == in) i = o;
        else if (out == 2 * in) i = o >> 1;
        else i = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
      } else {
        i = std::min(static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(o) + 0.5) * s))), in - 1);
      }
      m.idx[0][o] = i;
    }
    return m;
  }
  T ratio = area_scale<T>(in, out, align_corners, scale);
  if (mode == Mode::kLinear) {
    m.idx.assign(2, std::vector<int64_t>(out));
    m.w.assign(2, std::vector<double>(out));
    for (int64_t o = 0; o < out; ++o) {
      int64_t i0, i1;
      T l0, l1;
      if (out == in) {
        i0 = i1 = o;
        l0 = 1;
        l1 = 0;
      } else {
        T real = source_index<T>(ratio, o, align_corners, false);
        guard_index_and_lambda<T>(real, in, i0, l1);
        i1 = i0 + (i0 < in - 1 ? 1 : 0);
        l0 = static_cast<T>(1) - l1;
      }
      m.idx[0][o] = i0;
      m.idx[1][o] = i1;
      m.w[0][o] = l0;
      m.w[1][o] = l1;
    }
    return m;
  }
  m.idx.assign(4, std::vector<int64_t>(out));
  m.w.assign(4, std::vector<double>(out));
  const T A = static_cast<T>(-0.75);
  for (int64_t o = 0; o < out; ++o) {
    T real = source_index<T>(ratio, o, align_corners, true);
    int64_t i;
    T t;
    guard_index_and_lambda<T>(real, in, i, t);
    T x1 = t, x2 = static_cast<T>(1.0) - t;
    T w[4] = {cubic2<T>(static_cast<T>(x1 + 1.0), A), cubic1<T>(x1, A), cubic1<T>(x2, A),
              cubic2<T>(static_cast<T>(x2 + 1.0), A)};
    for (int j = 0; j < 4; ++j) {
      m.idx[j][o] = std::max<int64_t>(std::min<int64_t>(i - 1 + j, in - 1), 0);
      m.w[j][o] = w[j];
    }
  }
  return m;
}

AxisMap axis_map(Mode mode, ElementType t, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (t == ElementType::kF64) return axis_map_t<double>(mode, in, out, align_corners, scale);
  return axis_map_t<float>(mode, in, out, align_corners, scale);
}

struct Upsample {
  Mode mode;
  int spatial;  // 1, 2 or 3
  bool has_align;
};

std::optional<double> opt_double(const Ctx& c, size_t k) {
  if (!c.has(k)) return std::nullopt;
  return c.d(k);
}

// upsample_*(self, output_size, [align_corners], scales...): applied along the last axis first, as the
// CPU kernels nest their interpolation.
Value upsample(Ctx& c, const Upsample& u) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value x = b.convert(c.t(0), t);
  const Dims& od = c.out_dims();
  if (numel(od) == 0) return b.constant(0, Type{t, od});
  if (x.rank() != u.spatial + 2) throw hlo::Error("upsample: unexpected rank");
  bool align = u.has_align && c.i(2) != 0;
  size_t scale0 = u.has_align ? 3 : 2;
  for (int s = u.spatial - 1; s >= 0; --s) {
    int64_t axis = 2 + s;
    int64_t in = x.dims()[axis], out = od[axis];
    if (in == 0) throw hlo::Error("upsample: empty input");
    AxisMap m = axis_map(u.mode, t, in, out, align, opt_double(c, scale0 + s));
    x = resample_axis(b, x, axis, m);
  }
  return x;
}

// upsample_*_backward(grad_output, output_size, input_size, [align_corners], scales...)
Value upsample_backward(Ctx& c, const Upsample& u) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value g = b.convert(c.t(0), t);
  const Dims& in_dims = c.ints(2);
  if (static_cast<int>(in_dims.size()) != u.spatial + 2) throw hlo::Error("upsample_backward: bad input_size");
  if (numel(in_dims) == 0 || g.type.numel() == 0) return b.constant(0, Type{t, c.out_dims()});
  bool align = u.has_align && c.i(3) != 0;
  size_t scale0 = u.has_align ? 4 : 3;
  for (int s = 0; s < u.spatial; ++s) {
    int64_t axis = 2 + s;
    int64_t in = in_dims[axis], out = g.dims()[axis];
    AxisMap m = axis_map(u.mode, t, in, out, align, opt_double(c, scale0 + s));
    g = resample_axis_backward(b, g, axis, in, m);
  }
  return b.reshape(g, c.out_dims());
}

// --------------------------------------------------------------------------------------- padding
// The source position of each output position along one padded axis.
std::vector<int64_t> pad_index(int64_t n, int64_t lo, int64_t hi, bool reflect) {
  std::vector<int64_t> idx;
  for (int64_t o = 0; o < n + lo + hi; ++o) {
    int64_t i = o - lo;
    if (reflect) {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else {
      i = std::min(std::max<int64_t>(i, 0), n - 1);
    }
    idx.push_back(i);
  }
  return idx;
}

// reflection_padNd / replication_padNd(self, padding): pairs (lo, hi) from the last dim backwards.
Value pad_nd(Ctx& c, bool reflect) {
  Builder& b = c.b;
  Value x = c.t(0);
  const Dims& p = c.ints(1);
  if (numel(c.out_dims()) == 0) return b.constant(0, c.out());
  for (size_t i = 0; i + 1 < p.size(); i += 2) {
    int64_t axis = x.rank() - 1 - static_cast<int64_t>(i / 2);
    int64_t n = x.dims()[axis];
    if (n == 0) throw hlo::Error("pad: empty dimension");
    if (reflect && (p[i] >= n || p[i + 1] >= n)) throw hlo::Error("reflection pad: padding too large");
    x = take_axis(b, x, axis, pad_index(n, p[i], p[i + 1], reflect));
  }
  return x;
}

// reflection_padNd_backward / replication_padNd_backward(grad_output, self, padding)
Value pad_nd_backward(Ctx& c, bool reflect) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value g = b.convert(c.t(0), t);
  const Dims& xd = c.t(1).dims();
  const Dims& p = c.ints(2);
  if (numel(xd) == 0) return b.constant(0, Type{t, xd});
  for (size_t i = 0; i + 1 < p.size(); i += 2) {
    int64_t axis = static_cast<int64_t>(xd.size()) - 1 - static_cast<int64_t>(i / 2);
    int64_t n = xd[axis];
    AxisMap m;
    m.idx.push_back(pad_index(n, p[i], p[i + 1], reflect));
    g = resample_axis_backward(b, g, axis, n, m);
  }
  return b.reshape(g, c.out_dims());
}

// ---------------------------------------------------------------------------------- activations
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
  return div(b, k(b, 1, x), add(b, k(b, 1, x), b.unary("exponential", b.unary("negate", x))));
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
  Value gb = mul(b, mul(b, mul(b, sub(b, k(b, 1, s), s), s), a), go);
  return b.concatenate({ga, gb}, dim);
}

// |x| <= lambd (both ends included)
Value in_band(Builder& b, Value x, Value l) {
  return andv(b, b.compare(Cmp::GE, x, b.unary("negate", l)), b.compare(Cmp::LE, x, l));
}

Value hardshrink(Ctx& c) {
  Value x = operand(c, 0), l = operand(c, 1);
  return c.b.select(in_band(c.b, x, l), k(c.b, 0, x), x);
}

Value softshrink(Ctx& c) {
  Builder& b = c.b;
  Value x = up(c, 0), l = up(c, 1);
  Value r = b.select(b.compare(Cmp::LT, x, b.unary("negate", l)), add(b, x, l), mul(b, x, k(b, 0, x)));
  return b.select(b.compare(Cmp::GT, x, l), sub(b, x, l), r);
}

// hardshrink_backward / softshrink_backward(grad, self, lambd): 0 inside the band, grad outside.
Value shrink_backward(Ctx& c) {
  Value g = operand(c, 0), x = operand(c, 1), l = operand(c, 2);
  return c.b.select(in_band(c.b, x, l), k(c.b, 0, g), g);
}

// log_sigmoid_forward(self) -> (min(x, 0) - log1p(exp(-|x|)), buffer exp(-|x|))
V log_sigmoid_forward(Ctx& c) {
  Builder& b = c.b;
  Value x = b.convert(c.t(0), compute_type(c.out_type(0)));
  Value z = b.unary("exponential", b.unary("negate", b.unary("abs", x)));
  Value out = sub(b, b.binary("minimum", x, k(b, 0, x)), b.unary("log_plus_one", z));
  Value buf = numel(c.out_dims(1)) == numel(x.dims()) ? b.reshape(z, c.out_dims(1)) : b.constant(0, c.out(1));
  return V{out, buf};
}

// log_sigmoid_backward(grad, self, buffer): (max_deriv - sign * z / (1 + z)) * grad
Value log_sigmoid_backward(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value g = operand(c, 0, t, c.out_dims()), x = operand(c, 1, t, c.out_dims());
  Value neg = b.compare(Cmp::LT, x, k(b, 0, x));
  Value max_deriv = b.select(neg, k(b, 1, x), k(b, 0, x));
  Value sign = b.select(neg, k(b, 1, x), k(b, -1, x));
  Value z = b.unary("exponential", b.unary("negate", b.unary("abs", x)));
  return mul(b, sub(b, max_deriv, mul(b, sign, div(b, z, add(b, k(b, 1, z), z)))), g);
}

Value prelu(Ctx& c) {
  Builder& b = c.b;
  Value x = operand(c, 0), w = operand(c, 1);
  return b.select(b.compare(Cmp::GT, x, k(b, 0, x)), x, mul(b, w, x));
}

// _prelu_kernel_backward(grad, self, weight) -> (grad_input, grad_weight), both elementwise.
V prelu_backward(Ctx& c) {
  Builder& b = c.b;
  const Dims& d = c.out_dims(0);
  ElementType t = c.out_type(0);
  Value g = operand(c, 0, t, d), x = operand(c, 1, t, d), w = operand(c, 2, t, d);
  Value pos = b.compare(Cmp::GT, x, k(b, 0, x));
  Value gi = b.select(pos, g, mul(b, w, g));
  Value gw = b.select(pos, k(b, 0, x), mul(b, x, g));
  if (c.out_dims(1) != d) throw hlo::Error("prelu_backward: unexpected weight gradient shape");
  return V{gi, gw};
}

// ---------------------------------------------------------------------------------------- pooling
// adaptive_max_pool2d(self, output_size) -> (out, indices): every bin scanned row by row, keeping the
// first maximum (a NaN always replaces), as the CPU kernel; positions past a bin's end repeat its last.
V adaptive_max_pool2d(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() != 3 && x.rank() != 4) throw hlo::Error("adaptive_max_pool2d: expected 3-d or 4-d input");
  if (!pjrt::is_float(x.elem())) throw hlo::Error("adaptive_max_pool2d: floating-point only");
  const Dims& od = c.out_dims(0);
  int64_t r = x.rank(), H = x.dims()[r - 2], W = x.dims()[r - 1], OH = od[r - 2], OW = od[r - 1];
  if (numel(od) == 0 || H == 0 || W == 0) throw hlo::Error("adaptive_max_pool2d: empty input");
  auto bins = [](int64_t in, int64_t out, std::vector<int64_t>& s, std::vector<int64_t>& e) {
    int64_t kmax = 0;
    for (int64_t o = 0; o < out; ++o) {
      s.push_back(o * in / out);
      e.push_back(((o + 1) * in + out - 1) / out);
      kmax = std::max(kmax, e.back() - s.back());
    }
    return kmax;
  };
  std::vector<int64_t> sh, eh, sw, ew;
  int64_t kh = bins(H, OH, sh, eh), kw = bins(W, OW, sw, ew);
  Value best, best_idx;
  for (int64_t th = 0; th < kh; ++th) {
    std::vector<int64_t> rows;
    for (int64_t o = 0; o < OH; ++o) rows.push_back(std::min(sh[o] + th, eh[o] - 1));
    Value xr = take_axis(b, x, r - 2, rows);
    for (int64_t tw = 0; tw < kw; ++tw) {
      std::vector<int64_t> cols, flat;
      for (int64_t o = 0; o < OW; ++o) cols.push_back(std::min(sw[o] + tw, ew[o] - 1));
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) flat.push_back(rows[i] * W + cols[j]);
      Value v = take_axis(b, xr, r - 1, cols);
      Value idx = b.broadcast_in_dim(b.reshape(const_i64(b, flat), {OH, OW}), od, {r - 2, r - 1});
      if (!best.valid()) {
        best = v;
        best_idx = idx;
        continue;
      }
      Value take = orv(b, b.compare(Cmp::GT, v, best), isnan(b, v));
      best = b.select(take, v, best);
      best_idx = b.select(take, idx, best_idx);
    }
  }
  return V{best, best_idx};
}

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

// ------------------------------------------------------------------------------ im2col / col2im
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

// ------------------------------------------------------------------------------- N-d pooling
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
  if (!pjrt::is_float(x.elem())) throw hlo::Error("max_pool: floating-point only");
  const Dims& od = c.out_dims(0);
  PoolNd p = pool_nd(c, x, od, S, 1, true);
  if (numel(od) == 0) return V{b.constant(0, c.out(0)), b.constant_i(0, c.out(1))};
  int64_t r = x.rank(), L = p.L;
  Dims lo(r, 0), hi(r, 0), interior(r, 0);
  for (int i = 0; i < S; ++i) {
    lo[L + i] = p.padding[i];
    hi[L + i] = std::max<int64_t>(0, (p.out[i] - 1) * p.stride[i] + p.dilation[i] * (p.kernel[i] - 1) + 1 - p.in[i] - p.padding[i]);
  }
  Value padded = b.pad(x, b.scalar(-INFINITY, x.elem()), lo, hi, interior);
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

Value window_sum(Builder& b, Value x, const Dims& window, const Dims& strides,
                 const std::vector<std::pair<int64_t, int64_t>>& padding) {
  Dims ones(x.rank(), 1);
  return b.reduce_window(x, b.scalar(0, x.elem()), window, strides, ones, ones, padding,
                         [](Builder& bb, const V& a) { return V{bb.binary("add", a[0], a[1])}; });
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
  int64_t r = g.rank(), L = p.L;
  Value d = c.has(7) ? b.constant(static_cast<double>(c.i(7)), g.type) : b.convert(avg_divisor(b, p, g.dims(), c.i(6) != 0), t);
  g = div(b, g, d);
  Dims lo(r, 0), hi(r, 0), interior(r, 0), window(r, 1), ones(r, 1);
  for (int i = 0; i < S; ++i) {
    int64_t len = (p.out[i] - 1) * p.stride[i] + 1;
    lo[L + i] = p.kernel[i] - 1 - p.padding[i];
    hi[L + i] = p.in[i] + p.kernel[i] - 1 - len - lo[L + i];
    interior[L + i] = p.stride[i] - 1;
    window[L + i] = p.kernel[i];
  }
  // negative low/high padding crops, which stablehlo.pad allows
  Value padded = b.pad(g, b.scalar(0, t), lo, hi, interior);
  std::vector<std::pair<int64_t, int64_t>> none(r, {0, 0});
  return b.reshape(window_sum(b, padded, window, ones, none), c.out_dims());
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

// adaptive_max_pool3d(self, output_size) -> (out, indices), as adaptive_max_pool2d.
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
    if (!best.valid()) {
      best = v;
      best_idx = flat;
      continue;
    }
    Value take = orv(b, b.compare(Cmp::GT, v, best), isnan(b, v));
    best = b.select(take, v, best);
    best_idx = b.select(take, flat, best_idx);
  }
  return V{best, best_idx};
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

// ----------------------------------------------------------------------------------- grid_sample
// grid_sampler_2d(input [N, C, H, W], grid [N, OH, OW, 2], interpolation (0 bilinear, 1 nearest),
// padding (0 zeros, 1 border, 2 reflection), align_corners), following the CPU kernel's arithmetic.
// The source coordinate of normalized grid values `g` along an axis of `size`, and its derivative.
std::pair<Value, Value> grid_coord(Builder& b, Value g, int64_t size, int64_t padding, bool align) {
  Value one_ = k(b, 1, g), zero = k(b, 0, g);
  double scale = align ? static_cast<double>(static_cast<float>(size - 1) / 2) : static_cast<double>(static_cast<float>(size) / 2);
  Value x = mul(b, add(b, g, one_), k(b, scale, g));
  if (!align) x = sub(b, x, k(b, 0.5, g));
  Value d = k(b, scale, g);
  double max_val = static_cast<double>(size - 1);
  auto clip = [&](Value v, Value dv) {
    Value inside = andv(b, b.compare(Cmp::GT, v, zero), b.compare(Cmp::LT, v, k(b, max_val, v)));
    Value cv = b.binary("minimum", k(b, max_val, v), b.binary("maximum", v, zero));
    return std::make_pair(cv, b.select(inside, dv, zero));
  };
  if (padding == 1) return clip(x, d);
  if (padding == 2) {
    double low = align ? 0.0 : -0.5, twice = align ? 2.0 * (size - 1) : 2.0 * size;
    if (twice <= 0) return {zero, zero};
    Value rel = sub(b, x, k(b, low, x));
    Value a = b.unary("abs", rel);
    Value tw = k(b, twice, a);
    Value flips = div(b, a, tw);
    flips = b.select(b.compare(Cmp::LT, flips, zero), b.unary("ceil", flips), b.unary("floor", flips));
    Value extra = sub(b, a, mul(b, flips, tw));
    Value back = sub(b, tw, extra);
    Value forward = b.compare(Cmp::LE, extra, back);
    Value rv = add(b, b.select(forward, extra, back), k(b, low, extra));
    Value sign = b.select(b.compare(Cmp::LT, rel, zero), k(b, -1, x), one_);
    Value dr = mul(b, mul(b, d, sign), b.select(forward, one_, k(b, -1, x)));
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
  Value w = sub(b, s.x, xw), e = sub(b, k(b, 1, w), w), n = sub(b, s.y, yn), so = sub(b, k(b, 1, n), n);
  Value ixw = b.convert(xw, ElementType::kS64), iyn = b.convert(yn, ElementType::kS64);
  Value ixe = add(b, ixw, b.constant_i(1, s.it)), iys = add(b, iyn, b.constant_i(1, s.it));
  cs.push_back({ixw, iyn, mul(b, so, e), b.unary("negate", so), b.unary("negate", e)});  // nw
  cs.push_back({ixe, iyn, mul(b, so, w), so, b.unary("negate", w)});                      // ne
  cs.push_back({ixw, iys, mul(b, n, e), b.unary("negate", n), e});                        // sw
  cs.push_back({ixe, iys, mul(b, n, w), n, w});                                           // se
  return cs;
}

hlo::GatherDims grid_gather_dims() { return hlo::GatherDims{{2}, {0, 1}, {0, 1}, 2}; }

Value grid_sampler_2d(Ctx& c) {
  Builder& b = c.b;
  ElementType t = compute_type(c.out_type());
  Value in = b.convert(c.t(0), t), grid = b.convert(c.t(1), t);
  if (numel(c.out_dims()) == 0) return b.constant(0, Type{t, c.out_dims()});
  GridSample s = grid_setup(b, in, grid, c.i(2), c.i(3), c.i(4) != 0);
  Value src = b.reshape(b.transpose(in, {0, 2, 3, 1}), {s.N, s.H * s.W, s.C});
  Dims vd{s.N, s.L, s.C};
  Value out;
  for (const Corner& cr : grid_corners(b, s)) {
    auto [idx, ok] = grid_where(b, s, cr.ix, cr.iy);
    Value v = b.gather(src, idx, grid_gather_dims(), {1, 1, s.C}, vd);
    v = b.select(b.broadcast_in_dim(ok, vd, {0, 1}), v, b.constant(0, Type{t, vd}));
    if (cr.w.valid()) v = mul(b, v, b.broadcast_in_dim(cr.w, vd, {0, 1}));
    out = out.valid() ? add(b, out, v) : v;
  }
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

// ------------------------------------------------------------------------------------ margin losses
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
  Value h = b.select(b.compare(Cmp::EQ, p, k(b, 1, p)), z, mul(b, z, z));
  if (c.has(4)) {
    Value w = b.convert(c.t(4), t);
    Value wy = pick_target(b, b.broadcast_in_dim(w, {N, C}, {1}), tg);
    h = mul(b, h, b.broadcast_in_dim(wy, {N, C}, {0}));
  }
  Type it{ElementType::kS64, {N, C}};
  Value not_y = b.compare(Cmp::NE, b.iota(it, 1), b.broadcast_in_dim(b.convert(tg, ElementType::kS64), {N, C}, {0}));
  Value keep = andv(b, not_y, b.compare(Cmp::GT, z, k(b, 0, z)));
  Value l = div(b, reduce_sum(b, b.select(keep, h, k(b, 0, h)), {1}), b.constant(static_cast<double>(C), Type{t, {N}}));
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
  Value z = add(b, sub(b, k(b, 1, xb), b.broadcast_in_dim(xy, {N, C, C}, {0, 1})), xb);  // [n, j, d]
  Value keep = andv(b, andv(b, b.broadcast_in_dim(valid, {N, C, C}, {0, 1}),
                            b.unary("not", b.broadcast_in_dim(is_target, {N, C, C}, {0, 2}))),
                    b.compare(Cmp::GT, z, k(b, 0, z)));
  Value l = reduce_sum(b, b.select(keep, z, k(b, 0, z)), {1, 2});
  l = div(b, l, b.constant(static_cast<double>(C), l.type));
  Value out = reduce_loss(b, l, c.i(2));
  return V{b.reshape(out, c.out_dims(0)), b.reshape(b.convert(is_target, t), c.out_dims(1))};
}

#define UPSAMPLE_ROWS(NAME, MODE, SPATIAL, ALIGN)                                                         \
  {{NAME, NAME ".out"}, [](Ctx& c) { return one(upsample(c, {MODE, SPATIAL, ALIGN})); }},                  \
  {{NAME "_backward", NAME "_backward.grad_input"}, [](Ctx& c) {                                          \
     return one(upsample_backward(c, {MODE, SPATIAL, ALIGN}));                                             \
   }}

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

    UPSAMPLE_ROWS("upsample_nearest1d", Mode::kNearest, 1, false),
    UPSAMPLE_ROWS("upsample_nearest2d", Mode::kNearest, 2, false),
    UPSAMPLE_ROWS("upsample_nearest3d", Mode::kNearest, 3, false),
    UPSAMPLE_ROWS("_upsample_nearest_exact1d", Mode::kNearestExact, 1, false),
    UPSAMPLE_ROWS("_upsample_nearest_exact2d", Mode::kNearestExact, 2, false),
    UPSAMPLE_ROWS("_upsample_nearest_exact3d", Mode::kNearestExact, 3, false),
    UPSAMPLE_ROWS("upsample_linear1d", Mode::kLinear, 1, true),
    UPSAMPLE_ROWS("upsample_bilinear2d", Mode::kLinear, 2, true),
    UPSAMPLE_ROWS("upsample_trilinear3d", Mode::kLinear, 3, true),
    UPSAMPLE_ROWS("upsample_bicubic2d", Mode::kCubic, 2, true),
    UPSAMPLE_ROWS("_upsample_bilinear2d_aa", Mode::kLinearAA, 2, true),
    UPSAMPLE_ROWS("_upsample_bicubic2d_aa", Mode::kCubicAA, 2, true),

    {{"reflection_pad1d", "reflection_pad1d.out"}, [](Ctx& c) { return one(pad_nd(c, true)); }},
    {{"reflection_pad2d", "reflection_pad2d.out"}, [](Ctx& c) { return one(pad_nd(c, true)); }},
    {{"reflection_pad3d", "reflection_pad3d.out"}, [](Ctx& c) { return one(pad_nd(c, true)); }},
    {{"replication_pad1d", "replication_pad1d.out"}, [](Ctx& c) { return one(pad_nd(c, false)); }},
    {{"replication_pad2d", "replication_pad2d.out"}, [](Ctx& c) { return one(pad_nd(c, false)); }},
    {{"replication_pad3d", "replication_pad3d.out"}, [](Ctx& c) { return one(pad_nd(c, false)); }},
    {{"reflection_pad1d_backward", "reflection_pad1d_backward.grad_input"}, [](Ctx& c) { return one(pad_nd_backward(c, true)); }},
    {{"reflection_pad2d_backward", "reflection_pad2d_backward.grad_input"}, [](Ctx& c) { return one(pad_nd_backward(c, true)); }},
    {{"reflection_pad3d_backward", "reflection_pad3d_backward.grad_input"}, [](Ctx& c) { return one(pad_nd_backward(c, true)); }},
    {{"replication_pad1d_backward", "replication_pad1d_backward.grad_input"}, [](Ctx& c) { return one(pad_nd_backward(c, false)); }},
    {{"replication_pad2d_backward", "replication_pad2d_backward.grad_input"}, [](Ctx& c) { return one(pad_nd_backward(c, false)); }},
    {{"replication_pad3d_backward", "replication_pad3d_backward.grad_input"}, [](Ctx& c) { return one(pad_nd_backward(c, false)); }},

    {{"adaptive_max_pool2d", "adaptive_max_pool2d.out"}, adaptive_max_pool2d},
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
    {{"adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input"}, [](Ctx& c) { return one(indices_backward(c, 3, 2)); }},
    {{"grid_sampler_2d", "grid_sampler_2d.out"}, [](Ctx& c) { return one(grid_sampler_2d(c)); }},
    {{"grid_sampler_2d_backward", "grid_sampler_2d_backward.out"}, grid_sampler_2d_backward},
    {{"multi_margin_loss", "multi_margin_loss.out"}, [](Ctx& c) { return one(multi_margin_loss(c)); }},
    {{"multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output"}, multilabel_margin_loss},
    {{"im2col", "im2col.out"}, [](Ctx& c) { return one(im2col(c)); }},
    {{"col2im", "col2im.out"}, [](Ctx& c) { return one(col2im(c)); }},
};

}  // namespace
}  // namespace lowering
