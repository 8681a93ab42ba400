// Grouped (ragged) matrix products: aten::_grouped_mm, what Transformers' grouped_mm experts path and
// torch_pjrt's ragged_dot call. A group is a contiguous run of rows (or of the contraction) delimited by
// cumulative offsets: offs[g] ends group g, group 0 starts at 0. Rows past offs[-1] are zero (torch's
// CPU kernel leaves them unwritten).
//
// XLA:CPU does not compile chlo.ragged_dot (xla-cpu-pjrt 0.0.1: "HLO opcode `ragged-dot` is not
// supported by XLA:CPU ThunkEmitter"). There, grouped rows (the forward of an MoE layer) call
// torch-pjrt's host kernel (kernels/ragged_dot.cpp, a custom call) when the session registered it; what
// it does not take, and the contraction form (the weight gradient), is a static-shape loop: for each
// group, for each tile of T rows of it, one dot with that group's weights, masked to the group's rows
// and written into place. No host sync, no data-dependent shapes, and the weights of empty groups are
// never read: the work follows the routing, as a ragged dot does. Half-precision weights visit the
// groups through slots unrolled in the program instead of a loop (see ragged_rows). Where most groups
// have rows (decode at larger batch sizes, prefill) and the weights come as a transposed view, a dense
// pass does the first rows of every group in one batched dot first (dense_rows), and the loop only
// what is left.
#include <cstdlib>

#include "kernels/kernels.h"
#include "lowering/helpers.h"
#include "pjrt/session.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;

constexpr ElementType kIdx = ElementType::kS32;

Value idx(Builder& b, int64_t v) { return b.scalar_i(v, kIdx); }
Value at(Builder& b, Value vec, Value i) { return b.reshape(b.dynamic_slice(vec, {i}, {1}), {}); }
bool is_half(ElementType t) { return t == ElementType::kBF16 || t == ElementType::kF16; }
Value min(Builder& b, Value x, Value y) { return b.binary("minimum", x, y); }
Value max(Builder& b, Value x, Value y) { return b.binary("maximum", x, y); }

// Rows per tile: about twice the mean group size, a power of two from 4 to 128, at most `rows`. Decode
// (a few rows per expert) gets small tiles, prefill large ones; a larger group takes several tiles.
int64_t tile_rows(int64_t rows, int64_t groups) {
  int64_t mean = (rows + groups - 1) / groups, t = 4;
  while (t < 2 * mean && t < 128) t *= 2;
  return std::min(t, rows);
}

// dot_general(lhs, rhs) over lhs dim `lc` and rhs dim `rc` (`batch` leading dims of both batched), in
// `acc`, with the contraction summed in blocks of 32 apart and then together: XLA:CPU sums a small dot's
// contraction in one running sum for some shapes (20 ulps of float32 at K = 300, several times the
// error of the CPU's blocked sums).
Value dot_in_blocks(Builder& b, Value lhs, int64_t lc, Value rhs, int64_t rc, int64_t batch, ElementType acc) {
  constexpr int64_t kBlock = 32;
  const int64_t k = lhs.dims()[lc];
  Dims bd;
  for (int64_t i = 0; i < batch; ++i) bd.push_back(i);
  if (k <= 2 * kBlock) return b.dot_general(lhs, rhs, bd, bd, {lc}, {rc}, acc);
  const int64_t blocks = (k + kBlock - 1) / kBlock;
  auto split = [&](Value v, int64_t c) {  // dim c -> (blocks, kBlock), zeros past K
    Dims high(v.dims().size(), 0), d = v.dims();
    high[c] = blocks * kBlock - k;
    if (high[c]) v = b.pad(v, scalar_like(b, 0, v), Dims(d.size(), 0), high, Dims(d.size(), 0));
    d[c] = kBlock;
    d.insert(d.begin() + c, blocks);
    return b.reshape(v, d);
  };
  Dims lb = bd, rb = bd;
  lb.push_back(lc);
  rb.push_back(rc);
  Value y = b.dot_general(split(lhs, lc), split(rhs, rc), lb, rb, {lc + 1}, {rc + 1}, acc);
  return reduce_sum(b, y, {batch});
}

