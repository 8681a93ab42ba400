// Shape rows: concatenation, channel_shuffle. (Padding, flips, rolls, triangles and repeats are in indexing.cpp.)
#include "lowering/helpers.h"
#include "lowering/view.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

V one(Value v) { return V{v}; }

Value cat(Ctx& c) {
  const auto& list = c.arg(0).list;
  const int64_t rank = static_cast<int64_t>(c.out_dims().size());
  int64_t dim = wrap_dim(c.i(1), rank);
  std::vector<Value> parts;
  for (const Value& v : list) {
    if (v.rank() == 1 && v.dims()[0] == 0 && rank != 1) continue;  // legacy empty inputs are skipped
    if (v.type.numel() == 0) continue;
    parts.push_back(c.b.convert(v, c.out_type()));
  }
  if (parts.empty()) return c.b.constant(0, c.out());
  return c.b.concatenate(parts, dim);
}

// cat with run-time lengths, in flat index space: output element k (contiguous over the run-time
// result sizes) comes from the part whose span along `dim` holds k's index there.
Value grow_cat(Builder& b, const std::vector<GrowPart>& parts, int64_t dim, int64_t capacity) {
  const size_t rank = parts.front().sizes.size();
  const ElementType s64 = ElementType::kS64;
  Type t{s64, {capacity}};
  auto bc = [&](const Value& scalar) { return b.broadcast_in_dim(scalar, {capacity}, {}); };
  // the result's sizes: the parts' own, with their lengths along dim added up
  std::vector<Value> starts{b.scalar_i(0, s64)};
  for (const GrowPart& p : parts) starts.push_back(b.binary("add", starts.back(), p.sizes[dim]));
  std::vector<Value> out_sizes = parts.front().sizes;
  out_sizes[dim] = starts.back();
  // k -> multi-index over the result's sizes (row-major)
  std::vector<Value> idx(rank);
  Value rest = b.iota(t, 0);
  for (size_t d = rank; d-- > 0;) {
    Value n = bc(out_sizes[d]);
    idx[d] = d == 0 ? rest : b.binary("remainder", rest, n);
    if (d > 0) rest = b.binary("divide", rest, n);
  }
  Value out = b.constant(0, Type{parts.front().flat.elem(), {capacity}});
  for (size_t i = 0; i < parts.size(); ++i) {
    const GrowPart& p = parts[i];
    Value lo = bc(starts[i]), hi = bc(starts[i + 1]);
    Value inside = b.binary("and", b.compare(Cmp::GE, idx[dim], lo), b.compare(Cmp::LT, idx[dim], hi));
    Value src = bc(p.offset);
    for (size_t d = 0; d < rank; ++d) {
      Value at = static_cast<int64_t>(d) == dim ? b.binary("subtract", idx[d], lo) : idx[d];
      src = b.binary("add", src, b.binary("multiply", at, bc(p.strides[d])));
    }
    out = b.select(inside, gather_flat(b, p.flat, src), out);
  }
  return out;
}

// channel_shuffle(self, groups): [N, g, C/g, ...] -> [N, C/g, g, ...]
Value channel_shuffle(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  int64_t g = c.i(1);
  if (x.rank() < 3 || g <= 0 || x.dims()[1] % g != 0) throw hlo::Error("channel_shuffle: bad arguments");
  Dims split{x.dims()[0], g, x.dims()[1] / g};
  Dims perm{0, 2, 1};
  for (int64_t i = 2; i < x.rank(); ++i) {
    split.push_back(x.dims()[i]);
    perm.push_back(i + 1);
  }
  return b.reshape(b.transpose(b.reshape(x, split), perm), x.dims());
}

const Rows rows = {
    {{"cat", "cat.out"}, [](Ctx& c) { return one(cat(c)); }, kNoFlags, grow_cat},
    {{"channel_shuffle", "channel_shuffle.out"}, [](Ctx& c) { return one(channel_shuffle(c)); }},
    {{"native_channel_shuffle"}, [](Ctx& c) { return one(channel_shuffle(c)); }},
};

}  // namespace
}  // namespace lowering
