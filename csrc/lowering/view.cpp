#include "lowering/view.h"

#include <algorithm>
#include <numeric>

namespace lowering {
namespace {

using hlo::Type;

int64_t product(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

Value flatten(Builder& b, Value v) { return b.reshape(v, {v.type.numel()}); }

// Reinterprets the bytes of a 1-D value as elements of type `to` (torch's view(dtype)).
Value reinterpret(Builder& b, Value flat, ElementType to) {
  ElementType from = flat.elem();
  if (from == to) return flat;
  const int64_t n = flat.type.numel();
  // pred is one 0/1 byte: go through u8 so widths line up.
  if (from == ElementType::kPred) return reinterpret(b, b.convert(flat, ElementType::kU8), to);
  if (to == ElementType::kPred) return b.convert(reinterpret(b, flat, ElementType::kU8), ElementType::kPred);
  if (pjrt::is_complex(from)) {
    ElementType part = pjrt::real_type(from);
    Value re = b.reshape(b.unary_to("real", flat, part), {n, 1});
    Value im = b.reshape(b.unary_to("imag", flat, part), {n, 1});
    return reinterpret(b, b.reshape(b.concatenate({re, im}, 1), {2 * n}), to);
  }
  if (pjrt::is_complex(to)) {
    ElementType part = pjrt::real_type(to);
    Value parts = reinterpret(b, flat, part);
    int64_t m = parts.type.numel() / 2;
    Value pairs = b.reshape(parts, {m, 2});
    Value re = b.reshape(b.slice(pairs, {0, 0}, {m, 1}, {1, 1}), {m});
    Value im = b.reshape(b.slice(pairs, {0, 1}, {m, 2}, {1, 1}), {m});
    return b.complex(re, im);
  }
  size_t wf = pjrt::byte_size(from), wt = pjrt::byte_size(to);
  if (wf == wt) return b.bitcast_convert(flat, Type{to, {n}});
  if (wf > wt) {
    int64_t k = static_cast<int64_t>(wf / wt);
    return b.reshape(b.bitcast_convert(flat, Type{to, {n, k}}), {n * k});
  }
  int64_t k = static_cast<int64_t>(wt / wf);
  return b.bitcast_convert(b.reshape(flat, {n / k, k}), Type{to, {n / k}});
}

// The storage as a 1-D array of `elem`, zeros when it was never written.
Value storage_as_flat(Builder& b, const Value& base, const BaseForm& form, ElementType elem) {
  if (!form.present) return b.constant(0, Type{elem, {form.nbytes / static_cast<int64_t>(pjrt::byte_size(elem))}});
  return reinterpret(b, flatten(b, base), elem);
}

// Flat element indices (s64, shaped like the view) that the view addresses.
Value view_indices(Builder& b, const ViewForm& v) {
  Type t{ElementType::kS64, v.sizes};
  Value idx = v.dynamic ? b.broadcast_in_dim(v.offset_value, v.sizes, {}) : b.constant_i(v.offset, t);
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] == 1 || v.strides[d] == 0) continue;
    Value term = b.binary("multiply", b.iota(t, d), b.constant_i(v.strides[d], t));
    idx = b.binary("add", idx, term);
  }
  return idx;
}

Value gather_view(Builder& b, Value flat, const ViewForm& v) { return gather_flat(b, flat, view_indices(b, v)); }

// A view whose strides nest (the usual case: slices, transposes, expands, narrows) as a box of a segment
// of the flat storage: the segment [offset, offset + span) reshaped to `shape` (the dims that move
// through memory in stride order, each giving the next's stride, then the last's stride), of which the
// view is the corner [0, box): it holds the `kept` dims (by decreasing stride) and a 1 at the end.
struct Box {
  std::vector<int> kept;
  Dims shape, box;
  int64_t span = 0;
};

bool box_of(const ViewForm& v, Box* out) {
  Box& x = *out;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] != 1 && v.strides[d] != 0) x.kept.push_back(static_cast<int>(d));
  }
  std::stable_sort(x.kept.begin(), x.kept.end(), [&](int p, int q) { return v.strides[p] > v.strides[q]; });
  for (size_t i = 0; i + 1 < x.kept.size(); ++i) {
    int64_t s = v.strides[x.kept[i]], next = v.strides[x.kept[i + 1]];
    if (next <= 0 || s % next != 0 || s < v.sizes[x.kept[i + 1]] * next) return false;
  }
  if (x.kept.empty()) return true;
  x.span = v.sizes[x.kept[0]] * v.strides[x.kept[0]];
  x.shape = {v.sizes[x.kept[0]]};
  for (size_t i = 0; i + 1 < x.kept.size(); ++i) x.shape.push_back(v.strides[x.kept[i]] / v.strides[x.kept[i + 1]]);
  x.shape.push_back(v.strides[x.kept.back()]);
  x.box = x.shape;
  for (size_t i = 1; i < x.kept.size(); ++i) x.box[i] = v.sizes[x.kept[i]];
  x.box.back() = 1;
  return true;
}

