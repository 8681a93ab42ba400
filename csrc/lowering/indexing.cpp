// Indexing rows: index_select, gather, scatter and its reductions, index_add / index_copy / index_fill,
// advanced indexing (index.Tensor, index_put), take / put, masked_scatter, and the data-movement ops built from the
// same pieces: constant_pad_nd, flip, roll, repeat, tril / triu, sort and topk; index_reduce and nonzero_static.
//
// Index tensors may be int64 or int32; negative indices wrap as in torch (i + size) for the ops that take
// them (advanced indexing, take / put, index_fill). Indices out of range fail the op on the device
// (checked_index, helpers.h): the error is raised at the next sync point with the CPU's words, and a
// failed scatter writes nothing.
// Boolean-mask indices have a data-dependent shape and fall back, except for index_put with a single
// mask and a one-element value (x[mask] = v), which is a select.
#include <limits>

#include "kernels/kernels.h"
#include "lowering/helpers.h"

namespace lowering {
namespace {

using V = std::vector<Value>;
using hlo::Cmp;
using hlo::GatherDims;
using hlo::ScatterDims;

V one(Value v) { return V{v}; }

Dims iota_dims(int64_t from, int64_t to) {
  Dims d;
  for (int64_t i = from; i < to; ++i) d.push_back(i);
  return d;
}

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

bool is_bool_index(const Value& v) { return v.elem() == ElementType::kPred || v.elem() == ElementType::kU8; }

// An index tensor as s64 with negative entries wrapped by `size`, checked on the device (checked_index).
Value wrap_index(Builder& b, Value idx, int64_t size, const IndexCheck& how) {
  if (is_bool_index(idx)) throw hlo::Error("boolean index tensors have a data-dependent shape");
  return checked_index(b, idx, size, how);
}

// The CPU's words for an index out of range, by op family. These ops take no negative index.
IndexCheck dim_check(int64_t dim, bool write) {  // gather, scatter and their reductions, index_add
  IndexCheck how;
  how.dim = dim, how.wrap = false, how.index_error = false, how.write = write;
  return how;
}
IndexCheck in_self(bool write) {  // index_select, index_reduce
  IndexCheck how;
  how.wrap = false, how.write = write, how.message = "index out of range in self";
  return how;
}

// The scatter combiner for a reduction name; "" replaces.
std::string combiner(const std::string& reduce, ElementType t) {
  bool pred = t == ElementType::kPred;
  if (reduce.empty()) return "";
  if (reduce == "add" || reduce == "sum") return pred ? "or" : "add";
  if (reduce == "multiply" || reduce == "prod") return pred ? "and" : "multiply";
  if (reduce == "amax") return pred ? "or" : "maximum";
  if (reduce == "amin") return pred ? "and" : "minimum";
  throw hlo::Error("scatter: unsupported reduction '" + reduce + "'");
}

hlo::Builder::Body body_of(const std::string& op) {
  return [op](Builder& bb, const V& a) {
    if (op == "maximum") return V{nan_max(bb, a[0], a[1])};
    if (op == "minimum") return V{nan_min(bb, a[0], a[1])};
    return V{op.empty() ? a[1] : bb.binary(op.c_str(), a[0], a[1])};
  };
}

// Full coordinates into a rank-`rank` operand for every element of `index` (same rank): the index
// value along `dim`, the element's own position along the others. Shape index.dims + [rank].
Value dim_coords(Builder& b, Value index, int64_t dim, int64_t size, bool write) {
  const int64_t rank = index.rank();
  Dims d = index.dims(), dd = index.dims();
  dd.push_back(1);
  V parts;
  for (int64_t k = 0; k < rank; ++k) {
    Value v = k == dim ? wrap_index(b, index, size, dim_check(dim, write)) : b.iota(Type{ElementType::kS64, d}, k);
    parts.push_back(b.reshape(v, dd));
  }
  return b.concatenate(parts, rank);
}

// out[i...] = x[i with i[dim] = index[i...]]  (torch.gather)
Value gather_dim(Builder& b, Value x, int64_t dim, Value index) {
  if (index.type.numel() == 0) return b.constant(0, Type{x.elem(), index.dims()});
  const int64_t rank = x.rank();
  GatherDims g;
  g.collapsed_slice_dims = iota_dims(0, rank);
  g.start_index_map = iota_dims(0, rank);
  g.index_vector_dim = rank;
  return b.gather(x, dim_coords(b, index, dim, x.dims()[dim], false), g, Dims(rank, 1), index.dims());
}

// self[i with i[dim] = index[i...]] (op)= src[i...]  (torch.scatter); src is cut to index's shape.
Value scatter_dim(Builder& b, Value self, int64_t dim, Value index, Value src, const std::string& op) {
  if (index.type.numel() == 0) return self;
  const int64_t rank = self.rank();
  if (src.dims() != index.dims()) src = b.slice(src, Dims(rank, 0), index.dims(), Dims(rank, 1));
  ScatterDims s;
  s.inserted_window_dims = iota_dims(0, rank);
  s.scatter_dims_to_operand_dims = iota_dims(0, rank);
  s.index_vector_dim = rank;
  return b.scatter(self, dim_coords(b, index, dim, self.dims()[dim], true), src, s, body_of(op));
}

// self.index_select(dim, index). The CPU kernel words a bad index by its path: a copy per row along dim 1
// (of a tensor of 2 or more dims) raises a RuntimeError, the others an IndexError.
Value index_select(Builder& b, Value x, int64_t dim, Value index) {
  const int64_t n = index.type.numel();
  Dims out = x.dims();
  out[dim] = n;
  if (numel(out) == 0) return b.constant(0, Type{x.elem(), out});
  IndexCheck how = in_self(false);
  if (dim == 1 && x.rank() > 1) {
    how.index_error = false;
    how.message = "INDICES element is out of DATA bounds, id={value} axis_dim=" + std::to_string(x.dims()[1]);
  }
  Value idx = b.reshape(wrap_index(b, index, x.dims()[dim], how), {n, 1});
  GatherDims g;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != dim) g.offset_dims.push_back(i);
  g.collapsed_slice_dims = {dim};
  g.start_index_map = {dim};
  g.index_vector_dim = 1;
  Dims sizes = x.dims();
  sizes[dim] = 1;
  return b.gather(x, idx, g, sizes, out);
}

// self with self.select(dim, index[j]) (op)= updates.select(dim, j): index_add / index_copy / index_fill;
// `how` words an index out of range (its dim and write are set here).
Value index_scatter(Builder& b, Value self, int64_t dim, Value index, Value updates, const std::string& op,
                    IndexCheck how) {
  const int64_t n = index.type.numel();
  if (n == 0 || self.type.numel() == 0) return self;
  Dims ud = self.dims();
  ud[dim] = n;
  updates = b.reshape(updates, ud);
  how.dim = dim, how.write = true;
  Value idx = b.reshape(wrap_index(b, index, self.dims()[dim], how), {n, 1});
  ScatterDims s;
  for (int64_t i = 0; i < self.rank(); ++i)
    if (i != dim) s.update_window_dims.push_back(i);
  s.inserted_window_dims = {dim};
  s.scatter_dims_to_operand_dims = {dim};
  s.index_vector_dim = 1;
  return b.scatter(self, idx, updates, s, body_of(op));
}

// 0-d operands of the dim-wise ops behave as 1-element vectors.
Value as_vector(Builder& b, Value v) { return v.rank() == 0 ? b.reshape(v, {1}) : v; }

int64_t dim_arg(const Ctx& c, size_t k, const Value& x) { return wrap_dim(c.i(k), x.rank()); }

// ------------------------------------------------------------------------------------ scatter rows

Value scatter_row(Ctx& c, Value src, const std::string& reduce) {
  Value self = c.b.convert(c.t(0), c.out_type());
  Value index = c.t(2);
  const bool scalar = self.rank() == 0;
  int64_t dim = dim_arg(c, 1, self);
  if (scalar) {
    self = as_vector(c.b, self);
    index = as_vector(c.b, index);
    src = as_vector(c.b, src);
  }
  if (index.type.numel() == 0) return c.b.reshape(self, c.out_dims());  // nothing to write (any index rank)
  if (index.rank() != self.rank()) throw hlo::Error("scatter: index rank differs from self");
  if (src.rank() == 0) src = c.b.broadcast_to(src, index.dims());
  Value r = scatter_dim(c.b, self, dim, index, c.b.convert(src, self.elem()), combiner(reduce, self.elem()));
  return c.b.reshape(r, c.out_dims());
}

Value value_updates(Ctx& c, size_t k) {
  Value idx = c.t(2);
  return operand(c, k, c.out_type(), idx.dims());
}

// x // y for integers (floor), x / y otherwise.
Value divide_for_mean(Builder& b, Value s, Value n) {
  if (!pjrt::is_integral(s.elem())) return b.binary("divide", s, n);
  Value q = b.binary("divide", s, n);
  Value r = b.binary("remainder", s, n);
  Value zero = b.constant_i(0, s.type);
  Value fix = b.binary("and", b.compare(Cmp::NE, r, zero), b.compare(Cmp::LT, r, zero));  // n > 0
  return b.select(fix, b.binary("subtract", q, b.constant_i(1, q.type)), q);
}

Value scatter_reduce_two(Ctx& c) {
  Builder& b = c.b;
  Value self = b.convert(c.t(0), c.out_type());
  Value index = c.t(2), src = b.convert(c.t(3), c.out_type());
  const std::string reduce = c.arg(4).s;
  const bool include_self = !c.has(5) || c.i(5);
  if (self.rank() == 0) {
    self = as_vector(b, self);
    index = as_vector(b, index);
    src = as_vector(b, src);
  }
  int64_t dim = dim_arg(c, 1, self);
  if (index.type.numel() == 0) return b.reshape(self, c.out_dims());  // nothing to write (any index rank)
  if (index.rank() != self.rank()) throw hlo::Error("scatter_reduce: index rank differs from self");
  const ElementType t = self.elem();
  Value touched;
  if (!include_self || reduce == "mean") {
    Value f = b.constant(0, Type{ElementType::kPred, self.dims()});
    touched = scatter_dim(b, f, dim, index, b.constant(1, Type{ElementType::kPred, index.dims()}), "or");
  }
  Value r;
  if (reduce == "mean") {
    Value base = include_self ? self : b.select(touched, b.constant(0, self.type), self);
    Value sum = scatter_dim(b, base, dim, index, src, combiner("sum", t));
    ElementType ct = pjrt::is_integral(t) ? ElementType::kS64 : t;
    Value count = b.constant(include_self ? 1 : 0, Type{ct, self.dims()});
    count = scatter_dim(b, count, dim, index, b.constant(1, Type{ct, index.dims()}), "add");
    count = b.binary("maximum", count, b.constant(1, count.type));
    if (pjrt::is_integral(t)) {
      r = b.convert(divide_for_mean(b, b.convert(sum, ElementType::kS64), count), t);
    } else {
      r = b.binary("divide", sum, count);
    }
  } else {
    Value identity;
    if (reduce == "sum") identity = b.scalar(0, t);
    else if (reduce == "prod") identity = b.scalar(1, t);
    else if (reduce == "amax") identity = lowest(b, t);
    else if (reduce == "amin") identity = highest(b, t);
    else throw hlo::Error("scatter_reduce: unsupported reduction '" + reduce + "'");
    Value base = include_self ? self : b.select(touched, b.broadcast_to(identity, self.dims()), self);
    r = scatter_dim(b, base, dim, index, src, combiner(reduce, t));
  }
  return b.reshape(r, c.out_dims());
}

// ------------------------------------------------------------------------- index_add / copy / fill

Value index_row(Ctx& c, Value updates, const std::string& op, const IndexCheck& how) {
  Value self = c.b.convert(c.t(0), c.out_type());
  int64_t dim = dim_arg(c, 1, self);
  self = as_vector(c.b, self);
  Value r = index_scatter(c.b, self, dim, c.t(2), c.b.convert(updates, self.elem()), op, how);
  return c.b.reshape(r, c.out_dims());
}

Value index_fill(Ctx& c) {
  Value self = c.b.convert(c.t(0), c.out_type());
  int64_t dim = dim_arg(c, 1, self);
  self = as_vector(c.b, self);
  Dims ud = self.dims();
  ud[dim] = c.t(2).type.numel();
  Value v = c.b.broadcast_to(c.b.convert(c.t(3), self.elem()), ud);
  return c.b.reshape(index_scatter(c.b, self, dim, c.t(2), v, "", IndexCheck{}), c.out_dims());
}

// ---------------------------------------------------------------------------- advanced indexing

Dims broadcast_shapes(const std::vector<Value>& vs) {
  Dims out;
  for (const Value& v : vs) {
    const Dims& d = v.dims();
    if (d.size() > out.size()) out.insert(out.begin(), d.size() - out.size(), 1);
    int64_t shift = static_cast<int64_t>(out.size() - d.size());
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t& o = out[i + shift];
      if (o == 1) o = d[i];
      else if (d[i] != 1 && d[i] != o) throw hlo::Error("index: shape mismatch between indices");
    }
  }
  return out;
}

