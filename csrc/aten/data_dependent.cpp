// Ops whose result shape depends on values (nonzero, masked_select): a first program counts on the
// device, the count is synchronized to the host (these ops are sync points), then a second program of
// the now-known shape computes the result. Selection is a stable sort of keys that put selected
// positions first in their original order, then a slice: no scan, no host loop.
#include <ATen/ops/empty.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include "aten/errors.h"
#include "aten/program.h"
#include "aten/storage.h"
#include "aten/table_kernel.h"

namespace torch_pjrt {
namespace {

using hlo::Builder;
using hlo::Type;
using hlo::Value;
using pjrt::ElementType;

// The tensor's value as a dense buffer; a never-written storage becomes zeros of the right shape.
pjrt::BufferPtr dense(const at::Tensor& t) {
  pjrt::BufferPtr b = dense_buffer(t);
  if (b) return b;
  std::vector<int64_t> dims(t.sizes().begin(), t.sizes().end());
  return run_program("zeros", t.device().index(), {}, [&](Builder& bb, const std::vector<Value>&) {
    return std::vector<Value>{bb.constant(0, Type{element_type(t.scalar_type()), dims})};
  })[0];
}

Value flat_nonzero(Builder& b, Value x) {
  Value flat = b.reshape(x, {x.type.numel()});
  return b.compare(hlo::Cmp::NE, flat, b.constant(0, flat.type));
}

int64_t count_nonzero(const at::Tensor& t, const pjrt::BufferPtr& buf) {
  auto out = run_program("nonzero_count", t.device().index(), {buf.get()}, [](Builder& b, const std::vector<Value>& a) {
    Value m = b.convert(flat_nonzero(b, a[0]), ElementType::kS64);
    return std::vector<Value>{b.reduce(
        {m}, {b.scalar_i(0, ElementType::kS64)}, {0},
        [](Builder& bb, const std::vector<Value>& v) { return std::vector<Value>{bb.binary("add", v[0], v[1])}; })[0]};
  });
  int64_t n = 0;
  guarded("nonzero_count", [&] { out[0]->to_host(&n); });
  return n;
}

// Flat positions of the first k nonzero elements of x, in order (s64 [k]).
Value selected_positions(Builder& b, Value x, int64_t k) {
  const int64_t n = x.type.numel();
  Value m = flat_nonzero(b, x);
  Value iota = b.iota(Type{ElementType::kS64, {n}}, 0);
  Value key = b.select(m, iota, b.binary("add", iota, b.constant_i(n, iota.type)));
  Value sorted = b.sort({key}, 0, true, [](Builder& bb, const std::vector<Value>& v) {
    return std::vector<Value>{bb.compare(hlo::Cmp::LT, v[0], v[1])};
  })[0];
  return b.slice(sorted, {0}, {k}, {1});
}

at::Tensor nonzero(const at::Tensor& self) {
  pjrt::BufferPtr buf = dense(self);
  const int64_t k = count_nonzero(self, buf);
  const int64_t rank = self.dim();
  if (k == 0 || self.numel() == 0) return at::empty({0, rank}, self.options().dtype(at::kLong));
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  auto out = run_program("nonzero", self.device().index(), {buf.get()}, [&](Builder& b, const std::vector<Value>& a) {
    Value pos = selected_positions(b, a[0], k);
    std::vector<Value> coords;
    int64_t stride = 1;
    std::vector<int64_t> strides(rank);
    for (int64_t d = rank - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= sizes[d];
    }
    for (int64_t d = 0; d < rank; ++d) {
      Value q = b.binary("divide", pos, b.constant_i(strides[d], pos.type));
      Value c = b.binary("remainder", q, b.constant_i(sizes[d], pos.type));
      coords.push_back(b.reshape(c, {k, 1}));
    }
    if (coords.empty()) return std::vector<Value>{b.constant_i(0, Type{ElementType::kS64, {k, 0}})};
    return std::vector<Value>{b.concatenate(coords, 1)};
  });
  return wrap_buffer(out[0], {k, rank}, at::kLong);
}

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  at::Tensor r = nonzero(self);
  out.resize_(r.sizes());
  out.copy_(r);
  return out;
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  auto shape = at::infer_size(self.sizes(), mask.sizes());
  at::Tensor s = self.expand(shape), m = mask.expand(shape);
  pjrt::BufferPtr mbuf = dense(m), sbuf = dense(s);
  const int64_t k = count_nonzero(m, mbuf);
  if (k == 0) return at::empty({0}, self.options());
  auto out = run_program("masked_select", self.device().index(), {sbuf.get(), mbuf.get()},
                         [&](Builder& b, const std::vector<Value>& a) {
                           Value pos = selected_positions(b, a[1], k);
                           Value flat = b.reshape(a[0], {a[0].type.numel()});
                           hlo::GatherDims dn{{}, {0}, {0}, 1};
                           return std::vector<Value>{b.gather(flat, b.reshape(pos, {k, 1}), dn, {1}, {k})};
                         });
  return wrap_buffer(out[0], {k}, self.scalar_type());
}

// As the CPU kernel: the result may not overlap its inputs at all (assert_no_overlap), nor itself.
at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "masked_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  at::Tensor r = masked_select(self, mask);
  out.resize_(r.sizes());
  out.copy_(r);
  return out;
}

