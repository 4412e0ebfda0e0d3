// Head packing for the attention kernel (baseline AVX2 flags): 8x8 transposes in registers for
// the transposed layouts, whole-vector copies for V's panels, scalar loops only at the edges.
#include "kernels/cpu/attention/pack_heads.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::attention {
namespace {

}  // namespace

void pack_transposed(const float* src, int64_t stride, int64_t rows, int64_t dim, int64_t width,
                     float* dst, int64_t ld) {
  const int64_t rows8 = rows / 8 * 8, dim8 = dim / 8 * 8;
  for (int64_t i = 0; i < rows8; i += 8) {
    for (int64_t c = 0; c < dim8; c += 8)
      vec::transpose_8x8_avx2(src + i * stride + c, stride, dst + c * ld + i, ld);
    for (int64_t c = dim8; c < dim; ++c)
      for (int64_t k = 0; k < 8; ++k) dst[c * ld + i + k] = src[(i + k) * stride + c];
  }
  for (int64_t i = rows8; i < rows; ++i)
    for (int64_t c = 0; c < dim; ++c) dst[c * ld + i] = src[i * stride + c];
  for (int64_t c = 0; c < dim; ++c) std::fill(dst + c * ld + rows, dst + c * ld + width, 0.0f);
}

void pack_v_panels(const float* src, int64_t stride, int64_t tokens, int64_t dim, int64_t mr,
                   float* dst) {
  for (int64_t c0 = 0; c0 < dim; c0 += mr, dst += tokens * mr) {
    const int64_t n = std::min(mr, dim - c0);
    if (n == 8 && mr == 8) {
      for (int64_t p = 0; p < tokens; ++p)
        _mm256_storeu_ps(dst + p * 8, _mm256_loadu_ps(src + p * stride + c0));
      continue;
    }
    for (int64_t p = 0; p < tokens; ++p) {
      const float* s = src + p * stride + c0;
      float* d = dst + p * mr;
      for (int64_t i = 0; i < n; ++i) d[i] = s[i];
      for (int64_t i = n; i < mr; ++i) d[i] = 0.0f;
    }
  }
}

}  // namespace kiln::attention
