// The -O3 nchwc-layout pass: conv chains, pools and residuals moved to the blocked NCHWc layout
// (ai.kiln.BlockedConv and friends) must leave the structure expected and compute what the -O2
// graph (FusedConv, reference kernels) computes, within 1e-4 relative.
#include <gtest/gtest.h>

#include <algorithm>

#include "ir/shape_inference.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;
using test::attr_ints;
using test::attr_s;
using test::Builder;
using test::run_pass;

constexpr float kTol = 1e-4f;

// Runs the -O2 conv-epilogue fusion on b's model (the reference graph), then checks nchwc-layout
// against it.
ir::Model check_o3(Builder& b, const std::vector<std::string>& want_ops,
                   const std::vector<Shape>& input_shapes, float lo = -1, float hi = 1) {
  auto fused = run_pass(b.m, "conv-epilogue");
  EXPECT_TRUE(fused.is_ok()) << fused.status().message();
  return test::check_pass(b, "nchwc-layout", want_ops, input_shapes, lo, hi, kTol);
}

// Conv with explicit attributes (b.conv only makes same-padded ones).
void conv(Builder& b, const std::string& x, const std::string& y, int64_t c, int64_t m, int64_t k,
          std::vector<ir::Attribute> attrs, int64_t group = 1) {
  b.weight(y + "_w", {m, c / group, k, k});
  b.weight(y + "_b", {m});
  attrs.push_back(attr_i("group", group));
  b.add("Conv", {x, y + "_w", y + "_b"}, {y}, std::move(attrs));
}

int count(const ir::Model& m, const std::string& op) {
  int k = 0;
  for (const auto& n : m.graph.nodes) k += n.op_type == op;
  return k;
}

TEST(NchwcLayout, ChainWithOddChannelsStridePadsDilation) {
  Builder b;
  b.input("x", {1, 12, 11, 13});
  conv(b, "x", "a", 12, 20, 3, {attr_ints("pads", {1, 1, 1, 1})});
  b.add("Relu", {"a"}, {"ar"});
  // Stride 2, dilation 2, uneven pads, 13 output channels.
  conv(b, "ar", "c", 20, 13, 3,
       {attr_ints("strides", {2, 2}), attr_ints("dilations", {2, 2}),
        attr_ints("pads", {2, 1, 1, 0})});
  conv(b, "c", "d", 13, 9, 1, {});
  b.add("Sigmoid", {"d"}, {"ds"});
  b.output("ds");
  const ir::Model m = check_o3(
      b, {"ReorderToBlocked", "BlockedConv", "BlockedConv", "BlockedConv", "ReorderFromBlocked"},
      {{1, 12, 11, 13}});
  EXPECT_EQ(m.graph.nodes.back().attr_int("channels", 0), 9);
  EXPECT_EQ(m.graph.nodes.back().outputs[0], "ds");  // the graph output keeps its name
  // The original weights are gone, replaced by their blocked forms.
  EXPECT_EQ(m.graph.initializers.count("a_w"), 0u);
  EXPECT_EQ(m.graph.initializers.at("c_w_nchwc").shape(), (Shape{2, 3, 3, 3, 8, 8}));
  EXPECT_EQ(m.graph.initializers.at("d_b_nchwc").shape(), (Shape{16}));
}

// tf2onnx's 1-D convolutions: [N, C, L, 1] with [K, 1] kernels, which BlockedConv runs as
// rows (its register tiles span pixels of a row). Strides, dilation, pads down the column, a
// depthwise one, and a column whose kernel reaches past both ends.
TEST(NchwcLayout, ColumnConvsRunAsRows) {
  Builder b;
  b.input("x", {2, 12, 37, 1});
  auto column = [&](const std::string& x, const std::string& y, int64_t c, int64_t m, int64_t k,
                    std::vector<ir::Attribute> attrs, int64_t group = 1) {
    b.weight(y + "_w", {m, c / group, k, 1});
    b.weight(y + "_b", {m});
    attrs.push_back(attr_i("group", group));
    b.add("Conv", {x, y + "_w", y + "_b"}, {y}, std::move(attrs));
  };
  column("x", "a", 12, 24, 5, {attr_ints("pads", {2, 0, 2, 0})});
  b.add("Relu", {"a"}, {"ar"});
  column("ar", "c", 24, 24, 3, {attr_ints("pads", {1, 0, 1, 0})}, 24);  // depthwise
  column("c", "d", 24, 20, 3,
         {attr_ints("strides", {2, 1}), attr_ints("dilations", {2, 1}), attr_ints("pads", {3, 0, 1, 0})});
  column("d", "e", 20, 16, 9, {attr_ints("pads", {8, 0, 8, 0})});
  b.output("e");
  const ir::Model m = check_o3(b,
                               {"ReorderToBlocked", "BlockedConv", "BlockedConv", "BlockedConv",
                                "BlockedConv", "ReorderFromBlocked"},
                               {{2, 12, 37, 1}});
  EXPECT_EQ(count(m, "BlockedConv"), 4);
}

