// Element types shared by the pjrt and hlo layers. Values are the PJRT_Buffer_Type numbers, so a
// conversion to the ABI is a cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pjrt {

enum class ElementType : int {
  kInvalid = 0,
  kPred = 1,
  kS8 = 2,
  kS16 = 3,
  kS32 = 4,
  kS64 = 5,
  kU8 = 6,
  kU16 = 7,
  kU32 = 8,
  kU64 = 9,
  kF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kBF16 = 13,
  kC64 = 14,
  kC128 = 15,
};

// Bytes per element; pred is stored as one 0/1 byte.
size_t byte_size(ElementType t);
// The MLIR spelling: i1, i8, ui8, f32, complex<f32>, ...
std::string_view mlir_name(ElementType t);
bool is_float(ElementType t);    // f16, bf16, f32, f64
bool is_complex(ElementType t);  // c64, c128
bool is_signed_int(ElementType t);
bool is_unsigned_int(ElementType t);  // u8..u64 (not pred)
inline bool is_integral(ElementType t) { return is_signed_int(t) || is_unsigned_int(t); }
// The real component type of a complex type (c64 -> f32); the type itself otherwise.
ElementType real_type(ElementType t);

}  // namespace pjrt