struct Advanced {
  Dims indexed;   // self dims indexed by a tensor, ascending
  Dims rest;      // the other self dims, ascending
  Dims batch;     // the indices' broadcast shape
  Value coords;   // [batch..., indexed.size()] s64
  Dims perm;      // indexed dims first, then the rest
  bool adjacent;  // indexed dims are consecutive: the batch dims replace them in place
  // The shape of self[indices] in torch's order, and the permutations between it and [batch, rest].
  Dims result_dims;
  Dims to_torch;   // [batch, rest] -> torch order
  Dims from_torch;  // torch order -> [batch, rest]
};

// `write`: the coordinates address index_put's updates (checked_index).
Advanced advanced(Builder& b, const Value& self, const std::vector<Value>& list, bool write) {
  Advanced a;
  if (static_cast<int64_t>(list.size()) > self.rank()) throw hlo::Error("index: too many indices");
  std::vector<Value> idx;
  for (size_t k = 0; k < list.size(); ++k) {
    if (!list[k].valid()) continue;
    if (is_bool_index(list[k])) throw hlo::Error("index: boolean mask indices have a data-dependent shape");
    a.indexed.push_back(static_cast<int64_t>(k));
    idx.push_back(list[k]);
  }
  if (idx.empty()) throw hlo::Error("index: no index tensors");
  for (int64_t i = 0; i < self.rank(); ++i) {
    bool used = false;
    for (int64_t d : a.indexed) used |= d == i;
    if (!used) a.rest.push_back(i);
  }
  a.batch = broadcast_shapes(idx);
  const int64_t nb = static_cast<int64_t>(a.batch.size()), k = static_cast<int64_t>(idx.size());
  Dims cd = a.batch;
  cd.push_back(1);
  V parts;
  for (int64_t j = 0; j < k; ++j) {
    IndexCheck how;
    how.dim = a.indexed[j], how.write = write;
    Value w = wrap_index(b, idx[j], self.dims()[a.indexed[j]], how);
    parts.push_back(b.reshape(b.broadcast_to(w, a.batch), cd));
  }
  a.coords = b.concatenate(parts, nb);
  a.perm = a.indexed;
  a.perm.insert(a.perm.end(), a.rest.begin(), a.rest.end());
  a.adjacent = a.indexed.back() - a.indexed.front() + 1 == k;
  // torch order: with adjacent indices, dims before the first indexed dim come first.
  const int64_t before = a.adjacent ? a.indexed.front() : 0;
  const int64_t nr = static_cast<int64_t>(a.rest.size());
  for (int64_t i = 0; i < before; ++i) a.to_torch.push_back(nb + i);
  for (int64_t i = 0; i < nb; ++i) a.to_torch.push_back(i);
  for (int64_t i = before; i < nr; ++i) a.to_torch.push_back(nb + i);
  a.from_torch.assign(a.to_torch.size(), 0);
  for (size_t i = 0; i < a.to_torch.size(); ++i) a.from_torch[a.to_torch[i]] = static_cast<int64_t>(i);
  Dims internal = a.batch;
  for (int64_t d : a.rest) internal.push_back(self.dims()[d]);
  for (int64_t p : a.to_torch) a.result_dims.push_back(internal[p]);
  return a;
}