// Groups of whole blocks (regnet's 8-channel groups, resnext's 16 and 32) run blocked, with a
// bias, a residual, stride and padding, batch 2; 4-channel groups (resnext's first stage) stay
// plain.
TEST(NchwcLayout, GroupedConvsOfWholeBlocks) {
  Builder b;
  b.input("x", {2, 24, 9, 11});
  conv(b, "x", "g8", 24, 24, 3, {attr_ints("pads", {1, 1, 1, 1})}, 3);  // 8 in, 8 out per group
  b.add("Relu", {"g8"}, {"r8"});
  conv(b, "r8", "g16", 24, 48, 3, {attr_ints("pads", {1, 0, 1, 1}), attr_ints("strides", {2, 2})}, 3);  // 8 in, 16 out
  conv(b, "g16", "c", 48, 64, 1, {});
  conv(b, "g16", "g32", 48, 64, 3, {attr_ints("pads", {1, 1, 1, 1})}, 2);  // 24 in, 32 out per group
  b.add("Add", {"g32", "c"}, {"h"});  // a residual: fused into the grouped conv
  // 4 and 2 channels a group: 2 and 4 groups side by side make 8-channel groups (block-diagonal
  // weights), 8 of them each.
  conv(b, "h", "g4", 64, 64, 3, {attr_ints("pads", {1, 1, 1, 1})}, 16);
  conv(b, "g4", "g2", 64, 64, 3, {attr_ints("pads", {0, 1, 1, 0})}, 32);
  b.output("g2");
  ASSERT_TRUE(run_pass(b.m, "conv-epilogue").is_ok());
  // Seven convs deep the sums' rounding (blocked vs im2col order) reaches ~1e-4 of a value.
  const ir::Model m = test::check_pass(b, "nchwc-layout",
                                       {"ReorderToBlocked", "BlockedConv", "BlockedConv", "BlockedConv",
                                        "BlockedConv", "BlockedConv", "BlockedConv", "ReorderFromBlocked"},
                                       {{2, 24, 9, 11}}, -1, 1, 5e-4f);
  std::vector<int64_t> groups;
  for (const auto& n : m.graph.nodes)
    if (n.op_type == "BlockedConv" && n.attr_int("group", 1) > 1) groups.push_back(n.attr_int("group", 1));
  EXPECT_EQ(groups, (std::vector<int64_t>{3, 3, 2, 8, 8}));
  // Shape inference runs through the grouped BlockedConvs (their dense W is not a depthwise one).
  ir::Model inferred = m;
  ASSERT_TRUE(ir::infer_shapes(inferred).is_ok());
  EXPECT_EQ(inferred.graph.outputs[0].type.static_shape(), (std::optional<Shape>{Shape{2, 64, 4, 4}}));
}

TEST(NchwcLayout, GroupsThatDoNotTileABlockStayPlain) {
  // 3 channels a group (8 % 3 != 0) and 1 in / 2 out (not square): the plain grouped kernel.
  Builder b;
  b.input("x", {1, 24, 7, 7});
  conv(b, "x", "a", 24, 24, 3, {attr_ints("pads", {1, 1, 1, 1})});
  conv(b, "a", "g3", 24, 24, 3, {attr_ints("pads", {1, 1, 1, 1})}, 8);
  conv(b, "g3", "c", 24, 24, 3, {attr_ints("pads", {1, 1, 1, 1})});
  b.output("c");
  ASSERT_TRUE(run_pass(b.m, "conv-epilogue").is_ok());
  test::check_pass(b, "nchwc-layout",
                   {"ReorderToBlocked", "BlockedConv", "ReorderFromBlocked", "Conv", "ReorderToBlocked", "BlockedConv",
                    "ReorderFromBlocked"},
                   {{1, 24, 7, 7}}, -1, 1, 5e-4f);
}

