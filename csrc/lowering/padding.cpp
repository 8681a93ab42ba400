// Reflection and replication padding (1-d to 3-d) and their backwards: along each padded axis every output
// position reads one input position, computed on the host, so the forward is a gather and the backward a
// scatter-add along that axis. (constant_pad_nd is in indexing.cpp.)
#include <algorithm>
#include <vector>

#include "lowering/helpers.h"

namespace lowering {
namespace {

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
    Dims d = g.dims();
    d[axis] = n;
    g = scatter_add_axis(b, b.constant(0, Type{g.elem(), d}), axis, pad_index(n, p[i], p[i + 1], reflect), g);
  }
  return b.reshape(g, c.out_dims());
}

const Rows rows = {
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
};

}  // namespace
}  // namespace lowering