Value index_tensor(Ctx& c) {
  Builder& b = c.b;
  Value self = c.t(0);
  if (c.out_type() != ElementType::kInvalid && numel(c.out_dims()) == 0) return b.constant(0, c.out());
  Advanced a = advanced(b, self, c.arg(1).list, false);
  const int64_t nb = static_cast<int64_t>(a.batch.size()), k = static_cast<int64_t>(a.indexed.size());
  Value xt = b.transpose(self, a.perm);
  GatherDims g;
  g.offset_dims = iota_dims(nb, nb + static_cast<int64_t>(a.rest.size()));
  g.collapsed_slice_dims = iota_dims(0, k);
  g.start_index_map = iota_dims(0, k);
  g.index_vector_dim = nb;
  Dims sizes(k, 1), out = a.batch;
  for (int64_t d : a.rest) {
    sizes.push_back(self.dims()[d]);
    out.push_back(self.dims()[d]);
  }
  Value r = b.gather(xt, a.coords, g, sizes, out);
  return b.transpose(r, a.to_torch);
}

// self[mask] (op)= value for a single boolean mask and a one-element value: a select.
Value masked_put(Ctx& c, Value self, const std::vector<Value>& list, Value values, bool accumulate) {
  Builder& b = c.b;
  int64_t pos = -1;
  for (size_t k = 0; k < list.size(); ++k) {
    if (!list[k].valid()) continue;
    if (pos >= 0 || !is_bool_index(list[k])) throw hlo::Error("index_put: boolean masks mixed with other indices");
    pos = static_cast<int64_t>(k);
  }
  Value mask = b.convert(list[pos], ElementType::kPred);
  if (values.type.numel() != 1) throw hlo::Error("index_put: a boolean mask with a multi-element value has a data-dependent shape");
  if (pos + mask.rank() > self.rank()) throw hlo::Error("index_put: mask has too many dimensions");
  for (int64_t i = 0; i < mask.rank(); ++i)
    if (mask.dims()[i] != self.dims()[pos + i]) throw hlo::Error("index_put: mask shape mismatch");
  Value m = b.broadcast_in_dim(mask, self.dims(), iota_dims(pos, pos + mask.rank()));
  Value v = b.broadcast_to(b.reshape(values, {}), self.dims());
  if (accumulate) v = b.binary(self.elem() == ElementType::kPred ? "or" : "add", self, v);
  return b.select(m, v, self);
}

