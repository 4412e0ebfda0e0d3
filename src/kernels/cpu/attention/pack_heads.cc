// Head packing for the attention kernel (baseline AVX2 flags): 8x8 transposes in registers for
// the transposed layouts, whole-vector copies for V's panels, scalar loops only at the edges.
#include "kernels/cpu/attention/pack_heads.h"

#include <immintrin.h>

#include <algorithm>

namespace kiln::attention {
namespace {

// dst[c * ld + i] = src[i * stride + c] for an 8 x 8 block.
inline void transpose8x8(const float* src, int64_t stride, float* dst, int64_t ld) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[k] (k < 4) holds column k of rows 0-3 in its low half and column k + 4 in its high half;
  // r[k + 4] the same for rows 4-7. Pair the halves.
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

}  // namespace

void pack_transposed(const float* src, int64_t stride, int64_t rows, int64_t dim, int64_t width,
                     float* dst, int64_t ld) {
  const int64_t rows8 = rows / 8 * 8, dim8 = dim / 8 * 8;
  for (int64_t i = 0; i < rows8; i += 8) {
    for (int64_t c = 0; c < dim8; c += 8)
      transpose8x8(src + i * stride + c, stride, dst + c * ld + i, ld);
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