// The view's first element, an s64 scalar (run-time for a dynamic view).
Value start_of(Builder& b, const ViewForm& v) {
  return v.dynamic ? v.offset_value : b.scalar_i(v.offset, ElementType::kS64);
}

// `flat` padded with zeros to at least `need` elements.
Value pad_to(Builder& b, Value flat, int64_t need) {
  const int64_t len = flat.type.numel();
  if (need <= len) return flat;
  return b.pad(flat, b.constant(0, Type{flat.elem(), {}}), {0}, {need - len}, {0});
}

// The box's segment of `flat`, which is padded so the segment fits: at a static offset, the offset's; at
// a run-time one, any offset the storage (`limit` elements) admits for the view (whose extent may be less
// than the box's span: a column of a matrix), so dynamic_slice never moves the segment.
Value segment(Builder& b, Value* flat, const ViewForm& v, const Box& x, int64_t limit) {
  if (!v.dynamic) {
    *flat = pad_to(b, *flat, v.offset + x.span);
    return b.slice(*flat, {v.offset}, {v.offset + x.span}, {1});
  }
  *flat = pad_to(b, *flat, std::max(limit, v.extent()) - v.extent() + x.span);
  return b.dynamic_slice(*flat, {v.offset_value}, {x.span});
}

// The permutation from the kept dims' stride order to their order in the view
Dims view_order(const std::vector<int>& kept) {
  std::vector<int> order(kept.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return kept[x] < kept[y]; });
  return Dims(order.begin(), order.end());
}

// Materializes the view with slice/reshape/transpose/broadcast when its strides nest; returns an invalid
// Value when they do not.
Value sliced_view(Builder& b, Value flat, const ViewForm& v, int64_t limit) {
  Box x;
  if (!box_of(v, &x)) return Value{};
  Value core;  // the kept dims, in stride order
  if (x.kept.empty()) {
    if (!v.dynamic && v.offset >= flat.type.numel()) return Value{};
    x.span = 1;
    core = b.reshape(segment(b, &flat, v, x, limit), {});
  } else {
    Value seg = b.reshape(segment(b, &flat, v, x, limit), x.shape);
    seg = b.slice(seg, Dims(x.shape.size(), 0), x.box, Dims(x.shape.size(), 1));
    Dims core_dims;
    for (int d : x.kept) core_dims.push_back(v.sizes[d]);
    core = b.transpose(b.reshape(seg, core_dims), view_order(x.kept));  // back to the view's dim order
  }
  // Reinsert size-1 dims and broadcast stride-0 dims.
  Dims bdims;
  std::vector<int> sorted_kept = x.kept;
  std::sort(sorted_kept.begin(), sorted_kept.end());
  for (int d : sorted_kept) bdims.push_back(d);
  return b.broadcast_in_dim(core, v.sizes, bdims);
}

// flat with the view's elements replaced by `update` (shaped as the view) through the view's box: the
// update put in the segment's corner (a dynamic_update_slice, which XLA fuses), where the view's strides
// nest and no element repeats (no stride-0 dim of more than one element); else an invalid Value.
Value boxed_write(Builder& b, Value flat, const ViewForm& v, Value update, int64_t limit) {
  Box x;
  if (!box_of(v, &x) || x.kept.empty()) return Value{};
  for (size_t d = 0; d < v.sizes.size(); ++d)
    if (v.sizes[d] != 1 && v.strides[d] == 0) return Value{};
  const int64_t len = flat.type.numel();
  Value padded = flat;
  Value seg = b.reshape(segment(b, &padded, v, x, limit), x.shape);
  // the update in stride order, as the box
  const Dims order = view_order(x.kept);
  Dims inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  Dims in_view_order(order.size());
  for (size_t i = 0; i < order.size(); ++i) in_view_order[i] = v.sizes[x.kept[order[i]]];
  Value u = b.reshape(update, in_view_order);  // the kept dims in the view's order (size-1 dims dropped)
  u = b.reshape(b.transpose(u, inverse), x.box);
  const Value zero = b.scalar_i(0, ElementType::kS64);
  seg = b.reshape(b.dynamic_update_slice(seg, u, std::vector<Value>(x.shape.size(), zero)), {x.span});
  padded = b.dynamic_update_slice(padded, seg, {start_of(b, v)});
  return padded.type.numel() > len ? b.slice(padded, {0}, {len}, {1}) : padded;
}

// The lazy conj/neg bits of a view (both are their own inverse, so reads and writes share this).
Value apply_bits(Builder& b, Value v, const ViewForm& view) {
  if (view.neg) v = b.unary("negate", v);
  if (view.conj && pjrt::is_complex(v.elem())) {
    ElementType part = pjrt::real_type(v.elem());
    v = b.complex(b.unary_to("real", v, part), b.unary("negate", b.unary_to("imag", v, part)));
  }
  return v;
}

