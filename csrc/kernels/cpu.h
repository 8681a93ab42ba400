// The instruction sets the host kernels take: the best the CPU has, capped by TORCH_PJRT_KERNEL_ISA
// (portable|avx2, to test the other paths on any machine). Chosen once, when the process starts.
#pragma once

#include <cstdlib>
#include <string>

namespace kernels {

enum class Isa { kPortable, kAvx2, kAvx512Bf16 };

inline Isa isa() {
  static const Isa chosen = [] {
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    const bool bf16 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bf16");
    const char* cap = std::getenv("TORCH_PJRT_KERNEL_ISA");
    const std::string c = cap ? cap : "";
    if (c == "portable" || !avx2) return Isa::kPortable;
    if (c == "avx2" || !bf16) return Isa::kAvx2;
    return Isa::kAvx512Bf16;
  }();
  return chosen;
}

}  // namespace kernels
