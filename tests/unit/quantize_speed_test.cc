// The quantizer's speed check (kiln/quantize.h, QuantizeOptions::check_speed; speed_check.cc):
// its rule; each planned node cut out and timed as its fused 8-bit kernel and in float; dynamic
// nodes with their bias Add; static quantization's dynamic nodes; and, end to end, 3-D convs
// (8-bit on a reference loop) kept in float with the reason. These tests keep the check on; the
// others turn it off (test::untimed()).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kiln/model.h"
#include "pass_test_util.h"
#include "quantize_test_util.h"
#include "quantize/calibration.h"
#include "quantize/quantize_internal.h"

namespace kiln {
namespace {

using test::samples_of;
using test::small_cnn;

// The speed check's rule: float + conversions must beat the 8-bit kernel by 10 % and by 10 us.
TEST(QuantizeSpeed, FloatMustWinByAFractionAndByTime) {
  auto speed = [](double int8_us, double conversion_us, double float_us) {
    return NodeSpeed{"n", "QLinearConv", int8_us, conversion_us, float_us};
  };
  EXPECT_TRUE(quantize::faster_in_float(speed(1000, 100, 700)));
  EXPECT_FALSE(quantize::faster_in_float(speed(1000, 250, 700)));  // conversions paid: 950, within 10 %
  EXPECT_FALSE(quantize::faster_in_float(speed(1000, 0, 1000)));
  EXPECT_FALSE(quantize::faster_in_float(speed(50, 0, 41)));       // 18 % but 9 us
  EXPECT_TRUE(quantize::faster_in_float(speed(50, 0, 40)));
}

// Each planned node is cut out and timed in both forms: the 8-bit one must really be the fused
// 8-bit kernel (a QDQ node left unfused would time a float conv between Q and DQ), both times real.
TEST(QuantizeSpeed, EachPlannedNodeTimedAsItsEightBitKernelAndInFloat) {
  ir::Model m = small_cnn(13);
  OptimizeOptions none;
  passes::PassContext ctx(m, none);
  QuantizeOptions o;
  QuantizeReport scratch;
  const quantize::Plan plan = quantize::choose(m, ctx.types(), o, {}, &scratch);
  ASSERT_EQ(plan.nodes.size(), 2u);  // the convs; the Gemm's logits go on in float
  std::map<std::string, quantize::QuantParams> params;
  // Ranges from 0, as a Relu's output calibrates: its QuantizeLinear then absorbs the Relu, and
  // the conv fuses (with a zero point inside the range the Relu would stay, and so a float conv).
  for (const std::string& p : plan.points) params[p] = quantize::activation_params(0, 4, false);
  test::Builder data;
  auto speeds = quantize::time_plan_nodes(m, plan, params, o, {data.random({1, 8, 12, 12})});
  ASSERT_TRUE(speeds.is_ok()) << speeds.status().message();
  ASSERT_EQ(speeds->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const NodeSpeed& s = (*speeds)[i];
    const ir::Node& n = m.graph.nodes[plan.nodes[i].node];
    EXPECT_EQ(s.node, n.name.empty() ? n.outputs[0] : n.name);
    EXPECT_NE(s.int8_ops.find("QLinearConv"), std::string::npos) << s.node << ": " << s.int8_ops;
    EXPECT_EQ(s.int8_ops.find("Conv "), std::string::npos) << s.int8_ops;
    EXPECT_GT(s.int8_us, 0);
    EXPECT_GT(s.float_us, 0);
    EXPECT_GT(s.conversion_us, 0);  // its QuantizeLinear and DequantizeLinear at least
  }
}

// Dynamic quantization's speed check: each MatMul cut out with the bias Add kiln's form takes in,
// timed as one DynamicQuantMatMul (the Add inside it) against float; no conversions.
TEST(QuantizeSpeed, DynamicNodesTimedWithTheirBiasAdd) {
  test::Builder b(13);
  b.input("x", {64, 128});
  b.weight("w1", {128, 96});
  b.weight("bias", {96});
  b.add("MatMul", {"x", "w1"}, {"m1"});
  b.add("Add", {"m1", "bias"}, {"h"});
  b.add("Relu", {"h"}, {"r"});
  b.weight("w2", {96, 32});
  b.add("MatMul", {"r", "w2"}, {"y"});
  b.output("y");
  QuantizeOptions o;
  o.dynamic = true;
  auto speeds = quantize::time_dynamic_nodes(b.m, o, {b.random({64, 128})});
  ASSERT_TRUE(speeds.is_ok()) << speeds.status().message();
  ASSERT_EQ(speeds->size(), 2u);
  for (const NodeSpeed& s : *speeds) {
    EXPECT_EQ(s.int8_ops, "ai.kiln.DynamicQuantMatMul") << s.node;
    EXPECT_GT(s.int8_us, 0);
    EXPECT_GT(s.float_us, 0);
    EXPECT_EQ(s.conversion_us, 0);
  }
}

// Static quantization times the MatMul/Gemm nodes it quantizes dynamically too (their output goes
// on in float: the small CNN's Gemm), after its planned convs.
TEST(QuantizeSpeed, StaticQuantizationTimesItsDynamicNodesToo) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 8, {1, 8, 12, 12});
  Model model(std::make_shared<ir::Model>(fp32));
  auto report = model.quantize(samples_of(calib), {});
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  std::vector<std::string> names, ops;
  for (const NodeSpeed& s : report->speeds) names.push_back(s.node), ops.push_back(s.int8_ops);
  auto name = [&](const std::string& op, int k) {
    for (const ir::Node& n : fp32.graph.nodes)
      if (n.op_type == op && k-- == 0) return n.name.empty() ? n.outputs[0] : n.name;
    return std::string();
  };
  EXPECT_EQ(names, (std::vector<std::string>{name("Conv", 0), name("Conv", 1), name("Gemm", 0)}));
  EXPECT_EQ(ops, (std::vector<std::string>{"com.microsoft.QLinearConv", "com.microsoft.QLinearConv",
                                           "ai.kiln.DynamicQuantMatMul"}));
  EXPECT_EQ(report->speeds.back().conversion_us, 0);
}

