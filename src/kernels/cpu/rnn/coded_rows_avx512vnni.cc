// coded_rows.h's tile on AVX-512 VNNI: up to 4 rows x the 64 outputs of a tile (16 zmm
// accumulators); per pair of k, four loads of 32 codes (16 outputs x 2) widened to 16 bits, each
// against every row's broadcast pair through vpdpwssd (two products and the add, 32 products an
// instruction). With 6 rows (24 accumulators) GCC 12 kept them on the stack, storing each at
// every step: 118 GMAC/s against 163 with 4 rows (16 rows of k 512, one Zen 5 core). This file
// alone is compiled with -mavx512vnni; it is reached only when cpu_features() reports AVX-512
// with VNNI.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/rnn/coded_rows.h"

// GCC 12 warns of the masked loads' undefined pass-through lanes (maskz zeroes them).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln::rnn {
namespace {

constexpr int64_t kTile = CodedRows::kTile;

template <int R>
void tile(const CodedArgs& args, int64_t t, int64_t row0) {
  const CodedRows& b = *args.b;
  const int8_t* c = b.codes.data() + (t * b.pairs + args.p0) * kTile * 2;
  const int32_t* a = args.a + row0 * args.lda;
  __m512i acc[R][4];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_si512();
  for (int64_t p = args.p0; p < args.p1; ++p, c += 2 * kTile) {
    __m512i w[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) w[v] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * v)));
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const __m512i x = _mm512_set1_epi32(a[i * args.lda + p]);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_dpwssd_epi32(acc[i][v], x, w[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    // No early exit past n: GCC would keep acc on the stack. Lanes past n are masked off.
    const int64_t col = t * kTile + 16 * v, left = std::clamp<int64_t>(b.n - col, 0, 16);
    const __mmask16 m = static_cast<__mmask16>((1u << left) - 1);
    const __m512 scale = _mm512_loadu_ps(b.scale.data() + col);  // zero-padded to whole tiles
    const __m512 bias = args.bias && !args.accumulate ? _mm512_maskz_loadu_ps(m, args.bias + col) : _mm512_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      float* out = args.out + (row0 + i) * args.ldo + col;
      const __m512 base = args.accumulate ? _mm512_maskz_loadu_ps(m, out) : bias;
      const __m512 s = _mm512_mul_ps(scale, _mm512_set1_ps(args.row_scale[row0 + i]));
      _mm512_mask_storeu_ps(out, m, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][v]), s, base));
    }
  }
}

}  // namespace

void coded_tile_avx512vnni(const CodedArgs& args, int64_t t) {
  for (int64_t i = 0; i < args.rows; i += 4) {
    switch (std::min<int64_t>(4, args.rows - i)) {
      case 4: tile<4>(args, t, i); break;
      case 3: tile<3>(args, t, i); break;
      case 2: tile<2>(args, t, i); break;
      default: tile<1>(args, t, i); break;
    }
  }
}

}  // namespace kiln::rnn