TEST(NchwcLayout, ResidualBlockAndPools) {
  // ResNet: Relu(Conv(Relu(Conv(x))) + x), then max, average and global average pools.
  Builder b;
  b.input("x", {2, 16, 10, 10});
  b.conv("x", "a", 16, 16);
  b.add("Relu", {"a"}, {"ar"});
  b.conv("ar", "c", 16, 16);
  b.add("Add", {"c", "x"}, {"s"});
  b.add("Relu", {"s"}, {"r"});
  b.add("MaxPool", {"r"}, {"mp"},
        {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}),
         attr_ints("pads", {1, 1, 1, 1})});
  b.add("AveragePool", {"mp"}, {"ap"},
        {attr_ints("kernel_shape", {2, 2}), attr_ints("pads", {1, 1, 0, 0}),
         attr_i("count_include_pad", 1)});
  b.add("AveragePool", {"ap"}, {"ap2"},
        {attr_ints("kernel_shape", {3, 3}), attr_ints("pads", {1, 1, 1, 1}),
         attr_i("ceil_mode", 1), attr_ints("strides", {2, 2})});
  b.add("GlobalAveragePool", {"ap2"}, {"g"});
  b.output("g");
  const ir::Model m = check_o3(b,
                               {"ReorderToBlocked", "BlockedConv", "BlockedConv", "BlockedMaxPool",
                                "BlockedAveragePool", "BlockedAveragePool",
                                "BlockedGlobalAveragePool", "ReorderFromBlocked"},
                               {{2, 16, 10, 10}});
  // x enters the region once and feeds both the first conv and the residual.
  EXPECT_EQ(m.graph.nodes[2].inputs[3], m.graph.nodes[0].outputs[0]);
}

TEST(NchwcLayout, InvertedResidualWithDepthwise) {
  // MobileNetV2: 1x1 expand + Relu6, 3x3 depthwise + Relu6, 1x1 project, + x.
  Builder b;
  b.input("x", {1, 12, 9, 9});
  b.scalar("lo", 0.0f);
  b.scalar("hi", 6.0f);
  conv(b, "x", "e", 12, 36, 1, {});
  b.add("Clip", {"e", "lo", "hi"}, {"er"});
  conv(b, "er", "d", 36, 36, 3, {attr_ints("pads", {1, 1, 1, 1})}, 36);
  b.add("Clip", {"d", "lo", "hi"}, {"dr"});
  conv(b, "dr", "p", 36, 12, 1, {});
  b.add("Add", {"p", "x"}, {"s"});
  // A strided depthwise with odd channels and uneven padding after it.
  conv(b, "s", "q", 12, 12, 5, {attr_ints("strides", {2, 2}), attr_ints("pads", {2, 1, 2, 3})}, 12);
  b.add("HardSwish", {"q"}, {"qh"});
  b.output("qh");
  const ir::Model m = check_o3(b,
                               {"ReorderToBlocked", "BlockedConv", "BlockedConv", "BlockedConv",
                                "BlockedConv", "ReorderFromBlocked"},
                               {{1, 12, 9, 9}}, -2, 2);
  EXPECT_EQ(m.graph.initializers.at("d_w_nchwc").shape(), (Shape{5, 3, 3, 8}));
  EXPECT_EQ(m.graph.nodes[2].attr_int("group", 0), 36);
}

