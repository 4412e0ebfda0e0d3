// Head packing for the attention kernel (baseline AVX2 flags): 8x8 transposes in registers for
// the transposed layouts, whole-vector copies for V's panels, scalar loops only at the edges.
#include "kernels/cpu/attention/pack_heads.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::attention {
namespace {

// The first 6 floats of v at dst: 4 and 2, never past them.
inline void store6(float* dst, __m256 v) {
  _mm_storeu_ps(dst, _mm256_castps256_ps128(v));
  _mm_storel_pi(reinterpret_cast<__m64*>(dst + 4), _mm256_extractf128_ps(v, 1));
}

// pack_transposed of at most 6 rows into 6-wide rows (the AVX2 6x16 tile's K panels): an 8x8
// transpose of the rows and zeros, 6 floats of each column stored. Scalar, this packing was a
// fifth of the attention kernel's time at AVX2 (seq 128).
void pack_transposed6(const float* src, int64_t stride, int64_t rows, int64_t dim, float* dst) {
  const int64_t dim8 = dim / 8 * 8;
  for (int64_t c = 0; c < dim8; c += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = i < rows ? _mm256_loadu_ps(src + i * stride + c) : _mm256_setzero_ps();
    vec::transpose_8x8_avx2(r);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) store6(dst + (c + j) * 6, r[j]);
  }
  for (int64_t c = dim8; c < dim; ++c)
    for (int64_t i = 0; i < 6; ++i) dst[c * 6 + i] = i < rows ? src[i * stride + c] : 0.0f;
}

}  // namespace

void pack_transposed(const float* src, int64_t stride, int64_t rows, int64_t dim, int64_t width,
                     float* dst, int64_t ld) {
  if (rows <= 6 && width == 6 && ld == 6) return pack_transposed6(src, stride, rows, dim, dst);
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
    if (n == 6 && mr == 6) {  // the AVX2 tile's: 4 floats and 2
      for (int64_t p = 0; p < tokens; ++p) {
        const float* s = src + p * stride + c0;
        _mm_storeu_ps(dst + p * 6, _mm_loadu_ps(s));
        _mm_storel_pi(reinterpret_cast<__m64*>(dst + p * 6 + 4),
                      _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(s + 4))));
      }
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
