// The stores' activation (Requantize::activation) on vectors of the sums' float values: the
// activation (the blocked kernels' epilogue on 8 or 16 lanes), then the product by 1 / y_scale
// that the codes are rounded from. Files compiled for AVX-512 get the 16-lane form alone, the
// others the 8-lane one: an inline function compiled both ways could link as the AVX-512 one.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/qconv/qconv.h"
#ifdef __AVX512F__
#include "kernels/kiln/nchwc/activation_avx512.h"
#else
#include "kernels/kiln/nchwc/activation_avx2.h"
#endif

namespace kiln::qconv {

// On AVX2, SiLU and Sigmoid (every conv of an efficientnet or a YOLO) take sigma(x) = 1 / (1 + e^-x)
// with x held to [-87, 87], where e^-x and 2^n stay normal floats (past them sigma's codes are
// the same): e^-x = 2^n p(r), n = round(-x log2 e) read off the low bits of a float that a magic
// number's add rounded it into (shifted up, they are 2^n's exponent bits), r the rest (ln 2 in
// two parts), p of degree 5 (relative error 1.7e-7, as the store's division); 1 / (1 + e) from
// the reciprocal estimate and one Newton step, no cancellation either side. 17 instructions a
// vector against 20 for e^-|x| and a blend of sigma and 1 - sigma by x's sign (efficientnet's
// SiLU conv 16 -> 96 at 112x112 382-394 -> 340 us, its stem 170 -> 156, Zen 5 posing as Zen 3),
// and 25 for e^-x by round/convert/shift and Cephes' degree 7. (Measured against double: sigma's
// relative error at most 2.4e-7 over [-87, 100], SiLU's at most an ulp of x.)
// (With the division in place of the estimate: efficientnet_b0 int8 5.07 against 5.39 ms, Zen 5
// capped at AVX2.) On AVX-512 the division inline (activate_tile) was faster: 1.73-1.78 ms
// against 1.87-1.91 by rcp14, and 1.88-1.92 with apply_activation out of line.
#ifdef __AVX512F__
template <int R>
[[gnu::always_inline]] inline void activate(const Requantize& rq, __m512 (&f)[R]) {
  nchwc::activate_tile<R>(*rq.activation, f);  // SiLU inline, the rest out of line
  const __m512 inverse = _mm512_set1_ps(rq.inverse_y_scale);
  for (int i = 0; i < R; ++i) f[i] = _mm512_mul_ps(f[i], inverse);
}
#else
[[gnu::always_inline]] inline __m256 logistic(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), magic = _mm256_set1_ps(0x1.8000FEp23f);  // 1.5 * 2^23 + 127
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(87.0f));
  __m256 n = _mm256_fmadd_ps(x, _mm256_set1_ps(-0x1.715476p+0f), magic);  // round(-x log2 e) + 127, low bits
  const __m256 two_n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(n), 23));
  n = _mm256_sub_ps(n, magic);
  __m256 r = _mm256_fnmsub_ps(n, _mm256_set1_ps(0x1.62e400p-1f), x);  // -x - n ln 2, in two parts
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), r);
  __m256 p = _mm256_set1_ps(0x1.0fa802p-7f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.573a52p-5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.555a6cp-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.fffdc6p-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0x1.fffff6p-1f));
  const __m256 e = _mm256_fmadd_ps(_mm256_mul_ps(r, two_n), p, two_n);  // e^-x = 2^n (1 + r p(r))
  const __m256 d = _mm256_add_ps(one, e);
  const __m256 inverse = _mm256_rcp_ps(d);
  return _mm256_fmadd_ps(inverse, _mm256_fnmadd_ps(d, inverse, one), inverse);
}

// activate on `count` vectors (the ymm tiles' activate_floats runs it over a tile's).
[[gnu::always_inline]] inline void activate_vectors(const Requantize& rq, __m256* f, int count) {
  using K = kiln_ops::Activation::Kind;
  const kiln_ops::Activation& act = *rq.activation;
  if (act.kind == K::kSilu) {
    for (int i = 0; i < count; ++i) f[i] = _mm256_mul_ps(f[i], logistic(f[i]));
  } else if (act.kind == K::kSigmoid) {
    for (int i = 0; i < count; ++i) f[i] = logistic(f[i]);
  } else {
    nchwc::apply_unclamped(act, f, count);  // out of line
  }
  nchwc::apply_clamp(act, f, count);
  const __m256 inverse = _mm256_set1_ps(rq.inverse_y_scale);
  for (int i = 0; i < count; ++i) f[i] = _mm256_mul_ps(f[i], inverse);
}

template <int R>
[[gnu::always_inline]] inline void activate(const Requantize& rq, __m256 (&f)[R]) {
  activate_vectors(rq, f, R);
}
#endif

}  // namespace kiln::qconv
