// look_up_bytes (lookup_table.h): AVX-512 VBMI's where the CPU has it, else AVX2's vpshufb.
#include "kernels/cpu/lookup_table.h"

#include <immintrin.h>

#include "core/cpu_features.h"

namespace kiln {

namespace {

// vpshufb looks 32 bytes up in a 16-entry row at once and gives 0 where an index's top bit is
// set. Indices (x & 127) - 16r are negative, and so give 0, for every row r past x's own row
// k; rows 0..k all give an entry. So with the rows stored as differences (row r XOR row r-1;
// rows 0 and 8 as they are), the XOR of the eight lookups is row k's entry, for the table's
// first half and its second; x's top bit picks the half. 41 instructions for 32 bytes, against
// a load and a store a byte (2x faster on Zen 5) or a gather of 8 int32 per instruction (4x).
struct Rows {
  __m256i difference[16];
  explicit Rows(const uint8_t* table) {
    for (int r = 0; r < 16; ++r) {
      __m128i row = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16 * r));
      if (r % 8 != 0) row = _mm_xor_si128(row, _mm_loadu_si128(reinterpret_cast<const __m128i*>(table + 16 * (r - 1))));
      difference[r] = _mm256_broadcastsi128_si256(row);
    }
  }
  __m256i look_up(__m256i x) const {
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256i index = _mm256_and_si256(x, _mm256_set1_epi8(0x7f));
    __m256i low = _mm256_setzero_si256(), high = _mm256_setzero_si256();
    for (int r = 0; r < 8; ++r) {
      low = _mm256_xor_si256(low, _mm256_shuffle_epi8(difference[r], index));
      high = _mm256_xor_si256(high, _mm256_shuffle_epi8(difference[r + 8], index));
      index = _mm256_sub_epi8(index, sixteen);
    }
    return _mm256_blendv_epi8(low, high, x);
  }
};

void look_up_bytes_avx2(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
  const Rows rows(table);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), rows.look_up(v));
  }
  for (; i < n; ++i) y[i] = table[x[i]];
}

}  // namespace

void look_up_bytes(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
  static const bool vbmi = cpu_features().has_avx512_vbmi();  // the level is fixed once kernels run
  if (vbmi) return look_up_bytes_avx512vbmi(table, x, y, n);
  look_up_bytes_avx2(table, x, y, n);
}

}  // namespace kiln
