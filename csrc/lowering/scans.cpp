// Scans that carry an index: cummax and cummin, as log2(n) steps of a pairwise combine.
#include <functional>
#include <utility>

#include "lowering/helpers.h"

namespace lowering {
namespace {

using hlo::Cmp;

// An inclusive scan of (value, index) pairs along `dim` in log2(n) steps; `combine(earlier, later)`
// must be associative. `init` fills the positions before the first element.
using PairCombine = std::function<std::pair<Value, Value>(Builder&, Value, Value, Value, Value)>;

std::pair<Value, Value> scan_pairs(Builder& b, Value v, Value i, int64_t dim, Value init_v, const PairCombine& f) {
  const int64_t n = v.dims()[dim];
  Dims zeros(v.rank(), 0), step(v.rank(), 1);
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Dims low = zeros, limit = v.dims();
    low[dim] = shift;
    Value pv = b.slice(b.pad(v, init_v, low, zeros, zeros), zeros, limit, step);
    Value pi = b.slice(b.pad(i, b.scalar_i(0, i.elem()), low, zeros, zeros), zeros, limit, step);
    auto r = f(b, pv, pi, v, i);
    v = r.first;
    i = r.second;
  }
  return {v, i};
}

// cummax / cummin: the later element wins ties and NaN, as torch's sequential kernel.
V cum_extremum(Ctx& c, bool is_max) {
  Builder& b = c.b;
  Value x = c.t(0);
  if (x.rank() == 0) return V{x, b.constant_i(0, c.out(1))};
  int64_t dim = wrap_dim(c.i(1), x.rank());
  if (x.type.numel() == 0) return V{x, b.constant_i(0, c.out(1))};
  Value idx = b.iota(Type{ElementType::kS64, x.dims()}, dim);
  const bool fp = pjrt::is_float(x.elem());
  auto f = [is_max, fp](Builder& bb, Value v1, Value i1, Value v2, Value i2) {
    Value later = bb.compare(is_max ? Cmp::GE : Cmp::LE, v2, v1);
    if (fp) later = orv(bb, isnan(bb, v2), andv(bb, notv(bb, isnan(bb, v1)), later));
    return std::make_pair(bb.select(later, v2, v1), bb.select(later, i2, i1));
  };
  Value init = is_max ? lowest(b, x.elem()) : highest(b, x.elem());
  auto r = scan_pairs(b, x, idx, dim, init, f);
  return V{r.first, r.second};
}

const Rows rows = {
    {{"cummax", "cummax.out"}, [](Ctx& c) { return cum_extremum(c, true); }},
    {{"cummin", "cummin.out"}, [](Ctx& c) { return cum_extremum(c, false); }},
};

}  // namespace
}  // namespace lowering
