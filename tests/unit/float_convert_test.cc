// float16 conversions checked against the CPU's own F16C instructions (an independent reference),
// bfloat16 against its definition, and float8 round trips over every code.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>

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