Value index_put(Ctx& c, bool accumulate) {
  Builder& b = c.b;
  Value self = b.convert(c.t(0), c.out_type());
  Value values = b.convert(c.t(2), c.out_type());
  const auto& list = c.arg(1).list;
  bool any_bool = false;
  for (const Value& v : list) any_bool |= v.valid() && is_bool_index(v);
  if (any_bool) return masked_put(c, self, list, values, accumulate);
  if (self.type.numel() == 0) return self;
  Advanced a = advanced(b, self, list, true);
  if (numel(a.result_dims) == 0) return self;
  // values broadcast to self[indices], then into [batch, rest] order
  while (values.rank() > static_cast<int64_t>(a.result_dims.size()) && values.dims()[0] == 1)
    values = b.reshape(values, Dims(values.dims().begin() + 1, values.dims().end()));
  Value v = b.transpose(b.broadcast_to(values, a.result_dims), a.from_torch);
  const int64_t nb = static_cast<int64_t>(a.batch.size()), k = static_cast<int64_t>(a.indexed.size());
  ScatterDims s;
  s.update_window_dims = iota_dims(nb, nb + static_cast<int64_t>(a.rest.size()));
  s.inserted_window_dims = iota_dims(0, k);
  s.scatter_dims_to_operand_dims = iota_dims(0, k);
  s.index_vector_dim = nb;
  Value xt = b.transpose(self, a.perm);
  Value r = b.scatter(xt, a.coords, v, s, body_of(accumulate ? combiner("add", self.elem()) : ""));
  Dims inv(a.perm.size());
  for (size_t i = 0; i < a.perm.size(); ++i) inv[a.perm[i]] = static_cast<int64_t>(i);
  return b.transpose(r, inv);
}

// -------------------------------------------------------------------------------- masked_scatter

// Inclusive prefix sum along dim 0 of a vector: log2(n) shifted adds.
Value prefix_sum(Builder& b, Value x) {
  const int64_t n = x.dims()[0];
  Value zero = b.scalar(0, x.elem());
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Value shifted = b.pad(b.slice(x, {0}, {n - shift}, {1}), zero, {shift}, {0}, {0});
    x = b.binary("add", x, shifted);
  }
  return x;
}

