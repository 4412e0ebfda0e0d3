// The ymm FMA loop of cpu_peak.h, with the AVX2 baseline flags.
#include <immintrin.h>

#include "runtime/cpu_peak.h"

namespace kiln::runtime {

float fma_rounds_avx2(long rounds) {
  constexpr int kChains = 12;
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  __m256 c[kChains];
  // Every loop over c unrolled by pragma, so that c lives in registers; the empty asm makes each
  // chain opaque once a round, so that none is folded away or run after another.
#pragma GCC unroll 12
  for (int i = 0; i < kChains; ++i) c[i] = _mm256_set1_ps(1e-3f * static_cast<float>(i));
  for (long r = 0; r < rounds; ++r) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) {
      c[i] = _mm256_fmadd_ps(c[i], a, b);
      asm volatile("" : "+x"(c[i]));
    }
  }
  __m256 sum = c[0];
#pragma GCC unroll 12
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, c[i]);
  return _mm256_cvtss_f32(sum);
}

}  // namespace kiln::runtime
