// The Winograd GEMM micro-kernel in AVX2/FMA: a register tile of R tiles x 16 output channels
// (2 ymm each, 12 accumulators at R = 6), one broadcast of a transformed input value feeding 2
// FMAs, the weights streamed from a packed panel of 16 channels. The input is read in blocks of
// 8 channels as the input transform writes it, so nothing is packed per call.
#include <immintrin.h>

#include "kernels/kiln/nchwc/blocked_conv_winograd.h"

namespace kiln::nchwc {
namespace {

constexpr int kRows = 6, kNr = 16;

template <int R>
void block(const WinogradGemmArgs& g, const float* v, float* m) {
  __m256 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r][0] = g.accumulate ? _mm256_loadu_ps(m + r * g.ldm) : _mm256_setzero_ps();
    acc[r][1] = g.accumulate ? _mm256_loadu_ps(m + r * g.ldm + 8) : _mm256_setzero_ps();
  }
  const float* u = g.u;
  const int64_t blocks = g.k_blocks, v_block = g.v_block;
  for (int64_t cb = 0; cb < blocks; ++cb, v += v_block) {
#pragma GCC unroll 8
    for (int ci = 0; ci < 8; ++ci, u += kNr) {
      const __m256 b0 = _mm256_load_ps(u), b1 = _mm256_load_ps(u + 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 a = _mm256_broadcast_ss(v + r * 8 + ci);
        acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(m + r * g.ldm, acc[r][0]);
    _mm256_storeu_ps(m + r * g.ldm + 8, acc[r][1]);
  }
}

void gemm(const WinogradGemmArgs& g) {
  using Fn = void (*)(const WinogradGemmArgs&, const float*, float*);
  static constexpr Fn kBlocks[kRows + 1] = {nullptr,   &block<1>, &block<2>, &block<3>,
                                            &block<4>, &block<5>, &block<6>};
  for (int64_t t = 0; t < g.tiles; t += kRows) {
    const int64_t r = g.tiles - t < kRows ? g.tiles - t : kRows;
    kBlocks[r](g, g.v + t * 8, g.m + t * g.ldm);
  }
}

}  // namespace

WinogradGemmKernel winograd_gemm_avx2_kernel() {
  // 32 input blocks x 8 x 16 floats: a 16 KiB panel slice, half of L1.
  return {"winograd_gemm_6x16_avx2", kRows, kNr, 32, gemm};
}

}  // namespace kiln::nchwc
