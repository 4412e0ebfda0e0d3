// The vector loops of kernels/ref/quantize.cc that other 8-bit kernels reuse.
#pragma once

#include <cstdint>

namespace kiln {

// min(0, x...) and max(0, x...), NaN skipped (DynamicQuantizeLinear's range).
void zero_inclusive_range(const float* x, int64_t n, float* mn, float* mx);
// y = saturate(round_half_even(x / scale) + zp) into [0, 255], 32 at a time.
void quantize_u8(const float* x, int64_t n, float scale, float zp, uint8_t* y);

}  // namespace kiln
