// The epilogue activations of the ai.kiln ops on AVX2 registers, for the blocked kernels' tiles.
// Piecewise-linear ones are exact; Sigmoid/Silu use a Cephes-style exp (about 2 ulp); the rest
// (Gelu, GeluTanh, Tanh) go lane by lane through the double reference of epilogue_activation.h.
#pragma once

#include <immintrin.h>

#include <type_traits>

#include "kernels/kiln/epilogue_activation.h"

namespace kiln::nchwc {

// e^x for x in float range, |relative error| < 3e-7; overflow saturates at e^88.37.
inline __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.37f));
  const __m256 fx = _mm256_floor_ps(
      _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

inline __m256 sigmoid_avx2(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// act(v) without act's clamp for a kind known at compile time, p0 and p1 its parameters as
// vectors: what apply_unclamped computes, for tiles that keep their accumulators in registers.
// Not for Gelu, GeluTanh and Tanh, which go lane by lane.
template <kiln_ops::Activation::Kind kKind>
[[gnu::always_inline]] inline __m256 unclamped_vector(__m256 v, __m256 p0, __m256 p1) {
  using K = kiln_ops::Activation::Kind;
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
  if constexpr (kKind == K::kNone) return v;
  if constexpr (kKind == K::kRelu) return _mm256_max_ps(v, zero);
  if constexpr (kKind == K::kClip) return _mm256_min_ps(_mm256_max_ps(v, p0), p1);
  if constexpr (kKind == K::kLeakyRelu)
    return _mm256_blendv_ps(_mm256_mul_ps(v, p0), v, _mm256_cmp_ps(v, zero, _CMP_GE_OQ));
  if constexpr (kKind == K::kHardSigmoid)
    return _mm256_max_ps(zero, _mm256_min_ps(one, _mm256_fmadd_ps(p0, v, p1)));
  if constexpr (kKind == K::kHardSwish)
    return _mm256_mul_ps(v, _mm256_max_ps(zero, _mm256_min_ps(one, _mm256_fmadd_ps(
                                                                    v, _mm256_set1_ps(1.0f / 6.0f),
                                                                    _mm256_set1_ps(0.5f)))));
  if constexpr (kKind == K::kSigmoid) return sigmoid_avx2(v);
  if constexpr (kKind == K::kSilu) return _mm256_mul_ps(v, sigmoid_avx2(v));
  static_assert(kKind != K::kGelu && kKind != K::kGeluTanh && kKind != K::kTanh,
                "computed lane by lane");
  return v;
}

// v[i] = act(v[i]) for i < count, without act's clamp.
inline void apply_unclamped(const kiln_ops::Activation& act, __m256* v, int count) {
  using K = kiln_ops::Activation::Kind;
  const __m256 p0 = _mm256_set1_ps(static_cast<float>(act.p0));
  const __m256 p1 = _mm256_set1_ps(static_cast<float>(act.p1));
  auto each = [&](auto kind) {
    for (int i = 0; i < count; ++i) v[i] = unclamped_vector<decltype(kind)::value>(v[i], p0, p1);
  };
  switch (act.kind) {
    case K::kNone: return;
    case K::kRelu: return each(std::integral_constant<K, K::kRelu>{});
    case K::kClip: return each(std::integral_constant<K, K::kClip>{});
    case K::kLeakyRelu: return each(std::integral_constant<K, K::kLeakyRelu>{});
    case K::kHardSigmoid: return each(std::integral_constant<K, K::kHardSigmoid>{});
    case K::kHardSwish: return each(std::integral_constant<K, K::kHardSwish>{});
    case K::kSigmoid: return each(std::integral_constant<K, K::kSigmoid>{});
    case K::kSilu: return each(std::integral_constant<K, K::kSilu>{});
    default:
      for (int i = 0; i < count; ++i) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, v[i]);
        for (float& l : lanes) l = static_cast<float>(act.unclamped(l));
        v[i] = _mm256_load_ps(lanes);
      }
      return;
  }
}

// act's clamp (a Clip absorbed after it) on v[i], i < count.
[[gnu::always_inline]] inline void apply_clamp(const kiln_ops::Activation& act, __m256* v, int count) {
  if (!act.clamped()) return;
  const __m256 lo = _mm256_set1_ps(static_cast<float>(act.lo));
  const __m256 hi = _mm256_set1_ps(static_cast<float>(act.hi));
#pragma GCC unroll 8
  for (int i = 0; i < count; ++i) v[i] = _mm256_min_ps(_mm256_max_ps(v[i], lo), hi);
}

// v[i] = act(v[i]) for i < count.
inline void apply_activation(const kiln_ops::Activation& act, __m256* v, int count) {
  apply_unclamped(act, v, count);
  apply_clamp(act, v, count);
}

// apply_activation on a tile held in registers: Relu, Clip (mobilenet's) and SiLU
// (efficientnet's) inline, the rest through apply_unclamped, which GCC leaves out of line with
// the tile spilled around the call; then the clamp.
template <int R>
[[gnu::always_inline]] inline void activate_tile(const kiln_ops::Activation& act, __m256 (&acc)[R]) {
  using K = kiln_ops::Activation::Kind;
  if (act.kind == K::kRelu || act.kind == K::kClip) {
    const bool clip = act.kind == K::kClip;
    const __m256 lo = _mm256_set1_ps(clip ? static_cast<float>(act.p0) : 0.0f);
    const __m256 hi = _mm256_set1_ps(clip ? static_cast<float>(act.p1) : __builtin_inff());
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_min_ps(_mm256_max_ps(acc[r], lo), hi);
  } else if (act.kind == K::kSilu) {  // efficientnet's
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_mul_ps(acc[r], sigmoid_avx2(acc[r]));
  } else if (act.kind != K::kNone) {
    apply_unclamped(act, acc, R);
  }
  apply_clamp(act, acc, R);
}

}  // namespace kiln::nchwc
