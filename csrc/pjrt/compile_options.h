// A tiny protobuf writer for xla.CompileOptionsProto (field numbers in shared/research/pjrt.md §2.6).
#pragma once

#include <cstdint>
#include <string>

namespace pjrt {

struct CompileOptions {
  int64_t num_replicas = 1;  // never 0: the compiler CHECK-fails on empty options
  int64_t num_partitions = 1;
  bool portable = true;  // one executable for every device, chosen at execute time
};

std::string encode_compile_options(const CompileOptions& options);

}  // namespace pjrt
