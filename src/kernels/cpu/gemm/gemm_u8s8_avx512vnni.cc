// gemm_u8s8's AVX-512 VNNI kernels (gemm_u8s8_kernels.h): a register tile of 6 rows x 64 columns
// (24 zmm accumulators), each k quad one broadcast of A's 4 bytes per row, four loads of B's
// packed quad and 24 vpdpbusd; a B panel (k / 4 x 256 bytes, 192 KiB at K = 3072) stays in L2
// while the row tiles sweep it (gemm DESIGN.md has the measurements). The finished tile gets its
// compensation terms in int32 vectors and leaves as int32 sums or, dequantized, as floats. This
// file alone is compiled with -mavx512vnni (CMakeLists.txt); it is reached only on CPUs with
// AVX-512 VNNI.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm/gemm_u8s8_kernels.h"

// GCC 12 warns of the masked loads' undefined pass-through lanes (maskz zeroes them).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kiln::gemm {
namespace {

using u8s8::Call;
using u8s8::Prefetch;
constexpr int64_t kMr = u8s8::kRows, kNr = PackedU8S8::kPanelColumns, kBlocks = kNr / 16;


__mmask16 lanes(int64_t n) { return n >= 16 ? 0xffff : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1); }

// GELU as the epilogue computes it (epilogue.cc: 0.5 x + 0.5 x erf(x / sqrt 2), erf_avx2's rational
// approximation), on 16 lanes: the same operations, so the same values, at half the instructions,
// in the registers before the store (bert's MLP spends more on this than on its bias).
__m512 gelu16(__m512 x) {
  const __m512 c = _mm512_set1_ps(4.0f);
  const __m512 u = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
  const __m512 uc = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), c), _mm512_min_ps(c, u));
  const __m512 u2 = _mm512_mul_ps(uc, uc);
  __m512 p = _mm512_set1_ps(-2.72614225801306e-10f);
  for (float k : {2.77068142495902e-08f, -2.10102402082508e-06f, -5.69250639462346e-05f, -7.34990630326855e-04f,
                  -2.95459980854025e-03f, -1.60960333262415e-02f})
    p = _mm512_fmadd_ps(p, u2, _mm512_set1_ps(k));
  p = _mm512_mul_ps(p, uc);
  __m512 q = _mm512_set1_ps(-1.45660718464996e-05f);
  for (float k : {-2.13374055278905e-04f, -1.68282697438203e-03f, -7.37332916720468e-03f, -1.42647390514189e-02f})
    q = _mm512_fmadd_ps(q, u2, _mm512_set1_ps(k));
  const __m512 hx = _mm512_mul_ps(_mm512_set1_ps(0.5f), x);
  return _mm512_fmadd_ps(hx, _mm512_div_ps(p, q), hx);
}

