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

// On AVX2, SiLU and Sigmoid (every conv of an efficientnet or a YOLO) take 1 / (1 + e^-x) from
// the reciprocal estimate and one Newton step (relative error ~1e-7, as the division's), not a
// division: efficientnet_b0 int8 5.07 against 5.39 ms (Zen 5 capped at AVX2; its tables: 4.66).
// x is held above -87, where e^-x stays finite (the step would give NaN from an infinite
// 1 + e^-x). On AVX-512 the division inline (activate_tile) was faster: 1.73-1.78 ms against
// 1.87-1.91 by rcp14, and 1.88-1.92 with apply_activation out of line (tables 1.37-1.41).
#ifdef __AVX512F__
template <int R>
[[gnu::always_inline]] inline void activate(const Requantize& rq, __m512 (&f)[R]) {
  nchwc::activate_tile<R>(*rq.activation, f);  // SiLU inline, the rest out of line
  const __m512 inverse = _mm512_set1_ps(rq.inverse_y_scale);
  for (int i = 0; i < R; ++i) f[i] = _mm512_mul_ps(f[i], inverse);
}
#else
[[gnu::always_inline]] inline __m256 logistic(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 d = _mm256_add_ps(one, nchwc::exp_avx2(_mm256_min_ps(_mm256_set1_ps(87.0f), _mm256_sub_ps(_mm256_setzero_ps(), x))));
  const __m256 r = _mm256_rcp_ps(d);
  return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, one), r);
}

template <int R>
[[gnu::always_inline]] inline void activate(const Requantize& rq, __m256 (&f)[R]) {
  using K = kiln_ops::Activation::Kind;
  const kiln_ops::Activation& act = *rq.activation;
  if (act.kind == K::kSilu) {
    for (int i = 0; i < R; ++i) f[i] = _mm256_mul_ps(f[i], logistic(f[i]));
  } else if (act.kind == K::kSigmoid) {
    for (int i = 0; i < R; ++i) f[i] = logistic(f[i]);
  } else {
    nchwc::apply_unclamped(act, f, R);  // out of line
  }
  nchwc::apply_clamp(act, f, R);
  const __m256 inverse = _mm256_set1_ps(rq.inverse_y_scale);
  for (int i = 0; i < R; ++i) f[i] = _mm256_mul_ps(f[i], inverse);
}
#endif

}  // namespace kiln::qconv
