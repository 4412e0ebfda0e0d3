// The -O2 mlp-fusion (two MatMuls with constant weights → ai.kiln.FusedMLP): the structure it
// leaves, what it must not fuse, and the FusedMLP kernel's row blocking against the unfused graph.
#include <gtest/gtest.h>

#include "ir/shape_inference.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::Builder;
using test::run_pass;

// fc1 = x·w1 (+ b1) [→ act], fc2 = ·w2 (+ b2), as an exporter writes it.
void mlp(Builder& b, const Shape& x, int64_t h, int64_t n, bool bias1, bool bias2,
         const std::string& act) {
  const int64_t k = x.back();
  b.input("x", x);
  b.weight("w1", {k, h});
  b.weight("w2", {h, n});
  b.add("MatMul", {"x", "w1"}, {"m1"});
  std::string v = "m1";
  if (bias1) {
    b.weight("b1", {h});
    b.add("Add", {v, "b1"}, {"a1"});
    v = "a1";
  }
  if (!act.empty()) {
    b.add(act, {v}, {"h"});
    v = "h";
  }
  b.add("MatMul", {v, "w2"}, {bias2 ? "m2" : "y"});
  if (bias2) {
    b.weight("b2", {n});
    b.add("Add", {"b2", "m2"}, {"y"});  // commuted: the bias first
  }
  b.output("y");
}

// Runs gemm-epilogue as -O2 does first, then checks mlp-fusion on the result: the ops left, and
// outputs equal to the original graph's.
ir::Model check_fused(Builder& b, const std::vector<std::string>& want_ops, const Shape& x_shape) {
  const ir::Model original = b.m;
  EXPECT_TRUE(run_pass(b.m, "gemm-epilogue").is_ok());
  ir::Model after = test::check_pass(b, "mlp-fusion", want_ops, {x_shape});
  const Tensor x = b.random(x_shape);
  test::expect_same_outputs(original, after, {x});
  return after;
}

TEST(MlpFusion, MatMulBiasGeluMatMul) {
  Builder b;
  mlp(b, {2, 3, 16}, 40, 12, true, false, "Gelu");
  const ir::Model m = check_fused(b, {"FusedMLP"}, {2, 3, 16});
  const ir::Node& f = m.graph.nodes[0];
  EXPECT_EQ(f.domain, "ai.kiln");
  EXPECT_EQ(f.inputs, (std::vector<std::string>{"x", "w1", "b1", "w2"}));
  EXPECT_EQ(f.outputs, (std::vector<std::string>{"y"}));
  EXPECT_EQ(f.attr_string("activation", ""), "Gelu");
  // The output keeps its shape through shape inference of the new op.
  ir::Model inferred = m;
  ASSERT_TRUE(ir::infer_shapes(inferred).is_ok());
  EXPECT_EQ(inferred.graph.outputs[0].type.static_shape(), (std::optional<Shape>{Shape{2, 3, 12}}));
}

TEST(MlpFusion, BothBiases) {
  Builder b;
  mlp(b, {5, 16}, 24, 8, true, true, "Gelu");
  const ir::Model m = check_fused(b, {"FusedMLP"}, {5, 16});
  EXPECT_EQ(m.graph.nodes[0].inputs, (std::vector<std::string>{"x", "w1", "b1", "w2", "b2"}));
}

TEST(MlpFusion, SecondBiasOnly) {
  Builder b;
  mlp(b, {4, 8}, 20, 6, false, true, "Gelu");
  const ir::Model m = check_fused(b, {"FusedMLP"}, {4, 8});
  EXPECT_EQ(m.graph.nodes[0].inputs, (std::vector<std::string>{"x", "w1", "", "w2", "b2"}));
}

TEST(MlpFusion, ReluWithoutBiases) {
  Builder b;
  mlp(b, {3, 7, 10}, 33, 9, false, false, "Relu");
  const ir::Model m = check_fused(b, {"FusedMLP"}, {3, 7, 10});
  EXPECT_EQ(m.graph.nodes[0].inputs, (std::vector<std::string>{"x", "w1", "", "w2"}));
  EXPECT_EQ(m.graph.nodes[0].attr_string("activation", ""), "Relu");
}

TEST(MlpFusion, PlainMatMulPairHasNoActivation) {
  Builder b;
  mlp(b, {6, 8}, 12, 5, false, false, "");
  const ir::Model m = check_fused(b, {"FusedMLP"}, {6, 8});
  EXPECT_FALSE(m.graph.nodes[0].has_attr("activation"));
}

TEST(MlpFusion, IntermediateReadElsewhereIsKept) {
  Builder b;
  mlp(b, {4, 8}, 16, 8, true, false, "Gelu");
  b.add("Relu", {"h"}, {"r"});  // a second reader of the intermediate
  b.output("r");
  check_fused(b, {"FusedMatMul", "MatMul", "Relu"}, {4, 8});
}

