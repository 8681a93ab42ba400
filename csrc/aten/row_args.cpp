#include "aten/row_args.h"

#include <ATen/ops/empty.h>

#include <cstring>

#include "aten/storage.h"

namespace torch_pjrt {

using lowering::Arg;
using pjrt::ElementType;

ArgKind kind_of(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return ArgKind::kTensor;
    case c10::TypeKind::NumberType: return ArgKind::kScalar;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return ArgKind::kInt;
    case c10::TypeKind::FloatType: return ArgKind::kDouble;
    case c10::TypeKind::BoolType: return ArgKind::kBool;
    case c10::TypeKind::StringType: return ArgKind::kString;
    case c10::TypeKind::ScalarTypeType: return ArgKind::kDtype;
    case c10::TypeKind::DeviceObjType: return ArgKind::kDevice;
    case c10::TypeKind::ListType: {
      c10::TypePtr e = t->cast<c10::ListType>()->getElementType();
      if (auto opt = e->cast<c10::OptionalType>()) e = opt->getElementType();
      if (e->kind() == c10::TypeKind::TensorType) return ArgKind::kTensorList;
      if (e->kind() == c10::TypeKind::NumberType) return ArgKind::kScalarList;
      return ArgKind::kIntList;
    }
    default: return ArgKind::kIgnored;
  }
}

int64_t scalar_kind(const c10::Scalar& s) {
  if (s.isComplex()) return static_cast<int64_t>(ElementType::kC128);
  if (s.isFloatingPoint()) return static_cast<int64_t>(ElementType::kF64);
  if (s.isBoolean()) return static_cast<int64_t>(ElementType::kPred);
  return static_cast<int64_t>(ElementType::kS64);
}

int64_t list_item(const c10::IValue& e) {
  if (e.isInt()) return e.toInt();
  if (e.isBool()) return e.toBool();
  if (e.isDouble()) {
    double d = e.toDouble();
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    return bits;
  }
  return e.toSymInt().guard_int(__FILE__, __LINE__);
}

Arg row_arg(const c10::IValue& v, ArgKind kind, unsigned row_flags, int index, const ArgSources& src) {
  Arg a;
  if (v.isNone()) return a;
  switch (kind) {
    case ArgKind::kTensor: {
      const at::Tensor& t = v.toTensor();
      if (t.defined()) a = src.tensor(t, index, -1);
      break;
    }
    case ArgKind::kTensorList: {
      a.kind = Arg::kTensorList;
      std::vector<at::Tensor> items;
      if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList()) items.push_back(t);
      } else {
        for (const std::optional<at::Tensor> t : v.toOptionalTensorList()) items.push_back(t ? *t : at::Tensor());
      }
      for (size_t k = 0; k < items.size(); ++k)
        a.list.push_back(items[k].defined() ? src.tensor(items[k], index, static_cast<int>(k)).value : hlo::Value{});
      break;
    }
    case ArgKind::kScalar: {
      c10::Scalar sc = v.toScalar();
      a.kind = Arg::kScalar;
      a.weak = true;
      a.scalar_type = static_cast<ElementType>(scalar_kind(sc));
      if (row_flags & lowering::kBakeScalars) {
        a.d = sc.isComplex() ? sc.toComplexDouble().real() : sc.toDouble();
        auto z = sc.toComplexDouble();
        a.c = std::complex<double>(z.real(), z.imag());
        if (sc.isIntegral(false)) a.i = sc.toLong();
        if (sc.isBoolean()) a.i = sc.toBool();
      } else {
        a.value = src.scalar(a.scalar_type, sc, index, -1);
      }
      break;
    }
    case ArgKind::kScalarList: {
      a.kind = Arg::kTensorList;
      a.weak = true;
      auto list = v.toListRef();
      for (size_t k = 0; k < list.size(); ++k) {
        c10::Scalar sc = list[k].toScalar();
        a.list.push_back(src.scalar(static_cast<ElementType>(scalar_kind(sc)), sc, index, static_cast<int>(k)));
      }
      break;
    }
    case ArgKind::kInt:
      a.kind = Arg::kInt;
      a.i = v.toInt();
      break;
    case ArgKind::kBool:
      a.kind = Arg::kBool;
      a.i = v.toBool();
      break;
    case ArgKind::kDtype:
      a.kind = Arg::kDtype;
      a.scalar_type = element_type(static_cast<at::ScalarType>(v.toInt()));
      break;
    case ArgKind::kIntList:
      a.kind = Arg::kInts;
      for (const auto& e : v.toListRef()) a.ints.push_back(list_item(e));
      break;
    case ArgKind::kDouble:
      if (row_flags & lowering::kRuntimeFloats) {
        a.kind = Arg::kScalar;
        a.scalar_type = ElementType::kF64;
        a.value = src.scalar(ElementType::kF64, c10::Scalar(v.toDouble()), index, -1);
        break;
      }
      a.kind = Arg::kDouble;
      a.d = v.toDouble();
      break;
    case ArgKind::kString:
      a.kind = Arg::kString;
      a.s = v.toStringRef();
      break;
    default: break;
  }
  return a;
}

void convert_results(hlo::Builder& b, std::vector<hlo::Value>& results, const std::vector<pjrt::TensorSpec>& outs,
                     const std::string& name) {
  if (results.size() != outs.size())
    throw hlo::Error(name + ": lowering returned " + std::to_string(results.size()) + " results, expected " +
                     std::to_string(outs.size()));
  for (size_t r = 0; r < results.size(); ++r) {
    if (outs[r].type == ElementType::kInvalid) continue;
    if (results[r].dims() != outs[r].dims)
      throw hlo::Error(name + ": lowering produced " + results[r].type.str() + ", expected " + outs[r].str());
    results[r] = b.convert(results[r], outs[r].type);
  }
}

c10::IValue to_meta(const c10::IValue& v, ArgKind kind, MetaBases& bases) {
  auto meta_tensor = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return t;
    auto k = std::make_pair(static_cast<void*>(t.storage().unsafeGetStorageImpl()),
                            static_cast<int>(t.scalar_type()));
    int64_t item = static_cast<int64_t>(t.element_size());
    int64_t need = t.storage().nbytes() / item;
    if (t.numel() > 0) {
      int64_t extent = t.storage_offset() + 1;
      for (int64_t d = 0; d < t.dim(); ++d) extent += (t.size(d) - 1) * t.stride(d);
      need = std::max(need, extent);
    }
    auto it = bases.find(k);
    if (it == bases.end() || it->second.numel() < need) {
      it = bases.insert_or_assign(k, at::empty({need}, t.options().device(c10::kMeta))).first;
    }
    return it->second.as_strided(t.sizes(), t.strides(), t.storage_offset());
  };
  if (v.isNone()) return v;
  switch (kind) {
    case ArgKind::kTensor: return meta_tensor(v.toTensor());
    case ArgKind::kTensorList: {
      if (v.isTensorList()) {
        c10::List<at::Tensor> out;
        for (const at::Tensor& t : v.toTensorList()) out.push_back(meta_tensor(t));
        return out;
      }
      c10::List<std::optional<at::Tensor>> out;
      for (const std::optional<at::Tensor> t : v.toOptionalTensorList())
        out.push_back(t.has_value() ? std::optional<at::Tensor>(meta_tensor(*t)) : std::nullopt);
      return out;
    }
    case ArgKind::kDevice: return c10::Device(c10::kMeta);
    default: return v;
  }
}

}  // namespace torch_pjrt
