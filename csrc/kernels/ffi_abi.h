// Our own declarations of the subset of XLA's typed-FFI C ABI that torch-pjrt's custom-call handlers use
// (facts only: field order, enum values; the upstream header is deliberately not used).
//
// A handler is `Error* handler(CallFrame*)`. The plugin calls it once when it is registered, with a
// metadata extension in `extension_start` (the handler answers its API version there), then on every
// execution with the operands and results as Buffers. Structs are append-only: later versions add fields
// at the end (the call frame's `future`, for one), so only fields present since 0.1 are read.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kernels::ffi {

struct ExtensionBase {
  size_t struct_size;
  int type;  // 1: metadata
  ExtensionBase* next;
};
inline constexpr int kExtensionMetadata = 1;

enum DataType : int {
  kS16 = 3, kS32 = 4, kS64 = 5, kU16 = 7, kU32 = 8, kU64 = 9, kF16 = 10, kF32 = 11, kF64 = 12, kC64 = 15, kBF16 = 16
};
enum Stage : int { kExecute = 3 };
enum ErrorCode : int { kInvalidArgument = 3, kInternal = 13 };

struct ApiVersion {
  size_t struct_size;
  ExtensionBase* extension_start;
  int major_version;
  int minor_version;
};

struct Metadata {
  size_t struct_size;
  ApiVersion api_version;
  uint32_t traits;
};

struct MetadataExtension {
  ExtensionBase base;
  Metadata* metadata;
};

struct Buffer {
  size_t struct_size;
  ExtensionBase* extension_start;
  DataType dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
};

struct Args {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  int* types;  // 1: buffer
  void** args;
};
inline constexpr int kArgBuffer = 1;

struct Rets {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  int* types;  // 1: buffer
  void** rets;
};

struct Attrs {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  int* types;
  void** names;
  void** attrs;
};

struct Error;

struct ErrorCreateArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  const char* message;
  ErrorCode errc;
};

// The API table: a header, the version, an internal pointer, then the functions; Error_Create first.
struct Api {
  size_t struct_size;
  ExtensionBase* extension_start;
  ApiVersion api_version;
  void* internal_api;
  Error* (*error_create)(ErrorCreateArgs*);
};

struct CallFrame {
  size_t struct_size;
  ExtensionBase* extension_start;
  const Api* api;
  void* ctx;
  Stage stage;
  Args args;
  Rets rets;
  Attrs attrs;
};

using Handler = Error*(CallFrame*);

// The API version our handlers are written against (the oldest typed-FFI version: every field above).
inline constexpr int kApiMajor = 0;
inline constexpr int kApiMinor = 1;

}  // namespace kernels::ffi
