// qlinear_quantize.h on AVX-512: quantize.cc's 8-lane loops on 16 lanes, the same operations in
// the same order (so the same codes). The loops are bound by their vector instructions, not by
// memory: DynamicQuantizeLinear of [128, 3072] on one thread 118 -> 92 us (Intel Xeon model 207).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/qlinear_quantize.h"

// GCC 12 warns of the undefined pass-through lanes inside its own reduce and abs intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln::qlinear {

void range_with_zero_avx512(const float* x, int64_t n, float* mn, float* mx) {
  __m512 lo[4], hi[4];
  for (int k = 0; k < 4; ++k) lo[k] = hi[k] = _mm512_setzero_ps();
  int64_t i = 0;
  // min_ps/max_ps return their second operand when either is NaN: the running value goes second.
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 4; ++k) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * k);
      lo[k] = _mm512_min_ps(v, lo[k]);
      hi[k] = _mm512_max_ps(v, hi[k]);
    }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);  // masked lanes read 0: in the range
    lo[0] = _mm512_min_ps(v, lo[0]);
    hi[0] = _mm512_max_ps(v, hi[0]);
  }
  for (int k = 1; k < 4; ++k) lo[0] = _mm512_min_ps(lo[k], lo[0]), hi[0] = _mm512_max_ps(hi[k], hi[0]);
  *mn = _mm512_reduce_min_ps(lo[0]);
  *mx = _mm512_reduce_max_ps(hi[0]);
}

void quantize_avx512(const float* x, int64_t n, float scale, float zp, bool to_int8, void* y) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const bool by_inverse = std::isnormal(scale) && std::isnormal(1.0f / scale);
  const __m512 s = _mm512_set1_ps(scale), inv = _mm512_set1_ps(1.0f / scale), z = _mm512_set1_ps(zp);
  const __m512 lo = _mm512_set1_ps(to_int8 ? -128.0f : 0.0f), hi = _mm512_set1_ps(to_int8 ? 127.0f : 255.0f);
  const __m512 near_half = _mm512_set1_ps(0.5f - 0x1p-11f);
  uint8_t* out = static_cast<uint8_t*>(y);
  for (int64_t i = 0; i < n; i += 64) {
    __m512 v[4], r[4];
    __mmask16 m[4], risky = 0;
    for (int k = 0; k < 4; ++k) {
      const int64_t left = n - i - 16 * k;
      m[k] = left >= 16 ? 0xffff : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
      v[k] = _mm512_maskz_loadu_ps(m[k], x + i + 16 * k);
      const __m512 p = _mm512_mul_ps(v[k], inv);
      r[k] = _mm512_roundscale_ps(p, kNearest);
      // quantize.cc's bound: a product further than 2^-11 from a half gives the quotient's code.
      risky |= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(p, r[k])), near_half, _CMP_GE_OQ);
    }
    if (risky || !by_inverse)
      for (int k = 0; k < 4; ++k) r[k] = _mm512_roundscale_ps(_mm512_div_ps(v[k], s), kNearest);
    for (int k = 0; k < 4; ++k) {
      const __m512i c = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r[k], z), lo), hi));
      if (to_int8)
        _mm_mask_storeu_epi8(out + i + 16 * k, m[k], _mm512_cvtsepi32_epi8(c));
      else
        _mm_mask_storeu_epi8(out + i + 16 * k, m[k], _mm512_cvtusepi32_epi8(c));
    }
  }
}

}  // namespace kiln::qlinear
