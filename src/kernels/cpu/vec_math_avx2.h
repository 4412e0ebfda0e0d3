// Vector float math on 8 lanes (AVX2 + FMA, kiln's baseline ISA): exp, sigmoid, tanh and erf
// accurate to a few ulp, horizontal sum / max, tail masks, the 8x8 register transpose. Inline, for the softmax, norm and epilogue loops.
// NaN propagates through exp and erf (their min/max take x as the second operand, which is the
// one x86 returns when either is NaN).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kiln::vec {

// exp(x): x = n ln2 + r with |r| <= ln2/2 (ln2 in two parts, Cody-Waite), exp(r) by Cephes'
// degree-7 polynomial (relative error < 2e-7), times 2^n as two factors 2^(n/2) built in the
// exponent bits, so n may run from -150 to 128 (denormal results and exp(88.7) both come out
// right). Below -103.97 the result is 0, above 88.72 it is +inf.
inline __m256 exp_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-103.972077f), hi = _mm256_set1_ps(88.7228391f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 overflow = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  const __m256 xc = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i ni = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 e2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, e1), e2);
  y = _mm256_andnot_ps(underflow, y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), overflow);
}

// 1 / (1 + exp(-x)).
inline __m256 sigmoid_avx2(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// tanh(x): Cephes' odd polynomial below |x| = 0.625, where 2 sigmoid(2x) - 1 would cancel;
// 2 sigmoid(2x) - 1 above. A few ulp either way.
inline __m256 tanh_avx2(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  const __m256 big = _mm256_fmsub_ps(two, sigmoid_avx2(_mm256_mul_ps(two, x)), one);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(abs, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

// erf(x): the odd/even rational approximation Eigen and TensorFlow use (Abramowitz & Stegun
// 7.1.26 is too coarse at 1.5e-7 absolute near 0), x clamped to [-4, 4], outside which erf is
// +-1 in float. Absolute error a few 1e-8: 1 + erf(x) for x << 0 keeps only that absolutely.
inline __m256 erf_avx2(__m256 x) {
  const __m256 c = _mm256_set1_ps(4.0f);
  const __m256 xc = _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), c), _mm256_min_ps(c, x));
  const __m256 x2 = _mm256_mul_ps(xc, xc);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
  p = _mm256_mul_ps(p, xc);
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
  return _mm256_div_ps(p, q);
}

// Rows r[0..8) become columns: lane j of r[i] moves to lane i of r[j]. Pure data movement, so
// it is exact for any 32-bit elements held as floats.
inline void transpose_8x8_avx2(__m256 (&r)[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // u[k] (k < 4) holds column k of rows 0-3 in its low half and column k + 4 in its high half;
  // u[k + 4] the same for rows 4-7. Pair the halves.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// dst[j * dst_step + i] = src[i * src_step + j] for an 8 x 8 block.
inline void transpose_8x8_avx2(const float* src, int64_t src_step, float* dst, int64_t dst_step) {
  __m256 r[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_step);
  transpose_8x8_avx2(r);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * dst_step, r[i]);
}

inline float hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax_avx2(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// The first n lanes all-ones (all 8 for n >= 8, none for n <= 0): for masked loads and stores of
// a row's tail.
inline __m256i tail_mask_avx2(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

}  // namespace kiln::vec
