// gemm_u8s8's ymm tile (gemm_u8s8_kernels.h), which gemm_u8s8_avxvnni.cc and gemm_u8s8.cc
// instantiate, each compiled for its ISA, with a step of ymm_dot_steps.h multiplying a broadcast
// quad of A's u8 values by B's quads of 8 columns into their int32 sums.
// A 64-column panel goes as four sub-tiles of 6 rows x 16 columns (12 ymm accumulators, two B
// vectors and the broadcast in the 16 registers), A's rows read again from L1 for each; the
// panel's sums then get their compensation terms and leave as int32 or dequantized floats
// (fma(float(sum), a_scale * b_scale, bias), as the zmm tile's), the epilogue applied to the
// panel's rows while they are in L1.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm/gemm_u8s8_kernels.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::gemm::u8s8 {

template <class Step>
struct YmmTile {
  static constexpr int64_t kNr = PackedU8S8::kPanelColumns;

  static void finish(const Call& call, const int32_t (&sums)[kRows][kNr], int64_t i0, int64_t rows, int64_t p,
                     int64_t cols) {
    const int64_t j0 = p * kNr;
    const int32_t* beta = call.b->beta().data() + j0;  // both padded to whole panels
    const int32_t* column_sums = call.b->column_sums().data() + j0;
    const Dequantize* dq = call.dq;
    // The panel's column scales and biases, once for its rows (as the zmm tile's finish).
    __m256 b_scale[kNr / 8], bias[kNr / 8];
    for (int64_t j = 0; dq && j < cols; j += 8) {
      const __m256i mask = vec::tail_mask_avx2(static_cast<int>(cols - j));
      b_scale[j / 8] = dq->b_per_column ? _mm256_maskload_ps(dq->b_scale + j0 + j, mask) : _mm256_set1_ps(dq->b_scale[0]);
      bias[j / 8] = dq->bias ? _mm256_maskload_ps(dq->bias + j0 + j, mask) : _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < rows; ++i) {
      const __m256i alpha = _mm256_set1_epi32(call.alpha[i0 + i]), term = _mm256_set1_epi32(call.row_term[i0 + i]);
      const __m256 a_scale = _mm256_set1_ps(dq ? dq->a_scale[dq->a_per_row ? i0 + i : 0] : 0.0f);
      for (int64_t j = 0; j < cols; j += 8) {
        const __m256i mask = vec::tail_mask_avx2(static_cast<int>(cols - j));
        const __m256i t = _mm256_load_si256(reinterpret_cast<const __m256i*>(sums[i] + j));
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(beta + j));
        const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(column_sums + j));
        const __m256i v = _mm256_sub_epi32(_mm256_add_epi32(t, _mm256_mullo_epi32(b, term)), _mm256_mullo_epi32(alpha, s));
        const int64_t at = (i0 + i) * call.ldc + j0 + j;
        if (!dq) {
          _mm256_maskstore_epi32(call.c + at, mask, v);
          continue;
        }
        _mm256_maskstore_ps(call.y + at, mask,
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(a_scale, b_scale[j / 8]), bias[j / 8]));
      }
    }
    if (dq && dq->epilogue) apply_epilogue(*dq->epilogue, call.y + i0 * call.ldc + j0, call.ldc, i0, j0, rows, cols);
  }

  // kR of the tile's rows into sums, 16 x kH columns a pass (kR x 2 kH accumulators): a tile of
  // fewer rows than kRows multiplies only those, wider, so that one broadcast of A still meets
  // several B vectors (a batch-1 classifier's one row took 6 rows' products: 1 x 1000 x 1280 in
  // 65 us hot on 2 threads of a Zen 3). Every loop over the accumulators is unrolled and they
  // leave through a store to memory, so that GCC keeps them in registers (gemm_u8s8_avx512vnni.cc's
  // tile says why).
  template <int kR>
  static void rows_into(const Call& call, int64_t i0, int64_t p, int64_t cols, Prefetch next,
                        int32_t (&sums)[kRows][kNr]) {
    constexpr int kH = kR == 1 ? 4 : kR == 2 ? 2 : 1;
    const uint8_t* a[kR];
    for (int i = 0; i < kR; ++i) a[i] = call.a + (i0 + i) * call.quads * 4;
    for (int64_t h = 0; h < (cols + 16 * kH - 1) / (16 * kH); ++h) {
      __m256i acc[kR][2 * kH];
#pragma GCC unroll 6
      for (int i = 0; i < kR; ++i)
#pragma GCC unroll 8
        for (int v = 0; v < 2 * kH; ++v) acc[i][v] = _mm256_setzero_si256();
      const int64_t strip_bytes = call.b->strip_bytes();
      const int8_t* bp = call.b->panel(p) + kH * h * strip_bytes;  // the pass's first strip
      for (int64_t q = 0; q < call.quads; ++q, bp += 64) {
        for (int64_t l = 0; h == 0 && l < next.step && next.lines > 0; ++l, --next.lines, next.at += 64)
          _mm_prefetch(reinterpret_cast<const char*>(next.at), _MM_HINT_T1);
        __m256i b[2 * kH];
#pragma GCC unroll 8
        for (int v = 0; v < 2 * kH; ++v)
          b[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + v / 2 * strip_bytes + v % 2 * 32));
#pragma GCC unroll 6
        for (int i = 0; i < kR; ++i) {
          int32_t word;
          std::memcpy(&word, a[i] + q * 4, 4);
          const __m256i av = _mm256_set1_epi32(word);
#pragma GCC unroll 8
          for (int v = 0; v < 2 * kH; ++v) acc[i][v] = Step::add(acc[i][v], av, b[v]);
        }
      }
#pragma GCC unroll 6
      for (int i = 0; i < kR; ++i)
#pragma GCC unroll 8
        for (int v = 0; v < 2 * kH; ++v)
          _mm256_store_si256(reinterpret_cast<__m256i*>(sums[i] + 16 * kH * h + 8 * v), acc[i][v]);
    }
  }

  static void tile(const Call& call, int64_t i0, int64_t rows, int64_t p, int64_t cols, Prefetch next) {
    alignas(32) int32_t sums[kRows][kNr];
    switch (rows) {
      case 1: rows_into<1>(call, i0, p, cols, next, sums); break;
      case 2: rows_into<2>(call, i0, p, cols, next, sums); break;
      case 3: rows_into<3>(call, i0, p, cols, next, sums); break;
      default: rows_into<kRows>(call, i0, p, cols, next, sums); break;  // (A has zero rows past m)
    }
    finish(call, sums, i0, rows, p, cols);
  }
};

}  // namespace kiln::gemm::u8s8
