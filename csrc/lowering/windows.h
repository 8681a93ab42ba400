// Window sums shared by the pooling rows (nn.cpp's 2-d pooling and pooling.cpp's N-d pooling); defined
// in pooling.cpp.
#pragma once

#include <utility>
#include <vector>

#include "lowering/table.h"

namespace lowering {

// Sums of x over windows (zero init, unit dilations).
Value window_sum(Builder& b, Value x, const Dims& window, const Dims& strides,
                 const std::vector<std::pair<int64_t, int64_t>>& padding);

// avg_pool's backward once the gradient g is divided by the divisors: every input element gets the sum
// over the windows that hold it (a window sum over the stride-dilated gradient; negative padding crops).
// Spatial dims start at `lead`; `in` and `out` are the spatial sizes of the input and of g.
Value avg_pool_backward_sum(Builder& b, Value g, int64_t lead, const Dims& kernel, const Dims& stride,
                            const Dims& padding, const Dims& in, const Dims& out);

}  // namespace lowering
