// QLinearAdd and QLinearMul's row (qlinear_binary.cc): c = saturate(round_half_even(((a - az) *
// as op (b - bz) * bs) / cs) + cz) in float, or by a shorter way (QLinearBinaryMethod) where the
// caller found it gives every pair of codes the same c.
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

// How c may be computed for one set of parameters without changing a code: c depends on the
// codes (a, b) alone, so each shorter way is tried on all 65536 pairs against the steps above
// (once per set of parameters, then remembered; qlinear_binary_method).
struct QLinearBinaryMethod {
  // Multiplying by 1 / cs in place of the division: else the rows divide the lanes within 2^-11
  // of a half (qlinear_binary.cc).
  bool reciprocal = false;
  // QLinearAdd only: v = fma(a, ra, fma(b, rb, k)) on the codes themselves, c =
  // saturate(round_half_even(v) + cz): two multiply-adds where the steps take seven and a check.
  // (ra, rb, k) is the first of the neighbours of (as / cs, bs / cs, -(az as + bz bs) / cs), up
  // to two steps of a float apart in each, that gives every pair the steps' c: about 98 % of
  // random sets of parameters have one (and v then fits int32).
  bool by_fma = false;
  float ra = 0, rb = 0, k = 0;
};
QLinearBinaryMethod qlinear_binary_method(const QLinearBinaryParams& p, bool is_signed);

// c[0, n) of 8-bit a and b (s8 where `is_signed`), each read at step 1 (a row) or 0 (one value
// repeated), 16 lanes at a time (AVX-512; its own translation unit), by `method`. b_floats: b is
// B already dequantized, (b - bz) * bs as floats at step 1 (then not by_fma).
void qlinear_binary_row_avx512(const QLinearBinaryParams& p, bool is_signed, const QLinearBinaryMethod& method,
                               bool b_floats, const void* a, int64_t sa, const void* b, int64_t sb, void* c,
                               int64_t n);

// Whether c's unrounded value, sum / cs, stays below 2^30 in magnitude for every pair of codes
// (|a - az|, |b - bz| <= 255): then the rows round it to int32 and let the saturating narrowing
// clamp it; else they clamp it in float first.
inline bool qlinear_binary_fits_int32(const QLinearBinaryParams& p) {
  const double a = 255.0 * std::fabs(p.as), b = 255.0 * std::fabs(p.bs);
  return (p.multiply ? a * b : a + b) / std::fabs(p.cs) < 0x1p30;
}

// c[0, n) of a and b of one shape, the rows over `pool` (may be null); c may be a or b.
void qlinear_binary_same_shape(const QLinearBinaryParams& p, bool is_signed, const void* a, const void* b, void* c,
                               int64_t n, ThreadPool* pool);

}  // namespace kiln