// Adds the compensation terms (gemm_u8s8.h) to `rows` finished rows of sums and stores them. In
// int32: the terms wrap mod 2^32, but the exact result fits int32, so the wrapped sum is that result.
void finish(const Call& call, const int32_t (&tile_sums)[kMr][kNr], int64_t i0, int64_t rows, int64_t p, int64_t cols) {
  const int64_t j0 = p * kNr;
  __mmask16 mask[kBlocks];
  for (int h = 0; h < kBlocks; ++h) mask[h] = lanes(cols - 16 * h);
  const int32_t* beta = call.b->beta().data() + j0;  // both padded to whole panels
  const int32_t* sums = call.b->column_sums().data() + j0;
  // A lone GELU (no clamp, no residual) runs here, on the registers; any other epilogue after.
  const Epilogue* e = call.dq ? call.dq->epilogue : nullptr;
  const bool gelu = e && e->activation == Epilogue::Activation::kGelu && !e->clamped() && !e->residual;
  __m512 b_scale[kBlocks], bias[kBlocks];
  for (int h = 0; h < kBlocks; ++h) {
    if (!call.dq) break;
    b_scale[h] = call.dq->b_per_column ? _mm512_maskz_loadu_ps(mask[h], call.dq->b_scale + j0 + 16 * h)
                                       : _mm512_set1_ps(call.dq->b_scale[0]);
    bias[h] = call.dq->bias ? _mm512_maskz_loadu_ps(mask[h], call.dq->bias + j0 + 16 * h) : _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < rows; ++i) {
    const __m512i alpha = _mm512_set1_epi32(call.alpha[i0 + i]), term = _mm512_set1_epi32(call.row_term[i0 + i]);
    for (int h = 0; h < kBlocks; ++h) {
      if (!mask[h]) break;
      const __m512i t = _mm512_load_si512(tile_sums[i] + 16 * h);
      const __m512i v = _mm512_sub_epi32(_mm512_add_epi32(t, _mm512_mullo_epi32(_mm512_loadu_si512(beta + 16 * h), term)),
                                         _mm512_mullo_epi32(alpha, _mm512_loadu_si512(sums + 16 * h)));
      const int64_t at = (i0 + i) * call.ldc + j0 + 16 * h;
      if (!call.dq) {
        _mm512_mask_storeu_epi32(call.c + at, mask[h], v);
        continue;
      }
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(call.dq->a_scale[call.dq->a_per_row ? i0 + i : 0]), b_scale[h]);
      const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), scale, bias[h]);
      _mm512_mask_storeu_ps(call.y + at, mask[h], gelu ? gelu16(f) : f);
    }
  }
  // The activation and residual on the tile while it is in L1.
  if (e && !gelu)
    apply_epilogue(*call.dq->epilogue, call.y + i0 * call.ldc + j0, call.ldc, i0, j0, rows, cols);
}


// Rows [i0, i0 + rows) of panel p (cols of its 64 columns). The tile always runs 6 rows (A has
// zero rows past m), so that its loop has no row count to branch on. Every loop over the
// accumulators is unrolled and they leave through a store to memory: GCC 12 keeps them in
// registers then, where an index known only at run time (or a reference to them passed on)
// costs two register moves a vpdpbusd.
void tile(const Call& call, int64_t i0, int64_t rows, int64_t p, int64_t cols, Prefetch next) {
  __m512i acc[kMr][kBlocks];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i)
#pragma GCC unroll 4
    for (int h = 0; h < kBlocks; ++h) acc[i][h] = _mm512_setzero_si512();
  const uint8_t* a[kMr];
  for (int i = 0; i < kMr; ++i) a[i] = call.a + (i0 + i) * call.quads * 4;
  const int8_t* bp = call.b->panel(p);
  const int64_t strip_bytes = call.b->strip_bytes();  // a zmm's 16 columns are one strip
  for (int64_t q = 0; q < call.quads; ++q, bp += 64) {
    for (int64_t l = 0; l < next.step && next.lines > 0; ++l, --next.lines, next.at += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next.at), _MM_HINT_T1);
    __m512i b[kBlocks];
#pragma GCC unroll 4
    for (int h = 0; h < kBlocks; ++h) b[h] = _mm512_loadu_si512(bp + h * strip_bytes);
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      int32_t word;
      std::memcpy(&word, a[i] + q * 4, 4);
      const __m512i av = _mm512_set1_epi32(word);
#pragma GCC unroll 4
      for (int h = 0; h < kBlocks; ++h) acc[i][h] = _mm512_dpbusd_epi32(acc[i][h], av, b[h]);
    }
  }
  alignas(64) int32_t sums[kMr][kNr];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i)
#pragma GCC unroll 4
    for (int h = 0; h < kBlocks; ++h) _mm512_store_si512(sums[i] + 16 * h, acc[i][h]);
  finish(call, sums, i0, rows, p, cols);
}

}  // namespace

u8s8::Kernels u8s8::avx512vnni_kernels() { return {tile}; }

}  // namespace kiln::gemm
