// The -O2 epilogue fusions (conv-epilogue, gemm-epilogue, squeeze-excite): each pattern checked
// for the structure it leaves and for computing the same outputs as the graph it replaced.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;
using test::attr_ints;
using test::Builder;
using test::run_pass;
using test::run_model;

ir::Model check(Builder& b, const std::string& pass, const std::vector<std::string>& want_ops,
                std::vector<Shape> input_shapes, float lo = -1, float hi = 1) {
  return test::check_pass(b, pass, want_ops, input_shapes, lo, hi);
}

const ir::Node& only_node(const ir::Model& m) { return m.graph.nodes.at(0); }

TEST(ConvEpilogue, ConvRelu) {
  Builder b;
  b.input("x", {1, 3, 6, 6});
  b.conv("x", "y", 3, 4);
  b.add("Relu", {"y"}, {"r"});
  b.output("r");
  check(b, "conv-epilogue", {"FusedConv"}, {{1, 3, 6, 6}});
}

TEST(ConvEpilogue, CommutedResidualThenRelu) {
  // ResNet: Relu(Add(shortcut, Conv(x))), the shortcut first.
  Builder b;
  b.input("x", {1, 4, 5, 5});
  b.conv("x", "y", 4, 4);
  b.add("Add", {"x", "y"}, {"s"});
  b.add("Relu", {"s"}, {"r"});
  b.output("r");
  ir::Model m = b.m;
  ASSERT_TRUE(run_pass(m, "conv-epilogue").is_ok());
  ASSERT_EQ(m.graph.nodes.size(), 1u);
  const ir::Node& f = only_node(m);
  EXPECT_EQ(f.domain, "ai.kiln");
  EXPECT_EQ(f.inputs, (std::vector<std::string>{"x", "y_w", "y_b", "x"}));
  EXPECT_EQ(f.attr_string("activation", ""), "Relu");
  EXPECT_EQ(f.attr_int("residual_before_activation", 0), 1);
  check(b, "conv-epilogue", {"FusedConv"}, {{1, 4, 5, 5}});
}

TEST(ConvEpilogue, TwoConvsIntoOneAdd) {
  // The downsampling block: Relu(Conv_a(x) + Conv_b(x)); one Conv absorbs the Add, the other stays.
  Builder b;
  b.input("x", {1, 2, 4, 4});
  b.conv("x", "a", 2, 3);
  b.conv("x", "c", 2, 3, 1);
  b.add("Add", {"a", "c"}, {"s"});
  b.add("Relu", {"s"}, {"r"});
  b.output("r");
  check(b, "conv-epilogue", {"Conv", "FusedConv"}, {{1, 2, 4, 4}});
}

TEST(ConvEpilogue, Relu6ThenResidual) {
  // MobileNet: Clip(0, 6) with constant inputs, then a residual Add after the activation.
  Builder b;
  b.input("x", {1, 3, 4, 4});
  b.conv("x", "y", 3, 3);
  b.scalar("lo", 0.0f);
  b.scalar("hi", 6.0f);
  b.add("Clip", {"y", "lo", "hi"}, {"c"});
  b.add("Add", {"c", "x"}, {"s"});
  b.output("s");
  check(b, "conv-epilogue", {"FusedConv"}, {{1, 3, 4, 4}}, -3, 8);
}

TEST(ConvEpilogue, ResidualWithoutActivation) {
  Builder b;
  b.input("x", {2, 3, 4, 4});
  b.conv("x", "y", 3, 3);
  b.add("Add", {"y", "x"}, {"s"});
  b.output("s");
  check(b, "conv-epilogue", {"FusedConv"}, {{2, 3, 4, 4}});
}

TEST(ConvEpilogue, SiluCommuted) {
  Builder b;
  b.input("x", {1, 2, 4, 4});
  b.conv("x", "y", 2, 3);
  b.add("Sigmoid", {"y"}, {"s"});
  b.add("Mul", {"s", "y"}, {"m"});
  b.output("m");
  check(b, "conv-epilogue", {"FusedConv"}, {{1, 2, 4, 4}});
}

