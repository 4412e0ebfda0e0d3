// The epilogue activations on AVX-512 registers: activation_avx2.h's formulas on 16 lanes (exp in
// a shorter form of its own), for the AVX-512 blocked kernels' tiles. Only include from files
// compiled with KILN_AVX512_FLAGS.
#pragma once

#include <immintrin.h>

#include "kernels/kiln/epilogue_activation.h"

namespace kiln::nchwc {

// e^x as 2^n * e^r with n = round(x * log2(e)) and r = x - n * ln2 (ln2 in two parts, so that r
// stays exact for large x), |r| <= ln2 / 2: e^r by its degree-6 Taylor polynomial (|relative
// error| < 3e-7), 2^n applied by vscalefps, which also saturates to inf and 0 past float's range,
// so no clamps. Fewer instructions than exp_avx2's Cephes form: SiLU epilogues run it on every
// output, where it cost as much as the 1x1 convs' FMAs.
inline __m512 exp_avx512(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// 1 / (1 + e^-x): e^-x = inf past x < -88 gives 0, as it should.
inline __m512 sigmoid_avx512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// x * sigmoid(x) as x / (1 + e^-x): one multiply less.
inline __m512 silu_avx512(__m512 x) {
  return _mm512_div_ps(
      x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// v[i] = act(v[i]) for i < count, without act's clamp.
inline void apply_unclamped(const kiln_ops::Activation& act, __m512* v, int count) {
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
      for (int i = 0; i < count; ++i) v[i] = silu_avx512(v[i]);
      return;
    default:
      for (int i = 0; i < count; ++i) {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, v[i]);
        for (float& l : lanes) l = static_cast<float>(act.unclamped(l));
        v[i] = _mm512_load_ps(lanes);
      }
      return;
  }
}

// act's clamp (a Clip absorbed after it) on v[i], i < count.
[[gnu::always_inline]] inline void apply_clamp(const kiln_ops::Activation& act, __m512* v, int count) {
  if (!act.clamped()) return;
  const __m512 lo = _mm512_set1_ps(static_cast<float>(act.lo));
  const __m512 hi = _mm512_set1_ps(static_cast<float>(act.hi));
#pragma GCC unroll 8
  for (int i = 0; i < count; ++i) v[i] = _mm512_min_ps(_mm512_max_ps(v[i], lo), hi);
}

// v[i] = act(v[i]) for i < count.
inline void apply_activation(const kiln_ops::Activation& act, __m512* v, int count) {
  apply_unclamped(act, v, count);
  apply_clamp(act, v, count);
}

// apply_activation on a tile held in registers: Relu, Clip (mobilenet's) and SiLU
// (efficientnet's) inline, the rest through apply_unclamped, which GCC leaves out of line with
// the tile spilled around the call; then the clamp.
template <int R>
[[gnu::always_inline]] inline void activate_tile(const kiln_ops::Activation& act, __m512 (&acc)[R]) {
  using K = kiln_ops::Activation::Kind;
  if (act.kind == K::kRelu || act.kind == K::kClip) {
    const bool clip = act.kind == K::kClip;
    const __m512 lo = _mm512_set1_ps(clip ? static_cast<float>(act.p0) : 0.0f);
    const __m512 hi = _mm512_set1_ps(clip ? static_cast<float>(act.p1) : __builtin_inff());
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm512_min_ps(_mm512_max_ps(acc[r], lo), hi);
  } else if (act.kind == K::kSilu) {  // efficientnet's
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = silu_avx512(acc[r]);
  } else if (act.kind != K::kNone) {
    apply_unclamped(act, acc, R);
  }
  apply_clamp(act, acc, R);
}

}  // namespace kiln::nchwc
