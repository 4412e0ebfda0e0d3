// gemm_s16's AVX-512 VNNI tile: 6 rows x 32 columns (12 zmm accumulators), each k pair one
// vpdpwssd per row and 16 columns (the two products and the add in one instruction). This file
// alone is compiled with -mavx512f/bw/vnni (CMakeLists.txt); its tile is only reached through
// s16_kernels() when cpu_features() reports AVX-512 with VNNI.
#include <immintrin.h>

#include "kernels/cpu/gemm/gemm_s16.h"

namespace kiln::gemm {
namespace {

constexpr int64_t kMr = kS16Mr, kNr = 32;

void tile_avx512_vnni(int64_t pairs, const int32_t* ap, const int16_t* bp, int32_t* c, int64_t ldc,
                      bool accumulate, int64_t rows, int64_t cols) {
  __m512i acc[kMr][2];
  for (auto& r : acc) r[0] = r[1] = _mm512_setzero_si512();
  for (int64_t p = 0; p < pairs; ++p, ap += kMr, bp += 2 * kNr) {
    const __m512i b0 = _mm512_loadu_si512(bp), b1 = _mm512_loadu_si512(bp + 32);
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      const __m512i av = _mm512_set1_epi32(ap[i]);
      acc[i][0] = _mm512_dpwssd_epi32(acc[i][0], av, b0);
      acc[i][1] = _mm512_dpwssd_epi32(acc[i][1], av, b1);
    }
  }
  // The partial tiles write their columns through a mask, their rows by count.
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xffff) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols <= 16 ? __mmask16(0) : cols >= 32 ? __mmask16(0xffff) : __mmask16((1u << (cols - 16)) - 1);
  for (int64_t i = 0; i < rows; ++i) {
    int32_t* out = c + i * ldc;
    __m512i v0 = acc[i][0], v1 = acc[i][1];
    if (accumulate) {
      v0 = _mm512_add_epi32(v0, _mm512_maskz_loadu_epi32(m0, out));
      v1 = _mm512_add_epi32(v1, _mm512_maskz_loadu_epi32(m1, out + 16));
    }
    _mm512_mask_storeu_epi32(out, m0, v0);
    _mm512_mask_storeu_epi32(out + 16, m1, v1);
  }
}

}  // namespace

S16Kernel s16_avx512_vnni_kernel() { return {"s16_6x32_avx512vnni", kNr, tile_avx512_vnni}; }

}  // namespace kiln::gemm
