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

// Rows [i0, i0 + R) x the nr = 8 * NV columns of panel column j0.
template <int NV, int R>
void panel_rows(const GemmF32Args& g, int64_t i0, int64_t j0) {
  const PackedMatrix& b = *g.packed_b;
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  // A's element (i, p) sits at a + i * ia + p * pa.
  const int64_t ia = g.trans_a ? 1 : g.lda, pa = g.trans_a ? g.lda : 1;
  for (int64_t p0 = 0; p0 < g.k; p0 += b.kc()) {
    const int64_t depth = std::min(b.kc(), g.k - p0);
    const float* panel = b.panel(p0, j0);
    const float* a = g.a + i0 * ia + p0 * pa;
    for (int64_t p = 0; p < depth; ++p, panel += 8 * NV, a += pa) {
      __m256 bv[NV];
      for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(panel + 8 * v);
      for (int r = 0; r < R; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + r * ia);
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
  }
  const int64_t cols = std::min<int64_t>(8 * NV, g.n - j0);
  const __m256 alpha = _mm256_set1_ps(g.alpha);
  for (int64_t r = 0; r < R; ++r) {
    alignas(32) float out[8 * NV];
    for (int v = 0; v < NV; ++v) _mm256_store_ps(out + 8 * v, _mm256_mul_ps(alpha, acc[r][v]));
    float* c = g.c + (i0 + r) * g.ldc + j0;
    for (int64_t j = 0; j < cols; ++j) {
      float y = out[j];
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
