// kernels/cpu/vec_math_avx2.h against the C library in double: exp's relative error over the
// whole float range and its ends (underflow to 0, overflow to inf, -inf, NaN); erf's absolute
// error; the horizontal reductions and tail masks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/vec_math_avx2.h"

namespace kiln {
namespace {

// f applied to 8 copies of x, lane 0.
template <typename F>
float lane0(F f, float x) {
  float out[8];
  _mm256_storeu_ps(out, f(_mm256_set1_ps(x)));
  return out[0];
}

TEST(VecMath, ExpRelativeErrorAndEnds) {
  double worst = 0;
  for (double x = -87.0; x <= 88.72; x += 0.00731) {
    const float xf = static_cast<float>(x);
    const double want = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::fabs(lane0(vec::exp_avx2, xf) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  // Denormal results: absolutely within a few of their ulp (1.4e-45).
  for (float x : {-88.0f, -95.5f, -100.0f, -103.0f})
    EXPECT_NEAR(lane0(vec::exp_avx2, x), std::exp(double(x)), 4e-45) << x;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(lane0(vec::exp_avx2, 0.0f), 1.0f);
  EXPECT_EQ(lane0(vec::exp_avx2, -inf), 0.0f);
  EXPECT_EQ(lane0(vec::exp_avx2, -110.0f), 0.0f);
  EXPECT_EQ(lane0(vec::exp_avx2, inf), inf);
  EXPECT_EQ(lane0(vec::exp_avx2, 100.0f), inf);
  EXPECT_TRUE(std::isnan(lane0(vec::exp_avx2, std::nanf(""))));
}

TEST(VecMath, ErfAbsoluteError) {
  double worst = 0;
  for (double x = -6.0; x <= 6.0; x += 0.00137) {
    const float xf = static_cast<float>(x);
    worst =
        std::max(worst, std::fabs(lane0(vec::erf_avx2, xf) - std::erf(static_cast<double>(xf))));
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(lane0(vec::erf_avx2, 0.0f), 0.0f);
  EXPECT_NEAR(lane0(vec::erf_avx2, 1e-3f), std::erf(1e-3), 1e-10);  // relative near 0
  EXPECT_TRUE(std::isnan(lane0(vec::erf_avx2, std::nanf(""))));
}

TEST(VecMath, ReductionsAndTailMask) {
  const __m256 v = _mm256_setr_ps(1, -2, 3, 40, 5, -6, 7, 8);
  EXPECT_EQ(vec::hsum_avx2(v), 56.0f);
  EXPECT_EQ(vec::hmax_avx2(v), 40.0f);
  for (int n = 0; n < 8; ++n) {
    int lanes[8];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), vec::tail_mask_avx2(n));
    for (int i = 0; i < 8; ++i) EXPECT_EQ(lanes[i] != 0, i < n) << "n " << n << " lane " << i;
  }
}

}  // namespace
}  // namespace kiln
