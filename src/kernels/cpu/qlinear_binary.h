// QLinearAdd and QLinearMul's row (qlinear_binary.cc): c = saturate(round_half_even(((a - az) *
// as op (b - bz) * bs) / cs) + cz) in float, or with `reciprocal` (1 / cs) where the caller
// found it gives every pair of codes the same c.
#pragma once

#include <cstdint>

namespace kiln {

struct QLinearBinaryParams {
  float as, bs, cs;
  float az, bz, cz, lo, hi;
  bool multiply;
};

// c[0, n) of 8-bit a and b (s8 where `is_signed`), each read at step 1 (a row) or 0 (one value
// repeated), 16 lanes at a time (AVX-512; its own translation unit).
void qlinear_binary_row_avx512(const QLinearBinaryParams& p, bool is_signed, bool reciprocal, const void* a,
                               int64_t sa, const void* b, int64_t sb, void* c, int64_t n);

}  // namespace kiln
