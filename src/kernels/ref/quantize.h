// The vector loops of kernels/ref/quantize.cc that other 8-bit kernels reuse.
#pragma once

#include <cstdint>

namespace kiln {

// DynamicQuantizeLinear's rule on x[0, n): the u8 scale and zero point of its range with 0
// included (NaN skipped), and y = saturate(round_half_even(x / scale) + zero_point), 32 at a time.
void dynamic_quantize_u8(const float* x, int64_t n, uint8_t* y, float* scale, float* zero_point);

// DynamicQuantMatMul's rule for one row (docs/ops.md): the same scale and zero point, and
// y = saturate(round_half_even(x * (1 / scale)) + zero_point).
void dynamic_quantize_row_u8(const float* x, int64_t n, uint8_t* y, float* scale, int32_t* zero_point);

}  // namespace kiln