// [starts, ends) of every group (s32[G] each), ends clamped to `rows` and starts to their ends.
std::pair<Value, Value> group_bounds(Builder& b, Value offs, int64_t rows) {
  const int64_t g = offs.dims()[0];
  Value ends = b.convert(offs, kIdx);
  ends = b.clamp(b.constant_i(0, ends.type), ends, b.constant_i(rows, ends.type));
  Value starts = b.concatenate({b.constant_i(0, Type{kIdx, {1}}), b.slice(ends, {0}, {g - 1}, {1})}, 0);
  return {min(b, starts, ends), ends};
}

// The group ids, the non-empty groups first, in order (empty ones sort past G).
Value nonempty_first(Builder& b, Value starts, Value ends) {
  const int64_t groups = starts.dims()[0];
  Value g_iota = b.iota(Type{kIdx, {groups}}, 0);
  Value key = b.select(b.compare(Cmp::LT, starts, ends), g_iota,
                       b.binary("add", g_iota, b.constant_i(groups, g_iota.type)));
  key = b.sort({key}, 0, false, [](Builder& bb, const V& a) { return V{bb.compare(Cmp::LT, a[0], a[1])}; })[0];
  return b.select(b.compare(Cmp::LT, key, b.constant_i(groups, key.type)), key,
                  b.binary("subtract", key, b.constant_i(groups, key.type)));
}

// The tiles of T rows over [lo, hi) (rows of group g): `tile(b, g, s, keep, acc, extra)` returns the new
// accumulator for the tile starting at row s (clamped so the tile fits; `keep` (pred[T]) marks the rows
// of the tile in [lo, hi) not done by an earlier tile). -> {the final accumulator, the final row counter}.
template <class Tile>
V over_tiles(Builder& b, Value lo, Value hi, Value g, int64_t rows, int64_t t, Value acc, const V& extra,
             Tile tile) {
  V inner{lo, hi, g, acc};
  inner.insert(inner.end(), extra.begin(), extra.end());
  V r = b.while_loop(
      inner, [&](Builder& b2, const V& q) { return V{b2.compare(Cmp::LT, q[0], q[1])}; },
      [&](Builder& b2, const V& q) {
        Value r0 = q[0], end = q[1];
        Value start = min(b2, r0, idx(b2, rows - t));
        Value row = b2.binary("add", b2.broadcast_in_dim(start, {t}, {}), b2.iota(Type{kIdx, {t}}, 0));
        Value keep = b2.binary("and", b2.compare(Cmp::GE, row, b2.broadcast_in_dim(r0, {t}, {})),
                               b2.compare(Cmp::LT, row, b2.broadcast_in_dim(end, {t}, {})));
        V x(q.begin() + 4, q.end());
        Value next = tile(b2, q[2], start, keep, q[3], x);
        V out{b2.binary("add", r0, idx(b2, t)), end, q[2], next};
        out.insert(out.end(), x.begin(), x.end());
        return out;
      });
  return {r[3], r[0]};
}

// Loops over the groups with rows in [starts, ends) and their tiles (over_tiles). Empty groups cost
// nothing: XLA hoists what depends on g alone (the group's weights) out of the tile loop, so it runs
// once per non-empty group.
template <class Tile>
Value for_each_tile(Builder& b, Value starts, Value ends, int64_t rows, int64_t t, Value acc, const V& extra,
                    Tile tile) {
  Value order = nonempty_first(b, starts, ends);
  Value count = reduce_sum(b, b.convert(b.compare(Cmp::LT, starts, ends), kIdx), {0});
  V state{idx(b, 0), count, order, starts, ends, acc};
  state.insert(state.end(), extra.begin(), extra.end());
  constexpr size_t kExtra = 6;
  V done = b.while_loop(
      state, [&](Builder& bb, const V& s) { return V{bb.compare(Cmp::LT, s[0], s[1])}; },
      [&](Builder& bb, const V& s) {
        Value g = at(bb, s[2], s[0]);
        V x(s.begin() + kExtra, s.end());
        Value next = over_tiles(bb, at(bb, s[3], g), at(bb, s[4], g), g, rows, t, s[5], x, tile)[0];
        V out{bb.binary("add", s[0], idx(bb, 1)), s[1], s[2], s[3], s[4], next};
        out.insert(out.end(), x.begin(), x.end());
        return out;
      });
  return done[5];
}

