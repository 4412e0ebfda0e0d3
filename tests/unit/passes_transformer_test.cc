// The passes that tidy transformer exports around the fused ops: gemm-to-matmul, transpose-cancel,
// embed-layer-norm (the whole pipeline on batch_first attention is in passes_attention_test.cc).
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;
using test::attr_ints;
using test::Builder;
using test::num;
using test::sym;

constexpr int64_t kE = 8;

TEST(GemmToMatMul, FlattenGemmRestoreBecomesMatMulAdd) {
  Builder b;
  b.input("x", {3, 4, kE});
  b.ints("flat", {-1, kE});
  b.ints("back", {3, -1, 6});
  b.weight("w", {6, kE});  // transB: [N, K]
  b.weight("c", {6});
  b.add("Reshape", {"x", "flat"}, {"x2"});
  b.add("Gemm", {"x2", "w", "c"}, {"g"}, {attr_i("transB", 1)});
  b.add("Reshape", {"g", "back"}, {"y"});
  b.output("y");
  ir::Model after =
      test::check_pass(b, "gemm-to-matmul", {"Reshape", "MatMul", "Add"}, {{3, 4, kE}});
  EXPECT_EQ(after.graph.nodes.back().outputs[0], "y");
  // The flatten now keeps the leading axes: [3, -1, K].
  const Tensor& shape = after.graph.initializers.at(after.graph.nodes[0].inputs[1]);
  EXPECT_EQ(std::vector<int64_t>(shape.data<int64_t>(), shape.data<int64_t>() + 3),
            (std::vector<int64_t>{3, -1, kE}));
}

TEST(GemmToMatMul, LeavesScaledGemmAndCopyingShapes) {
  for (int variant = 0; variant < 2; ++variant) {
    Builder b;
    b.input("x", {3, 4, kE});
    b.ints("flat", {-1, kE});
    b.ints("back", variant == 0 ? std::vector<int64_t>{3, -1, 6} : std::vector<int64_t>{0, 6});
    b.weight("w", {kE, 6});
    b.add("Reshape", {"x", "flat"}, {"x2"});
    b.add("Gemm", {"x2", "w"}, {"g"}, {attr_f("alpha", variant == 0 ? 0.5f : 1.0f)});
    b.add("Reshape", {"g", "back"}, {"y"});
    b.output("y");
    test::check_pass(b, "gemm-to-matmul", {"Reshape", "Gemm", "Reshape"}, {{3, 4, kE}});
  }
}

TEST(TransposeCancel, PairAroundRowWiseOpsGoes) {
  Builder b;
  b.input("x", {2, 5, kE});
  b.weight("w", {kE, 6});
  b.weight("c", {6});
  b.weight("gamma", {6});
  b.add("Transpose", {"x"}, {"t"}, {attr_ints("perm", {1, 0, 2})});
  b.add("MatMul", {"t", "w"}, {"m"});
  b.add("Add", {"c", "m"}, {"a"});
  b.add("Relu", {"a"}, {"r"});
  b.add("LayerNormalization", {"r", "gamma"}, {"n"});
  b.add("Transpose", {"n"}, {"y"}, {attr_ints("perm", {1, 0, 2})});
  b.output("y");
  ir::Model after = test::check_pass(b, "transpose-cancel",
                                     {"MatMul", "Add", "Relu", "LayerNormalization"}, {{2, 5, kE}});
  EXPECT_EQ(after.graph.nodes[0].inputs[0], "x");
  EXPECT_EQ(after.graph.nodes.back().outputs[0], "y");
}

TEST(TransposeCancel, KeepsPairsThatDoNotCommute) {
  // A Softmax over the last axis would commute, but a per-row bias of rank 2 does not.
  Builder b;
  b.input("x", {2, 5, kE});
  b.weight("c", {5, 1, kE});
  b.add("Transpose", {"x"}, {"t"}, {attr_ints("perm", {1, 0, 2})});
  b.add("Add", {"t", "c"}, {"a"});
  b.add("Transpose", {"a"}, {"y"}, {attr_ints("perm", {1, 0, 2})});
  b.output("y");
  test::check_pass(b, "transpose-cancel", {"Transpose", "Add", "Transpose"}, {{2, 5, kE}});
  // Not inverse permutations of rank 4.
  Builder c;
  c.input("x", {2, 3, 4, kE});
  c.add("Transpose", {"x"}, {"t"}, {attr_ints("perm", {1, 2, 0, 3})});
  c.add("Relu", {"t"}, {"r"});
  c.add("Transpose", {"r"}, {"y"}, {attr_ints("perm", {1, 2, 0, 3})});
  c.output("y");
  test::check_pass(c, "transpose-cancel", {"Transpose", "Relu", "Transpose"}, {{2, 3, 4, kE}});
}

