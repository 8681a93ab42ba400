// Upsampling (nearest, nearest-exact, linear, bilinear, trilinear, bicubic, antialiased bilinear/bicubic)
// and its backward. Upsampling is separable: along each spatial axis an output position reads one or more
// input positions with fixed weights. Those positions and weights are computed here, on the host, with
// the same float arithmetic as torch's CPU kernels (so the same source pixels and the same weights), and
// become gathers (forward) and scatter-adds (backward) along that axis.
#include <algorithm>
#include <cmath>
#include <optional>

#include "lowering/helpers.h"

namespace lowering {
namespace {

// A per-position weight vector along `axis`, broadcast to `dims`.
Value axis_weights(Builder& b, const std::vector<double>& w, ElementType t, const Dims& dims, int64_t axis) {
  return b.broadcast_in_dim(const_float(b, w, t), dims, {axis});
}

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

// torch's area_pixel_compute_source_index. The CPU's kernels are compiled with FMA contraction (x86-64
// with AVX2, the CPU torch dispatches to), so scale * (dst + 0.5) - 0.5 is one fused multiply-add there,
// rounded once: computed in two roundings, 345 -> 270 rows took other weights at 2 of 270 (bilinear
// 345x456 -> 270x270 differed from the CPU at 854 elements, by up to 2.3e-4).
template <typename T>
T source_index(T scale, int64_t dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<T>(dst);
  T src = std::fma(scale, static_cast<T>(dst) + static_cast<T>(0.5), static_cast<T>(-0.5));
  return (!cubic && src < static_cast<T>(0)) ? static_cast<T>(0) : src;
}

template <typename T>
void guard_index_and_lambda(T real, int64_t in, int64_t& index, T& lambda) {
  index = std::min(static_cast<int64_t>(std::floor(static_cast<float>(real))), in - 1);
  lambda = std::min(std::max(real - static_cast<T>(index), static_cast<T>(0)), static_cast<T>(1));
}

template <typename T>
T cubic1(T x, T a) { return std::fma(std::fma(a + 2, x, -(a + 3)) * x, x, T(1)); }  // fused as the CPU's
template <typename T>
T cubic2(T x, T a) { return std::fma(std::fma(std::fma(a, x, -5 * a), x, 8 * a), x, -4 * a); }

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

#define UPSAMPLE_ROWS(NAME, MODE, SPATIAL, ALIGN)                                                         \
  {{NAME, NAME ".out"}, [](Ctx& c) { return one(upsample(c, {MODE, SPATIAL, ALIGN})); }},                  \
  {{NAME "_backward", NAME "_backward.grad_input"}, [](Ctx& c) {                                          \
     return one(upsample_backward(c, {MODE, SPATIAL, ALIGN}));                                             \
   }}

const Rows rows = {
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
};

}  // namespace
}  // namespace lowering
