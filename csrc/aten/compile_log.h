// Why each program was built (issue: "no surprise compiles"). Every program new to this process (compiled
// by the plugin or loaded from the disk cache) is noted with its op and the parts of its cache key, as
// fields; the reason is the difference from the op's nearest earlier program (a new shape, dtype, stride,
// offset, storage form or argument), like Dynamo's recompile reasons. TORCH_PJRT_LOG_COMPILES=1 prints a
// line per program; torch_pjrt.compile_report() returns them per op.
#pragma once

#include <ATen/core/stack.h>

#include <string>
#include <vector>

#include "aten/row_args.h"
#include "pjrt/program_cache.h"

namespace torch_pjrt {

struct KeyField {
  std::string name;   // "self shape", "dim", "op 3"
  std::string value;  // "[4, 8]", "1", "aten::mul.Tensor(self: f32[4])"
  const char* kind;   // "shape", "dtype", "stride", "offset", "storage", "argument", "op", "input"
};
using KeyFields = std::vector<KeyField>;

// The fields of an ATen call's key (schema argument `names` and `kinds`, the call's stack from `base`),
// and its short signature ("self: f32[4, 8], other: f32[8], alpha: 1"). `baked_scalars`: the row bakes
// Scalar arguments into the program; `runtime_floats`: it takes float arguments at run time.
KeyFields call_fields(const torch::jit::Stack& stack, size_t base, const std::vector<std::string>& names,
                      const std::vector<ArgKind>& kinds, bool baked_scalars, bool runtime_floats,
                      std::string* signature);

// A tensor's signature: "f32[4, 8]" (with its strides or offset where they are not the plain ones).
std::string tensor_signature(const at::Tensor& t);

// Notes a program built for `op`; does nothing when it was served from memory (an identical program text:
// not a new program). Prints the line under TORCH_PJRT_LOG_COMPILES.
void note_program(const std::string& op, const std::string& signature, KeyFields fields, const pjrt::Served& served);

struct CompileRecord {
  std::string op, signature, reason;
  bool from_disk;
  double seconds;
};
// Every program noted since the start (or reset_compile_report), oldest first (at most the last 20000).
std::vector<CompileRecord> compile_records();
void reset_compile_report();
// TORCH_PJRT_LOG_COMPILES, switchable at run time (torch_pjrt.log_compiles).
void set_log_compiles(bool on);
bool log_compiles();

}  // namespace torch_pjrt
