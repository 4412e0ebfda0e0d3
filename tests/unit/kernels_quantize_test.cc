// DynamicQuantizeLinear and QuantizeLinear against the ONNX formula written out in plain float
// code (a division), on lengths that use the vector loops and their tails, with NaN, ties at .5
// (rounded half to even), values a few ulps either side of every half (where the vector loops'
// multiply by 1 / scale would round the other way), values that saturate, subnormal scales and
// reciprocals, and all-positive / all-negative / all-zero inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "pass_test_util.h"

namespace kiln {
namespace {

void check(const std::vector<float>& x) {
  SCOPED_TRACE(::testing::Message() << x.size() << " values");
  test::Builder b(11);
  b.input("x", {static_cast<int64_t>(x.size())});
  b.add("DynamicQuantizeLinear", {"x"}, {"y", "scale", "zp"});
  b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
  b.m.graph.outputs.push_back(ir::ValueInfo{"scale", ir::TypeInfo::tensor(DType::kFloat32), ""});
  b.m.graph.outputs.push_back(ir::ValueInfo{"zp", ir::TypeInfo::tensor(DType::kUInt8), ""});
  Tensor t = Tensor::make(DType::kFloat32, {static_cast<int64_t>(x.size())}).value();
  std::copy(x.begin(), x.end(), t.data<float>());
  const std::vector<Value> out = test::run_model(b.m, {t});
  ASSERT_EQ(out.size(), 3u);
  // The formula: the range includes 0 and skips NaN; scale (max - min) / 255; zero point and y
  // rounded half to even and saturated to [0, 255] (NaN to 0).
  float mn = 0, mx = 0;
  for (float v : x)
    if (!std::isnan(v)) mn = std::min(mn, v), mx = std::max(mx, v);
  const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
  const float zp = std::nearbyint(std::min(255.0f, std::max(0.0f, -mn / scale)));
  EXPECT_EQ(out[1].tensor.data<float>()[0], scale);
  EXPECT_EQ(out[2].tensor.data<uint8_t>()[0], static_cast<uint8_t>(zp));
  for (size_t i = 0; i < x.size(); ++i) {
    const float q = std::nearbyint(x[i] / scale) + zp;
    const uint8_t want = std::isnan(q) ? 0 : static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, q)));
    ASSERT_EQ(out[0].tensor.data<uint8_t>()[i], want) << "element " << i << " x=" << x[i];
  }
}

TEST(DynamicQuantizeLinear, VectorLoopMatchesTheFormula) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-3.0f, 5.0f);
  for (size_t n : {size_t{1}, size_t{31}, size_t{32}, size_t{100}, size_t{1037}}) {
    std::vector<float> x(n);
    for (float& v : x) v = d(rng);
    check(x);
    for (float& v : x) v = std::fabs(v);  // all positive: zero point 0
    check(x);
    for (float& v : x) v = -v;  // all negative: zero point 255
    check(x);
  }
  // Ties: with the range [-1.275, 1.275] the scale is 0.01 and k/2 * 0.01 lands on .5 steps.
  std::vector<float> ties;
  for (int k = -255; k <= 255; ++k) ties.push_back(static_cast<float>(k) * 0.005f);
  ties.push_back(1.275f);
  ties.push_back(-1.275f);
  ties.push_back(std::numeric_limits<float>::quiet_NaN());  // in the tail
  ties.insert(ties.begin() + 5, std::numeric_limits<float>::quiet_NaN());  // in the vector loop
  check(ties);
  check(std::vector<float>(40, 0.0f));
}

// x / scale a few ulps either side of k + 1/2 for every k that lands in or near the codes: where
// a multiply by 1 / scale can round to the other integer.
std::vector<float> near_halves(float scale, int k_lo, int k_hi) {
  std::vector<float> x;
  for (int k = k_lo; k <= k_hi; ++k) {
    float v = (static_cast<float>(k) + 0.5f) * scale;
    for (int u = 0; u < 4; ++u) v = std::nextafter(v, -std::numeric_limits<float>::infinity());
    for (int u = 0; u < 9; ++u, v = std::nextafter(v, std::numeric_limits<float>::infinity())) x.push_back(v);
  }
  return x;
}

TEST(DynamicQuantizeLinear, ValuesNearHalvesRoundAsTheDivisionDoes) {
  for (float top : {1.0f, 2.55f, 0.3711f, 1234.5f}) {
    // The range [-top/2, top] sets the scale (the kernel's expression) and holds the values.
    std::vector<float> x = near_halves((top - (-top / 2)) / 255.0f, -84, 169);
    x.push_back(-top / 2);
    x.push_back(top);
    check(x);
  }
}

TEST(QuantizeLinear, PerTensorVectorLoopMatchesTheFormula) {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float scale;
    DType type;
    int zero_point;
  };
  const Case cases[] = {{0.01f, DType::kUInt8, 0},    {0.0137f, DType::kUInt8, 128}, {1.7e-5f, DType::kInt8, 0},
                        {3.3f, DType::kInt8, -128},   {0.25f, DType::kInt8, 100},    {1e-39f, DType::kUInt8, 3},
                        {3e38f, DType::kInt8, -5}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "scale " << c.scale << " zero point " << c.zero_point);
    std::vector<float> x = near_halves(c.scale, -400, 400);
    for (float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e30f, -1e30f, 3e-41f})
      x.insert(x.begin() + static_cast<long>(x.size() / 3), v);  // in the vector loop
    x.push_back(std::numeric_limits<float>::quiet_NaN());      // in the tail
    test::Builder b(13);
    const int64_t n = static_cast<int64_t>(x.size());
    b.input("x", {n});
    Tensor s = Tensor::make(DType::kFloat32, {}).value();
    s.data<float>()[0] = c.scale;
    Tensor z = Tensor::make(c.type, {}).value();
    if (c.type == DType::kUInt8) z.data<uint8_t>()[0] = static_cast<uint8_t>(c.zero_point);
    else z.data<int8_t>()[0] = static_cast<int8_t>(c.zero_point);
    b.m.graph.initializers["s"] = s;
    b.m.graph.initializers["z"] = z;
    b.add("QuantizeLinear", {"x", "s", "z"}, {"y"});
    b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(c.type), ""});
    Tensor t = Tensor::make(DType::kFloat32, {n}).value();
    std::copy(x.begin(), x.end(), t.data<float>());
    const std::vector<Value> out = test::run_model(b.m, {t});
    ASSERT_EQ(out.size(), 1u);
    const float lo = c.type == DType::kUInt8 ? 0.0f : -128.0f, hi = c.type == DType::kUInt8 ? 255.0f : 127.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float q = std::nearbyint(x[i] / c.scale) + static_cast<float>(c.zero_point);
      const int want = std::isnan(q) ? static_cast<int>(lo) : static_cast<int>(std::min(hi, std::max(lo, q)));
      const int got = c.type == DType::kUInt8 ? out[0].tensor.data<uint8_t>()[i] : out[0].tensor.data<int8_t>()[i];
      ASSERT_EQ(got, want) << "element " << i << " x=" << x[i] << " x/scale=" << x[i] / c.scale;
    }
  }
}

}  // namespace
}  // namespace kiln
