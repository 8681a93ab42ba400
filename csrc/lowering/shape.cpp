// Shape rows: concatenation, padding, flips, rolls, triangles, repeats.
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

const Rows rows = {
    {{"cat", "cat.out"}, [](Ctx& c) { return one(cat(c)); }},
};

}  // namespace
}  // namespace lowering
