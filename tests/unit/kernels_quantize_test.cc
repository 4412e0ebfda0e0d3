// DynamicQuantizeLinear against the ONNX formula written out in plain float code, on lengths
// that use the 32-wide vector loop and its tail, with NaN, ties at .5 (rounded half to even),
// values that saturate, and all-positive / all-negative / all-zero inputs.
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

}  // namespace
}  // namespace kiln
