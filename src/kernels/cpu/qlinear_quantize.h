// The vector loops of QuantizeLinear and DynamicQuantizeLinear (float32 to 8 bits, one scale and
// zero point) on 16 lanes, for CPUs with AVX-512 (kernels/ref/quantize.cc runs its 8-lane loops
// elsewhere): the same results, bit for bit.
#pragma once

#include <cstdint>

namespace kiln::qlinear {

// min(0, x...) and max(0, x...) over x[0, n), NaN skipped.
void range_with_zero_avx512(const float* x, int64_t n, float* mn, float* mx);

// y = saturate(round_half_even(x / scale) + zp) into [0, 255] (int8: [-128, 127]); NaN gives the
// lower end. A multiply by 1 / scale stands in for the division where it gives the same code
// (quantize.cc's quantize_8bit says when).
void quantize_avx512(const float* x, int64_t n, float scale, float zp, bool to_int8, void* y);

}  // namespace kiln::qlinear