template <class Tile>
Value for_each_tile(Builder& b, Value offs, int64_t rows, int64_t t, Value acc, const V& extra, Tile tile) {
  auto [starts, ends] = group_bounds(b, offs, rows);
  return for_each_tile(b, starts, ends, rows, t, acc, extra, tile);
}

// The weights of group g as [K, N] (or [N, K] in nt form) from w [G, ...], in `acc`.
Value group_weights(Builder& b, Value w, Value g, ElementType acc) {
  Value z = idx(b, 0);
  const Dims& d = w.dims();
  return b.convert(b.reshape(b.dynamic_slice(w, {g, z, z}, {1, d[1], d[2]}), {d[1], d[2]}), acc);
}

// rows[i] of x [M, K] for i in `rows` (s32[R]) -> [R, K]
Value take_rows(Builder& b, Value x, Value rows) {
  const int64_t r = rows.dims()[0], k = x.dims()[1];
  return b.gather(x, rows, hlo::GatherDims{{1}, {0}, {0}, 1}, {1, k}, {r, k});
}

// The first `cap` rows of every group at once, for weights w [G, N, K] (nt form): the rows are gathered
// into a dense [G, cap, K] block (slot c of group g holds row starts[g] + c), multiplied by all the
// weights in one batched dot into [G, N, cap], and gathered back in row order -> [N, M] in `acc`; rows
// past their group's first `cap`, and rows in no group, are zero. One dot over every expert reads the
// weights once, in storage order, contracting over the contiguous K: on XLA:CPU 1.3-2x less CPU time
// than the loop over groups at 4 rows per group (float32; bfloat16 weights go straight into the dot, as
// bfloat16, at 2x less). The result is gathered straight from the dot's [G, N, cap]: XLA folds a
// transpose after the dot back into the slow [G, cap, K] . [G, N, K] form (7x slower). Slots past a
// group's end compute on some other row and are never read back.
Value dense_rows(Builder& b, Value x, Value w, Value starts, Value ends, int64_t cap, ElementType acc) {
  const int64_t m = x.dims()[0], k = x.dims()[1], n = w.dims()[1], groups = w.dims()[0];
  const Type slots{kIdx, {groups, cap}};
  Value slot_row = b.binary("add", b.broadcast_in_dim(starts, slots.dims, {0}), b.iota(slots, 1));
  slot_row = b.clamp(idx(b, 0), slot_row, idx(b, m - 1));
  Value xg = b.reshape(b.convert(take_rows(b, x, b.reshape(slot_row, {groups * cap})), w.elem()), {groups, cap, k});
  Value y = dot_in_blocks(b, w, 2, xg, 2, 1, acc);  // [G, N, cap]
  // row r's group: the last group whose rows hold it (-1 for rows of no group; with offsets that
  // decrease, groups overlap and the later one writes, as in the loops and torch's kernel), and its
  // place in the group
  const Type rg{kIdx, {m, groups}};
  Value row = b.iota(rg, 0);
  Value holds = b.binary("and", b.compare(Cmp::LE, b.broadcast_in_dim(starts, rg.dims, {1}), row),
                         b.compare(Cmp::LT, row, b.broadcast_in_dim(ends, rg.dims, {1})));
  Value g = reduce(b, b.select(holds, b.iota(rg, 1), b.constant_i(-1, rg)), {1}, "maximum", idx(b, -1));
  Value gc = max(b, g, b.constant_i(0, g.type));
  Value pos = b.binary("subtract", b.iota(g.type, 0), b.gather(starts, gc, hlo::GatherDims{{}, {0}, {0}, 1}, {1}, {m}));
  Value valid = b.binary("and", b.compare(Cmp::GE, g, b.constant_i(0, g.type)),
                         b.compare(Cmp::LT, pos, b.constant_i(cap, pos.type)));
  pos = b.clamp(idx(b, 0), pos, idx(b, cap - 1));
  Value at_gc = b.concatenate({b.reshape(gc, {m, 1}), b.reshape(pos, {m, 1})}, 1);
  Value cols = b.gather(y, at_gc, hlo::GatherDims{{0}, {0, 2}, {0, 2}, 1}, {1, n, 1}, {n, m});
  return b.select(b.broadcast_in_dim(valid, {n, m}, {1}), cols, like(b, 0, cols));
}

