// The vector loops of kernels/ref/quantize.cc that other 8-bit kernels reuse.
#pragma once

#include <cstdint>

namespace kiln {

// DynamicQuantMatMul's rule for one row x[0, n) (docs/ops.md): the u8 scale and zero point of
// its range with 0 included (NaN skipped), as DynamicQuantizeLinear's, and
// y = saturate(round_half_even(x * (1 / scale)) + zero_point), 32 at a time.
void dynamic_quantize_row_u8(const float* x, int64_t n, uint8_t* y, float* scale, int32_t* zero_point);

}  // namespace kiln
