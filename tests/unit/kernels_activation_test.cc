// The float32 activation kernels on 8 lanes against plain double loops of their formulas:
// LeakyRelu and Clip bit for bit (odd lengths, masked tails, NaN, infinities, signed zeros), and
// ai.kiln.Gelu / BiasGelu within a few ulp.
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

TEST(ActivationLanes, GeluAndBiasGeluWithinAFewUlp) {
  for (const char* approx : {"none", "tanh"}) {
    for (const bool bias : {false, true}) {
      SCOPED_TRACE(std::string(approx) + (bias ? " BiasGelu" : " Gelu"));
      Builder b(17);
      b.m.opsets["ai.kiln"] = 1;
      const int64_t rows = 3, cols = 37;
      b.input("x", {rows, cols});
      std::vector<std::string> in = {"x"};
      if (bias) {
        b.weight("b", {cols});
        in.push_back("b");
      }
      ir::Node& n = b.add(bias ? "BiasGelu" : "Gelu", in, {"y"}, {test::attr_s("approximate", approx)});
      n.domain = "ai.kiln";
      b.output("y");
      const Tensor x = b.random({rows, cols}, -6, 6);
      const std::vector<Value> out = test::run_model(b.m, {x});
      ASSERT_EQ(out.size(), 1u);
      const float* y = out[0].tensor.data<float>();
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float s = x.data<float>()[i] + (bias ? b.m.graph.initializers.at("b").data<float>()[i % cols] : 0.0f);
        const double v = s;
        const double want = std::string(approx) == "tanh"
                                ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                                : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        EXPECT_NEAR(y[i], want, 2e-6 * std::max(1.0, std::fabs(want))) << "element " << i << " x=" << s;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