TEST(ConvEpilogue, PaddleHardSwishDivideLast) {
  // Paddle: x * Clip(x + 3, 0, 6) / 6.
  Builder b;
  b.input("x", {1, 2, 5, 5});
  b.conv("x", "y", 2, 3);
  b.scalar("three", 3.0f);
  b.scalar("zero", 0.0f);
  b.scalar("six", 6.0f);
  b.add("Add", {"y", "three"}, {"a"});
  b.add("Clip", {"a", "zero", "six"}, {"c"});
  b.add("Mul", {"y", "c"}, {"m"});
  b.add("Div", {"m", "six"}, {"h"});
  b.output("h");
  // Fusions match the canonical spelling, which hard-sigmoid-canonical makes (HardSwish here).
  ASSERT_TRUE(run_pass(b.m, "hard-sigmoid-canonical").is_ok());
  check(b, "conv-epilogue", {"FusedConv"}, {{1, 2, 5, 5}}, -4, 4);
  ir::Model m = b.m;
  ASSERT_TRUE(run_pass(m, "conv-epilogue").is_ok());
  EXPECT_EQ(only_node(m).attr_string("activation", ""), "HardSwish");
}

TEST(ConvEpilogue, PaddleHardSwishScaleFirst) {
  // x * (Clip(3 + x, 0, 6) * (1/6)), the Mul by x last and commuted.
  Builder b;
  b.input("x", {1, 2, 5, 5});
  b.conv("x", "y", 2, 3);
  b.scalar("three", 3.0f);
  b.scalar("zero", 0.0f);
  b.scalar("six", 6.0f);
  b.scalar("sixth", 1.0f / 6.0f);
  b.add("Add", {"three", "y"}, {"a"});
  b.add("Clip", {"a", "zero", "six"}, {"c"});
  b.add("Mul", {"sixth", "c"}, {"d"});
  b.add("Mul", {"d", "y"}, {"h"});
  b.output("h");
  ASSERT_TRUE(run_pass(b.m, "hard-sigmoid-canonical").is_ok());
  check(b, "conv-epilogue", {"FusedConv"}, {{1, 2, 5, 5}}, -4, 4);
}

TEST(ConvEpilogue, OtherActivations) {
  struct Case {
    std::string op;
    std::vector<ir::Attribute> attrs;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"LeakyRelu", {attr_f("alpha", 0.1f)}, "LeakyRelu"},
      {"HardSigmoid", {attr_f("alpha", 0.3f), attr_f("beta", 0.4f)}, "HardSigmoid"},
      {"HardSwish", {}, "HardSwish"},
      {"Tanh", {}, "Tanh"},
      {"Sigmoid", {}, "Sigmoid"},
      {"Gelu", {}, "Gelu"},
  };
  for (const auto& c : cases) {
    Builder b;
    b.input("x", {1, 2, 4, 4});
    b.conv("x", "y", 2, 2);
    b.add(c.op, {"y"}, {"r"}, c.attrs);
    b.output("r");
    check(b, "conv-epilogue", {"FusedConv"}, {{1, 2, 4, 4}}, -3, 3);
    ir::Model m = b.m;
    ASSERT_TRUE(run_pass(m, "conv-epilogue").is_ok());
    EXPECT_EQ(only_node(m).attr_string("activation", ""), c.want) << c.op;
  }
}