// Boolean (and uint8) masks among advanced indices become the long indices of their true elements, as
// torch does before indexing; the rows then see only integer indices, whose shapes are static. Indices
// on the CPU move to the device, as torch allows for accelerators.
c10::List<std::optional<at::Tensor>> expand_masks(const c10::List<std::optional<at::Tensor>>& given,
                                                  const c10::Device& device, bool* any) {
  c10::List<std::optional<at::Tensor>> indices, out;
  *any = false;
  for (const std::optional<at::Tensor> idx : given) {
    if (idx.has_value() && idx->defined() && idx->device() != device) {
      indices.push_back(idx->to(device));
      *any = true;
    } else {
      indices.push_back(idx);
    }
  }
  for (const std::optional<at::Tensor> idx : indices) {
    if (idx.has_value() && idx->defined() && (idx->scalar_type() == at::kBool || idx->scalar_type() == at::kByte)) {
      *any = true;
      at::Tensor nz = nonzero(*idx);
      for (int64_t d = 0; d < idx->dim(); ++d) out.push_back(nz.select(1, d));
    } else {
      out.push_back(idx);
    }
  }
  return out;
}

// The kernel of an indexing overload whose argument 1 is `Tensor?[] indices`: masks expanded, then the row.
// `x[mask] = value` with one mask and a one-element value is a select in the row: no sync needed.
bool single_mask_fill(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t n) {
  if (op.schema().name() == "aten::index") return false;
  auto indices = stack[stack.size() - n + 1].toOptionalTensorList();
  if (indices.size() != 1) return false;
  std::optional<at::Tensor> mask = indices.get(0);
  const at::Tensor& values = stack[stack.size() - n + 2].toTensor();
  return mask.has_value() && mask->scalar_type() == at::kBool && mask->device() == values.device() &&
         values.numel() == 1;
}

template <const char* kOverload>
void with_expanded_masks(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  if (single_mask_fill(op, *stack, n)) return call_row(kOverload, stack);
  c10::IValue& indices = (*stack)[stack->size() - n + 1];
  bool any = false;
  auto expanded = expand_masks(indices.toOptionalTensorList(), (*stack)[stack->size() - n].toTensor().device(), &any);
  if (any) indices = expanded;
  call_row(kOverload, stack);
}

constexpr char kIndex[] = "index.Tensor";
constexpr char kIndexPut[] = "index_put";
constexpr char kIndexPutInplace[] = "index_put_";
constexpr char kIndexPutImpl[] = "_index_put_impl_";

}  // namespace

const std::set<std::string>& data_dependent_overloads() {
  static const std::set<std::string> names = {kIndex, kIndexPut, kIndexPutInplace, kIndexPutImpl};
  return names;
}

void register_data_dependent_kernels(torch::Library& m) {
  m.impl("nonzero", nonzero);
  m.impl("nonzero.out", nonzero_out);
  m.impl("masked_select", masked_select);
  m.impl("masked_select.out", masked_select_out);
  m.impl(kIndex, torch::CppFunction::makeFromBoxedFunction<&with_expanded_masks<kIndex>>());
  m.impl(kIndexPut, torch::CppFunction::makeFromBoxedFunction<&with_expanded_masks<kIndexPut>>());
  m.impl(kIndexPutInplace, torch::CppFunction::makeFromBoxedFunction<&with_expanded_masks<kIndexPutInplace>>());
  m.impl(kIndexPutImpl, torch::CppFunction::makeFromBoxedFunction<&with_expanded_masks<kIndexPutImpl>>());
}

}  // namespace torch_pjrt
