// The avx2 FMA-throughput loop of fma_peak.h: 24 accumulators hide the FMA latency.
#include <immintrin.h>

#include "fma_peak.h"

namespace kiln::bench {

float fma_loop_avx2(int64_t iters) {
  __m256 acc[24];
  // Every loop over acc unrolled by pragma: otherwise GCC keeps acc in memory and the loop
  // measures store forwarding (half the FMA peak on Zen 2).
#pragma GCC unroll 24
  for (int i = 0; i < 24; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  __m256 sum = acc[0];
#pragma GCC unroll 24
  for (int i = 1; i < 24; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(64) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float s = 0.0f;
  for (float l : lanes) s += l;
  return s;
}

}  // namespace kiln::bench
