// The direct ConvTranspose of patch_conv_transpose.h. Output row oh of channel o is kernel row
// kh = (oh + pad) % s of input row ih = (oh + pad) / s: with P[kw][iw] = sum over the group's
// input channels ci of w[ci, o, kh, kw] * x[ci, ih, iw], the uncropped row L has L[iw * s_w +
// kw] = P[kw][iw], and the output row is L shifted by the left pad, past the input's reach the
// bias alone. P is computed 32 input columns at a time in registers (4 vectors a phase; 16
// columns, 2 vectors, for 3 and 4 phases), one FMA per loaded input vector and phase, and
// interleaved into L from the registers (stride 2 by unpacking pairs of vectors; a scalar
// interleave cost as much as the FMAs). A task is a run of output rows in the order (image,
// output row, channel).
#include "kernels/cpu/conv/patch_conv_transpose.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/thread_pool.h"

namespace kiln {
namespace {

constexpr int64_t kMaxStride = 4;
// 8-column vectors a phase in one register tile: at most 8 accumulators, beside the input
// vectors and a weight, in the 16 registers.
template <int SW>
constexpr int kVectors = SW <= 2 ? 4 : 2;

// L[iw * SW + q] = sum over ci < cg of wq[ci * w_step + q] * xr[ci * in_w + iw], for iw in
// [0, in_w) and q < SW (xr: the gathered input rows, [cg][in_w]).
template <int SW>
void patch_row(const float* xr, const float* wq, int64_t w_step, int64_t cg, int64_t in_w, float* line) {
  constexpr int V = kVectors<SW>;
  int64_t iw = 0;
  for (; iw + 8 * V <= in_w; iw += 8 * V) {
    __m256 acc[SW][V];
#pragma GCC unroll 4
    for (int q = 0; q < SW; ++q)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[q][v] = _mm256_setzero_ps();
    for (int64_t ci = 0; ci < cg; ++ci) {
      const float* xc = xr + ci * in_w + iw;
      __m256 xv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) xv[v] = _mm256_loadu_ps(xc + 8 * v);
#pragma GCC unroll 4
      for (int q = 0; q < SW; ++q) {
        const __m256 wv = _mm256_broadcast_ss(wq + ci * w_step + q);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[q][v] = _mm256_fmadd_ps(wv, xv[v], acc[q][v]);
      }
    }
    float* out = line + iw * SW;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      if constexpr (SW == 1) {
        _mm256_storeu_ps(out + 8 * v, acc[0][v]);
      } else if constexpr (SW == 2) {
        const __m256 lo = _mm256_unpacklo_ps(acc[0][v], acc[1][v]);  // columns 0, 1, 4, 5 of each
        const __m256 hi = _mm256_unpackhi_ps(acc[0][v], acc[1][v]);  // 2, 3, 6, 7
        _mm256_storeu_ps(out + 16 * v, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(out + 16 * v + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
      } else {
        alignas(32) float phase[SW][8];
        for (int q = 0; q < SW; ++q) _mm256_store_ps(phase[q], acc[q][v]);
        for (int i = 0; i < 8; ++i)
          for (int q = 0; q < SW; ++q) out[(8 * v + i) * SW + q] = phase[q][i];
      }
    }
  }
  for (; iw < in_w; ++iw)  // the last columns, one at a time
    for (int q = 0; q < SW; ++q) {
      float a = 0;
      for (int64_t ci = 0; ci < cg; ++ci) a += wq[ci * w_step + q] * xr[ci * in_w + iw];
      line[iw * SW + q] = a;
    }
}

using PatchRowFn = void (*)(const float*, const float*, int64_t, int64_t, int64_t, float*);
constexpr PatchRowFn kPatchRow[kMaxStride + 1] = {nullptr, &patch_row<1>, &patch_row<2>, &patch_row<3>,
                                                  &patch_row<4>};

}  // namespace

bool patch_conv_transpose_fits(const conv_util::Geo3& g, int64_t inputs_per_group, int64_t outputs_per_group) {
  return (inputs_per_group <= kPatchMaxInputs || outputs_per_group < kPatchFewOutputs) && g.k[0] == 1 &&
         g.s[0] == 1 && g.d[1] == 1 && g.d[2] == 1 && g.k[1] == g.s[1] && g.k[2] == g.s[2] &&
         g.s[2] <= kMaxStride && g.s[1] >= 1 && g.s[2] >= 1;
}

void patch_conv_transpose_f32(const float* x, const float* w, const float* bias, float* y, int64_t n,
                              int64_t c, int64_t m, int64_t group, const conv_util::Geo3& g,
                              const gemm::Epilogue* e, ThreadPool* pool) {
  const int64_t cg = c / group, mg = m / group, sh = g.s[1], sw = g.s[2];
  const int64_t in_h = g.in[1], in_w = g.in[2], out_h = g.out[1], out_w = g.out[2];
  const int64_t in_sz = in_h * in_w, out_sz = out_h * out_w, taps = sh * sw;
  const int64_t reach = in_w * sw;  // columns of the uncropped row
  const int64_t rows = n * m * out_h;
  // Rows in the order (image, output row, channel), so that a run of them reads one input row
  // of every input channel, gathered once into `packed` [cg][in_w]: read in place, rows a plane
  // (a multiple of 4 KiB) apart fall into one L1 set and evicted each other.
  auto run = [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> line, packed;
    line.resize(static_cast<size_t>(reach));
    packed.resize(static_cast<size_t>(cg * in_w));
    int64_t packed_of = -1;  // (image, group, input row) packed holds, as one number
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r % m, oh = r / m % out_h, ni = r / (m * out_h);
      const int64_t gi = o / mg, oi = o % mg;
      float* yrow = y + (ni * m + o) * out_sz + oh * out_w;
      const float b = bias ? bias[o] : 0.0f;
      const int64_t ih = (oh + g.pb[1]) / sh, kh = (oh + g.pb[1]) % sh;
      if (ih >= in_h) {
        std::fill(yrow, yrow + out_w, b);
      } else {
        // w[ci, oi, kh, kw] of the group: input channel steps of mg * taps.
        const float* wq = w + (gi * cg * mg + oi) * taps + kh * sw;
        const int64_t key = (ni * group + gi) * in_h + ih;
        if (key != packed_of) {
          const float* xr = x + (ni * c + gi * cg) * in_sz + ih * in_w;
          for (int64_t ci = 0; ci < cg; ++ci) std::copy_n(xr + ci * in_sz, in_w, packed.data() + ci * in_w);
          packed_of = key;
        }
        kPatchRow[sw](packed.data(), wq, mg * taps, cg, in_w, line.data());
        const int64_t ow_end = std::clamp<int64_t>(reach - g.pb[2], 0, out_w);  // columns the input reaches
        for (int64_t ow = 0; ow < ow_end; ++ow) yrow[ow] = b + line[ow + g.pb[2]];
        std::fill(yrow + ow_end, yrow + out_w, b);
      }
      if (e) gemm::apply_epilogue(*e, yrow, out_w, 0, yrow - y, 1, out_w);
    }
  };
  if (pool != nullptr && rows > 1 && rows * out_w * cg > (1 << 15)) pool->parallel_for(rows, 8, run);
  else run(0, rows);
}

}  // namespace kiln
