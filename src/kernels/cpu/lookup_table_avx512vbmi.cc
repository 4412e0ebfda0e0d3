// look_up_bytes on AVX-512 VBMI (lookup_table.h): vpermi2b looks 64 bytes up in 128 table entries
// at once; one for entries 0-127, one for 128-255, and a blend on each byte's top bit give the
// 256-entry answer, three instructions for 64 bytes. This file alone is compiled with
// -mavx512vbmi; it is reached only when cpu_features().has_avx512_vbmi().
#include <immintrin.h>

#include "kernels/cpu/lookup_table.h"

namespace kiln {

void look_up_bytes_avx512vbmi(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 m = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(m, x + i);
    // Each index's bit 6 picks the table's half, bits 0-5 the byte: entries (v & 127) of 0-127
    // and of 128-255; bit 7 (the sign) then picks between them.
    const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1), hi = _mm512_permutex2var_epi8(t2, v, t3);
    _mm512_mask_storeu_epi8(y + i, m, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
  }
}

}  // namespace kiln
