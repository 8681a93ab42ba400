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
  Value idx = b.constant_i(v.offset, t);
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] == 1 || v.strides[d] == 0) continue;
    Value term = b.binary("multiply", b.iota(t, d), b.constant_i(v.strides[d], t));
    idx = b.binary("add", idx, term);
  }
  return idx;
}

Value gather_view(Builder& b, Value flat, const ViewForm& v) { return gather_flat(b, flat, view_indices(b, v)); }

// Materializes the view with slice/reshape/transpose/broadcast when its strides nest (the usual case:
// slices, transposes, expands, narrows); returns an invalid Value when they do not.
Value sliced_view(Builder& b, Value flat, const ViewForm& v) {
  std::vector<int> kept;  // dims that move through memory
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] != 1 && v.strides[d] != 0) kept.push_back(static_cast<int>(d));
  }
  std::stable_sort(kept.begin(), kept.end(), [&](int x, int y) { return v.strides[x] > v.strides[y]; });
  for (size_t i = 0; i + 1 < kept.size(); ++i) {
    int64_t s = v.strides[kept[i]], next = v.strides[kept[i + 1]];
    if (next <= 0 || s % next != 0 || s < v.sizes[kept[i + 1]] * next) return Value{};
  }
  const int64_t len = flat.type.numel();
  Value core;  // the kept dims, in stride order
  if (kept.empty()) {
    if (v.offset >= len) return Value{};
    core = b.reshape(b.slice(flat, {v.offset}, {v.offset + 1}, {1}), {});
  } else {
    int64_t span = v.sizes[kept[0]] * v.strides[kept[0]];
    int64_t need = v.offset + span;
    if (need > len) flat = b.pad(flat, b.constant(0, Type{flat.elem(), {}}), {0}, {need - len}, {0});
    Value seg = b.slice(flat, {v.offset}, {v.offset + span}, {1});
    Dims shape{v.sizes[kept[0]]};
    for (size_t i = 0; i + 1 < kept.size(); ++i) shape.push_back(v.strides[kept[i]] / v.strides[kept[i + 1]]);
    shape.push_back(v.strides[kept.back()]);
    seg = b.reshape(seg, shape);
    Dims start(shape.size(), 0), limit = shape, step(shape.size(), 1);
    for (size_t i = 1; i < kept.size(); ++i) limit[i] = v.sizes[kept[i]];
    limit.back() = 1;
    seg = b.slice(seg, start, limit, step);
    Dims core_dims;
    for (int d : kept) core_dims.push_back(v.sizes[d]);
    core = b.reshape(seg, core_dims);
    // back to the view's dim order
    std::vector<int> order(kept.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int x, int y) { return kept[x] < kept[y]; });
    Dims perm(order.begin(), order.end());
    core = b.transpose(core, perm);
  }
  // Reinsert size-1 dims and broadcast stride-0 dims.
  Dims bdims;
  std::vector<int> sorted_kept = kept;
  std::sort(sorted_kept.begin(), sorted_kept.end());
  for (int d : sorted_kept) bdims.push_back(d);
  return b.broadcast_in_dim(core, v.sizes, bdims);
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

}  // namespace

int64_t ViewForm::numel() const { return product(sizes); }

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
  return view.offset == 0 && view.contiguous() &&
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
  if (form.elem == view.elem && view.offset == 0 && view.contiguous() && view.numel() == product(form.dims)) {
    return b.reshape(base, view.sizes);
  }
  Value flat = storage_as_flat(b, base, form, view.elem);
  Value v = sliced_view(b, flat, view);
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
  if (view.contiguous()) {
    flat = b.dynamic_update_slice(flat, upd, {b.scalar_i(view.offset, ElementType::kS64)});
  } else {
    Value idx = b.reshape(view_indices(b, view), {n, 1});
    hlo::ScatterDims dn{{}, {0}, {0}, 1};
    flat = b.scatter(flat, idx, upd, dn, [](Builder&, const std::vector<Value>& a) { return std::vector<Value>{a[1]}; });
  }
  return b.reshape(reinterpret(b, flat, target.elem), target.dims);
}

}  // namespace lowering
