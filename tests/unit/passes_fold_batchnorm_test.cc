// The -O1 fold-batchnorm pass: an inference BatchNormalization folded into the Conv,
// ConvTranspose, Gemm or MatMul before it, or else made a per-channel scale and shift; the
// structure it leaves, and the same numbers before and after.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;
using test::attr_ints;
using test::Builder;
using test::expect_same_outputs;
using test::histogram;
using test::num;
using test::run_passes;
using test::sym;

constexpr int64_t kOpset = 17;

// y = BatchNormalization(c) with c channels and random statistics (variance kept positive).
void batchnorm(Builder& b, const std::string& in, const std::string& out, int64_t c) {
  b.m.graph.initializers["gamma"] = b.random({c}, 0.5f, 2.0f);
  b.weight("beta", {c});
  b.weight("mean", {c});
  b.m.graph.initializers["var"] = b.random({c}, 0.1f, 3.0f);
  b.add("BatchNormalization", {in, "gamma", "beta", "mean", "var"}, {out},
        {attr_f("epsilon", 1e-3f)});
}

// Runs fold-batchnorm on b's graph: one `op` node is left, computing what the graph did on an
// input of `x_dims`.
void expect_folded_into(Builder& b, const std::string& op, const Shape& x_dims) {
  ir::Model m = b.m;
  run_passes(m, {"fold-batchnorm", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{op, 1}}));
  expect_same_outputs(b.m, m, {b.random(x_dims)});
}

TEST(FoldBatchNorm, ConvAbsorbsBatchNorm) {
  Builder b(kOpset);
  b.input("x", {1, 2, 5, 5});
  b.output_dims("y", {num(1), num(3), num(5), num(5)});
  b.weight("w", {3, 2, 3, 3});
  b.add("Conv", {"x", "w"}, {"c"}, {attr_ints("pads", {1, 1, 1, 1})});
  batchnorm(b, "c", "y", 3);
  expect_folded_into(b, "Conv", {1, 2, 5, 5});
}

// A DB text detector's upsampling, ConvTranspose then BN, with 2 groups (output channel
// g * M/group + j of input channels of group g) and a bias; and one without bias.
TEST(FoldBatchNorm, ConvTransposeAbsorbsBatchNorm) {
  for (const bool with_bias : {true, false}) {
    Builder b(kOpset);
    b.input("x", {1, 4, 3, 5});
    b.output_dims("y", {num(1), num(6), num(6), num(10)});
    b.weight("w", {4, 3, 2, 2});
    std::vector<std::string> in{"x", "w"};
    if (with_bias) {
      b.weight("bias", {6});
      in.push_back("bias");
    }
    b.add("ConvTranspose", in, {"c"}, {attr_ints("strides", {2, 2}), attr_i("group", 2)});
    batchnorm(b, "c", "y", 6);
    expect_folded_into(b, "ConvTranspose", {1, 4, 3, 5});
  }
}

TEST(FoldBatchNorm, GemmAbsorbsBatchNorm) {
  Builder b(kOpset);
  b.input("x", {2, 4});
  b.output_dims("y", {num(2), num(3)});
  b.weight("w", {3, 4});
  b.weight("bias", {3});
  b.add("Gemm", {"x", "w", "bias"}, {"c"}, {attr_i("transB", 1)});
  batchnorm(b, "c", "y", 3);
  expect_folded_into(b, "Gemm", {2, 4});
}

TEST(FoldBatchNorm, MatMulBecomesGemmWithTheBatchNorm) {
  Builder b(kOpset);
  b.input_dims("x", {sym("batch"), num(4)});
  b.output_dims("y", {sym("batch"), num(3)});
  b.weight("w", {4, 3});
  b.add("MatMul", {"x", "w"}, {"c"});
  batchnorm(b, "c", "y", 3);
  expect_folded_into(b, "Gemm", {5, 4});
}

// A BatchNormalization after no Conv or Gemm (DenseNet's BN-ReLU after a Concat) becomes Mul and
// Add by per-channel constants shaped to broadcast over N, C, H, W; the values stay the same.
// Two BNs in one graph, one folding into its Conv, the other not, are both rewritten in one run.
TEST(FoldBatchNorm, UnfoldableBatchNormBecomesScaleShift) {
  test::Builder b(17);
  b.input("x", {2, 3, 5, 4});
  b.conv("x", "c", 3, 4, 3);
  b.weight("bn1_g", {7});
  b.weight("bn1_b", {7});
  b.weight("bn1_m", {7});
  b.m.graph.initializers["bn1_v"] = b.random({7}, 0.5f, 2.0f);
  b.weight("bn0_g", {4});
  b.weight("bn0_b", {4});
  b.weight("bn0_m", {4});
  b.m.graph.initializers["bn0_v"] = b.random({4}, 0.5f, 2.0f);
  b.add("BatchNormalization", {"c", "bn0_g", "bn0_b", "bn0_m", "bn0_v"}, {"cb"});
  b.add("Concat", {"x", "cb"}, {"cat"}, {test::attr_i("axis", 1)});
  b.add("BatchNormalization", {"cat", "bn1_g", "bn1_b", "bn1_m", "bn1_v"}, {"n1"},
        {test::attr_f("epsilon", 1e-3f)});
  b.add("Relu", {"n1"}, {"y"});
  b.output("y");
  test::check_pass(b, "fold-batchnorm", {"Conv", "Concat", "Mul", "Add", "Relu"}, {{2, 3, 5, 4}});
}

}  // namespace
}  // namespace kiln
