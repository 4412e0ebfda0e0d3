// f32_gemm_<MR>x32_avx512: MR rows x 2 zmm of C, 2 loads of B and MR embedded broadcasts of A
// per k step. This file alone is compiled with -mavx512f/bw/vl/dq (see CMakeLists.txt); its
// kernel is only reached through the dispatch table when cpu_features() reports AVX-512.
// Zen 4 splits each zmm FMA into two 256-bit halves, so the gain over AVX2 is fewer
// instructions and twice the registers (a taller tile: less B traffic per FMA), not wider math.
#include <immintrin.h>

#include "kernels/cpu/gemm/microkernel.h"

namespace kiln::gemm {
namespace {

#ifndef KILN_AVX512_MR
#define KILN_AVX512_MR 8
#endif
constexpr int kMr = KILN_AVX512_MR, kNr = 32;

// The first kRows rows of the tile (kRows < kMr: the partial last row tile of a packed A, whose
// rows are still kMr apart). kPrefetch also asks L2 for row p of t.prefetch_b (the next panel,
// 32 floats: two lines) at step p, as the AVX2 kernel does (microkernel.h, DESIGN.md).
template <bool kPrefetch = false, int kRows = kMr>
void f32_gemm_avx512(const TileArgs& t) {
  __m512 acc[kRows][2];
  // Every loop over acc fully unrolled, or GCC keeps acc in memory.
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  // Locals, not t's fields: the vector types may alias anything, so stores to `acc` would
  // otherwise force t.kc to be re-read (and acc kept in memory) on every step.
  const float* a = t.a;
  const float* b = t.b;
  const int64_t kc = t.kc;
  // C's lines are wanted at the end (stored, or read when beta != 0): ask for them now, so a
  // cold tile does not stall the stores after kc steps.
  for (int i = 0; i < kRows; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(t.c + i * t.ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(t.c + i * t.ldc + kNr - 1), _MM_HINT_T0);
  }
  const float* next = t.prefetch_b;
  for (int64_t p = 0; p < kc; ++p, a += kMr, b += kNr) {
    if constexpr (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(next + p * kNr), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(next + p * kNr + 16), _MM_HINT_T1);
    }
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 16
    for (int i = 0; i < kRows; ++i) {
      const __m512 av = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  const __m512 alpha = _mm512_set1_ps(t.alpha), beta = _mm512_set1_ps(t.beta);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
  if (t.bias) bias0 = _mm512_loadu_ps(t.bias), bias1 = _mm512_loadu_ps(t.bias + 16);
  float* const c0 = t.c;
  const int64_t ldc = t.ldc;
  const bool read_c = t.beta != 0.0f;
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) {
    float* c = c0 + i * ldc;
    __m512 v0 = _mm512_fmadd_ps(alpha, acc[i][0], bias0);
    __m512 v1 = _mm512_fmadd_ps(alpha, acc[i][1], bias1);
    if (read_c) {
      v0 = _mm512_fmadd_ps(beta, _mm512_loadu_ps(c), v0);
      v1 = _mm512_fmadd_ps(beta, _mm512_loadu_ps(c + 16), v1);
    }
    _mm512_storeu_ps(c, v0);
    _mm512_storeu_ps(c + 16, v1);
  }
}

}  // namespace

MicroKernel f32_gemm_avx512_kernel() {
  static const char* const name = KILN_AVX512_MR == 8    ? "f32_gemm_8x32_avx512"
                                  : KILN_AVX512_MR == 12 ? "f32_gemm_12x32_avx512"
                                                         : "f32_gemm_14x32_avx512";
  // kc 256: B micro-panel 32 KiB, measured no worse than 128 or 384 (DESIGN.md, bench/).
  MicroKernel k{name, kMr, kNr, 8 * 24, 256, 3072, 1024, f32_gemm_avx512<>};
  k.fn_prefetch = f32_gemm_avx512<true>;
  if constexpr (kMr == 8)  // fn_short holds 8; the taller experimental tiles have none
    k.fn_short = {nullptr,
                  f32_gemm_avx512<false, 1>,
                  f32_gemm_avx512<false, 2>,
                  f32_gemm_avx512<false, 3>,
                  f32_gemm_avx512<false, 4>,
                  f32_gemm_avx512<false, 5>,
                  f32_gemm_avx512<false, 6>,
                  f32_gemm_avx512<false, 7>};
  return k;
}

}  // namespace kiln::gemm