TEST(NchwcLayout, ActivationsWithOddChannels) {
  // Activations whose value at 0 is not 0 (Sigmoid, HardSigmoid) on padded blocks, and the
  // transcendental ones computed in float by the blocked kernels.
  const char* acts[] = {"Sigmoid", "HardSigmoid", "Tanh", "LeakyRelu", "Elu"};
  for (const char* act : acts) {
    SCOPED_TRACE(act);
    Builder b;
    b.input("x", {1, 10, 7, 6});
    conv(b, "x", "a", 10, 11, 3, {attr_ints("pads", {1, 1, 1, 1})});
    b.add(act, {"a"}, {"aa"});
    conv(b, "aa", "c", 11, 10, 3, {attr_ints("pads", {0, 1, 0, 1})});
    b.add("Mul", {"c", "c"}, {"cc"});  // x * Sigmoid(x) would be Silu; a plain square here
    b.output("cc");
    // Elu is no epilogue activation: it splits the convs into two regions of one conv each,
    // each doing 99 or 90 multiply-adds per element it reads (channels out x 9 taps): enough to
    // pay for their own reorders around the plain Elu.
    const bool fused = std::string(act) != "Elu";
    const std::vector<std::string> want =
        fused ? std::vector<std::string>{"ReorderToBlocked", "BlockedConv", "BlockedConv", "Mul",
                                         "ReorderFromBlocked"}
              : std::vector<std::string>{"ReorderToBlocked", "BlockedConv", "ReorderFromBlocked", "Elu",
                                         "ReorderToBlocked", "BlockedConv", "Mul", "ReorderFromBlocked"};
    check_o3(b, want, {{1, 10, 7, 6}}, -3, 3);
  }
}

TEST(NchwcLayout, SiluAndResidualFirst) {
  Builder b;
  b.input("x", {1, 16, 8, 8});
  b.conv("x", "a", 16, 16);
  b.add("Sigmoid", {"a"}, {"sg"});
  b.add("Mul", {"a", "sg"}, {"si"});
  b.conv("si", "c", 16, 16, 1);
  b.add("Add", {"x", "c"}, {"s"});
  b.add("LeakyRelu", {"s"}, {"r"}, {attr_f("alpha", 0.2f)});
  b.output("r");
  const ir::Model m = check_o3(
      b, {"ReorderToBlocked", "BlockedConv", "BlockedConv", "ReorderFromBlocked"}, {{1, 16, 8, 8}},
      -4, 4);
  EXPECT_EQ(m.graph.nodes[1].attr_string("activation", ""), "Silu");
  EXPECT_EQ(m.graph.nodes[2].attr_int("residual_before_activation", 0), 1);
}

TEST(NchwcLayout, SqueezeExciteStaysInTheRegion) {
  // EfficientNet's MBConv: conv + Silu, squeeze-excite, projection.
  Builder b;
  b.m.opsets["ai.kiln"] = 1;
  b.input("x", {2, 12, 5, 7});
  b.conv("x", "a", 12, 20);
  b.add("Sigmoid", {"a"}, {"sg"});
  b.add("Mul", {"a", "sg"}, {"si"});
  b.weight("w1", {5, 20, 1, 1});
  b.weight("b1", {5});
  b.weight("w2", {20, 5, 1, 1});
  b.weight("b2", {20});
  b.add("SqueezeExcite", {"si", "w1", "b1", "w2", "b2"}, {"se"},
        {attr_s("activation", "Silu"), attr_s("gate", "Sigmoid")})
      .domain = "ai.kiln";
  b.conv("se", "p", 20, 12, 1);
  b.output("p");
  check_o3(b, {"ReorderToBlocked", "BlockedConv", "BlockedSqueezeExcite", "BlockedConv", "ReorderFromBlocked"},
           {{2, 12, 5, 7}});
}

TEST(NchwcLayout, RegionExitsToGraphOutputAndPlainOp) {
  Builder b;
  b.input("x", {1, 8, 6, 6});
  b.conv("x", "a", 8, 16);
  b.output("a");  // read outside the region as a graph output ...
  b.conv("a", "c", 16, 24);
  b.add("Softmax", {"c"}, {"sm"}, {attr_i("axis", 1)});  // ... and by a plain op
  b.conv("sm", "d", 24, 8, 1);  // a lone conv of 8 multiply-adds an element: stays plain
  b.output("d");
  const ir::Model m = check_o3(b,
                               {"ReorderToBlocked", "BlockedConv", "ReorderFromBlocked",
                                "BlockedConv", "ReorderFromBlocked", "Softmax", "Conv"},
                               {{1, 8, 6, 6}});
  EXPECT_EQ(m.graph.nodes[2].outputs[0], "a");
  EXPECT_EQ(m.graph.nodes[5].inputs[0], "c");
}

