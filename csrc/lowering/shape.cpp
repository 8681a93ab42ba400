// Shape rows: concatenation, channel_shuffle. (Padding, flips, rolls, triangles and repeats are in indexing.cpp.)
#include "lowering/helpers.h"

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
    {{"cat", "cat.out"}, [](Ctx& c) { return one(cat(c)); }},
    {{"channel_shuffle", "channel_shuffle.out"}, [](Ctx& c) { return one(channel_shuffle(c)); }},
    {{"native_channel_shuffle"}, [](Ctx& c) { return one(channel_shuffle(c)); }},
};

}  // namespace
}  // namespace lowering