// A decoder's upsampling (4x4/2 pad 1), a DB text detector's head (2x2/2 to one channel, batch 2,
// then Sigmoid) and a 3x3/2: ai.kiln.FusedConvTranspose runs the tail on each gathered row.
TEST(ConvEpilogue, ConvTransposeActivations) {
  struct Case {
    Shape x;
    int64_t m, k, pad;
    std::string op;
    std::vector<ir::Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {{1, 4, 9, 11}, 3, 4, 1, "Relu", {}},
      {{2, 3, 40, 70}, 1, 2, 0, "Sigmoid", {}},
      {{1, 2, 5, 6}, 2, 3, 1, "LeakyRelu", {attr_f("alpha", 0.2f)}},
  };
  for (const Case& c : cases) {
    Builder b;
    b.input("x", c.x);
    b.weight("w", {c.x[1], c.m, c.k, c.k});
    b.weight("b", {c.m});
    b.add("ConvTranspose", {"x", "w", "b"}, {"y"},
          {attr_ints("strides", {2, 2}), attr_ints("pads", {c.pad, c.pad, c.pad, c.pad})});
    b.add(c.op, {"y"}, {"r"}, c.attrs);
    b.output("r");
    const ir::Model m = check(b, "conv-epilogue", {"FusedConvTranspose"}, {c.x}, -3, 3);
    EXPECT_EQ(only_node(m).attr_string("activation", ""), c.op);
  }
}

// A U-Net's skip connection added to the upsampled map, then Relu: the residual before the
// activation, read at each gathered row.
TEST(ConvEpilogue, ConvTransposeResidualThenRelu) {
  Builder b;
  b.input("x", {1, 4, 6, 7});
  b.input("skip", {1, 3, 12, 14});
  b.weight("w", {4, 3, 2, 2});
  b.add("ConvTranspose", {"x", "w"}, {"y"}, {attr_ints("strides", {2, 2})});
  b.add("Add", {"y", "skip"}, {"s"});
  b.add("Relu", {"s"}, {"r"});
  b.output("r");
  const ir::Model m = check(b, "conv-epilogue", {"FusedConvTranspose"}, {{1, 4, 6, 7}, {1, 3, 12, 14}});
  EXPECT_EQ(only_node(m).inputs, (std::vector<std::string>{"x", "w", "", "skip"}));
  EXPECT_EQ(only_node(m).attr_int("residual_before_activation", 0), 1);
}

TEST(ConvEpilogue, ClipAttributeForm) {
  Builder b;
  b.m.opsets[""] = 6;
  b.input("x", {1, 2, 4, 4});
  b.conv("x", "y", 2, 2);
  b.add("Clip", {"y"}, {"r"}, {attr_f("min", -1.0f), attr_f("max", 2.0f)});
  b.output("r");
  ASSERT_TRUE(run_pass(b.m, "conv-epilogue").is_ok());
  ASSERT_EQ(b.m.graph.nodes.size(), 1u);
  EXPECT_EQ(only_node(b.m).attr_string("activation", ""), "Clip");
  EXPECT_EQ(only_node(b.m).attr_floats("activation_params"), (std::vector<float>{-1.0f, 2.0f}));
}

// tf2onnx's Max(LeakyRelu(x), -0.4), a Clip once clip-canonical ran: one FusedConv whose
// activation carries the Clip's bounds as its clamp.
TEST(ConvEpilogue, ClipAfterActivationIsItsClamp) {
  Builder b;
  b.input("x", {1, 2, 5, 5});
  b.conv("x", "y", 2, 3);
  b.add("LeakyRelu", {"y"}, {"a"}, {attr_f("alpha", 0.3f)});
  b.scalar("lo", -0.4f);
  b.add("Clip", {"a", "lo"}, {"r"});
  b.output("r");
  ir::Model m = check(b, "conv-epilogue", {"FusedConv"}, {{1, 2, 5, 5}}, -3, 3);
  EXPECT_EQ(only_node(m).attr_string("activation", ""), "LeakyRelu");
  const std::vector<float> clip = only_node(m).attr_floats("activation_clip");
  ASSERT_EQ(clip.size(), 2u);
  EXPECT_EQ(clip[0], -0.4f);
  EXPECT_TRUE(std::isinf(clip[1]) && clip[1] > 0);
}

