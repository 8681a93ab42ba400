// The FFTs (_fft_r2c, _fft_c2c, _fft_c2r) as stablehlo.fft.
#include <cmath>
#include <optional>
#include <string>

#include "lowering/helpers.h"

namespace lowering {
namespace {

// stablehlo.fft transforms the trailing dims: the transformed dims are moved last (in order), then
// moved back. XLA's inverse transforms divide by n; torch's normalization: 0 none, 1 1/sqrt(n), 2 1/n.
struct FftDims {
  Dims perm, inverse;  // the permutation moving `dims` last, and its inverse
};

FftDims fft_dims(int64_t rank, const Dims& dims) {
  FftDims f;
  for (int64_t i = 0; i < rank; ++i) {
    bool t = false;
    for (int64_t d : dims) t |= d == i;
    if (!t) f.perm.push_back(i);
  }
  for (int64_t d : dims) f.perm.push_back(d);
  f.inverse.assign(rank, 0);
  for (int64_t i = 0; i < rank; ++i) f.inverse[f.perm[i]] = i;
  return f;
}

Value fft_op(Builder& b, Value x, const char* type, const Dims& lengths, const Type& result) {
  std::string attrs = std::string("fft_type = #stablehlo<fft_type ") + type + ">, fft_length = " + hlo::dims_attr(lengths);
  return b.raw("stablehlo.fft", attrs, {x}, result);
}

Value fft_scale(Builder& b, Value y, double n, int64_t norm, bool inverse_xla) {
  double f = inverse_xla ? n : 1.0;  // undo XLA's 1/n
  if (norm == 1) f /= std::sqrt(n);
  if (norm == 2) f /= n;
  if (f == 1.0) return y;
  ElementType part = pjrt::real_type(y.elem());
  Value s = b.convert(b.scalar(f, ElementType::kF64), part);
  if (pjrt::is_complex(y.elem())) s = b.complex(s, b.convert(b.scalar(0, ElementType::kF64), part));
  return mul(b, y, b.broadcast_to(s, y.dims()));
}

Dims fft_signal_dims(const Ctx& c, size_t k, int64_t rank) {
  Dims d;
  for (int64_t v : c.ints(k)) d.push_back(wrap_dim(v, rank));
  if (d.empty()) throw hlo::Error("fft: no dims");
  return d;
}

ElementType complex_of(ElementType t) { return t == ElementType::kF64 ? ElementType::kC128 : ElementType::kC64; }

// The signal of an FFT: the input with its transformed dims moved last, their lengths (the last one
// replaced by `last` when given) and the product of the lengths.
struct Signal {
  FftDims f;
  Value xt;
  Dims lengths;
  double n = 1;
};

Signal signal_of(const Ctx& c, Builder& b, Value x, std::optional<int64_t> last = std::nullopt) {
  Signal s;
  Dims dims = fft_signal_dims(c, 1, x.rank());
  s.f = fft_dims(x.rank(), dims);
  s.xt = b.transpose(x, s.f.perm);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t len = last && i + 1 == dims.size() ? *last : x.dims()[dims[i]];
    s.lengths.push_back(len);
    s.n *= static_cast<double>(len);
  }
  if (s.n == 0) throw hlo::Error("fft: empty signal");
  return s;
}

// _fft_r2c(self, dim, normalization, onesided)
Value fft_r2c(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.elem() != ElementType::kF32 && x.elem() != ElementType::kF64) throw hlo::Error("fft: f32/f64 only");
  Signal s = signal_of(c, b, x);
  const bool onesided = c.i(3) != 0;
  Dims rd = s.xt.dims();
  ElementType ct = complex_of(x.elem());
  Value y;
  if (onesided) {
    rd.back() = rd.back() / 2 + 1;
    y = fft_op(b, s.xt, "RFFT", s.lengths, Type{ct, rd});
  } else {
    Value xc = b.complex(s.xt, b.constant(0, s.xt.type));
    y = fft_op(b, xc, "FFT", s.lengths, Type{ct, rd});
  }
  y = fft_scale(b, y, s.n, c.i(2), false);
  return b.reshape(b.transpose(y, s.f.inverse), c.out_dims());
}

// _fft_c2c(self, dim, normalization, forward)
Value fft_c2c(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (!pjrt::is_complex(x.elem())) throw hlo::Error("fft_c2c: complex input expected");
  Signal s = signal_of(c, b, x);
  const bool forward = c.i(3) != 0;
  Value y = fft_op(b, s.xt, forward ? "FFT" : "IFFT", s.lengths, s.xt.type);
  y = fft_scale(b, y, s.n, c.i(2), !forward);
  return b.reshape(b.transpose(y, s.f.inverse), c.out_dims());
}

// _fft_c2r(self, dim, normalization, last_dim_size)
Value fft_c2r(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (!pjrt::is_complex(x.elem())) throw hlo::Error("fft_c2r: complex input expected");
  const int64_t last = c.i(3);
  Signal s = signal_of(c, b, x, last);
  // the input's last transformed dim must hold last/2 + 1 entries
  Dims want = s.xt.dims();
  want.back() = last / 2 + 1;
  if (s.xt.dims().back() > want.back()) {
    s.xt = slice_at(b, s.xt, s.xt.rank() - 1, 0, want.back());
  } else if (s.xt.dims().back() < want.back()) {
    Dims lo(s.xt.rank(), 0), hi(s.xt.rank(), 0);
    hi.back() = want.back() - s.xt.dims().back();
    s.xt = b.pad(s.xt, b.scalar(0, s.xt.elem()), lo, hi, lo);
  }
  Dims rd = s.xt.dims();
  rd.back() = last;
  Value y = fft_op(b, s.xt, "IRFFT", s.lengths, Type{pjrt::real_type(x.elem()), rd});
  y = fft_scale(b, y, s.n, c.i(2), true);
  return b.reshape(b.transpose(y, s.f.inverse), c.out_dims());
}

const Rows rows = {
    {{"_fft_r2c", "_fft_r2c.out"}, [](Ctx& c) { return one(fft_r2c(c)); }},
    {{"_fft_c2c", "_fft_c2c.out"}, [](Ctx& c) { return one(fft_c2c(c)); }},
    {{"_fft_c2r", "_fft_c2r.out"}, [](Ctx& c) { return one(fft_c2r(c)); }},
};

}  // namespace
}  // namespace lowering
