// Packing loops. Two cases: the panel's rows lie along the source rows (A transposed, B not):
// a memcpy per k step; or they lie across them (A not transposed, B transposed): 8 x 8 blocks
// transposed in registers, 8 source rows read contiguously at a time.
#include "kernels/cpu/gemm/pack.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace kiln::gemm {
namespace {

// r[i] (lanes p) becomes r[p] (lanes i).
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 s[8];
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; ++h) {
      s[i + h] = _mm256_shuffle_ps(t[i + h], t[i + h + 2], _MM_SHUFFLE(1, 0, 1, 0));
      s[i + h + 2] = _mm256_shuffle_ps(t[i + h], t[i + h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  // s[0]: rows 0-3 lane 0|4, s[2]: lane 1|5, s[1]: lane 2|6, s[3]: lane 3|7; s[4..7] rows 4-7.
  const int order[4] = {0, 2, 1, 3};
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(s[order[q]], s[order[q] + 4], 0x20);
    r[q + 4] = _mm256_permute2f128_ps(s[order[q]], s[order[q] + 4], 0x31);
  }
}

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
      transpose8x8(r);
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