// The clamp of x*Sigmoid(x), then a residual Add: the clamp stays before the residual.
TEST(ConvEpilogue, ClampedSiluThenResidual) {
  Builder b;
  b.input("x", {1, 3, 4, 4});
  b.input("z", {1, 3, 4, 4});
  b.conv("x", "y", 3, 3);
  b.add("Sigmoid", {"y"}, {"s"});
  b.add("Mul", {"y", "s"}, {"a"});
  b.scalar("lo", -0.1f);
  b.scalar("hi", 0.6f);
  b.add("Clip", {"a", "lo", "hi"}, {"c"});
  b.add("Add", {"c", "z"}, {"r"});
  b.output("r");
  ir::Model m = check(b, "conv-epilogue", {"FusedConv"}, {{1, 3, 4, 4}, {1, 3, 4, 4}}, -3, 3);
  EXPECT_EQ(only_node(m).attr_string("activation", ""), "Silu");
  EXPECT_EQ(only_node(m).attr_floats("activation_clip"), (std::vector<float>{-0.1f, 0.6f}));
  EXPECT_EQ(only_node(m).attr_int("residual_before_activation", -1), 0);
}

TEST(ConvEpilogue, SharedOutputIsLeftAlone) {
  Builder b;
  b.input("x", {1, 2, 4, 4});
  b.conv("x", "y", 2, 2);
  b.add("Relu", {"y"}, {"r"});
  b.output("r");
  b.output("y");
  check(b, "conv-epilogue", {"Conv", "Relu"}, {{1, 2, 4, 4}});
}

TEST(ConvEpilogue, BroadcastingAddIsNotAResidual) {
  Builder b;
  b.input("x", {1, 2, 4, 4});
  b.input("z", {1, 2, 1, 1});
  b.conv("x", "y", 2, 2);
  b.add("Add", {"y", "z"}, {"s"});
  b.output("s");
  check(b, "conv-epilogue", {"Conv", "Add"}, {{1, 2, 4, 4}, {1, 2, 1, 1}});
}

TEST(GemmEpilogue, BatchedMatMulBiasGeluResidual) {
  // BERT's FFN shape: [batch, seq, K] x [K, N] + bias, GELU, then a residual of the same shape.
  Builder b;
  b.input("x", {2, 3, 8});
  b.input("z", {2, 3, 16});
  b.weight("w", {8, 16});
  b.weight("bias", {16});
  b.add("MatMul", {"x", "w"}, {"y"});
  b.add("Add", {"bias", "y"}, {"yb"});
  b.add("Gelu", {"yb"}, {"g"});
  b.add("Add", {"z", "g"}, {"o"});
  b.output("o");
  check(b, "gemm-epilogue", {"FusedMatMul"}, {{2, 3, 8}, {2, 3, 16}});
  ir::Model m = b.m;
  ASSERT_TRUE(run_pass(m, "gemm-epilogue").is_ok());
  EXPECT_EQ(only_node(m).inputs, (std::vector<std::string>{"x", "w", "bias", "z"}));
  EXPECT_EQ(only_node(m).attr_int("residual_before_activation", 1), 0);
}

TEST(GemmEpilogue, MatMulBiasOnly) {
  Builder b;
  b.input("x", {4, 8});
  b.weight("w", {8, 5});
  b.weight("bias", {1, 5});
  b.add("MatMul", {"x", "w"}, {"y"});
  b.add("Add", {"y", "bias"}, {"o"});
  b.output("o");
  check(b, "gemm-epilogue", {"FusedMatMul"}, {{4, 8}});
}

TEST(GemmEpilogue, GemmBiasRelu) {
  Builder b;
  b.input("x", {4, 8});
  b.weight("w", {5, 8});
  b.weight("bias", {5});
  b.add("Gemm", {"x", "w"}, {"y"}, {attr_i("transB", 1), attr_f("beta", 0.5f)});
  b.add("Add", {"y", "bias"}, {"yb"});
  b.add("Relu", {"yb"}, {"o"});
  b.output("o");
  check(b, "gemm-epilogue", {"FusedGemm"}, {{4, 8}});
}