Value masked_scatter(Ctx& c) {
  Builder& b = c.b;
  const Dims& out = c.out_dims();
  Value self = b.broadcast_to(b.convert(c.t(0), c.out_type()), out);
  Value mask = b.broadcast_to(b.convert(c.t(1), ElementType::kPred), out);
  Value source = b.convert(c.t(2), c.out_type());
  const int64_t n = numel(out), m = source.type.numel();
  if (n == 0 || m == 0) return self;
  Value flat = b.reshape(b.convert(mask, ElementType::kS64), {n});
  Value ones = reduce_sum(b, flat, {0});
  Value failed = check(b, b.reshape(b.compare(Cmp::GT, ones, b.scalar_i(m, ElementType::kS64)), {1}), Value{},
                       "Number of elements of source < number of ones in mask", false);
  if (failed.valid()) mask = andv(b, mask, b.broadcast_to(notv(b, failed), out));  // a failed op writes nothing
  Value pos = b.binary("subtract", prefix_sum(b, flat), b.constant_i(1, flat.type));
  pos = b.clamp(b.scalar_i(0, ElementType::kS64), pos, b.scalar_i(m - 1, ElementType::kS64));
  GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  Value picked = b.gather(b.reshape(source, {m}), b.reshape(pos, {n, 1}), g, {1}, {n});
  return b.select(mask, b.reshape(picked, out), self);
}

// ------------------------------------------------------------------------------- data movement

Value constant_pad_nd(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  const Dims& pad = c.ints(1);
  const int64_t rank = x.rank();
  if (pad.size() % 2 || static_cast<int64_t>(pad.size()) > 2 * rank) throw hlo::Error("constant_pad_nd: bad padding");
  Dims low(rank, 0), high(rank, 0);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    int64_t d = rank - 1 - static_cast<int64_t>(i);
    low[d] = pad[2 * i];
    high[d] = pad[2 * i + 1];
  }
  Value value = operand(c, 2, c.out_type(), {});
  if (numel(c.out_dims()) == 0) return b.constant(0, c.out());
  if (x.type.numel() == 0) return b.broadcast_to(value, c.out_dims());
  // negative padding crops: slice first (pad's negative edges need the plugin's support otherwise)
  Dims start(rank, 0), limit = x.dims();
  for (int64_t d = 0; d < rank; ++d) {
    if (low[d] < 0) start[d] = -low[d], low[d] = 0;
    if (high[d] < 0) limit[d] += high[d], high[d] = 0;
  }
  x = b.slice(x, start, limit, Dims(rank, 1));
  return b.pad(x, value, low, high, Dims(rank, 0));
}

