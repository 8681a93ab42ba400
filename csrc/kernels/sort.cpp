// Sorted prefixes on the host (see kernels.h): topk and sort of float rows as one custom call.
//
// Why a kernel: XLA:CPU sorts with a comparator it calls per comparison, and torch's NaN order needs a
// comparator of several ops; a [64, 128] topk (an MoE router's) took 1.3 ms. Here each element becomes
// one 64-bit key, (order of the value, column), and the first k keys of a row are selected (in linear
// time) and sorted: a total order, so the result is exactly the stable sort's. Rows run on all cores.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/handlers.h"
#include "kernels/kernels.h"
#include "kernels/pool.h"

namespace kernels {
namespace {

// An unsigned key whose order is the float order, with -0.0 equal to 0.0 and every NaN above +inf.
uint32_t order_key(float v) {
  if (v != v) return 0xFFFFFFFFu;
  if (v == 0.0f) v = 0.0f;
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

void sorted_prefix(bool descending, const float* x, float* values, int64_t* indices, int64_t rows, int64_t n,
                   int64_t k) {
  // descending: larger values first, then lower columns; ascending: smaller values, then lower columns
  auto key = [descending](const float* xr, int64_t i) {
    const uint32_t o = order_key(xr[i]);
    return (static_cast<uint64_t>(descending ? ~o : o) << 32) | static_cast<uint64_t>(i);
  };
  Pool::get().run(rows, [&](int64_t r) {  // rows on all cores
    const float* xr = x + r * n;
    std::vector<uint64_t> keys;
    if (k * 16 <= n) {
      // a few of many (topk of logits): the k least keys so far in a heap whose top is the largest of
      // them; most keys lose one comparison with it
      keys.resize(k);
      for (int64_t i = 0; i < k; ++i) keys[i] = key(xr, i);
      std::make_heap(keys.begin(), keys.end());
      for (int64_t i = k; i < n; ++i) {
        const uint64_t q = key(xr, i);
        if (k > 0 && q < keys.front()) {
          std::pop_heap(keys.begin(), keys.end());
          keys.back() = q;
          std::push_heap(keys.begin(), keys.end());
        }
      }
      std::sort(keys.begin(), keys.end());
    } else {
      keys.resize(n);
      for (int64_t i = 0; i < n; ++i) keys[i] = key(xr, i);
      if (k < n) {  // the first k selected (linear time), then sorted
        std::nth_element(keys.begin(), keys.begin() + k, keys.end());
        std::sort(keys.begin(), keys.begin() + k);
      } else {
        std::sort(keys.begin(), keys.end());
      }
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = static_cast<int64_t>(keys[j] & 0xFFFFFFFFu);
      values[r * k + j] = xr[i];
      indices[r * k + j] = i;
    }
  });
}

ffi::Error* handle(ffi::CallFrame* f, bool descending) {
  if (!executing(f)) return nullptr;
  const std::string name = descending ? kSortedPrefixDescending : kSortedPrefixAscending;
  if (f->args.size != 1 || f->rets.size != 2 || f->args.types[0] != ffi::kArgBuffer)
    return fail(f, name + ": expected 1 operand and 2 results");
  auto* x = static_cast<ffi::Buffer*>(f->args.args[0]);
  auto* v = static_cast<ffi::Buffer*>(f->rets.rets[0]);
  auto* i = static_cast<ffi::Buffer*>(f->rets.rets[1]);
  if (x->rank != 2 || v->rank != 2 || i->rank != 2 || x->dtype != ffi::kF32 || v->dtype != ffi::kF32 ||
      i->dtype != ffi::kS64)
    return fail(f, name + ": expected x f32[R,N], values f32[R,k], indices s64[R,k]");
  const int64_t rows = x->dims[0], n = x->dims[1], k = v->dims[1];
  if (v->dims[0] != rows || i->dims[0] != rows || i->dims[1] != k || k > n || n >= (int64_t{1} << 32))
    return fail(f, name + ": result shapes do not agree with the operand");
  sorted_prefix(descending, static_cast<const float*>(x->data), static_cast<float*>(v->data),
                static_cast<int64_t*>(i->data), rows, n, k);
  return nullptr;
}

}  // namespace

ffi::Error* sorted_prefix_descending(ffi::CallFrame* f) { return handle(f, true); }
ffi::Error* sorted_prefix_ascending(ffi::CallFrame* f) { return handle(f, false); }

}  // namespace kernels
