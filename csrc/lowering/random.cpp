// Random rows: uniform_, normal_ (and normal with tensor mean/std), random_ (three overloads),
// bernoulli, exponential_, log_normal_, cauchy_, geometric_, native_dropout (+ backward), randperm,
// multinomial, rrelu_with_noise.
//
// Every row draws from stablehlo.rng_bit_generator (THREE_FRY) seeded by the device generator's
// (seed, offset) state, which the aten layer passes as c.rng_state and advances once per call: results
// are reproducible under torch.manual_seed and torch.tpu.set_rng_state, but they are not the numbers
// CPU or CUDA produce for the same seed.
//
// Floats in [0, 1): the top 23 (f32) or 52 (f64) random bits become the mantissa of a number in [1, 2),
// minus 1. Half-precision results are computed in f32 and rounded; a result that rounds onto the upper
// bound of uniform_ is replaced by the largest value below it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// An unsigned 64-bit constant (built through s64 so every bit pattern survives).
Value u64(Builder& b, uint64_t v, const Dims& dims) {
  int64_t s;
  std::memcpy(&s, &v, sizeof s);
  return b.bitcast_convert(b.constant_i(s, Type{ElementType::kS64, dims}), Type{ElementType::kU64, dims});
}

// The type random floats are computed in for a result type: f64 for f64, f32 otherwise.
ElementType compute_type(ElementType t) { return t == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32; }

// Draws from the generator; the state advances with each draw and is reported in c.new_rng_state.
struct Rng {
  Ctx& c;
  Value state;
  explicit Rng(Ctx& ctx) : c(ctx), state(ctx.rng_state) {
    if (!state.valid()) throw hlo::Error("random row without a generator state");
  }
  Value bits(ElementType t, const Dims& dims) {
    auto [next, out] = c.b.rng_bit_generator(state, Type{t, dims});
    state = next;
    c.new_rng_state = next;
    return out;
  }
  // Uniform in [0, 1) as f32 (23 bits) or f64 (52 bits).
  Value unit(ElementType t, const Dims& dims) {
    Builder& b = c.b;
    if (t == ElementType::kF64) {
      Value x = bits(ElementType::kU64, dims);
      x = b.binary("shift_right_logical", x, u64(b, 12, dims));
      x = b.binary("or", x, u64(b, 0x3FF0000000000000ULL, dims));
      Value f = b.bitcast_convert(x, Type{ElementType::kF64, dims});
      return b.binary("subtract", f, b.constant(1, f.type));
    }
    return unit_f32(b, bits(ElementType::kU32, dims));
  }
  // Uniform in (0, 1]: 1 - unit.
  Value open_unit(ElementType t, const Dims& dims) {
    Value u = unit(t, dims);
    return c.b.binary("subtract", c.b.constant(1, u.type), u);
  }
  // Standard normal (Box-Muller, the cosine branch).
  Value normal(ElementType t, const Dims& dims) {
    Builder& b = c.b;
    Value u1 = open_unit(t, dims), u2 = unit(t, dims);
    Value r = b.unary("sqrt", b.binary("multiply", b.constant(-2, u1.type), b.unary("log", u1)));
    Value theta = b.binary("multiply", b.constant(2 * M_PI, u2.type), u2);
    return b.binary("multiply", r, b.unary("cosine", theta));
  }
};

}  // namespace

Value unit_f32(Builder& b, Value x) {
  x = b.binary("shift_right_logical", x, b.constant_i(9, x.type));
  x = b.binary("or", x, b.constant_i(0x3F800000, x.type));
  Value f = b.bitcast_convert(x, Type{ElementType::kF32, x.dims()});
  return b.binary("subtract", f, b.constant(1, f.type));
}