Value roll1(Builder& b, Value x, int64_t dim, int64_t shift) {
  const int64_t n = x.dims()[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  const int64_t rank = x.rank();
  Dims start(rank, 0), limit = x.dims(), ones(rank, 1);
  start[dim] = n - s;
  Value tail = b.slice(x, start, limit, ones);
  start[dim] = 0;
  limit[dim] = n - s;
  Value head = b.slice(x, start, limit, ones);
  return b.concatenate({tail, head}, dim);
}

Value roll(Ctx& c) {
  Value x = c.t(0);
  const Dims& shifts = c.ints(1);
  Dims dims = c.has(2) ? c.ints(2) : Dims{};
  if (dims.empty()) {
    if (shifts.size() != 1) throw hlo::Error("roll: shifts without dims must be one value");
    Value flat = c.b.reshape(x, {x.type.numel()});
    return c.b.reshape(roll1(c.b, flat, 0, shifts[0]), x.dims());
  }
  if (dims.size() != shifts.size()) throw hlo::Error("roll: shifts and dims differ in length");
  for (size_t i = 0; i < dims.size(); ++i) x = roll1(c.b, x, wrap_dim(dims[i], x.rank()), shifts[i]);
  return x;
}

Value repeat(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  const Dims& reps = c.ints(1);
  const int64_t n = static_cast<int64_t>(reps.size());
  if (n < x.rank()) throw hlo::Error("repeat: fewer repeats than dims");
  if (numel(c.out_dims()) == 0) return b.constant(0, c.out());
  Dims xd(n - x.rank(), 1);
  xd.insert(xd.end(), x.dims().begin(), x.dims().end());
  x = b.reshape(x, xd);
  Dims inter, bdims;
  for (int64_t i = 0; i < n; ++i) {
    inter.push_back(reps[i]);
    inter.push_back(xd[i]);
    bdims.push_back(2 * i + 1);
  }
  return b.reshape(b.broadcast_in_dim(x, inter, bdims), c.out_dims());
}

Value triangle(Ctx& c, bool lower) {
  Builder& b = c.b;
  Value x = c.t(0);
  const int64_t rank = x.rank();
  if (rank < 2) throw hlo::Error("tril/triu: input must have at least 2 dimensions");
  Type it{ElementType::kS64, x.dims()};
  Value diff = b.binary("subtract", b.iota(it, rank - 1), b.iota(it, rank - 2));  // col - row
  Value diag = b.constant_i(c.has(1) ? c.i(1) : 0, it);
  Value keep = b.compare(lower ? Cmp::LE : Cmp::GE, diff, diag);
  return b.select(keep, x, b.constant(0, x.type));
}

// ---------------------------------------------------------------------------------- sort and topk

// (values, indices) sorted along dim, stably; NaN sorts above every number, as in torch.
std::pair<Value, Value> sort_dim(Builder& b, Value x, int64_t dim, bool descending) {
  Value idx = b.iota(Type{ElementType::kS64, x.dims()}, dim);
  const bool fp = pjrt::is_float(x.elem());
  auto r = b.sort({x, idx}, dim, true, [descending, fp](Builder& bb, const V& a) {
    Value l = a[0], r = a[1];
    Value before = bb.compare(descending ? Cmp::GT : Cmp::LT, l, r);
    if (fp) {
      Value ln = bb.compare(Cmp::NE, l, l), rn = bb.compare(Cmp::NE, r, r);
      Value nan_first = descending ? bb.binary("and", ln, bb.unary("not", rn)) : bb.binary("and", bb.unary("not", ln), rn);
      before = bb.binary("or", before, nan_first);
    }
    return V{before};
  });
  return {r[0], r[1]};
}

// The first k along dim of x sorted stably, as (values, s64 indices). Float rows go through the host
// kernel where the session registered it (kernels.h: one custom call, where XLA:CPU's sort calls a
// comparator per comparison), the StableHLO sort otherwise; both give the stable sort's order.
std::pair<Value, Value> sorted_prefix(Builder& b, Value x, int64_t dim, bool descending, int64_t k) {
  const ElementType t = x.elem();
  if (host_kernels() && (t == ElementType::kF32 || t == ElementType::kBF16 || t == ElementType::kF16)) {
    const int64_t r = x.rank(), n = x.dims()[dim];
    Dims perm, inv(r);  // dim last, and back
    for (int64_t d = 0; d < r; ++d)
      if (d != dim) perm.push_back(d);
    perm.push_back(dim);
    for (int64_t d = 0; d < r; ++d) inv[perm[d]] = d;
    Value xt = b.transpose(x, perm);
    Dims lead = xt.dims();
    lead.pop_back();
    const int64_t rows = numel(lead);
    Value rows_x = b.reshape(b.convert(xt, ElementType::kF32), {rows, n});
    V res = b.custom_call(descending ? kernels::kSortedPrefixDescending : kernels::kSortedPrefixAscending, {rows_x},
                          {Type{ElementType::kF32, {rows, k}}, Type{ElementType::kS64, {rows, k}}});
    Dims out = lead;
    out.push_back(k);
    auto back = [&](Value v) { return b.transpose(b.reshape(v, out), inv); };
    return {back(b.convert(res[0], t)), back(res[1])};
  }
  auto [v, i] = sort_dim(b, x, dim, descending);
  if (k == x.dims()[dim]) return {v, i};
  Dims start(x.rank(), 0), limit = x.dims(), ones(x.rank(), 1);
  limit[dim] = k;
  return {b.slice(v, start, limit, ones), b.slice(i, start, limit, ones)};
}

V sort_row(Ctx& c, size_t dim_k, size_t desc_k) {
  Value x = c.t(0);
  if (x.rank() == 0) return V{x, c.b.constant_i(0, c.out(1))};
  int64_t dim = wrap_dim(c.has(dim_k) ? c.i(dim_k) : -1, x.rank());
  bool desc = c.has(desc_k) && c.i(desc_k);
  if (x.type.numel() == 0) return V{x, c.b.constant_i(0, c.out(1))};
  auto [v, i] = sorted_prefix(c.b, x, dim, desc, x.dims()[dim]);
  return V{v, i};
}

V topk(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  const int64_t k = c.i(1);
  if (x.rank() == 0) return V{x, b.constant_i(0, c.out(1))};
  int64_t dim = wrap_dim(c.has(2) ? c.i(2) : -1, x.rank());
  bool largest = !c.has(3) || c.i(3);
  if (numel(c.out_dims(0)) == 0) return V{b.constant(0, c.out(0)), b.constant_i(0, c.out(1))};
  auto [v, i] = sorted_prefix(b, x, dim, largest, k);
  return V{v, i};
}

// self.flatten()[index] (take) and its scatter (put): indices address the flattened self.
IndexCheck flat_check(int64_t n, bool write) {
  IndexCheck how;
  how.write = write;
  how.message = "out of range: tried to access index {value} on a tensor of " + std::to_string(n) + " elements.";
  return how;
}

Value take(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0), index = c.t(1);
  const int64_t n = x.type.numel(), k = index.type.numel();
  if (k == 0) return b.constant(0, c.out());
  GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  Value idx = b.reshape(wrap_index(b, index, n, flat_check(n, false)), {k, 1});
  return b.reshape(b.gather(b.reshape(x, {n}), idx, g, {1}, {k}), c.out_dims());
}

Value put(Ctx& c) {
  Builder& b = c.b;
  Value x = b.convert(c.t(0), c.out_type());
  Value index = c.t(1), src = b.convert(c.t(2), c.out_type());
  const bool accumulate = c.has(3) && c.i(3);
  const int64_t n = x.type.numel(), k = index.type.numel();
  if (k == 0 || n == 0) return x;
  if (src.type.numel() != k) throw hlo::Error("put: source and index differ in size");
  ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  Value idx = b.reshape(wrap_index(b, index, n, flat_check(n, true)), {k, 1});
  Value r = b.scatter(b.reshape(x, {n}), idx, b.reshape(src, {k}), s,
                      body_of(accumulate ? combiner("add", x.elem()) : ""));
  return b.reshape(r, c.out_dims());
}

