// A tiny protobuf writer for xla.CompileOptionsProto (field numbers in shared/research/pjrt.md §2.6).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pjrt {

struct CompileOptions {
  int64_t num_replicas = 1;  // never 0: the compiler CHECK-fails on empty options
  int64_t num_partitions = 1;
  bool portable = true;  // one executable for every device, chosen at execute time
  // A program of one replica per entry, replica i on the device of id replica_devices[i] (a collective
  // program): sets num_replicas, a device assignment, and makes the executable not portable.
  std::vector<int64_t> replica_devices;
  // Compiler settings (DebugOptions fields by name: CompileOptionsProto's env_option_overrides).
  std::map<std::string, bool> overrides;
};

// What every program is compiled with: xla_allow_excess_precision off, so that a bfloat16 or float16
// value the program rounds (a convert, an op's half-precision result) is rounded, as torch rounds it,
// even where XLA fuses it with the ops around it (with it on, fused eager's exp(x).float() on a
// bfloat16 x kept exp's float32 bits).
CompileOptions default_compile_options();

std::string encode_compile_options(const CompileOptions& options);

}  // namespace pjrt
