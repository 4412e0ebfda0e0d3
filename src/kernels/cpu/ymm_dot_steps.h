// The multiply steps of kiln's ymm 8-bit tiles (qconv's dense and depthwise tiles, gemm_u8s8's
// tile): Step::add(acc, a, b) adds into each int32 lane of acc the products of that lane's
// 16-bit pair or 8-bit quad of a and b, exactly.
//   PairsOf16Bits       vpmaddwd: two int16 products a lane (any values up to 16 bits).
//   QuadsOf7BitValues   vpmaddubsw + vpmaddwd against ones: four u8 x s8 products a lane, exact
//                       when b is within +-64 (pair sums at most 255 * 64 * 2 = 32640) or a
//                       below 128 (127 * 128 * 2 = 32512: DynamicQuantMatMul's 7-bit rows).
//   VnniQuads           vpdpbusd (AVX-VNNI): four u8 x s8 products a lane, any s8 b; declared
//                       only in files compiled with -mavxvnni.
// The tiles are templates of their step. Each step is instantiated in files of one ISA only
// (VnniQuads with -mavxvnni, the others on the baseline flags), so the linker never trades one
// file's code for another's: with -mavxvnni GCC may fuse vpmaddwd + vpaddd into vpdpwssd.
#pragma once

#include <immintrin.h>

namespace kiln::ymm {

struct PairsOf16Bits {
  static __m256i add(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
};

struct QuadsOf7BitValues {
  static __m256i add(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
  }
};

#ifdef __AVXVNNI__
struct VnniQuads {
  static __m256i add(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
};
#endif

}  // namespace kiln::ymm