Value read_plain(Builder& b, const Value& base, const BaseForm& form, const ViewForm& view);

// How many elements of the view's type the storage holds.
int64_t storage_elements(const BaseForm& form, const ViewForm& view) {
  return form.nbytes / static_cast<int64_t>(pjrt::byte_size(view.elem));
}

}  // namespace

int64_t ViewForm::numel() const { return product(sizes); }

int64_t ViewForm::extent() const {
  int64_t e = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    e += (sizes[d] - 1) * strides[d];
  }
  return e;
}

bool ViewForm::contiguous() const {
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

Dims ViewForm::storage_order() const {
  Dims order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return strides[x] > strides[y]; });
  return order;
}

bool covers_storage(const BaseForm& base, const ViewForm& view) {
  return !view.dynamic && view.offset == 0 && view.contiguous() &&
         view.numel() * static_cast<int64_t>(pjrt::byte_size(view.elem)) == base.nbytes;
}

bool has_spare_capacity(const BaseForm& base) {
  return base.present && base.dims.size() == 1 &&
         base.dims[0] * static_cast<int64_t>(pjrt::byte_size(base.elem)) > base.nbytes;
}

Value gather_flat(Builder& b, const Value& flat, Value idx) {
  const Dims shape = idx.dims();
  const int64_t n = idx.type.numel();
  const int64_t len = flat.type.numel();
  Type t{ElementType::kS64, {}};
  idx = b.clamp(b.constant_i(0, t), b.reshape(idx, {n, 1}), b.constant_i(len - 1, t));
  hlo::GatherDims dn{{}, {0}, {0}, 1};
  return b.reshape(b.gather(flat, idx, dn, {1}, {n}), shape);
}

Value read_view_dynamic(Builder& b, const Value& flat, const Dims& sizes, const Value& offset,
                        const std::vector<Value>& strides) {
  Type t{ElementType::kS64, sizes};
  if (t.numel() == 0) return b.constant(0, Type{flat.elem(), sizes});
  Value idx = b.broadcast_in_dim(offset, sizes, {});
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    idx = b.binary("add", idx, b.binary("multiply", b.iota(t, static_cast<int64_t>(d)),
                                        b.broadcast_in_dim(strides[d], sizes, {})));
  }
  return gather_flat(b, flat, idx);
}

Value read_view(Builder& b, const Value& base, const BaseForm& form, const ViewForm& view) {
  return apply_bits(b, read_plain(b, base, form, view), view);
}

namespace {

Value read_plain(Builder& b, const Value& base, const BaseForm& form, const ViewForm& view) {
  Type out{view.elem, view.sizes};
  if (view.numel() == 0) return b.constant(0, out);
  if (!form.present) return b.constant(0, out);
  // Fast path: the tensor is its storage's base, maybe reshaped.
  if (form.elem == view.elem && !view.dynamic && view.offset == 0 && view.contiguous() &&
      view.numel() == product(form.dims)) {
    return b.reshape(base, view.sizes);
  }
  Value flat = storage_as_flat(b, base, form, view.elem);
  Value v = sliced_view(b, flat, view, storage_elements(form, view));
  if (v.valid()) return v;
  return gather_view(b, flat, view);
}

}  // namespace

Value write_view(Builder& b, const Value& base, const BaseForm& form, const ViewForm& view, Value update,
                 BaseForm* new_form) {
  update = apply_bits(b, update, view);
  if (covers_storage(form, view)) {
    *new_form = BaseForm{true, view.elem, view.sizes, form.nbytes};
    return update;
  }
  // Keep the base's form; an unwritten storage becomes a flat array of the view's type.
  BaseForm target = form;
  if (!form.present) {
    target = BaseForm{true, view.elem, {form.nbytes / static_cast<int64_t>(pjrt::byte_size(view.elem))}, form.nbytes};
  }
  *new_form = target;
  if (view.numel() == 0) return form.present ? base : b.constant(0, Type{target.elem, target.dims});
  Value flat = storage_as_flat(b, base, form, view.elem);
  const int64_t n = view.numel();
  Value upd = b.reshape(update, {n});
  Value boxed;
  if (view.contiguous()) {
    flat = b.dynamic_update_slice(flat, upd, {start_of(b, view)});
  } else if ((boxed = boxed_write(b, flat, view, update, storage_elements(form, view))).valid()) {
    flat = boxed;
  } else {
    Value idx = b.reshape(view_indices(b, view), {n, 1});
    hlo::ScatterDims dn{{}, {0}, {0}, 1};
    flat = b.scatter(flat, idx, upd, dn, [](Builder&, const std::vector<Value>& a) { return std::vector<Value>{a[1]}; });
  }
  return b.reshape(reinterpret(b, flat, target.elem), target.dims);
}

}  // namespace lowering
