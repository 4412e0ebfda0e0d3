// The vector loops of kernels/ref/quantize.cc that other 8-bit kernels reuse, and the rules
// they share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

// DynamicQuantizeLinear's u8 scale and zero point of a range [mn, mx] that holds 0: scale
// (mx - mn) / top (1 / top for an empty range), zero point round(clamp(-mn / scale, 0, top)), top
// 255 (or 127: DynamicQuantMatMul's 7-bit rows). Its per-tensor kernel and DynamicQuantMatMul's
// rows use it.
inline void dynamic_u8_params(float mn, float mx, float* scale, float* zero_point, float top = 255.0f) {
  *scale = (mx == mn ? 1.0f : (mx - mn)) / top;
  *zero_point = std::nearbyint(std::min(top, std::max(0.0f, 0.0f - mn / *scale)));
}

// A per-tensor quantization parameter of an 8-bit op (QLinearAdd/Mul/Sigmoid): `t` (input i,
// null when absent) holds one value, a float32 scale (required) or a zero point of `type`
// (absent: 0). Its value, or an error naming the input.
Result<float> per_tensor_parameter(const Tensor* t, size_t i, bool scale, DType type);

// QuantizeLinear's per-tensor rule on x[0, n): y = saturate(round_half_even(x / scale) +
// zero_point), u8 or (to_int8) s8, NaN to the lowest code; the vector loops of its kernel, so the
// same codes bit for bit (the 8-bit conv quantizes a float X with it while staging).
void quantize_row_8bit(const float* x, int64_t n, float scale, int32_t zero_point, bool to_int8, void* y);

// DynamicQuantMatMul's rule for one row x[0, n) (docs/ops.md): the u8 scale and zero point of
// its range with 0 included (NaN skipped), as DynamicQuantizeLinear's, and
// y = saturate(round_half_even(x * (1 / scale)) + zero_point), 32 at a time, codes in [0, top]:
// 255, or 127 for its 7-bit rows (row_bits 7).
void dynamic_quantize_row_u8(const float* x, int64_t n, uint8_t* y, float* scale, int32_t* zero_point, int top = 255);

}  // namespace kiln
