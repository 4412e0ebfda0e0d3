// float16 conversions checked against the CPU's own F16C instructions (an independent reference),
// bfloat16 against its definition, and float8 round trips over every code.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/float_convert.h"

namespace kiln {
namespace {

TEST(FloatConvert, HalfMatchesF16cOnEveryCodeAndRandomFloats) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = _cvtsh_ss(static_cast<uint16_t>(h));
    const float got = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << h;
    }
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    const uint16_t want = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
    } else {
      EXPECT_EQ(float_to_half(f), want) << f;
    }
  }
}

// The array conversions (vector bodies and scalar tails) give the scalar conversions' bits on
// random bit patterns, NaNs aside (those stay NaN).
TEST(FloatConvert, ArraysMatchTheScalarConversions) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t n : {0, 1, 7, 8, 9, 100, 4099}) {
    std::vector<float> f(static_cast<size_t>(n));
    std::vector<uint16_t> h(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u = bits(rng);
      if (i % 3 == 0) u = (u & 0x8fffffffu) | 0x38000000u;  // many in float16's range
      std::memcpy(&f[static_cast<size_t>(i)], &u, 4);
      h[static_cast<size_t>(i)] = static_cast<uint16_t>(bits(rng));
    }
    std::vector<uint16_t> half(static_cast<size_t>(n)), bf(static_cast<size_t>(n));
    std::vector<float> from_half(static_cast<size_t>(n)), from_bf(static_cast<size_t>(n));
    floats_to_halves(f.data(), half.data(), n);
    floats_to_bfloat16s(f.data(), bf.data(), n);
    halves_to_floats(h.data(), from_half.data(), n);
    bfloat16s_to_floats(h.data(), from_bf.data(), n);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      if (std::isnan(f[i])) {
        EXPECT_TRUE(std::isnan(half_to_float(half[i])) && std::isnan(bfloat16_to_float(bf[i])));
      } else {
        EXPECT_EQ(half[i], float_to_half(f[i])) << f[i];
        EXPECT_EQ(bf[i], float_to_bfloat16(f[i])) << f[i];
      }
      const float want_half = half_to_float(h[i]), want_bf = bfloat16_to_float(h[i]);
      if (std::isnan(want_half)) EXPECT_TRUE(std::isnan(from_half[i]));
      else EXPECT_EQ(std::memcmp(&want_half, &from_half[i], 4), 0) << h[i];
      if (std::isnan(want_bf)) EXPECT_TRUE(std::isnan(from_bf[i]));
      else EXPECT_EQ(std::memcmp(&want_bf, &from_bf[i], 4), 0) << h[i];
    }
  }
}

TEST(FloatConvert, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly between two bfloat16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(NAN))));
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bfloat16_to_float(static_cast<uint16_t>(b));
    if (!std::isnan(f)) EXPECT_EQ(float_to_bfloat16(f), b);
  }
}

TEST(FloatConvert, Float8EveryFiniteCodeRoundTrips) {
  for (DType t : {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ}) {
    for (int b = 0; b < 256; ++b) {
      const float f = float8_to_float(t, static_cast<uint8_t>(b));
      if (!std::isfinite(f)) continue;
      const uint8_t back = float_to_float8(t, f);
      EXPECT_EQ(float8_to_float(t, back), f) << dtype_name(t) << " code " << b;
    }
  }
  EXPECT_EQ(float8_to_float(DType::kFloat8E4M3FN, float_to_float8(DType::kFloat8E4M3FN, 1e6f)), 448.0f);
  EXPECT_EQ(float8_to_float(DType::kFloat8E4M3FN, float_to_float8(DType::kFloat8E4M3FN, -1e6f)), -448.0f);
  EXPECT_TRUE(std::isnan(float8_to_float(DType::kFloat8E4M3FN, float_to_float8(DType::kFloat8E4M3FN, 1e6f, false))));
  EXPECT_EQ(float8_to_float(DType::kFloat8E4M3FNUZ, float_to_float8(DType::kFloat8E4M3FNUZ, -INFINITY)), -240.0f);
}

}  // namespace
}  // namespace kiln