// index_reduce(self, dim, index, source, reduce, *, include_self): self's slices at index combined
// with source's slices (prod, amax, amin, mean); without include_self the indexed slices start from
// the reduction's identity.
Value index_reduce(Ctx& c) {
  Builder& b = c.b;
  ElementType t = c.out_type();
  Value self = b.convert(c.t(0), t), index = c.t(2), src = b.convert(c.t(3), t);
  const std::string red = c.arg(4).s;
  const bool include_self = !c.has(5) || c.i(5);
  if (self.rank() == 0) self = b.reshape(self, {1});
  if (src.rank() == 0) src = b.reshape(src, {1});
  int64_t dim = wrap_dim(c.i(1), self.rank());
  const int64_t n = index.type.numel();
  if (n == 0 || self.type.numel() == 0) return b.reshape(self, c.out_dims());
  if (!pjrt::is_integral(index.elem())) throw hlo::Error("index_reduce: integer index expected");
  Value idx = b.reshape(wrap_index(b, b.reshape(index, {n}), self.dims()[dim], in_self(true)), {n, 1});
  Dims ud = self.dims();
  ud[dim] = n;
  src = b.reshape(src, ud);
  hlo::ScatterDims s;
  for (int64_t i = 0; i < self.rank(); ++i)
    if (i != dim) s.update_window_dims.push_back(i);
  s.inserted_window_dims = {dim};
  s.scatter_dims_to_operand_dims = {dim};
  s.index_vector_dim = 1;
  auto scatter = [&](Value into, Value upd, const char* op) {
    std::string o = op;
    return b.scatter(into, idx, upd, s, [o](Builder& bb, const V& a) {
      return V{o.empty() ? a[1] : bb.binary(o.c_str(), a[0], a[1])};
    });
  };
  const char* op;
  Value init;
  if (red == "prod") {
    op = "multiply";
    init = b.scalar(1, t);
  } else if (red == "amax") {
    op = "maximum";
    init = lowest(b, t);
  } else if (red == "amin") {
    op = "minimum";
    init = highest(b, t);
  } else if (red == "mean") {
    op = "add";
    init = b.scalar(0, t);
  } else {
    throw hlo::Error("index_reduce: unknown reduction");
  }
  if (!include_self) self = scatter(self, b.broadcast_to(init, ud), "");
  Value r = scatter(self, src, op);
  if (red == "mean") {
    Value cnt = b.constant(include_self ? 1 : 0, self.type);
    cnt = scatter(cnt, b.constant(1, Type{t, ud}), "add");
    cnt = b.select(b.compare(Cmp::EQ, cnt, like(b, 0, cnt)), like(b, 1, cnt), cnt);
    if (pjrt::is_integral(t)) {
      Value q = div(b, r, cnt), rem = b.binary("remainder", r, cnt);
      Value fix = andv(b, b.compare(Cmp::NE, rem, like(b, 0, rem)), b.compare(Cmp::LT, rem, like(b, 0, rem)));
      r = b.select(fix, sub(b, q, like(b, 1, q)), q);
    } else {
      r = div(b, r, cnt);
    }
  }
  return b.reshape(r, c.out_dims());
}

// nonzero_static(self, *, size, fill_value): the coordinates of the first `size` nonzero elements in
// row-major order, padded with fill_value.
Value nonzero_static(Ctx& c) {
  Builder& b = c.b;
  Value x = c.t(0);
  const Dims& od = c.out_dims();
  const int64_t size = od[0], r = od[1], n = x.type.numel();
  Value out = b.constant_i(c.i(2), Type{ElementType::kS64, od});
  if (size == 0 || r == 0 || n == 0) return out;
  Value nz = b.reshape(b.convert(x, ElementType::kPred), {n});
  Value cnt = b.convert(nz, ElementType::kS64);
  // inclusive prefix sum
  for (int64_t shift = 1; shift < n; shift *= 2) {
    Value before = b.slice(b.pad(cnt, b.scalar_i(0, ElementType::kS64), {shift}, {0}, {0}), {0}, {n}, {1});
    cnt = add(b, cnt, before);
  }
  Value pos = sub(b, cnt, b.constant_i(1, cnt.type));
  pos = b.select(nz, pos, b.constant_i(size, pos.type));  // zeros go out of range: dropped
  V coords;
  for (int64_t i = 0; i < r; ++i) coords.push_back(b.reshape(b.iota(Type{ElementType::kS64, x.dims()}, i), {n, 1}));
  Value upd = b.concatenate(coords, 1);  // [n, r]
  hlo::ScatterDims s{{1}, {0}, {0}, 1};
  return b.scatter(out, b.reshape(pos, {n, 1}), upd, s, [](Builder& bb, const V& a) { return V{a[1]}; });
}

