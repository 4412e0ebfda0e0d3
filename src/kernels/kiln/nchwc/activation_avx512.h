// The epilogue activations on AVX-512 registers: activation_avx2.h's formulas on 16 lanes, for
// the AVX-512 blocked kernels' tiles. Only include from files compiled with KILN_AVX512_FLAGS.
#pragma once

#include <immintrin.h>

#include "kernels/kiln/epilogue_activation.h"

namespace kiln::nchwc {

// e^x for x in float range, |relative error| < 3e-7 (exp_avx2's polynomial).
inline __m512 exp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.37f));
  const __m512 fx = _mm512_roundscale_ps(
      _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvttps_epi32(fx), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

inline __m512 sigmoid_avx512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// v[i] = act(v[i]) for i < count.
inline void apply_activation(const kiln_ops::Activation& act, __m512* v, int count) {
  using K = kiln_ops::Activation::Kind;
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  switch (act.kind) {
    case K::kNone:
      return;
    case K::kRelu:
      for (int i = 0; i < count; ++i) v[i] = _mm512_max_ps(v[i], zero);
      return;
    case K::kClip: {
      const __m512 lo = _mm512_set1_ps(static_cast<float>(act.p0));
      const __m512 hi = _mm512_set1_ps(static_cast<float>(act.p1));
      for (int i = 0; i < count; ++i) v[i] = _mm512_min_ps(_mm512_max_ps(v[i], lo), hi);
      return;
    }
    case K::kLeakyRelu: {
      const __m512 a = _mm512_set1_ps(static_cast<float>(act.p0));
      for (int i = 0; i < count; ++i)
        v[i] = _mm512_mask_mul_ps(v[i], _mm512_cmp_ps_mask(v[i], zero, _CMP_LT_OQ), v[i], a);
      return;
    }
    case K::kHardSigmoid: {
      const __m512 a = _mm512_set1_ps(static_cast<float>(act.p0));
      const __m512 b = _mm512_set1_ps(static_cast<float>(act.p1));
      for (int i = 0; i < count; ++i)
        v[i] = _mm512_max_ps(zero, _mm512_min_ps(one, _mm512_fmadd_ps(a, v[i], b)));
      return;
    }
    case K::kHardSwish: {
      const __m512 sixth = _mm512_set1_ps(1.0f / 6.0f), half = _mm512_set1_ps(0.5f);
      for (int i = 0; i < count; ++i)
        v[i] = _mm512_mul_ps(
            v[i], _mm512_max_ps(zero, _mm512_min_ps(one, _mm512_fmadd_ps(v[i], sixth, half))));
      return;
    }
    case K::kSigmoid:
      for (int i = 0; i < count; ++i) v[i] = sigmoid_avx512(v[i]);
      return;
    case K::kSilu:
      for (int i = 0; i < count; ++i) v[i] = _mm512_mul_ps(v[i], sigmoid_avx512(v[i]));
      return;
    default:
      for (int i = 0; i < count; ++i) {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, v[i]);
        for (float& l : lanes) l = static_cast<float>(act(l));
        v[i] = _mm512_load_ps(lanes);
      }
      return;
  }
}

}  // namespace kiln::nchwc