TEST(MlpFusion, IntermediateAsGraphOutputIsKept) {
  Builder b;
  mlp(b, {4, 8}, 16, 8, true, false, "Gelu");
  b.output("h");
  check_fused(b, {"FusedMatMul", "MatMul"}, {4, 8});
}

TEST(MlpFusion, NonConstantSecondWeightIsKept) {
  Builder b;
  b.input("x", {4, 8});
  b.input("w2", {16, 8});
  b.weight("w1", {8, 16});
  b.add("MatMul", {"x", "w1"}, {"m1"});
  b.add("Relu", {"m1"}, {"h"});
  b.add("MatMul", {"h", "w2"}, {"y"});
  b.output("y");
  ASSERT_TRUE(run_pass(b.m, "gemm-epilogue").is_ok());
  test::check_pass(b, "mlp-fusion", {"FusedMatMul", "MatMul"}, {{4, 8}, {16, 8}});
}

TEST(MlpFusion, SecondActivationIsKept) {
  // FusedMLP applies nothing after fc2: fc2's own Relu would be lost.
  Builder b;
  mlp(b, {4, 8}, 16, 8, true, false, "Gelu");
  b.m.graph.outputs.clear();
  b.add("Relu", {"y"}, {"z"});
  b.output("z");
  check_fused(b, {"FusedMatMul", "FusedMatMul"}, {4, 8});
}

TEST(MlpFusion, ThreeLayersFuseTheFirstPair) {
  Builder b;
  mlp(b, {4, 8}, 16, 12, false, false, "Relu");
  b.m.graph.outputs.clear();
  b.weight("w3", {12, 5});
  b.add("MatMul", {"y", "w3"}, {"z"});
  b.output("z");
  check_fused(b, {"FusedMLP", "MatMul"}, {4, 8});
}

// Runs the unfused and the fused model on x with 1, 2 and 3 threads; Y must agree.
void expect_fused_matches(const ir::Model& unfused, const ir::Model& fused, const Tensor& x) {
  SessionOptions one;
  one.threads = 1;
  auto ref = Session::create(std::make_shared<const ir::Model>(unfused), one);
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  auto want = (*ref)->run({Value::of(x)});
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  const Tensor& p = (*want)[0].tensor;
  for (int threads : {1, 2, 3}) {
    SessionOptions so;
    so.threads = threads;
    auto s = Session::create(std::make_shared<const ir::Model>(fused), so);
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    auto got = (*s)->run({Value::of(x)});
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    const Tensor& q = (*got)[0].tensor;
    ASSERT_EQ(q.shape(), p.shape());
    for (int64_t i = 0; i < p.numel(); ++i)
      ASSERT_NEAR(q.data<float>()[i], p.data<float>()[i],
                  1e-4f * std::max(1.0f, std::fabs(p.data<float>()[i])))
          << "threads " << threads << " element " << i;
  }
}

TEST(FusedMlpKernel, RowBlocksAndOddHiddenSizeMatchUnfusedGraph) {
  // H = 1000 (not a multiple of the 16-wide GEMM tile, N = 20 neither) gives 64-row blocks.
  // 301 rows: blocks of 64 rows (1 thread) or 52 (2, 3 threads), the last one partial.
  // 60 rows: one block, which with 2 or 3 threads runs as all rows with the columns split.
  for (const Shape& x_shape : {Shape{7, 43, 24}, Shape{60, 24}}) {
    Builder b;
    mlp(b, x_shape, 1000, 20, true, true, "Gelu");
    const ir::Model original = b.m;
    ASSERT_TRUE(run_pass(b.m, "gemm-epilogue").is_ok());
    // Sums of 1000 products of O(1) values: 1e-4 rather than 1e-5.
    const ir::Model fused =
        test::check_pass(b, "mlp-fusion", {"FusedMLP"}, {x_shape}, -1, 1, 1e-4f);
    expect_fused_matches(original, fused, b.random(x_shape));
  }
}

TEST(FusedMlpKernel, MismatchedShapesAreAnError) {
  // W1 has 8 rows but X rows hold 6 values: shape inference names the clash, the session refuses.
  Builder b;
  b.input("x", {3, 6});
  b.weight("w1", {8, 16});
  b.weight("w2", {16, 4});
  ir::Node& f = b.add("FusedMLP", {"x", "w1", "", "w2"}, {"y"});
  f.domain = "ai.kiln";
  b.m.opsets["ai.kiln"] = 1;
  b.output("y");
  ir::Model m = b.m;
  const Status st = ir::infer_shapes(m);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("W1"), std::string::npos) << st.message();
  auto s = Session::create(std::make_shared<const ir::Model>(b.m));
  if (s.is_ok()) {
    auto r = (*s)->run({Value::of(b.random({3, 6}))});
    EXPECT_FALSE(r.is_ok());
  }
}

}  // namespace
}  // namespace kiln
