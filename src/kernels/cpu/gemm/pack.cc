// Packing loops. Two cases: the panel's rows lie along the source rows (A transposed, B not):
// a memcpy per k step; or they lie across them (A not transposed, B transposed): 8 x 8 blocks
// transposed in registers, 8 source rows read contiguously at a time.
#include "kernels/cpu/gemm/pack.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::gemm {
namespace {

// dst[p * w + i] = src[i * ld + p] for i < count, 0 for count <= i < w; p < kc.
void pack_across(const float* src, int64_t ld, int64_t count, int64_t kc, int64_t w, float* dst) {
  for (int64_t g = 0; g < w; g += 8) {
    const int64_t lanes = std::min<int64_t>(8, w - g);
    const int64_t rows = std::clamp<int64_t>(count - g, 0, lanes);
    const __m256i mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const float* s = src + g * ld;
    float* d = dst + g;
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = i < rows ? _mm256_loadu_ps(s + i * ld + p) : _mm256_setzero_ps();
      vec::transpose_8x8_avx2(r);
      if (lanes == 8)
        for (int q = 0; q < 8; ++q) _mm256_storeu_ps(d + (p + q) * w, r[q]);
      else
        for (int q = 0; q < 8; ++q) _mm256_maskstore_ps(d + (p + q) * w, mask, r[q]);
    }
    for (; p < kc; ++p)
      for (int64_t i = 0; i < lanes; ++i) d[p * w + i] = i < rows ? s[i * ld + p] : 0.0f;
  }
}

// dst[p * w + i] = src[p * ld + i] for i < count, 0 for count <= i < w; p < kc.
void pack_along(const float* src, int64_t ld, int64_t count, int64_t kc, int64_t w, float* dst) {
  for (int64_t p = 0; p < kc; ++p) {
    float* out = dst + p * w;
    std::memcpy(out, src + p * ld, sizeof(float) * count);
    std::fill(out + count, out + w, 0.0f);
  }
}

}  // namespace

void pack_a(const float* a, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t p0,
            int64_t kc, int64_t mr, float* dst) {
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int64_t rows = std::min(mr, mc - ir);
    if (trans)
      pack_along(a + p0 * lda + i0 + ir, lda, rows, kc, mr, dst + ir * kc);
    else
      pack_across(a + (i0 + ir) * lda + p0, lda, rows, kc, mr, dst + ir * kc);
  }
}

void pack_b(const float* b, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0,
            int64_t nc, int64_t nr, float* dst) {
  for (int64_t jr = 0; jr < nc; jr += nr) {
    const int64_t cols = std::min(nr, nc - jr);
    if (trans)
      pack_across(b + (j0 + jr) * ldb + p0, ldb, cols, kc, nr, dst + jr * kc);
    else
      pack_along(b + p0 * ldb + j0 + jr, ldb, cols, kc, nr, dst + jr * kc);
  }
}

}  // namespace kiln::gemm