// x[M,K] with rows in groups times w[G,K,N] -> [M,N] in `acc`: row m of group g is x[m] @ w[g]. With
// `nt`, w is given as [G,N,K] (the storage order of a transposed view), and w[g] is its transpose; then
// the product is formed as w[g] . x^T into a transposed result, transposed once at the end: XLA:CPU runs
// [T,K] . [N,K]^T with a few rows up to 15x slower than [N,K] . [T,K]^T or [T,K] . [K,N] (and it folds a
// transpose of a dot back into that slow form, hence the transposed accumulator).
//
// Half-precision weights (bfloat16, float16) are never carried by a loop: XLA:CPU computes every
// bfloat16 op but a convert in float32, a loop-carried value included, so a loop over the whole [G, ...]
// weight tensor would first widen all of it (every expert read, and twice its size written to fresh
// memory, on every call: 30x the read the step needs). Instead the groups are visited through min(M, G)
// slots unrolled in the program: slot i widens the weights of the i-th non-empty group, a slice that
// XLA reads straight from the bfloat16 parameter into one float32 [K, N] buffer (reused by the next
// slot: each slot's slice waits for the previous slot's tiles), then runs that group's tiles. Slots past
// the last non-empty group have no rows; they re-read that group's weights, still in cache.
//
// With nt weights and enough rows (see below), a dense pass (dense_rows) does the first `T` rows of
// every group in one batched dot; the loops (or slots) then take only the rows past them, in the few
// groups that have more: none at all under even routing.
Value ragged_rows(Builder& b, Value x, Value w, bool nt, Value offs, ElementType acc) {
  const int64_t m = x.dims()[0], k = x.dims()[1], n = nt ? w.dims()[1] : w.dims()[2], groups = w.dims()[0];
  Value out = b.constant(0, Type{acc, nt ? Dims{n, m} : Dims{m, n}});
  if (m == 0 || groups == 0 || k == 0 || n == 0) return nt ? b.transpose(out, {1, 0}) : out;
  const int64_t t = tile_rows(m, groups);
  // one tile: rows [s, s + T) (those marked `keep`) times the group's weights `wg` into `o`
  auto tile = [&](Builder& bb, Value s, Value keep, Value o, Value xs, Value wg) {
    Value z = idx(bb, 0);
    Value xt = bb.convert(bb.dynamic_slice(xs, {s, z}, {t, k}), acc);
    if (nt) {
      Value y = dot_in_blocks(bb, wg, 1, xt, 1, 0, acc);  // [N, T]
      Value old = bb.dynamic_slice(o, {z, s}, {n, t});
      return bb.dynamic_update_slice(o, bb.select(bb.broadcast_in_dim(keep, {n, t}, {1}), y, old), {z, s});
    }
    Value y = dot_in_blocks(bb, xt, 1, wg, 0, 0, acc);  // [T, N]
    Value old = bb.dynamic_slice(o, {s, z}, {t, n});
    return bb.dynamic_update_slice(o, bb.select(bb.broadcast_in_dim(keep, {t, n}, {0}), y, old), {s, z});
  };
  auto [starts, ends] = group_bounds(b, offs, m);
  // the dense pass first where most groups have rows (see dense_rows): nt weights only (XLA:CPU's
  // batched [G, cap, K] . [G, K, N] is slower than the loops), from two rows per group on (a group has
  // rows with odds 1 - e^-2 = 86% under uniform routing; fewer, and reading every expert costs more
  // than the loop saves), from one for half precision (whose slots cost more per group than the loop)
  const int64_t cap = t;
  int64_t busy = std::min(m, groups);  // groups that may have rows left for the loops
  if (nt && m >= (is_half(w.elem()) ? 1 : 2) * groups) {
    out = dense_rows(b, x, w, starts, ends, cap, acc);
    starts = min(b, b.binary("add", starts, b.broadcast_in_dim(idx(b, cap), {groups}, {})), ends);
    busy = std::min(groups, m / (cap + 1));  // those with more than `cap` rows
  }
  if (!is_half(w.elem())) {
    auto group_tile = [&](Builder& bb, Value g, Value s, Value keep, Value o, const V& xw) {
      return tile(bb, s, keep, o, xw[0], group_weights(bb, xw[1], g, acc));
    };
    out = for_each_tile(b, starts, ends, m, t, out, {x, w}, group_tile);
    return nt ? b.transpose(out, {1, 0}) : out;
  }
  Value order = nonempty_first(b, starts, ends);
  Value count = reduce_sum(b, b.convert(b.compare(Cmp::LT, starts, ends), kIdx), {0});
  Value last = max(b, b.binary("subtract", count, idx(b, 1)), idx(b, 0));
  Value after = idx(b, 0);  // the previous slot's final row counter (never negative): orders the slots
  for (int64_t i = 0; i < busy; ++i) {
    Value slot = min(b, idx(b, i), last);
    slot = b.select(b.compare(Cmp::LT, after, idx(b, 0)), after, slot);
    Value g = at(b, order, slot);
    Value lo = at(b, starts, g);
    Value hi = b.select(b.compare(Cmp::LT, idx(b, i), count), at(b, ends, g), lo);
    auto slot_tile = [&](Builder& bb, Value, Value s, Value keep, Value o, const V& xw) {
      return tile(bb, s, keep, o, xw[0], xw[1]);
    };
    V r = over_tiles(b, lo, hi, g, m, t, out, {x, group_weights(b, w, g, acc)}, slot_tile);
    out = r[0];
    after = r[1];
  }
  return nt ? b.transpose(out, {1, 0}) : out;
}

