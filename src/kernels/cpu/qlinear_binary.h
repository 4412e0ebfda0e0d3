// QLinearAdd and QLinearMul's row (qlinear_binary.cc): c = saturate(round_half_even(((a - az) *
// as op (b - bz) * bs) / cs) + cz) in float, or with `reciprocal` (1 / cs) where the caller
// found it gives every pair of codes the same c.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln {

class ThreadPool;

struct QLinearBinaryParams {
  float as, bs, cs;
  float az, bz, cz, lo, hi;
  bool multiply;
};

// c[0, n) of 8-bit a and b (s8 where `is_signed`), each read at step 1 (a row) or 0 (one value
// repeated), 16 lanes at a time (AVX-512; its own translation unit). b_floats: b is B already
// dequantized, (b - bz) * bs as floats at step 1.
void qlinear_binary_row_avx512(const QLinearBinaryParams& p, bool is_signed, bool reciprocal, bool b_floats,
                               const void* a, int64_t sa, const void* b, int64_t sb, void* c, int64_t n);

// Whether c's unrounded value, sum / cs, stays below 2^30 in magnitude for every pair of codes
// (|a - az|, |b - bz| <= 255): then the rows round it to int32 and let the saturating narrowing
// clamp it; else they clamp it in float first.
inline bool qlinear_binary_fits_int32(const QLinearBinaryParams& p) {
  const double a = 255.0 * std::fabs(p.as), b = 255.0 * std::fabs(p.bs);
  return (p.multiply ? a * b : a + b) / std::fabs(p.cs) < 0x1p30;
}

// Whether multiplying by 1 / cs gives the division's c for every pair of codes (all 65536 tried
// once per parameter set, then remembered).
bool qlinear_binary_reciprocal_is_exact(const QLinearBinaryParams& p, bool is_signed);

// c[0, n) of a and b of one shape, the rows over `pool` (may be null); c may be a or b.
void qlinear_binary_same_shape(const QLinearBinaryParams& p, bool is_signed, const void* a, const void* b, void* c,
                               int64_t n, ThreadPool* pool);

}  // namespace kiln
