// f32_gemm_6x16_avx2: 6 rows x 2 ymm of C (12 accumulators), 2 loads of B and 6 broadcasts of A
// per k step. Built with the baseline flags (-mavx2 -mfma).
#include <immintrin.h>

#include "kernels/cpu/gemm/microkernel.h"

namespace kiln::gemm {
namespace {

constexpr int kMr = 6, kNr = 16;

// A packed (a[p * 6 + i]) or, with kStridedA, read in place (a[i * lda + p]); the first kRows
// rows of the tile (kRows < 6: the partial last row tile of a packed A). kPrefetch also asks L2
// for line p of t.prefetch_b at step p (a 16-float panel row is one line).
template <bool kStridedA, int kRows = kMr, bool kPrefetch = false>
void f32_gemm_6x16_avx2(const TileArgs& t) {
  __m256 acc[kRows][2];
  // Every loop over acc fully unrolled, or GCC keeps acc in memory.
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  // Locals, not t's fields: the vector types may alias anything, so stores to `acc` would
  // otherwise force t.kc to be re-read (and acc kept in memory) on every step.
  const float* a = t.a;
  const float* b = t.b;
  const int64_t kc = t.kc;
  const int64_t lda = kStridedA ? t.lda : 1;
  // C's lines are wanted at the end (stored, or read when beta != 0): ask for them now.
  for (int i = 0; i < kRows; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(t.c + i * t.ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(t.c + i * t.ldc + kNr - 1), _MM_HINT_T0);
  }
  const float* next = t.prefetch_b;
  for (int64_t p = 0; p < kc; ++p, a += kStridedA ? 1 : kMr, b += kNr) {
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(next + p * kNr), _MM_HINT_T1);
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kRows; ++i) {
      const __m256 av = _mm256_broadcast_ss(kStridedA ? a + i * lda : a + i);
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  const __m256 alpha = _mm256_set1_ps(t.alpha), beta = _mm256_set1_ps(t.beta);
  __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
  if (t.bias) bias0 = _mm256_loadu_ps(t.bias), bias1 = _mm256_loadu_ps(t.bias + 8);
  float* const c0 = t.c;
  const int64_t ldc = t.ldc;
  const bool read_c = t.beta != 0.0f;
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) {
    float* c = c0 + i * ldc;
    __m256 v0 = _mm256_fmadd_ps(alpha, acc[i][0], bias0);
    __m256 v1 = _mm256_fmadd_ps(alpha, acc[i][1], bias1);
    if (read_c) {
      v0 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c), v0);
      v1 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c + 8), v1);
    }
    _mm256_storeu_ps(c, v0);
    _mm256_storeu_ps(c + 8, v1);
  }
}

}  // namespace

MicroKernel f32_gemm_6x16_avx2_kernel() {
  // B micro-panel kc x 16 (16 KiB at kc 256) stays in L1; A block mc x kc (~190 KiB) in L2.
  MicroKernel k{"f32_gemm_6x16_avx2", kMr, kNr, 186, 256, 3072, 1024, f32_gemm_6x16_avx2<false>,
                f32_gemm_6x16_avx2<true>};
  k.fn_prefetch = f32_gemm_6x16_avx2<false, kMr, true>;
  k.fn_short = {nullptr,
                f32_gemm_6x16_avx2<false, 1>,
                f32_gemm_6x16_avx2<false, 2>,
                f32_gemm_6x16_avx2<false, 3>,
                f32_gemm_6x16_avx2<false, 4>,
                f32_gemm_6x16_avx2<false, 5>};
  return k;
}

}  // namespace kiln::gemm
