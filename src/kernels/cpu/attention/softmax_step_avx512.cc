// softmax_step on 16 lanes (softmax_step.h): softmax_step_avx2 and exp_avx2 operation for
// operation, so that a query's probabilities are the same on either ISA.
#include <immintrin.h>

#include <limits>

#include "kernels/cpu/attention/softmax_step.h"

// GCC 12 warns of the intrinsics' undefined pass-through operands (they have no mask).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kiln::attention {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// exp_avx2 (vec_math_avx2.h) on 16 lanes, its 2^n by one vscalefps (p * 2^n rounded once, as
// exp_avx2's two exact multiplies by 2^(n/2) then a rounding one give it): the same values, with
// six fewer instructions a vector, which the softmax of head_dim 64 spends as much time on as
// its two products.
__m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-103.972077f), hi = _mm512_set1_ps(88.7228391f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  const __mmask16 overflow = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
  const __m512 xc = _mm512_max_ps(lo, _mm512_min_ps(hi, x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512 y = _mm512_scalef_ps(p, n);
  y = _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), y);
  return _mm512_mask_mov_ps(y, overflow, _mm512_set1_ps(kInf));
}

}  // namespace

bool softmax_step_avx512(float* st, int64_t cols, int64_t nr, float* m, float* l, float* factor) {
  bool rescale = false;
  for (int64_t q = 0; q < nr; q += 16) {
    __m512 mx = _mm512_set1_ps(-kInf);
    for (int64_t j = 0; j < cols; ++j) mx = _mm512_max_ps(mx, _mm512_load_ps(st + j * nr + q));
    const __m512 m_old = _mm512_load_ps(m + q);
    const __m512 m_new = _mm512_max_ps(m_old, mx);
    // Exponents relative to 0 while every score so far is -inf, so they give 0, not NaN.
    const __m512 ref = _mm512_mask_mov_ps(m_new, _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(-kInf), _CMP_EQ_OQ),
                                          _mm512_setzero_ps());
    const __m512 f = exp16(_mm512_sub_ps(m_old, ref));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols; ++j) {
      float* row = st + j * nr + q;
      const __m512 e = exp16(_mm512_sub_ps(_mm512_load_ps(row), ref));
      _mm512_store_ps(row, e);
      sum = _mm512_add_ps(sum, e);
    }
    _mm512_store_ps(l + q, _mm512_fmadd_ps(_mm512_load_ps(l + q), f, sum));
    _mm512_store_ps(m + q, m_new);
    _mm512_store_ps(factor + q, f);
    rescale |= _mm512_cmp_ps_mask(f, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0;
  }
  return rescale;
}

}  // namespace kiln::attention