TEST(NchwcLayout, WhatStaysPlain) {
  // A lone grouped conv with too little work per element to pay for its reorders (2 outputs a
  // group x 9 taps), weights fed as an input, and a pool reading a plain value stay as they are.
  Builder b;
  b.input("x", {1, 16, 12, 12});
  b.input("wi", {16, 16, 1, 1});
  b.add("MaxPool", {"x"}, {"mp"}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  conv(b, "mp", "g", 16, 16, 3, {attr_ints("pads", {1, 1, 1, 1})}, 8);
  b.add("Conv", {"g", "wi"}, {"v"});
  b.output("v");
  test::check_pass(b, "nchwc-layout", {"MaxPool", "Conv", "Conv"}, {{1, 16, 12, 12}, {16, 16, 1, 1}});
}

TEST(NchwcLayout, RgbStemReadPlain) {
  // resnet's head: 7x7/2 stem read plain (3 channels), max pool, 3x3 conv.
  Builder b;
  b.input("x", {1, 3, 32, 32});
  conv(b, "x", "s", 3, 16, 7, {attr_ints("strides", {2, 2}), attr_ints("pads", {3, 3, 3, 3})});
  b.add("Relu", {"s"}, {"sr"});
  b.add("MaxPool", {"sr"}, {"mp"},
        {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1})});
  b.conv("mp", "c", 16, 16);
  b.output("c");
  const ir::Model m = check_o3(
      b, {"BlockedConv", "BlockedMaxPool", "BlockedConv", "ReorderFromBlocked"}, {{1, 3, 32, 32}});
  EXPECT_EQ(m.graph.nodes[0].inputs[0], "x");
  EXPECT_EQ(m.graph.initializers.at("s_w_nchwc").shape(), (Shape{2, 1, 7, 7, 8, 8}));
}

TEST(NchwcLayout, NotRunBelowO3) {
  Builder b;
  b.input("x", {1, 8, 6, 6});
  b.conv("x", "a", 8, 8);
  b.conv("a", "c", 8, 8);
  b.output("c");
  for (int level : {1, 2}) {
    ir::Model m = b.m;
    OptimizeOptions o;
    o.level = level;
    ASSERT_TRUE(optimize(m, o).is_ok());
    EXPECT_EQ(count(m, "BlockedConv"), 0) << "level " << level;
  }
  ir::Model m = b.m;
  OptimizeOptions o;
  o.level = 3;
  ASSERT_TRUE(optimize(m, o).is_ok());
  EXPECT_EQ(count(m, "BlockedConv"), 2);
}

