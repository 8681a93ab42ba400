// The device generator: (seed, offset). Every random op takes the pair as a ui64[2] program argument
// (the state of stablehlo.rng_bit_generator) and advances the offset, so the same seed gives the same
// numbers and consecutive calls differ.
#pragma once

#include <ATen/core/Generator.h>

#include <optional>

#include "pjrt/runtime.h"

namespace torch_pjrt {

const at::Generator& default_generator(int device);
at::Generator new_generator(int device);
// The state for the next random op (advances the generator).
pjrt::BufferPtr next_rng_state(int device, const std::optional<at::Generator>& gen);

}  // namespace torch_pjrt
