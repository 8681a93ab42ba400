#include "pjrt/element_type.h"

namespace pjrt {

size_t byte_size(ElementType t) {
  switch (t) {
    case ElementType::kPred:
    case ElementType::kS8:
    case ElementType::kU8:
      return 1;
    case ElementType::kS16:
    case ElementType::kU16:
    case ElementType::kF16:
    case ElementType::kBF16:
      return 2;
    case ElementType::kS32:
    case ElementType::kU32:
    case ElementType::kF32:
      return 4;
    case ElementType::kS64:
    case ElementType::kU64:
    case ElementType::kF64:
    case ElementType::kC64:
      return 8;
    case ElementType::kC128:
      return 16;
    default:
      return 0;
  }
}

std::string_view mlir_name(ElementType t) {
  switch (t) {
    case ElementType::kPred: return "i1";
    case ElementType::kS8: return "i8";
    case ElementType::kS16: return "i16";
    case ElementType::kS32: return "i32";
    case ElementType::kS64: return "i64";
    case ElementType::kU8: return "ui8";
    case ElementType::kU16: return "ui16";
    case ElementType::kU32: return "ui32";
    case ElementType::kU64: return "ui64";
    case ElementType::kF16: return "f16";
    case ElementType::kF32: return "f32";
    case ElementType::kF64: return "f64";
    case ElementType::kBF16: return "bf16";
    case ElementType::kC64: return "complex<f32>";
    case ElementType::kC128: return "complex<f64>";
    default: return "invalid";
  }
}

bool is_float(ElementType t) {
  return t == ElementType::kF16 || t == ElementType::kBF16 || t == ElementType::kF32 ||
         t == ElementType::kF64;
}

bool is_complex(ElementType t) { return t == ElementType::kC64 || t == ElementType::kC128; }

bool is_signed_int(ElementType t) {
  return t == ElementType::kS8 || t == ElementType::kS16 || t == ElementType::kS32 ||
         t == ElementType::kS64;
}

bool is_unsigned_int(ElementType t) {
  return t == ElementType::kU8 || t == ElementType::kU16 || t == ElementType::kU32 ||
         t == ElementType::kU64;
}

ElementType real_type(ElementType t) {
  if (t == ElementType::kC64) return ElementType::kF32;
  if (t == ElementType::kC128) return ElementType::kF64;
  return t;
}

}  // namespace pjrt