// a[P,K] times b[K,N] with the contraction in groups -> [G,P,N] in `acc`: result g sums the products
// over group g's part of K (the weight gradient of ragged_rows). Empty groups give zeros.
Value ragged_contraction(Builder& b, Value a, Value y, Value offs, ElementType acc) {
  const int64_t p = a.dims()[0], k = a.dims()[1], n = y.dims()[1], groups = offs.dims()[0];
  Value out = b.constant(0, Type{acc, {groups, p, n}});
  if (k == 0 || groups == 0 || p == 0 || n == 0) return out;
  const int64_t t = tile_rows(k, groups);
  return for_each_tile(b, offs, k, t, out, {a, y}, [&](Builder& bb, Value g, Value s, Value keep, Value o, const V& ay) {
    Value z = idx(bb, 0);
    Value at_ = bb.dynamic_slice(ay[0], {z, s}, {p, t});
    Value yt = bb.dynamic_slice(ay[1], {s, z}, {t, n});
    // zero both sides outside the group, so that inf or NaN there cannot leak in as 0 * inf
    at_ = bb.select(bb.broadcast_in_dim(keep, {p, t}, {1}), at_, like(bb, 0, at_));
    yt = bb.select(bb.broadcast_in_dim(keep, {t, n}, {0}), yt, like(bb, 0, yt));
    Value d = bb.reshape(bb.dot_general(at_, yt, {}, {}, {1}, {0}, acc), {1, p, n});
    Value old = bb.dynamic_slice(o, {g, z, z}, {1, p, n});
    return bb.dynamic_update_slice(o, bb.binary("add", old, d), {g, z, z});
  });
}