namespace {

// The largest value of x's type below x (x a finite float scalar or tensor).
Value next_below(Builder& b, Value x) {
  ElementType ut;
  switch (pjrt::byte_size(x.elem())) {
    case 2: ut = ElementType::kU16; break;
    case 4: ut = ElementType::kU32; break;
    default: ut = ElementType::kU64; break;
  }
  Type u{ut, x.dims()};
  Value bits = b.bitcast_convert(x, u);
  Value one_bit = b.constant_i(1, u);
  Value zero = b.constant(0, x.type);
  Value up = b.bitcast_convert(b.binary("add", bits, one_bit), x.type);        // away from zero
  Value down = b.bitcast_convert(b.binary("subtract", bits, one_bit), x.type);  // toward zero
  Value tiny = b.bitcast_convert(one_bit, x.type);                               // smallest subnormal
  Value r = b.select(b.compare(Cmp::GT, x, zero), down, up);
  return b.select(b.compare(Cmp::EQ, x, zero), b.unary("negate", tiny), r);
}

// from + (to - from) * u in the result type, never reaching `to`.
Value uniform(Ctx& c, double from, double to) {
  Builder& b = c.b;
  const ElementType t = c.out_type();
  if (!pjrt::is_float(t)) throw hlo::Error("uniform_: floating-point results only");
  const Dims& dims = c.out_dims();
  if (from == to) return b.constant(from, c.out());
  Rng rng(c);
  const ElementType ct = compute_type(t);
  Value u = rng.unit(ct, dims);
  Value lo = b.constant(from, u.type), span = b.constant(to - from, u.type);
  Value r = b.convert(b.binary("add", lo, b.binary("multiply", u, span)), t);
  Value hi = b.convert(b.scalar(to, ElementType::kF64), t);
  Value bound = b.broadcast_to(next_below(b, hi), dims);
  return b.select(b.compare(Cmp::GE, r, b.broadcast_to(hi, dims)), bound, r);
}

// mean + std * z with mean / std from arguments (tensors, or float constants when `k` is a double).
Value normal(Ctx& c, size_t mean_k, size_t std_k) {
  Builder& b = c.b;
  const ElementType t = c.out_type();
  if (!pjrt::is_float(t)) throw hlo::Error("normal: floating-point results only");
  const Dims& dims = c.out_dims();
  const ElementType ct = compute_type(t);
  Rng rng(c);
  Value z = rng.normal(ct, dims);
  auto arg = [&](size_t k, double dflt) {
    if (!c.has(k)) return b.constant(dflt, Type{ct, dims});
    const Arg& a = c.arg(k);
    if (a.kind == Arg::kDouble) return b.constant(a.d, Type{ct, dims});
    return b.broadcast_to(b.convert(c.t(k), ct), dims);
  };
  Value mean = arg(mean_k, 0), std = arg(std_k, 1);
  return b.binary("add", mean, b.binary("multiply", std, z));
}

// torch's random_ ranges: [from, to) or, without `to`, up to the type's limit (2^digits for floats).
struct Range {
  int64_t from;
  uint64_t span;  // 0 means 2^64
};

int64_t type_limit(ElementType t) {
  switch (t) {
    case ElementType::kPred: return 1;
    case ElementType::kF16: return int64_t{1} << 11;
    case ElementType::kBF16: return int64_t{1} << 8;
    case ElementType::kF32: return int64_t{1} << 24;
    case ElementType::kF64: return int64_t{1} << 53;
    case ElementType::kU8: return 255;
    case ElementType::kS8: return 127;
    case ElementType::kS16: return 32767;
    case ElementType::kS32: return 2147483647;
    case ElementType::kS64: return std::numeric_limits<int64_t>::max();
    default: throw hlo::Error("random_: unsupported dtype");
  }
}

Value random_ints(Ctx& c, Range r) {
  Builder& b = c.b;
  const Dims& dims = c.out_dims();
  Rng rng(c);
  Value x = rng.bits(ElementType::kU64, dims);
  if (r.span != 0) x = b.binary("remainder", x, u64(b, r.span, dims));
  x = b.binary("add", x, u64(b, static_cast<uint64_t>(r.from), dims));
  Value s = b.bitcast_convert(x, Type{ElementType::kS64, dims});
  return b.convert(s, c.out_type());
}

// random_.from: [from, to) or [from, limit]
Value random_from(Ctx& c, int64_t from, bool has_to, int64_t to) {
  if (has_to) {
    if (to <= from) throw hlo::Error("random_: from must be less than to");
    return random_ints(c, {from, static_cast<uint64_t>(to) - static_cast<uint64_t>(from)});
  }
  int64_t limit = type_limit(c.out_type());
  return random_ints(c, {from, static_cast<uint64_t>(limit) - static_cast<uint64_t>(from) + 1});
}

// A uniform in [0, 1) to compare probabilities against: f64 for f64 probabilities, f32 otherwise.
Value bernoulli_from(Ctx& c, Value p, ElementType ct) {
  Builder& b = c.b;
  const Dims& dims = c.out_dims();
  Rng rng(c);
  Value u = rng.unit(ct, dims);
  Value keep = b.compare(Cmp::LT, u, b.broadcast_to(b.convert(p, ct), dims));
  return b.convert(keep, c.out_type());
}

V native_dropout(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  const double p = c.d(1);
  const bool train = !c.has(2) || c.i(2);
  const Dims& dims = c.out_dims(0);
  if (!train || numel(dims) == 0) return V{x, b.constant(1, Type{ElementType::kPred, dims})};
  const ElementType ct = compute_type(x.elem());
  const double keep_p = 1.0 - p;
  const double scale = keep_p == 0 ? 0.0 : 1.0 / keep_p;
  Rng rng(c);
  Value u = rng.unit(ct, dims);
  Value mask = b.compare(Cmp::LT, u, b.constant(keep_p, u.type));
  Value xs = b.convert(x, accumulation_type(x.elem()));
  Value out = b.binary("multiply", b.select(mask, xs, b.constant(0, xs.type)), b.constant(scale, xs.type));
  return V{b.convert(out, c.out_type(0)), mask};
}

Value randperm(Ctx& c) {
  Builder& b = c.b;
  const int64_t n = c.i(0);
  if (n == 0) return b.constant(0, c.out());
  Rng rng(c);
  Value keys = rng.bits(ElementType::kU64, {n});
  Value idx = b.iota(Type{ElementType::kS64, {n}}, 0);
  auto r = b.sort({keys, idx}, 0, true, [](Builder& bb, const V& a) { return V{bb.compare(Cmp::LT, a[0], a[1])}; });
  return b.convert(r[1], c.out_type());
}

// multinomial(self [n] or [B, n], num_samples, replacement): Gumbel-max sampling. Each category's key is
// log(p) + G with G = -log(-log(u)) standard Gumbel noise; the largest key is a draw from p / sum(p), and
// the num_samples largest keys of one draw are a draw without replacement. Categories of probability 0
// (key -inf) are never drawn.
Value multinomial(Ctx& c) {
  Builder& b = c.b;
  Value p = c.t(0);
  const bool batched = p.rank() == 2;
  const int64_t batch = batched ? p.dims()[0] : 1, n = p.dims().back(), k = c.i(1);
  const bool replacement = c.i(2);
  if (k == 0 || batch == 0) return b.constant(0, c.out());
  const ElementType ct = compute_type(p.elem());
  Value probs = b.convert(b.reshape(p, {batch, n}), ct);
  // The CPU's checks of the probabilities' values, in its words (the one-draw and without-replacement path
  // checks all entries first, the with-replacement kernel entry by entry).
  Value zero = b.constant(0, probs.type), negative = notv(b, b.compare(Cmp::GE, probs, zero));
  if (!replacement || k == 1) {
    check(b, orv(b, negative, is_inf(b, probs)), Value{},
          "probability tensor contains either `inf`, `nan` or element < 0", false);
  } else {
    check(b, negative, Value{}, "invalid multinomial distribution (encountering probability entry < 0)", false);
    check(b, notv(b, is_finite(b, probs)), Value{},
          "invalid multinomial distribution (encountering probability entry = infinity or NaN)", false);
  }
  Value sums = reduce_sum(b, probs, {1});
  check(b, b.compare(Cmp::LE, sums, b.constant(0, sums.type)), Value{},
        "invalid multinomial distribution (sum of probabilities <= 0)", false);
  Value logp = b.unary("log", probs);
  Rng rng(c);
  auto gumbel = [&](const Dims& dims) {
    Value u = rng.open_unit(ct, dims);  // (0, 1]: -log(u) >= 0
    Value e = b.unary("negate", b.unary("log", u));
    return b.unary("negate", b.unary("log", e));  // u == 1 gives +inf: certainly the maximum, still a valid draw
  };
  Value out;
  if (replacement) {
    Dims d{batch, k, n};
    Value keys = b.binary("add", b.broadcast_in_dim(logp, d, {0, 2}), gumbel(d));
    Value m = reduce(b, keys, {2}, "maximum", lowest(b, ct));
    Value iota = b.iota(Type{ElementType::kS64, d}, 2);
    Value at = b.compare(Cmp::EQ, keys, b.broadcast_in_dim(m, d, {0, 1}));
    out = reduce(b, b.select(at, iota, b.constant_i(n - 1, iota.type)), {2}, "minimum", b.scalar_i(n - 1, ElementType::kS64));
  } else {
    Value keys = b.binary("add", logp, gumbel({batch, n}));
    Value idx = b.iota(Type{ElementType::kS64, {batch, n}}, 1);
    auto r = b.sort({keys, idx}, 1, true, [](Builder& bb, const V& a) { return V{bb.compare(Cmp::GT, a[0], a[1])}; });
    out = b.slice(r[1], {0, 0}, {batch, k}, {1, 1});
  }
  return b.reshape(out, c.out_dims());
}

// Exponential(lambda): -log(1 - u) / lambda, u in [0, 1).
Value exponential(Ctx& c, double lambda) {
  Builder& b = c.b;
  const ElementType t = c.out_type();
  if (!pjrt::is_float(t)) throw hlo::Error("exponential_: floating-point results only");
  Rng rng(c);
  Value u = rng.unit(compute_type(t), c.out_dims());
  Value e = b.binary("divide", b.unary("negate", b.unary("log_plus_one", b.unary("negate", u))), b.constant(lambda, u.type));
  return b.convert(e, t);
}

// rrelu_with_noise_functional(self, noise, lower, upper, training, generator) -> (out, noise_out). In
// training every x <= 0 is scaled by a slope drawn uniformly from [lower, upper), which noise records (1
// elsewhere); in evaluation the slope is (lower + upper) / 2 and noise is left as it is.
V rrelu_with_noise(Ctx& c) {
  Builder& b = c.b;
  const ElementType t = c.out_type();
  if (!pjrt::is_float(t)) throw hlo::Error("rrelu_with_noise: floating-point only");
  const ElementType ct = compute_type(t);
  const Dims& dims = c.out_dims();
  Value x = b.convert(c.t(0), ct);
  if (!c.i(4)) {  // leaky_relu with the mean slope, computed in double as torch does
    Value l = b.convert(c.t(2), ElementType::kF64), u = b.convert(c.t(3), ElementType::kF64);
    Value slope = b.broadcast_to(b.convert(b.binary("multiply", b.binary("add", l, u), b.scalar(0.5, ElementType::kF64)), ct), dims);
    Value y = b.select(b.compare(Cmp::GT, x, b.constant(0, x.type)), x, b.binary("multiply", x, slope));
    return V{b.convert(y, t), c.t(1)};
  }
  Value lo = b.broadcast_to(b.convert(c.t(2), ct), dims), hi = b.broadcast_to(b.convert(c.t(3), ct), dims);
  Value neg = b.compare(Cmp::LE, x, b.constant(0, x.type));
  Rng rng(c);
  Value r = b.binary("add", lo, b.binary("multiply", rng.unit(ct, dims), b.binary("subtract", hi, lo)));
  Value noise = b.select(neg, r, b.constant(1, r.type));
  return V{b.convert(b.select(neg, b.binary("multiply", x, r), x), t), b.convert(noise, c.out_type(1))};
}

const Rows rows = {
    {{"uniform", "uniform_", "uniform.out"}, [](Ctx& c) {
       return one(uniform(c, c.has(1) ? c.d(1) : 0.0, c.has(2) ? c.d(2) : 1.0));
     }, kRandom},
    {{"normal_functional", "normal_", "normal.out"}, [](Ctx& c) { return one(normal(c, 1, 2)); }, kRandom},
    {{"normal.Tensor_float", "normal.Tensor_float_out"}, [](Ctx& c) { return one(normal(c, 0, 1)); }, kRandom},
    {{"normal.float_Tensor", "normal.float_Tensor_out"}, [](Ctx& c) { return one(normal(c, 0, 1)); }, kRandom},
    {{"normal.Tensor_Tensor", "normal.Tensor_Tensor_out"}, [](Ctx& c) { return one(normal(c, 0, 1)); }, kRandom},
    {{"random", "random_", "random.out"}, [](Ctx& c) { return one(random_from(c, 0, false, 0)); }, kRandom},
    {{"random.from", "random_.from", "random.from_out"}, [](Ctx& c) {
       return one(random_from(c, c.i(1), c.has(2), c.has(2) ? c.i(2) : 0));
     }, kRandom},
    {{"random.to", "random_.to", "random.to_out"}, [](Ctx& c) { return one(random_from(c, 0, true, c.i(1))); }, kRandom},
    {{"bernoulli.p", "bernoulli_.float", "bernoulli.float_out"}, [](Ctx& c) {
       return one(bernoulli_from(c, c.b.scalar(c.has(1) ? c.d(1) : 0.5, ElementType::kF64), compute_type(c.out_type())));
     }, kRandom},
    {{"bernoulli.Tensor", "bernoulli_.Tensor", "bernoulli.Tensor_out"}, [](Ctx& c) {
       return one(bernoulli_from(c, c.t(1), compute_type(c.t(1).elem())));
     }, kRandom},
    {{"bernoulli", "bernoulli.out"}, [](Ctx& c) { return one(bernoulli_from(c, c.t(0), compute_type(c.t(0).elem()))); }, kRandom},
    {{"exponential", "exponential_", "exponential.out"}, [](Ctx& c) {
       return one(exponential(c, c.has(1) ? c.d(1) : 1.0));
     }, kRandom},
    {{"log_normal", "log_normal_", "log_normal.out"}, [](Ctx& c) {
       Value z = normal(c, 1, 2);
       return one(c.b.unary("exponential", z));
     }, kRandom},
    {{"cauchy", "cauchy_", "cauchy.out"}, [](Ctx& c) {
       Builder& b = c.b;
       const ElementType t = c.out_type();
       if (!pjrt::is_float(t)) throw hlo::Error("cauchy_: floating-point results only");
       Rng rng(c);
       Value u = rng.unit(compute_type(t), c.out_dims());
       Value ang = b.binary("multiply", b.constant(M_PI, u.type), b.binary("subtract", u, b.constant(0.5, u.type)));
       Value x = b.binary("add", b.constant(c.has(1) ? c.d(1) : 0.0, u.type),
                          b.binary("multiply", b.constant(c.has(2) ? c.d(2) : 1.0, u.type), b.chlo_unary("tan", ang)));
       return one(b.convert(x, t));
     }, kRandom},
    {{"geometric", "geometric_", "geometric.out"}, [](Ctx& c) {
       // ceil(log(u) / log(1 - p)), u in (0, 1]: the number of trials up to the first success
       Builder& b = c.b;
       const ElementType t = c.out_type();
       Rng rng(c);
       const ElementType ct = t == ElementType::kF64 ? ElementType::kF64 : ElementType::kF32;
       Value u = rng.open_unit(ct, c.out_dims());
       Value k = b.unary("ceil", b.binary("divide", b.unary("log", u), b.constant(std::log1p(-c.d(1)), u.type)));
       k = b.binary("maximum", k, b.constant(1, k.type));
       return one(b.convert(k, t));
     }, kRandom},
    {{"native_dropout", "native_dropout.out"}, [](Ctx& c) { return native_dropout(c); }, kRandom},
    {{"native_dropout_backward", "native_dropout_backward.out"}, [](Ctx& c) {
       Builder& b = c.b;
       const ElementType acc = accumulation_type(c.out_type());
       Value g = b.broadcast_to(b.convert(c.t(0), acc), c.out_dims());
       Value m = b.broadcast_to(b.convert(c.t(1), ElementType::kPred), c.out_dims());
       Value r = b.binary("multiply", b.select(m, g, b.constant(0, g.type)), b.constant(c.d(2), g.type));
       return one(b.convert(r, c.out_type()));
     }},
    {{"multinomial", "multinomial.out"}, [](Ctx& c) { return one(multinomial(c)); }, kRandom},
    {{"rrelu_with_noise_functional", "rrelu_with_noise"}, rrelu_with_noise, kRandom},
    {{"randperm"}, [](Ctx& c) { return one(randperm(c)); }, kRandom},
    {{"randperm.generator"}, [](Ctx& c) { return one(randperm(c)); }, kRandom},
};

}  // namespace
}  // namespace lowering