// End to end: 3-D convs, whose 8-bit form kiln runs on a plain reference loop (~40 GFLOP/s on the
// machines of this project, against ~65 for the float kernel): the speed check keeps them in
// float and says why; without it they are quantized. Not under ASan, whose instrumentation
// slows the float kernel more (on a Zen 5: 8-bit 37.7 ms, float with its conversions 36.4).
TEST(QuantizeSpeed, ConvsSlowerInEightBitsStayFloat) {
  if (test::kAddressSanitizer) GTEST_SKIP() << "timings under AddressSanitizer are not the product's";
  test::Builder b(13);
  b.input("x", {1, 16, 8, 32, 32});
  const std::vector<int64_t> pads(6, 1);
  b.weight("a_w", {16, 16, 3, 3, 3});
  b.add("Conv", {"x", "a_w"}, {"a"}, {test::attr_ints("pads", pads)});
  b.m.graph.nodes.back().name = "conv3d_a";
  b.add("Relu", {"a"}, {"ra"});
  b.weight("b_w", {16, 16, 3, 3, 3});
  b.add("Conv", {"ra", "b_w"}, {"c"}, {test::attr_ints("pads", pads)});
  b.m.graph.nodes.back().name = "conv3d_b";
  b.add("Relu", {"c"}, {"rc"});
  b.add("MaxPool", {"rc"}, {"y"}, {test::attr_ints("kernel_shape", {2, 2, 2}), test::attr_ints("strides", {2, 2, 2})});
  b.output("y");
  std::vector<Tensor> calib = test::random_samples(b, 4, {1, 16, 8, 32, 32});
  Model timed(std::make_shared<ir::Model>(b.m));
  auto report = timed.quantize(samples_of(calib), {});
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  ASSERT_EQ(report->speeds.size(), 2u);
  for (const NodeSpeed& s : report->speeds) EXPECT_GT(s.int8_us, 1.1 * (s.float_us + s.conversion_us)) << s.node;
  EXPECT_EQ(report->quantized_nodes, 0);
  ASSERT_EQ(report->kept_float.size(), 2u);
  for (const std::string& k : report->kept_float)
    EXPECT_NE(k.find(": faster in float (8-bit kernel"), std::string::npos) << k;
  QuantizeOptions o;
  o.check_speed = false;
  Model all(std::make_shared<ir::Model>(b.m));
  report = all.quantize(samples_of(calib), o);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->quantized_nodes, 2);
  EXPECT_TRUE(report->speeds.empty());
}

}  // namespace
}  // namespace kiln
