// The -O3 channels-last pass (Transposes through Concat and Split too) and the mlp-residual
// fusion after it, on ConvNeXt's block: NCHW
// depthwise conv, LayerNorm and MLP on NHWC between two Transposes, a per-channel layer scale and
// the residual Add in NCHW. The full -O3 pipeline must leave the residual stream NHWC (no
// Transpose inside the blocks), fold scale and residual into the FusedMLP, and compute what the
// graph as exported computes.
#include <gtest/gtest.h>

#include "kiln/optimize.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_i;
using test::attr_ints;
using test::Builder;
using test::expect_no_rewrite;

// x [1, c, h, w] -> `blocks` ConvNeXt blocks -> y, as torchvision's export spells them.
void convnext_blocks(Builder& b, int64_t c, int64_t h, int64_t w, int blocks) {
  b.input("x", {1, c, h, w});
  std::string x = "x";
  for (int i = 0; i < blocks; ++i) {
    const std::string p = "b" + std::to_string(i) + "_";
    b.weight(p + "dw_w", {c, 1, 7, 7});
    b.weight(p + "dw_b", {c});
    b.add("Conv", {x, p + "dw_w", p + "dw_b"}, {p + "dw"},
          {attr_ints("pads", {3, 3, 3, 3}), attr_i("group", c)});
    b.add("Transpose", {p + "dw"}, {p + "nhwc"}, {attr_ints("perm", {0, 2, 3, 1})});
    b.weight(p + "ln_s", {c});
    b.weight(p + "ln_b", {c});
    b.add("LayerNormalization", {p + "nhwc", p + "ln_s", p + "ln_b"}, {p + "ln"});
    b.weight(p + "w1", {c, 4 * c});
    b.weight(p + "b1", {4 * c});
    b.weight(p + "w2", {4 * c, c});
    b.weight(p + "b2", {c});
    b.add("MatMul", {p + "ln", p + "w1"}, {p + "m1"});
    b.add("Add", {p + "m1", p + "b1"}, {p + "a1"});
    b.add("Gelu", {p + "a1"}, {p + "g"});
    b.add("MatMul", {p + "g", p + "w2"}, {p + "m2"});
    b.add("Add", {p + "m2", p + "b2"}, {p + "a2"});
    b.add("Transpose", {p + "a2"}, {p + "nchw"}, {attr_ints("perm", {0, 3, 1, 2})});
    b.weight(p + "gamma", {c, 1, 1});
    b.add("Mul", {p + "nchw", p + "gamma"}, {p + "scaled"});
    b.add("Add", {p + "scaled", x}, {p + "out"});
    x = p + "out";
  }
  b.output(x);
}

int count(const ir::Model& m, const std::string& op) {
  int k = 0;
  for (const auto& n : m.graph.nodes) k += n.op_type == op;
  return k;
}

// channels-last on b's model moves every Transpose out (they cancel), each `op` then along axis
// 3 (NHWC's channels), with the same outputs on `inputs`.
void expect_transposes_gone_around(const Builder& b, const std::string& op, const std::vector<Tensor>& inputs) {
  ir::Model after = b.m;
  auto n = test::run_pass(after, "channels-last");
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(count(after, "Transpose"), 0);
  for (const auto& node : after.graph.nodes) {
    if (node.op_type == op) {
      EXPECT_EQ(node.attr_int("axis", 0), 3);
    }
  }
  test::expect_same_outputs(b.m, after, inputs, 0.0f);
}

TEST(ChannelsLast, ConvNextResidualStreamStaysNhwc) {
  for (int64_t c : {16, 20}) {  // 20: a part block in the reorders
    SCOPED_TRACE(c);
    Builder b(20);
    convnext_blocks(b, c, 6, 9, 3);
    ir::Model o3 = b.m, o2 = b.m;
    ASSERT_TRUE(optimize(o3, OptimizeOptions{}).is_ok());
    OptimizeOptions level2;
    level2.level = 2;
    ASSERT_TRUE(optimize(o2, level2).is_ok());
    // -O2 keeps both Transposes of each block; -O3 none of them: the entry's NCHW value goes
    // NHWC once for the first residual, the exit back once for the graph output.
    EXPECT_EQ(count(o2, "Transpose"), 6);
    EXPECT_LE(count(o3, "Transpose"), 2);
    EXPECT_EQ(count(o3, "FusedElementwise"), 0);
    int with_residual = 0;
    for (const auto& n : o3.graph.nodes)
      with_residual += n.op_type == "FusedMLP" && n.inputs.size() == 6 && !n.inputs[5].empty();
    EXPECT_EQ(with_residual, 3);
    const Tensor x = b.random({1, c, 6, 9});
    test::expect_same_outputs(b.m, o3, {x}, 1e-4f);
    test::expect_same_outputs(b.m, o2, {x}, 1e-4f);
  }
}

