// QLinearAdd and QLinearMul's row on AVX-512 (qlinear_binary.h): the AVX2 row's operations in
// the same order, on 16 lanes, the tail under a mask; reached only where the CPU has AVX-512.
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/qlinear_binary.h"

// GCC 12 warns of the intrinsics' undefined pass-through operands (they have no mask).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kiln {
namespace {

// As qlinear_binary.cc's.
enum class Way { kDivision, kReciprocal, kFma };

template <typename T, Way kWay, bool kBFloats>
void row(const QLinearBinaryParams& p, const QLinearBinaryMethod& m, const T* a, int64_t sa, const void* b, int64_t sb,
         T* c, int64_t n) {
  const __m512 as = _mm512_set1_ps(p.as), bs = _mm512_set1_ps(p.bs), cs = _mm512_set1_ps(p.cs);
  const __m512 rcs = _mm512_set1_ps(1.0f / p.cs);
  const __m512 az = _mm512_set1_ps(p.az), bz = _mm512_set1_ps(p.bz), cz = _mm512_set1_ps(p.cz);
  const __m512 ra = _mm512_set1_ps(m.ra), rb = _mm512_set1_ps(m.rb), k = _mm512_set1_ps(m.k);
  const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
  const __m512i cz_int = _mm512_set1_epi32(static_cast<int32_t>(p.cz));
  const __m512 near_half = _mm512_set1_ps(0.5f - 0x1p-11f);
  const bool in_int32 = qlinear_binary_fits_int32(p);
  const T* b_codes = static_cast<const T*>(b);
  const float* b_floats = static_cast<const float*>(b);
  auto codes = [](const T* x, int64_t step, int64_t i, __mmask16 m) {
    if (!step) return _mm512_set1_ps(static_cast<float>(x[0]));
    const __m128i bytes = _mm_maskz_loadu_epi8(m, x + i);
    return _mm512_cvtepi32_ps(std::is_signed_v<T> ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes));
  };
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 v;
    if constexpr (kWay == Way::kFma) {
      v = _mm512_fmadd_ps(codes(a, sa, i, mask), ra, _mm512_fmadd_ps(codes(b_codes, sb, i, mask), rb, k));
    } else {
      const __m512 fa = _mm512_mul_ps(_mm512_sub_ps(codes(a, sa, i, mask), az), as);
      const __m512 fb = kBFloats ? _mm512_maskz_loadu_ps(mask, b_floats + i)
                                 : _mm512_mul_ps(_mm512_sub_ps(codes(b_codes, sb, i, mask), bz), bs);
      const __m512 sum = p.multiply ? _mm512_mul_ps(fa, fb) : _mm512_add_ps(fa, fb);
      // The division only where the multiply might round the other way (qlinear_binary.cc).
      v = _mm512_mul_ps(sum, rcs);
      if (kWay == Way::kDivision) {
        const __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (_mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, r)), near_half, _CMP_GE_OQ)) v = _mm512_div_ps(sum, cs);
      }
    }
    // As the AVX2 row: cvtps rounds half to even; the saturating narrowing clamps where v fits
    // int32 (u8 from the values at least 0), else the clamp is in float.
    __m128i bytes;
    if (in_int32) {
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), cz_int);
      bytes = std::is_signed_v<T> ? _mm512_cvtsepi32_epi8(q)
                                  : _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, _mm512_setzero_si512()));
    } else {
      const __m512 r = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), cz);
      bytes = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi)));  // in range: narrows
    }
    _mm_mask_storeu_epi8(c + i, mask, bytes);
  }
}

template <typename T>
void typed_row(const QLinearBinaryParams& p, const QLinearBinaryMethod& m, bool b_floats, const void* a, int64_t sa,
               const void* b, int64_t sb, void* c, int64_t n) {
  const T* x = static_cast<const T*>(a);
  T* z = static_cast<T*>(c);
  if (b_floats)
    (m.reciprocal ? row<T, Way::kReciprocal, true> : row<T, Way::kDivision, true>)(p, m, x, sa, b, sb, z, n);
  else if (m.by_fma)
    row<T, Way::kFma, false>(p, m, x, sa, b, sb, z, n);
  else
    (m.reciprocal ? row<T, Way::kReciprocal, false> : row<T, Way::kDivision, false>)(p, m, x, sa, b, sb, z, n);
}

}  // namespace

void qlinear_binary_row_avx512(const QLinearBinaryParams& p, bool is_signed, const QLinearBinaryMethod& method,
                               bool b_floats, const void* a, int64_t sa, const void* b, int64_t sb, void* c,
                               int64_t n) {
  (is_signed ? typed_row<int8_t> : typed_row<uint8_t>)(p, method, b_floats, a, sa, b, sb, c, n);
}

}  // namespace kiln