// BERT's embeddings: word[ids] + position[Range(0, seq)] + segment[types], then LayerNorm.
void bert_embeddings(Builder& b, bool with_segment, bool hf_buffer) {
  b.input_dims("ids", {sym("batch"), sym("seq")}, DType::kInt64);
  if (with_segment) b.input_dims("types", {sym("batch"), sym("seq")}, DType::kInt64);
  b.weight("word", {20, kE});
  b.weight("pos", {16, kE});
  b.weight("seg", {2, kE});
  b.weight("gamma", {kE});
  b.weight("beta", {kE});
  b.add("Shape", {"ids"}, {"shape"});
  b.ints("one", {1});
  b.m.graph.initializers["one_scalar"] = Tensor::scalar<int64_t>(DType::kInt64, 1);
  b.m.graph.initializers["zero_scalar"] = Tensor::scalar<int64_t>(DType::kInt64, 0);
  b.add("Gather", {"shape", "one_scalar"}, {"seq_len"}, {attr_i("axis", 0)});
  if (hf_buffer) {
    Tensor buf = Tensor::make(DType::kInt64, {1, 16}).value();
    for (int64_t i = 0; i < 16; ++i) buf.data<int64_t>()[i] = i;
    b.m.graph.initializers["position_ids"] = buf;
    b.ints("zero", {0});
    b.add("Unsqueeze", {"seq_len", "zero"}, {"seq_end"});
    b.add("Slice", {"position_ids", "zero", "seq_end", "one"}, {"positions"});
  } else {
    b.add("Range", {"zero_scalar", "seq_len", "one_scalar"}, {"range"});
    b.ints("zero", {0});
    b.add("Unsqueeze", {"range", "zero"}, {"positions"});
  }
  b.add("Gather", {"word", "ids"}, {"w"});
  b.add("Gather", {"pos", "positions"}, {"p"});
  b.add("Add", {"w", "p"}, {"wp"});
  std::string sum = "wp";
  if (with_segment) {
    b.add("Gather", {"seg", "types"}, {"s"});
    b.add("Add", {"wp", "s"}, {"wps"});
    sum = "wps";
  }
  b.add("LayerNormalization", {sum, "gamma", "beta"}, {"y"},
        {attr_i("axis", -1), attr_f("epsilon", 1e-12f)});
  b.output("y");
}

std::vector<Tensor> token_feeds(int64_t batch, int64_t seq, bool with_segment) {
  std::vector<Tensor> feeds;
  for (int k = 0; k < (with_segment ? 2 : 1); ++k) {
    Tensor t = Tensor::make(DType::kInt64, {batch, seq}).value();
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<int64_t>()[i] = k == 0 ? (i * 7) % 20 - (i % 5 == 0 ? 20 : 0) : i % 2;
    feeds.push_back(t);
  }
  return feeds;
}

TEST(EmbedLayerNorm, BertEmbeddingsBecomeOneNodeWithoutShape) {
  for (bool with_segment : {true, false})
    for (bool hf_buffer : {false, true}) {
      Builder b;
      bert_embeddings(b, with_segment, hf_buffer);
      ir::Model after = b.m;
      auto report = optimize(after, OptimizeOptions{});
      ASSERT_TRUE(report.is_ok()) << report.status().message();
      ASSERT_EQ(test::op_types(after), std::vector<std::string>{"EmbedLayerNorm"})
          << with_segment << hf_buffer;
      const ir::Node& f = after.graph.nodes[0];
      EXPECT_EQ(f.inputs[0], "ids");
      EXPECT_EQ(f.inputs[2], "word");
      EXPECT_EQ(f.inputs[3], "pos");
      for (auto [batch, seq] : {std::pair<int64_t, int64_t>{1, 1}, {2, 7}, {3, 16}})
        test::expect_same_outputs(b.m, after, token_feeds(batch, seq, with_segment));
    }
}

TEST(EmbedLayerNorm, FixedSeqFoldsThePositionsIntoATable) {
  // With seq fixed, constant folding turns position[Range(0, seq)] into a [1, seq, E] constant.
  Builder b;
  bert_embeddings(b, true, false);
  ir::Model after = b.m;
  OptimizeOptions options;
  options.fixed_dims = {{"batch", 2}, {"seq", 7}};
  ASSERT_TRUE(optimize(after, options).is_ok());
  ASSERT_EQ(test::op_types(after), std::vector<std::string>{"EmbedLayerNorm"});
  EXPECT_EQ(after.graph.initializers.at(after.graph.nodes[0].inputs[3]).shape(), (Shape{7, kE}));
  test::expect_same_outputs(b.m, after, token_feeds(2, 7, true));
}

TEST(EmbedLayerNorm, PositionsNotCountingFromZeroStay) {
  Builder b;
  bert_embeddings(b, false, false);
  b.m.graph.initializers["zero_scalar"] = Tensor::scalar<int64_t>(DType::kInt64, 1);
  ASSERT_TRUE(test::run_pass(b.m, "embed-layer-norm").is_ok());
  EXPECT_EQ(test::histogram(b.m).count("EmbedLayerNorm"), 0u);
}

TEST(EmbedLayerNorm, KernelRejectsTooLongSequences) {
  Builder b;
  bert_embeddings(b, false, false);
  ir::Model after = b.m;
  ASSERT_TRUE(optimize(after, OptimizeOptions{}).is_ok());
  auto s = Session::create(std::make_shared<const ir::Model>(after));
  ASSERT_TRUE(s.is_ok());
  auto out = (*s)->run({Value::of(token_feeds(1, 17, false)[0])});
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("exceeds the 16 positions"), std::string::npos)
      << out.status().message();
}

}  // namespace
}  // namespace kiln
