// The float32 activation kernels on 8 lanes (LeakyRelu, Clip) against plain double loops of the
// ONNX formulas, bit for bit: odd lengths (masked tails), NaN, infinities and signed zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::Builder;

constexpr float kInf = std::numeric_limits<float>::infinity();

// n values: the special ones first, then a spread over [-3, 3).
Tensor special_values(int64_t n) {
  Tensor t = Tensor::make(DType::kFloat32, {n}).value();
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf, 0.0f, -0.0f,
                           1e-40f, -1e-40f, 0.75f, -0.75f, 0.8f};
  for (int64_t i = 0; i < n; ++i)
    t.data<float>()[i] = i < 10 ? special[i] : -3.0f + 6.0f * static_cast<float>(i * 37 % n) / n;
  return t;
}

template <typename F>
void expect_bits(const ir::Model& m, int64_t n, F want) {
  const Tensor x = special_values(n);
  const std::vector<Value> out = test::run_model(m, {x});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].tensor.numel(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float got = out[0].tensor.data<float>()[i];
    const float w = want(static_cast<double>(x.data<float>()[i]));
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(got)) << "element " << i;
      continue;
    }
    EXPECT_EQ(std::memcmp(&got, &w, sizeof(float)), 0)
        << "element " << i << " x=" << x.data<float>()[i] << ": " << got << " vs " << w;
  }
}

TEST(ActivationLanes, LeakyReluMatchesTheDoubleFormula) {
  for (int64_t n : {1, 7, 8, 37}) {
    Builder b(16);
    b.input("x", {n});
    b.add("LeakyRelu", {"x"}, {"y"}, {attr_f("alpha", 0.3f)});
    b.output("y");
    const double alpha = 0.3f;
    expect_bits(b.m, n, [&](double x) { return static_cast<float>(x >= 0 ? x : alpha * x); });
  }
}

TEST(ActivationLanes, ClipMatchesMaxThenMin) {
  // Bounds as inputs (opset 13), one of them absent, bounds crossed, and as attributes (opset 6).
  struct Case {
    int64_t opset;
    bool has_lo, has_hi;
    float lo, hi;
  };
  for (const Case& c : {Case{13, true, true, -0.75f, 0.8f}, Case{13, true, false, -0.4f, 0},
                        Case{13, false, true, 0, 0.0f}, Case{13, true, true, 1.0f, -1.0f},
                        Case{6, true, true, -0.0f, 6.0f}}) {
    for (int64_t n : {5, 37}) {
      Builder b(c.opset);
      b.input("x", {n});
      if (c.opset >= 11) {
        b.scalar("lo", c.lo);
        b.scalar("hi", c.hi);
        b.add("Clip", {"x", c.has_lo ? "lo" : "", c.has_hi ? "hi" : ""}, {"y"});
      } else {
        b.add("Clip", {"x"}, {"y"}, {attr_f("min", c.lo), attr_f("max", c.hi)});
      }
      b.output("y");
      const float lo = c.has_lo ? c.lo : -kInf, hi = c.has_hi ? c.hi : kInf;
      expect_bits(b.m, n, [&](double x) {
        const float f = static_cast<float>(x);
        return std::isnan(f) ? f : std::min(std::max(f, lo), hi);
      });
    }
  }
}

}  // namespace
}  // namespace kiln
