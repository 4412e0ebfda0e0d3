// Packing loops: the inner loop always walks the source contiguously where the layout allows
// (A's columns when A is transposed, B's rows when it is not); the other cases gather.
#include "kernels/cpu/gemm/pack.h"

#include <algorithm>
#include <cstring>

namespace kiln::gemm {

void pack_a(const float* a, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t p0,
            int64_t kc, int64_t mr, float* dst) {
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int64_t rows = std::min(mr, mc - ir);
    float* panel = dst + ir * kc;
    if (trans) {
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = a + (p0 + p) * lda + i0 + ir;
        float* out = panel + p * mr;
        std::memcpy(out, src, sizeof(float) * rows);
        std::fill(out + rows, out + mr, 0.0f);
      }
      continue;
    }
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = a + (i0 + ir + i) * lda + p0;
      for (int64_t p = 0; p < kc; ++p) panel[p * mr + i] = src[p];
    }
    for (int64_t i = rows; i < mr; ++i)
      for (int64_t p = 0; p < kc; ++p) panel[p * mr + i] = 0.0f;
  }
}

void pack_b(const float* b, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0,
            int64_t nc, int64_t nr, float* dst) {
  for (int64_t jr = 0; jr < nc; jr += nr) {
    const int64_t cols = std::min(nr, nc - jr);
    float* panel = dst + jr * kc;
    if (!trans) {
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = b + (p0 + p) * ldb + j0 + jr;
        float* out = panel + p * nr;
        std::memcpy(out, src, sizeof(float) * cols);
        std::fill(out + cols, out + nr, 0.0f);
      }
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = b + (j0 + jr + j) * ldb + p0;
      for (int64_t p = 0; p < kc; ++p) panel[p * nr + j] = src[p];
    }
    for (int64_t j = cols; j < nr; ++j)
      for (int64_t p = 0; p < kc; ++p) panel[p * nr + j] = 0.0f;
  }
}

}  // namespace kiln::gemm