// Moving a Transpose down through an Add with a plain operand needs that operand's inverse: no
// fewer Transposes, so the graph stays as it was. A conv's output transposed to NHWC is one
// reorder out of the blocked layout, writing NHWC.
TEST(ChannelsLast, FoldsIntoReordersButKeepsWhatSavesNothing) {
  Builder b(20);
  b.input("x", {1, 4, 5, 8});
  b.input("z", {1, 8, 4, 5});
  b.add("Transpose", {"x"}, {"t"}, {attr_ints("perm", {0, 3, 1, 2})});
  b.add("Add", {"t", "z"}, {"y"});
  b.output("y");
  b.conv("z", "c1", 8, 16);
  b.conv("c1", "c", 16, 16);
  b.add("Transpose", {"c"}, {"c_nhwc"}, {attr_ints("perm", {0, 2, 3, 1})});
  b.output("c_nhwc");
  ir::Model after = b.m;
  ASSERT_TRUE(optimize(after, OptimizeOptions{}).is_ok());
  EXPECT_EQ(count(after, "Transpose"), 1);
  for (const auto& n : after.graph.nodes)
    if (n.op_type == "Transpose") EXPECT_EQ(n.outputs[0], "t");
  int nhwc_out = 0;
  for (const auto& n : after.graph.nodes)
    nhwc_out += n.op_type == "ReorderFromBlocked" && n.attr_int("channels_last", 0) == 1;
  EXPECT_EQ(nhwc_out, 1);
  test::expect_same_outputs(b.m, after, {b.random({1, 4, 5, 8}), b.random({1, 8, 4, 5})}, 1e-4f);
}

// A Concat of channels-last values on their way to NCHW (8-bit convs' outputs, a YOLO neck's
// concatenations), its result going channels-last again: the Transposes move below it, its axis
// with them, and cancel. A constant part is permuted (the second graph); a part no Transpose
// made gets one of its own, which saves nothing, so the graph stays (the third).
TEST(ChannelsLast, ConcatTakesTheTransposesOfItsParts) {
  for (const int64_t axis : {1, -3}) {
    SCOPED_TRACE(axis);
    Builder b(20);
    b.input("x", {1, 4, 5, 3});
    b.input("y", {1, 4, 5, 2});
    b.add("Transpose", {"x"}, {"xt"}, {attr_ints("perm", {0, 3, 1, 2})});
    b.add("Transpose", {"y"}, {"yt"}, {attr_ints("perm", {0, 3, 1, 2})});
    b.weight("k", {1, 2, 4, 5});
    b.add("Concat", {"xt", "yt", "k"}, {"c"}, {attr_i("axis", axis)});
    b.add("Transpose", {"c"}, {"ct"}, {attr_ints("perm", {0, 2, 3, 1})});
    b.add("Softmax", {"ct"}, {"z"});  // (not element-wise: the Transposes stop above it)
    b.output("z");
    expect_transposes_gone_around(b, "Concat", {b.random({1, 4, 5, 3}), b.random({1, 4, 5, 2})});
  }
  Builder b(20);
  b.input("x", {1, 4, 5, 3});
  b.input("w", {1, 2, 4, 5});
  b.add("Transpose", {"x"}, {"xt"}, {attr_ints("perm", {0, 3, 1, 2})});
  b.add("Concat", {"xt", "w"}, {"c"}, {attr_i("axis", 1)});
  b.add("Relu", {"c"}, {"z"});
  b.output("z");
  expect_no_rewrite(b.m, "channels-last");
}

// A Split of a channels-last value on its way to NCHW (an 8-bit conv's output, a YOLO C2f
// block's halves), each part going channels-last again: the Transpose moves below it, one a part,
// its axis permuted, and those cancel against the parts' own.
TEST(ChannelsLast, SplitTakesTheTransposeOfItsInput) {
  Builder b(20);
  b.input("x", {1, 4, 5, 8});
  b.add("Transpose", {"x"}, {"xt"}, {attr_ints("perm", {0, 3, 1, 2})});
  b.ints("sizes", {3, 5});
  b.add("Split", {"xt", "sizes"}, {"s0", "s1"}, {attr_i("axis", 1)});
  for (const char* s : {"s0", "s1"}) {
    b.add("Transpose", {s}, {std::string(s) + "t"}, {attr_ints("perm", {0, 2, 3, 1})});
    b.add("Softmax", {std::string(s) + "t"}, {std::string(s) + "y"});
    b.output(std::string(s) + "y");
  }
  expect_transposes_gone_around(b, "Split", {b.random({1, 4, 5, 8})});
}

}  // namespace
}  // namespace kiln
