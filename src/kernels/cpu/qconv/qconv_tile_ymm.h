// The 8-bit conv's ymm tile (qconv.h), which qconv_avx2.cc and qconv_avxvnni.cc instantiate,
// each compiled for its ISA, with the step that multiplies one broadcast step of a pixel's input
// channels by one weight vector of 8 filters and adds the products into their int32 sums:
//   Step::add(acc, a, w) -> acc + the products' sums.
// 6 output pixels x one block of 16 filters (two ymm), 12 accumulators. The store requantizes.
// Everything here is a template of Step, so each file's instantiation is its own code.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/qconv/qconv_driver.h"

namespace kiln::qconv {

template <class Step>
struct YmmTiles {
  static constexpr int kPixels = 6, kMaxBlocks = 1;

  static void store(const TilePlan& plan, __m256i (&acc)[kPixels][2], int64_t p0, int rows, int64_t m0) {
    const Requantize& rq = plan.rq;
    const int64_t filters = plan.g.filters;
    const __m256 lo = _mm256_set1_ps(static_cast<float>(rq.lo - rq.zero_point));
    const __m256 hi = _mm256_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
    const __m256i zp = _mm256_set1_epi32(rq.zero_point);
    for (int h = 0; h < 2; ++h) {
      const int64_t m = m0 + h * 8, count = std::min<int64_t>(8, filters - m);
      if (count <= 0) break;
      const __m256i mask = first_lanes(count);
      const __m256i bias = _mm256_maskload_epi32(rq.bias.data() + m, mask);
      const __m256 scale = _mm256_maskload_ps(rq.scale.data() + m, mask);
      for (int i = 0; i < rows; ++i) {
        const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc[i][h], bias)), scale);
        const int64_t at = (p0 + i) * filters + m;
        if (rq.output == Output::kFloat) {
          _mm256_maskstore_ps(static_cast<float*>(plan.y) + at, mask, f);
          continue;
        }
        // Clamped in float first (as MLAS does); in range, the packs only narrow.
        const __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(f, lo), hi)), zp);
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        const __m128i bytes = rq.output == Output::kS8 ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w);
        store_first_bytes(static_cast<char*>(plan.y) + at, bytes, count, 8);
      }
    }
  }

  // Pixels [p0, p0 + rows) x block b0.
  static void run(const TilePlan& plan, int64_t p0, int rows, int64_t b0, int) {
    const char* px[kPixels];
    windows(plan, p0, rows, px, kPixels);
    __m256i acc[kPixels][2];
    for (auto& row : acc) row[0] = row[1] = _mm256_setzero_si256();
    const int64_t steps = plan.w.steps();
    const int8_t* w = plan.w.block(b0);
    for (const int64_t off : plan.tap_offsets) {
      const char* p[kPixels];
      for (int i = 0; i < kPixels; ++i) p[i] = px[i] + off;
      for (int64_t q = 0; q < steps; ++q, w += 64) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32));
#pragma GCC unroll 6
        for (int i = 0; i < kPixels; ++i) {
          const __m256i a = _mm256_set1_epi32(load_u32(p[i] + q * 4));
          acc[i][0] = Step::add(acc[i][0], a, w0);
          acc[i][1] = Step::add(acc[i][1], a, w1);
        }
      }
    }
    store(plan, acc, p0, rows, b0 * 16);
  }
};

}  // namespace kiln::qconv
