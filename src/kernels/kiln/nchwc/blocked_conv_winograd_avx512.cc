// The Winograd GEMM micro-kernel in AVX-512: a register tile of R tiles x 32 output channels
// (2 zmm each, 16 accumulators at R = 8), one broadcast of a transformed input value feeding 2
// FMAs. This file alone is compiled with -mavx512f/bw/vl/dq (CMakeLists.txt); it is reached only
// through winograd_gemm_kernels() when cpu_features() reports AVX-512. On Zen 4 a zmm FMA is two
// 256-bit halves: the gain over AVX2 is half the instructions and twice the registers.
#include <immintrin.h>

#include <array>
#include <utility>

#include "kernels/kiln/nchwc/blocked_conv_winograd.h"

namespace kiln::nchwc {
namespace {

#ifndef KILN_WINOGRAD_AVX512_ROWS
#define KILN_WINOGRAD_AVX512_ROWS 8
#endif
constexpr int kRows = KILN_WINOGRAD_AVX512_ROWS, kNr = 32;

template <int R>
void block(const WinogradGemmArgs& g, const float* v, float* m) {
  __m512 acc[R][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    acc[r][0] = g.accumulate ? _mm512_loadu_ps(m + r * g.ldm) : _mm512_setzero_ps();
    acc[r][1] = g.accumulate ? _mm512_loadu_ps(m + r * g.ldm + 16) : _mm512_setzero_ps();
  }
  const float* u = g.u;
  const int64_t blocks = g.k_blocks, v_block = g.v_block;
  for (int64_t cb = 0; cb < blocks; ++cb, v += v_block) {
#pragma GCC unroll 8
    for (int ci = 0; ci < 8; ++ci, u += kNr) {
      const __m512 b0 = _mm512_load_ps(u), b1 = _mm512_load_ps(u + 16);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(v[r * 8 + ci]);
        acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(m + r * g.ldm, acc[r][0]);
    _mm512_storeu_ps(m + r * g.ldm + 16, acc[r][1]);
  }
}

template <int... Rs>
constexpr auto table(std::integer_sequence<int, Rs...>) {
  using Fn = void (*)(const WinogradGemmArgs&, const float*, float*);
  return std::array<Fn, sizeof...(Rs)>{&block<Rs + 1>...};
}

void gemm(const WinogradGemmArgs& g) {
  static constexpr auto kBlocks = table(std::make_integer_sequence<int, kRows>{});
  for (int64_t t = 0; t < g.tiles; t += kRows) {
    const int64_t r = g.tiles - t < kRows ? g.tiles - t : kRows;
    kBlocks[r - 1](g, g.v + t * 8, g.m + t * g.ldm);
  }
}

}  // namespace

WinogradGemmKernel winograd_gemm_avx512_kernel() {
  // 16 input blocks x 8 x 32 floats: a 16 KiB panel slice, half of L1.
  return {"winograd_gemm_8x32_avx512", kRows, kNr, 16, gemm};
}

}  // namespace kiln::nchwc
