// Up to 4 rows of A at a time against one nr-wide packed panel, all K slices, in AVX2 registers
// (4 rows x 4 ymm for nr = 32); the write-out applies alpha, beta, bias and the epilogue as the
// micro-kernel path does.
#include "kernels/cpu/gemm/small_m.h"

#include <immintrin.h>

#include <algorithm>

#include "core/thread_pool.h"

namespace kiln::gemm {
namespace {

constexpr int kRows = 4;

// Rows [i0, i0 + R) x the nr = 8 * NV columns of panel column j0. With few rows the sum over K
// runs as kChains interleaved chains (p, p + kChains, ...) added at the end, so that about 8
// accumulators are in flight: one row of a 16-wide panel is 2 accumulators, each FMA waiting on
// the last (4 cycles), which held a batch-1 LSTM step's h R^T to a quarter of the FMA rate, too
// slow to use the L3 bandwidth its 4 MiB of R needs.
template <int NV, int R>
void panel_rows(const GemmF32Args& g, int64_t i0, int64_t j0) {
  constexpr int kChains = std::clamp(8 / (R * NV), 1, 4);
  const PackedMatrix& b = *g.packed_b;
  __m256 acc[kChains][R][NV];
#pragma GCC unroll 4
  for (int c = 0; c < kChains; ++c)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[c][r][v] = _mm256_setzero_ps();
  // A's element (i, p) sits at a + i * ia + p * pa.
  const int64_t ia = g.trans_a ? 1 : g.lda, pa = g.trans_a ? g.lda : 1;
  // Row p of the slice's panel into chain c.
  auto step = [&](const float* panel, const float* a, int64_t p, int c) {
    __m256 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(panel + p * 8 * NV + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + p * pa + r * ia);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[c][r][v] = _mm256_fmadd_ps(av, bv[v], acc[c][r][v]);
    }
  };
  for (int64_t p0 = 0; p0 < g.k; p0 += b.kc()) {
    const int64_t depth = std::min(b.kc(), g.k - p0);
    const float* panel = b.panel(p0, j0);
    const float* a = g.a + i0 * ia + p0 * pa;
    int64_t p = 0;
    for (; p + kChains <= depth; p += kChains) {
#pragma GCC unroll 4
      for (int c = 0; c < kChains; ++c) step(panel, a, p + c, c);
    }
    for (; p < depth; ++p) step(panel, a, p, 0);
  }
#pragma GCC unroll 4
  for (int c = 1; c < kChains; ++c)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[0][r][v] = _mm256_add_ps(acc[0][r][v], acc[c][r][v]);
  const int64_t cols = std::min<int64_t>(8 * NV, g.n - j0);
  const __m256 alpha = _mm256_set1_ps(g.alpha);
  // acc is indexed by constants only (every loop over it unrolled), or GCC keeps it in memory and
  // stores each accumulator after each FMA (measured: 3 rows ran at a third of the FMA rate).
  alignas(32) float out[R][8 * NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm256_store_ps(out[r] + 8 * v, _mm256_mul_ps(alpha, acc[0][r][v]));
  for (int64_t r = 0; r < R; ++r) {
    float* c = g.c + (i0 + r) * g.ldc + j0;
    for (int64_t j = 0; j < cols; ++j) {
      float y = out[r][j];
      if (g.beta != 0.0f) y += g.beta * c[j];
      if (g.bias) y += g.bias[j0 + j];
      c[j] = y;
    }
  }
  if (g.epilogue && !g.epilogue->empty())
    apply_epilogue(*g.epilogue, g.c + i0 * g.ldc + j0, g.ldc, i0, j0, R, cols);
}

template <int NV>
void panels(const GemmF32Args& g, int64_t p_begin, int64_t p_end) {
  for (int64_t jp = p_begin; jp < p_end; ++jp) {
    const int64_t j0 = jp * 8 * NV;
    int64_t i0 = 0;
    for (; i0 + kRows <= g.m; i0 += kRows) panel_rows<NV, kRows>(g, i0, j0);
    switch (g.m - i0) {
      case 3: panel_rows<NV, 3>(g, i0, j0); break;
      case 2: panel_rows<NV, 2>(g, i0, j0); break;
      case 1: panel_rows<NV, 1>(g, i0, j0); break;
      default: break;
    }
  }
}

}  // namespace

void gemm_small_m_packed(const GemmF32Args& g, ThreadPool* pool) {
  const int64_t nr = g.packed_b->kernel().nr;
  void (*run)(const GemmF32Args&, int64_t, int64_t) = nr == 8    ? panels<1>
                                                      : nr == 16 ? panels<2>
                                                      : nr == 24 ? panels<3>
                                                                 : panels<4>;
  const int64_t count = (g.n + nr - 1) / nr;
  // A thread is worth waking for ~2^16 multiply-adds of B's panels.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (g.k * nr));
  if (pool == nullptr || count <= grain) return run(g, 0, count);
  pool->parallel_for(count, grain, [&](int64_t p0, int64_t p1) { run(g, p0, p1); });
}

}  // namespace kiln::gemm