TEST(GemmEpilogue, GemmWithCResidualTanh) {
  Builder b;
  b.input("x", {4, 8});
  b.input("z", {4, 5});
  b.weight("w", {8, 5});
  b.weight("c", {5});
  b.add("Gemm", {"x", "w", "c"}, {"y"}, {attr_f("alpha", 0.7f)});
  b.add("Add", {"y", "z"}, {"s"});
  b.add("Tanh", {"s"}, {"o"});
  b.output("o");
  check(b, "gemm-epilogue", {"FusedGemm"}, {{4, 8}, {4, 5}});
}

TEST(GemmEpilogue, PlainMatMulIsLeftAlone) {
  Builder b;
  b.input("x", {4, 8});
  b.input("w", {8, 5});
  b.input("z", {5});
  b.add("MatMul", {"x", "w"}, {"y"});
  b.add("Add", {"y", "z"}, {"o"});  // not a bias (not constant), not a residual (broadcasts)
  b.output("o");
  check(b, "gemm-epilogue", {"MatMul", "Add"}, {{4, 8}, {8, 5}, {5}});
}

// GlobalAveragePool -> Conv -> act -> Conv -> gate -> Mul(x, gate).
void squeeze_excite_block(Builder& b, const std::string& act, const std::string& gate,
                          bool swap_mul) {
  b.input("x", {2, 8, 5, 5});
  b.add("GlobalAveragePool", {"x"}, {"p"});
  b.conv("p", "h", 8, 2, 1);
  std::string v = "h";
  if (act == "Silu") {
    b.add("Sigmoid", {"h"}, {"hs"});
    b.add("Mul", {"h", "hs"}, {"ha"});
    v = "ha";
  } else {
    b.add(act, {"h"}, {"ha"});
    v = "ha";
  }
  b.conv(v, "e", 2, 8, 1);
  if (gate == "HardSigmoid")
    b.add(gate, {"e"}, {"g"}, {attr_f("alpha", 1.0f / 6), attr_f("beta", 0.5f)});
  else
    b.add(gate, {"e"}, {"g"});
  if (swap_mul)
    b.add("Mul", {"g", "x"}, {"o"});
  else
    b.add("Mul", {"x", "g"}, {"o"});
  b.output("o");
}

TEST(SqueezeExcite, EfficientNetStyle) {
  Builder b;
  squeeze_excite_block(b, "Silu", "Sigmoid", false);
  check(b, "squeeze-excite", {"SqueezeExcite"}, {{2, 8, 5, 5}});
  ir::Model m = b.m;
  ASSERT_TRUE(run_pass(m, "squeeze-excite").is_ok());
  EXPECT_EQ(only_node(m).attr_string("activation", ""), "Silu");
  EXPECT_EQ(only_node(m).attr_string("gate", ""), "Sigmoid");
}

TEST(SqueezeExcite, MobileNetV3Style) {
  Builder b;
  squeeze_excite_block(b, "Relu", "HardSigmoid", true);
  check(b, "squeeze-excite", {"SqueezeExcite"}, {{2, 8, 5, 5}}, -3, 3);
}

TEST(SqueezeExcite, MulWithAnotherTensorIsLeftAlone) {
  Builder b;
  squeeze_excite_block(b, "Relu", "Sigmoid", false);
  b.input("other", {2, 8, 5, 5});
  b.m.graph.nodes.back().inputs[0] = "other";
  check(b, "squeeze-excite", {"GlobalAveragePool", "Conv", "Relu", "Conv", "Sigmoid", "Mul"},
        {{2, 8, 5, 5}, {2, 8, 5, 5}});
}

}  // namespace
}  // namespace kiln