// How grouped products are lowered: chlo.ragged_dot where the device's compiler takes it (the GPU and
// TPU plugins; XLA:CPU does not compile it, see the top), torch-pjrt's host kernel (a custom call, see
// kernels/kernels.h) for grouped rows on XLA:CPU where the session registered it, the static-shape
// loops otherwise. TORCH_PJRT_RAGGED_DOT=native|kernel|loop chooses one, to compare them.
enum class Ragged { kNative, kKernel, kLoop };
Ragged ragged_impl() {
  static const Ragged host = [] {
    pjrt::Session* s = pjrt::Session::get_or_null();
    const bool kernel = s && s->host_kernels();  // this device's choice, whichever variant asks first
    const char* e = std::getenv("TORCH_PJRT_RAGGED_DOT");
    const std::string want = e ? e : "";
    if (want == "native") return Ragged::kNative;
    if (want == "loop") return Ragged::kLoop;
    if (want == "kernel") {
      if (!kernel) throw hlo::Error("TORCH_PJRT_RAGGED_DOT=kernel: the host kernels are not registered (" +
                                    (s ? s->host_kernels_reason() : std::string("no device")) + ")");
      return Ragged::kKernel;
    }
    if (s && s->client().platform_name() != "cpu") return Ragged::kNative;
    return kernel ? Ragged::kKernel : Ragged::kLoop;
  }();
  // Lowering for deviceless targets too (hlo::Builder::per_variant): they compile chlo.ragged_dot.
  if (!Builder::two_variants || host == Ragged::kNative) return host;
  if (hlo::lowering_variant() == 1) return Ragged::kNative;
  if (hlo::lowering_variant() == 0) hlo::note_variant_choice();
  return host;
}

// ragged_rows through the host kernel: x in float32 (bfloat16 rows with bfloat16 weights as they are),
// the weights in their own type (float32, bfloat16 or float16; others take the loops), the group ends
// clamped to the rows; rows past the last group are zero, as in torch's kernel.
Value kernel_rows(Builder& b, Value x, Value w, bool nt, Value offs, ElementType acc) {
  const int64_t m = x.dims()[0], n = nt ? w.dims()[1] : w.dims()[2];
  Value ends = group_bounds(b, offs, m).second;
  const bool bf16 = x.elem() == ElementType::kBF16 && w.elem() == ElementType::kBF16;
  Value rows = bf16 ? x : b.convert(x, ElementType::kF32);
  Value y = b.custom_call(nt ? kernels::kRaggedRowsNt : kernels::kRaggedRowsNn, {rows, w, ends},
                          {Type{ElementType::kF32, {m, n}}})[0];
  return b.convert(y, acc);
}

bool kernel_takes(Value w, ElementType acc) {
  const ElementType t = w.elem();
  return acc == ElementType::kF32 && (t == ElementType::kF32 || t == ElementType::kBF16 || t == ElementType::kF16);
}

// chlo.ragged_dot(lhs, rhs, the group sizes of `offs` over lhs dim `ragged`) in the operands' type (the
// compiler accumulates half precision in float32), then in `acc`. The group dimension of rhs is 0 when
// the ragged dimension is not contracted (rows in groups), none when it is (result [G, ...]).
Value chlo_ragged_dot(Builder& b, Value lhs, Value rhs, int64_t rhs_contract, bool contracted_ragged,
                      Value offs, const Dims& result, ElementType acc) {
  const ElementType t = rhs.elem();
  lhs = b.convert(lhs, t);
  const int64_t ragged = contracted_ragged ? 1 : 0;
  auto [starts, ends] = group_bounds(b, offs, lhs.dims()[ragged]);
  const char* p = t == ElementType::kF32 ? "HIGHEST" : "DEFAULT";  // as Builder::dot_general
  std::string attrs = std::string("precision_config = [#chlo<precision ") + p + ">, #chlo<precision " + p +
                      ">], ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], "
                      "rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], "
                      "rhs_contracting_dimensions = [" + std::to_string(rhs_contract) + "], "
                      "lhs_ragged_dimensions = [" + std::to_string(ragged) + "], rhs_group_dimensions = [" +
                      (contracted_ragged ? "" : "0") + "]>";
  Value sizes = b.binary("subtract", ends, starts);
  return b.convert(b.raw("chlo.ragged_dot", attrs, {lhs, rhs, sizes}, Type{t, result}), acc);
}