TEST(NchwcLayout, LonePatchEmbeddingStaysPlain) {
  // ViT: one 16x16/16 conv on RGB, then tokens (Reshape/Transpose) outside any region.
  Builder b;
  b.input("x", {1, 3, 32, 32});
  conv(b, "x", "p", 3, 24, 16, {attr_ints("strides", {16, 16})});
  b.ints("shape", {1, 24, 4});
  b.add("Reshape", {"p", "shape"}, {"t"});
  b.output("t");
  test::check_pass(b, "nchwc-layout", {"Conv", "Reshape"}, {{1, 3, 32, 32}});
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A lone conv between plain ops runs blocked when it does enough work per element it reads (a
// 1x1 with 64 channels out, as YOLOv8's after each Concat), and stays plain when it is a patchify
// conv (kernel = stride, ViT's patch embedding), whatever its width.
TEST(NchwcLayout, LoneConvsThatPayAlone) {
  test::Builder b;
  b.input("x", {1, 16, 8, 8});
  b.input("y", {1, 16, 8, 8});
  b.add("Concat", {"x", "y"}, {"xy"}, {test::attr_i("axis", 1)});
  b.conv("xy", "wide", 32, 64, 1);
  b.add("Softmax", {"wide"}, {"sm"}, {test::attr_i("axis", 1)});
  b.weight("pw", {64, 64, 4, 4});
  b.add("Conv", {"sm", "pw"}, {"patches"}, {test::attr_ints("strides", {4, 4})});
  b.output("patches");
  ir::Model m = b.m;
  OptimizeOptions o;
  o.level = 3;
  ASSERT_TRUE(optimize(m, o).is_ok());
  EXPECT_EQ(test::op_types(m), (std::vector<std::string>{"Concat", "ReorderToBlocked", "BlockedConv", "ReorderFromBlocked",
                                                         "Softmax", "Conv"}));
  test::expect_same_outputs(b.m, m, {b.random({1, 16, 8, 8}), b.random({1, 16, 8, 8})}, 1e-4f);
}

// A lone grouped conv pays by the outputs of a group: ResNeXt's 3x3 with 16 channels a group (144
// multiply-adds per element read) runs blocked, a 3x3 depthwise (9) stays plain.
TEST(NchwcLayout, LoneGroupedConvPaysByItsOutputsPerGroup) {
  for (int64_t group : {2, 32}) {
    test::Builder b;
    b.input("x", {1, 32, 7, 9});
    b.add("Relu", {"x"}, {"r"});
    b.weight("gw", {32, 32 / group, 3, 3});
    b.add("Conv", {"r", "gw"}, {"g"}, {test::attr_i("group", group), test::attr_ints("pads", {1, 1, 1, 1})});
    b.add("Softmax", {"g"}, {"y"}, {test::attr_i("axis", 1)});
    b.output("y");
    ir::Model m = b.m;
    OptimizeOptions o;
    o.level = 3;
    ASSERT_TRUE(optimize(m, o).is_ok());
    const std::vector<std::string> want =
        group == 2 ? std::vector<std::string>{"Relu", "ReorderToBlocked", "BlockedConv", "ReorderFromBlocked", "Softmax"}
                   : std::vector<std::string>{"Relu", "Conv", "Softmax"};
    EXPECT_EQ(test::op_types(m), want) << "group " << group;
    test::expect_same_outputs(b.m, m, {b.random({1, 32, 7, 9})}, 1e-4f);
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// tf2onnx's floor after each conv, Max(LeakyRelu(x), -0.4) with the bound shaped [1,1,1,1]:
// clip-canonical makes it a Clip, the LeakyRelu joins the conv's epilogue and the Clip (f(0) = 0)
// stays inside the blocked region, so the two convs make one region with no reorder between.
// A Clip whose range excludes 0 would turn padding lanes non-zero: it splits the region.
TEST(NchwcLayout, ZeroPreservingClipStaysBlocked) {
  // The LeakyRelu's result is also a model output, so the Clip is not the conv's clamp and stays
  // a node of its own: blocked when it keeps zero padding lanes zero (floor <= 0).
  for (float floor : {-0.4f, 0.3f}) {
    test::Builder b(13);
    b.input("x", {1, 8, 9, 9});
    b.conv("x", "a", 8, 12);
    b.add("LeakyRelu", {"a"}, {"al"}, {test::attr_f("alpha", 0.2f)});
    b.floats("floor", {1, 1, 1, 1}, {floor});
    b.add("Max", {"al", "floor"}, {"m"});
    b.conv("m", "c", 12, 16);
    b.output("c");
    b.output("al");
    ir::Model m = b.m;
    OptimizeOptions o;
    o.level = 3;
    ASSERT_TRUE(optimize(m, o).is_ok());
    const std::vector<std::string> ops = test::op_types(m);
    EXPECT_EQ(std::count(ops.begin(), ops.end(), "Clip"), 1) << "floor " << floor;
    EXPECT_EQ(std::count(ops.begin(), ops.end(), "ReorderToBlocked"), floor < 0 ? 1 : 2)
        << "floor " << floor;
    test::expect_same_outputs(b.m, m, {b.random({1, 8, 9, 9}, -3, 3)}, 1e-4f);
  }
}

// tf2onnx's Max(LeakyRelu(conv), -0.4) read only by the next conv: the clamp of the first conv.
TEST(NchwcLayout, ClipAfterLeakyReluIsTheConvsClamp) {
  test::Builder b(13);
  b.input("x", {1, 8, 9, 9});
  b.conv("x", "a", 8, 12);
  b.add("LeakyRelu", {"a"}, {"al"}, {test::attr_f("alpha", 0.2f)});
  b.floats("floor", {1, 1, 1, 1}, {0.3f});
  b.add("Max", {"al", "floor"}, {"m"});
  b.conv("m", "c", 12, 16);
  b.output("c");
  ir::Model m = b.m;
  OptimizeOptions o;
  o.level = 3;
  ASSERT_TRUE(optimize(m, o).is_ok());
  EXPECT_EQ(test::op_types(m), (std::vector<std::string>{"ReorderToBlocked", "BlockedConv",
                                                         "BlockedConv", "ReorderFromBlocked"}));
  test::expect_same_outputs(b.m, m, {b.random({1, 8, 9, 9}, -3, 3)}, 1e-4f);
}

// DenseNet's layer: Concat of the features so far, BN-ReLU (a FusedElementwise with per-channel
// scale and shift, [C,1,1] and [1,C,1,1]), a 1x1 conv. With channel counts of whole blocks the
// Concat and the chain stay blocked; a 12-channel input sends the Concat back to plain.
void dense_layer(Builder& b, int64_t grown) {
  b.m.opsets["ai.kiln"] = 1;
  b.input("x", {1, 16, 9, 9});
  b.conv("x", "a", 16, 16);
  b.conv("a", "c", 16, grown);
  b.add("Concat", {"a", "c"}, {"cat"}, {attr_i("axis", 1)});
  const int64_t ch = 16 + grown;
  b.weight("scale", {ch, 1, 1});
  b.weight("shift", {1, ch, 1, 1});
  ir::Node& bn = b.add("FusedElementwise", {"cat", "scale", "shift"}, {"bn"},
                       {test::attr_strings("ops", {"Mul", "Add", "Relu"}),
                        test::attr_ints("operands", {1, 2, -1}), test::attr_ints("swapped", {0, 1, 0})});
  bn.domain = "ai.kiln";
  conv(b, "bn", "d", ch, 16, 1, {});
  b.output("d");
}

TEST(NchwcLayout, ChannelConcatAndChannelChainStayBlocked) {
  Builder b;
  dense_layer(b, 8);
  const ir::Model m = check_o3(b, {"ReorderToBlocked", "BlockedConv", "BlockedConv", "Concat",
                                   "FusedElementwise", "BlockedConv", "ReorderFromBlocked"},
                               {{1, 16, 9, 9}});
  for (const auto& n : m.graph.nodes) {
    if (n.op_type == "Concat") {
      EXPECT_EQ(n.attr_int("axis", 0), 1);
    }
    if (n.op_type == "FusedElementwise") {
      for (size_t i = 1; i < 3; ++i)
        EXPECT_EQ(m.graph.initializers.at(n.inputs[i]).shape(), (Shape{1, 3, 1, 1, 8}));
    }
  }
}

TEST(NchwcLayout, ConcatOfPartBlocksStaysPlain) {
  Builder b;
  dense_layer(b, 12);
  check_o3(b, {"ReorderToBlocked", "BlockedConv", "ReorderFromBlocked", "BlockedConv",
               "ReorderFromBlocked", "Concat", "FusedElementwise", "Conv"},  // a lone 1x1 stays plain
           {{1, 16, 9, 9}});
}

// An FPN's top-down step: a lateral conv's map upsampled (Resize of H and W) and added to the next
// level's conv (its residual after conv-epilogue), then a conv. Nearest and linear, scales and
// sizes (a ratio that is not whole), up and down, the coordinate modes that move the taps, 12
// channels (a padded block). The Resize runs blocked: no reorder cuts the region. A Resize of the
// channels stays plain.
TEST(NchwcLayout, ResizeOfHAndWStaysBlocked) {
  struct Case {
    std::string mode, coord;
    std::vector<float> scales;
    std::vector<int64_t> sizes;
    Shape top, next;  // the input of the level resized, and of the level it is added to
  };
  const std::vector<Case> cases = {
      {"nearest", "asymmetric", {1, 1, 2, 2}, {}, {1, 12, 5, 6}, {1, 12, 10, 12}},
      {"nearest", "half_pixel", {}, {1, 12, 9, 11}, {1, 12, 4, 5}, {1, 12, 9, 11}},
      {"linear", "align_corners", {}, {1, 12, 17, 23}, {1, 12, 6, 7}, {1, 12, 17, 23}},
      {"linear", "pytorch_half_pixel", {1, 1, 0.5f, 0.5f}, {}, {1, 12, 14, 18}, {1, 12, 7, 9}},
  };
  for (const Case& c : cases) {
    Builder b;
    b.input("x", c.top);
    b.input("y", c.next);
    conv(b, "x", "a", 12, 12, 3, {attr_ints("pads", {1, 1, 1, 1})});
    std::vector<std::string> in{"a", "roi"};
    b.m.graph.initializers["roi"] = Tensor::make(DType::kFloat32, {0}).value();
    if (!c.scales.empty()) {
      Tensor t = Tensor::make(DType::kFloat32, {4}).value();
      std::copy(c.scales.begin(), c.scales.end(), t.data<float>());
      b.m.graph.initializers["scales"] = t;
      in.push_back("scales");
    } else {
      Tensor t = Tensor::make(DType::kInt64, {4}).value();
      std::copy(c.sizes.begin(), c.sizes.end(), t.data<int64_t>());
      b.m.graph.initializers["sizes"] = t;
      in.push_back("");
      in.push_back("sizes");
    }
    b.add("Resize", in, {"up"}, {attr_s("mode", c.mode), attr_s("coordinate_transformation_mode", c.coord)});
    conv(b, "y", "d", 12, 12, 1, {});
    b.add("Add", {"d", "up"}, {"s"});
    conv(b, "s", "e", 12, 12, 3, {attr_ints("pads", {1, 1, 1, 1})});
    b.output("e");
    const ir::Model m = check_o3(b,
                                 {"ReorderToBlocked", "BlockedConv", "BlockedResize", "ReorderToBlocked",
                                  "BlockedConv", "BlockedConv", "ReorderFromBlocked"},
                                 {c.top, c.next}, -2, 2);
    EXPECT_EQ(count(m, "Resize"), 0) << c.mode << " " << c.coord;
  }
  // Channels resized: plain, between two regions.
  Builder b;
  b.input("x", {1, 8, 6, 6});
  conv(b, "x", "a", 8, 8, 3, {attr_ints("pads", {1, 1, 1, 1})});
  conv(b, "a", "a2", 8, 8, 3, {attr_ints("pads", {1, 1, 1, 1})});
  b.m.graph.initializers["roi"] = Tensor::make(DType::kFloat32, {0}).value();
  Tensor t = Tensor::make(DType::kFloat32, {4}).value();
  std::copy_n(std::vector<float>{1, 2, 1, 1}.data(), 4, t.data<float>());
  b.m.graph.initializers["scales"] = t;
  b.add("Resize", {"a2", "roi", "scales"}, {"up"});
  b.output("up");
  const ir::Model m = check_o3(b, {"ReorderToBlocked", "BlockedConv", "BlockedConv", "ReorderFromBlocked", "Resize"},
                               {{1, 8, 6, 6}});
}

// Add and Mul of blocked values with the same channels broadcast over N, H and W exactly as on
// NCHW, so they stay blocked without a proof that the shapes match (a dynamic FPN's lateral +
// upsampled maps): here a 1-row map added to a 5-row one, and 2 images times 1. A Mul whose
// operands differ in channels stays plain.
TEST(NchwcLayout, BroadcastOverSpatialDimsStaysBlocked) {
  Builder b;
  b.input("x", {1, 12, 1, 6});
  b.input("y", {2, 12, 5, 6});
  conv(b, "x", "a", 12, 12, 3, {attr_ints("pads", {1, 1, 1, 1})});
  conv(b, "y", "c", 12, 12, 3, {attr_ints("pads", {1, 1, 1, 1})});
  b.add("Add", {"a", "c"}, {"s"});
  b.add("Mul", {"s", "a"}, {"t"});
  conv(b, "t", "e", 12, 12, 1, {});
  b.output("e");
  check_o3(b,
           {"ReorderToBlocked", "BlockedConv", "ReorderToBlocked", "BlockedConv", "Add", "Mul",
            "BlockedConv", "ReorderFromBlocked"},
           {{1, 12, 1, 6}, {2, 12, 5, 6}}, -2, 2);

  Builder p;
  p.input("x", {1, 8, 4, 4});
  conv(p, "x", "a", 8, 8, 3, {attr_ints("pads", {1, 1, 1, 1})});
  conv(p, "a", "c", 8, 1, 3, {attr_ints("pads", {1, 1, 1, 1})});
  p.add("Mul", {"a", "c"}, {"m"});  // [1, 8, 4, 4] * [1, 1, 4, 4]
  p.output("m");
  check_o3(p, {"ReorderToBlocked", "BlockedConv", "ReorderFromBlocked", "BlockedConv", "ReorderFromBlocked", "Mul"},
           {{1, 8, 4, 4}});
}

}  // namespace
}  // namespace kiln