const Rows rows = {
    {{"take", "take.out"}, [](Ctx& c) { return one(take(c)); }},
    {{"put", "put_", "put.out"}, [](Ctx& c) { return one(put(c)); }},
    {{"index_select", "index_select.out"}, [](Ctx& c) {
       Value x = c.t(0);
       int64_t dim = dim_arg(c, 1, x);
       return one(c.b.reshape(index_select(c.b, as_vector(c.b, x), dim, c.t(2)), c.out_dims()));
     }},
    {{"gather", "gather.out"}, [](Ctx& c) {
       Value x = c.t(0), index = c.t(2);
       int64_t dim = dim_arg(c, 1, x);
       if (x.rank() == 0) {
         x = as_vector(c.b, x);
         index = as_vector(c.b, index);
       }
       if (numel(c.out_dims()) == 0) return one(c.b.constant(0, c.out()));  // an empty index of any rank
       if (index.rank() != x.rank()) throw hlo::Error("gather: index rank differs from self");
       return one(c.b.reshape(gather_dim(c.b, x, dim, index), c.out_dims()));
     }},
    {{"scatter.src", "scatter_.src", "scatter.src_out"}, [](Ctx& c) { return one(scatter_row(c, c.t(3), "")); }},
    {{"scatter.value", "scatter_.value", "scatter.value_out"}, [](Ctx& c) {
       return one(scatter_row(c, value_updates(c, 3), ""));
     }},
    {{"scatter.reduce", "scatter_.reduce", "scatter.reduce_out"}, [](Ctx& c) {
       return one(scatter_row(c, c.t(3), c.arg(4).s));
     }},
    {{"scatter.value_reduce", "scatter_.value_reduce", "scatter.value_reduce_out"}, [](Ctx& c) {
       return one(scatter_row(c, value_updates(c, 3), c.arg(4).s));
     }},
    {{"scatter_add", "scatter_add_", "scatter_add.out"}, [](Ctx& c) { return one(scatter_row(c, c.t(3), "add")); }},
    {{"scatter_reduce.two", "scatter_reduce_.two", "scatter_reduce.two_out"}, [](Ctx& c) {
       return one(scatter_reduce_two(c));
     }},
    {{"index_add", "index_add_", "index_add.out"}, [](Ctx& c) {
       Value src = c.b.convert(c.t(3), c.out_type());
       if (c.has(4)) {
         Value alpha = c.b.broadcast_to(operand(c, 4, c.out_type(), {}), src.dims());
         src = c.b.binary(c.out_type() == ElementType::kPred ? "and" : "multiply", src, alpha);
       }
       // the CPU kernel words a bad index by its path: a scatter_add along the first or last dim of a
       // tensor of 2 or more dims, else a loop over slices, which words it as index_select does
       const int64_t rank = c.t(0).rank(), dim = rank ? wrap_dim(c.i(1), rank) : 0;
       const bool scatter_path = rank > 1 && (dim == 0 || dim == rank - 1);
       return one(index_row(c, src, combiner("add", c.out_type()), scatter_path ? dim_check(0, true) : in_self(true)));
     }},
    {{"index_copy", "index_copy_", "index_copy.out"}, [](Ctx& c) {
       IndexCheck how;
       how.wrap = false, how.prefix = "index_copy_(): ";
       return one(index_row(c, c.t(3), "", how));
     }},
    {{"index_fill.int_Scalar", "index_fill_.int_Scalar", "index_fill.int_Scalar_out"}, [](Ctx& c) {
       return one(index_fill(c));
     }},
    {{"index_fill.int_Tensor", "index_fill_.int_Tensor", "index_fill.int_Tensor_out"}, [](Ctx& c) {
       return one(index_fill(c));
     }},
    {{"index.Tensor", "index.Tensor_out"}, [](Ctx& c) { return one(index_tensor(c)); }},
    {{"_unsafe_index.Tensor"}, [](Ctx& c) { return one(index_tensor(c)); }},
    {{"index_put", "index_put_", "index_put.out"}, [](Ctx& c) { return one(index_put(c, c.has(3) && c.i(3))); }},
    {{"_index_put_impl", "_index_put_impl_", "_index_put_impl.out"}, [](Ctx& c) {
       return one(index_put(c, c.has(3) && c.i(3)));
     }},
    {{"_unsafe_index_put"}, [](Ctx& c) { return one(index_put(c, c.has(3) && c.i(3))); }},
    {{"masked_scatter", "masked_scatter_", "masked_scatter.out"}, [](Ctx& c) { return one(masked_scatter(c)); }},
    {{"constant_pad_nd", "constant_pad_nd.out"}, [](Ctx& c) { return one(constant_pad_nd(c)); }},
    {{"flip", "flip.out"}, [](Ctx& c) {
       Value x = c.t(0);
       Dims dims;
       for (int64_t d : c.ints(1)) dims.push_back(wrap_dim(d, x.rank()));
       if (x.rank() == 0) return one(x);
       return one(c.b.reverse(x, dims));
     }},
    {{"roll", "roll.out"}, [](Ctx& c) { return one(roll(c)); }},
    {{"repeat", "repeat.out"}, [](Ctx& c) { return one(repeat(c)); }},
    {{"tril", "tril_", "tril.out"}, [](Ctx& c) { return one(triangle(c, true)); }},
    {{"triu", "triu_", "triu.out"}, [](Ctx& c) { return one(triangle(c, false)); }},
    {{"sort.stable", "sort.values_stable"}, [](Ctx& c) { return sort_row(c, 2, 3); }},
    {{"sort", "sort.values"}, [](Ctx& c) { return sort_row(c, 1, 2); }},
    {{"topk", "topk.values"}, [](Ctx& c) { return topk(c); }},
    {{"index_reduce", "index_reduce_", "index_reduce.out"}, [](Ctx& c) { return one(index_reduce(c)); }},
    {{"nonzero_static", "nonzero_static.out"}, [](Ctx& c) { return one(nonzero_static(c)); }},
};

}  // namespace
}  // namespace lowering
