// The zmm FMA loop of cpu_peak.h, built with the AVX-512 flags (by its file name); called only
// when cpu_features() reports AVX-512.
#include <immintrin.h>

#include "runtime/cpu_peak.h"

namespace kiln::runtime {

float fma_rounds_avx512(long rounds) {
  constexpr int kChains = 24;
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  __m512 c[kChains];
#pragma GCC unroll 24
  for (int i = 0; i < kChains; ++i) c[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  for (long r = 0; r < rounds; ++r) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) {
      c[i] = _mm512_fmadd_ps(c[i], a, b);
      asm volatile("" : "+v"(c[i]));
    }
  }
  __m512 sum = c[0];
#pragma GCC unroll 24
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, c[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  return lanes[0];
}

}  // namespace kiln::runtime