// ragged_rows through chlo.ragged_dot: rows past the last group are zero, as in torch's kernel.
Value native_rows(Builder& b, Value x, Value w, bool nt, Value offs, ElementType acc) {
  const int64_t m = x.dims()[0], n = nt ? w.dims()[1] : w.dims()[2];
  Value y = chlo_ragged_dot(b, x, w, nt ? 2 : 1, false, offs, {m, n}, acc);
  auto [starts, ends] = group_bounds(b, offs, m);
  Value total = reduce_sum(b, b.binary("subtract", ends, starts), {0});
  Value in_group = b.compare(Cmp::LT, b.iota(Type{kIdx, {m}}, 0), b.broadcast_in_dim(total, {m}, {}));
  return b.select(b.broadcast_in_dim(in_group, {m, n}, {0}), y, like(b, 0, y));
}

// grouped rows as the chosen implementation lowers them
Value rows_of(Builder& b, Ragged impl, Value x, Value w, bool nt, Value offs, ElementType acc) {
  if (impl == Ragged::kNative) return native_rows(b, x, w, nt, offs, acc);
  if (impl == Ragged::kKernel && kernel_takes(w, acc)) return kernel_rows(b, x, w, nt, offs, acc);
  return ragged_rows(b, x, w, nt, offs, acc);
}

// _grouped_mm(self, mat2, offs, bias, out_dtype): shapes and argument checks come from
// aten/shape_rules.cpp (torch's meta kernel takes bfloat16 only).
Value grouped_mm(Ctx& c) {
  Builder& b = c.b;
  if (c.has(3)) throw hlo::Error("_grouped_mm: bias is not supported");
  const ElementType acc = accumulation_type(c.out_type());
  Value x = c.t(0), w = c.t(1);
  const bool x2 = x.rank() == 2, w2 = w.rank() == 2;
  // empty operands take the loops' early return (zeros), not a ragged dot over zero-sized dimensions
  bool empty = c.has(2) && c.t(2).dims()[0] == 0;  // offs (absent for 3-d times 3-d)
  for (const Value& v : {x, w})
    for (int64_t d : v.dims()) empty |= d == 0;
  const Ragged impl = empty ? Ragged::kLoop : ragged_impl();
  const bool native = impl == Ragged::kNative;
  if (x2 && w2) {
    if (native) {
      const int64_t groups = c.t(2).dims()[0];
      return chlo_ragged_dot(b, x, w, 0, true, c.t(2), {groups, x.dims()[0], w.dims()[1]}, acc);
    }
    return ragged_contraction(b, x, w, c.t(2), acc);
  }
  if (x2) {
    // a transposed view of [G, N, K] weights (what Transformers passes): read them in storage order
    const bool nt = c.arg(1).layout == Dims{0, 2, 1};
    return rows_of(b, impl, x, nt ? b.transpose(w, {0, 2, 1}) : w, nt, c.t(2), acc);
  }
  if (w2) {
    // columns of mat2 in groups: (mat2^T [N,K] times self^T [G,K,M])^T, where self is self^T's nt form
    Value wt = b.transpose(w, {1, 0});
    return b.transpose(rows_of(b, impl, wt, x, true, c.t(2), acc), {1, 0});
  }
  return b.dot_general(x, w, {0}, {0}, {2}, {1}, acc);
}

const Rows rows = {
    {{"_grouped_mm"}, [](Ctx& c) { return V{grouped_mm(c)}; }},
};

}  // namespace
}  // namespace lowering
