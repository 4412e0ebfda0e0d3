// The attention fusion on small attention blocks built in code (BERT-style with and without a
// mask, torchvision-style packed and sequence first): the structure after, and equal outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "ir/topological_order.h"
#include "kiln/model.h"
#include "kiln/quantize.h"
#include "pass_test_util.h"
#include "quantize_test_util.h"

namespace kiln {
namespace {

using test::attr_i;
using test::attr_ints;
using test::Builder;
using test::expect_same_outputs;
using test::num;
using test::qualified_histogram;
using test::sym;

constexpr int64_t kE = 8, kHeads = 2, kD = 4;

// Random x of `x_shape`, and when `mask_shape` is given a 0/1 mask hiding every third position.
std::vector<Tensor> feeds(Builder& b, const Shape& x_shape, const Shape& mask_shape = {}) {
  std::vector<Tensor> f{b.random(x_shape)};
  if (!mask_shape.empty()) {
    Tensor mask = Tensor::make(DType::kFloat32, mask_shape).value();
    for (int64_t j = 0; j < mask.numel(); ++j) mask.data<float>()[j] = j % 3 == 2 ? 0.0f : 1.0f;
    f.push_back(mask);
  }
  return f;
}

int64_t run_fusion(ir::Model& m) {
  auto r = test::run_pass(m, "attention-fusion");
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : -1;
}

void bert_heads(Builder& b, bool with_mask, bool scale_on_q);

// A BERT layer's self-attention: Q/K/V MatMul + bias, heads split by Reshape [b,s,h,d] (Q's shape
// computed by Shape/Gather/Concat, K's and V's constant), scores scaled and optionally masked.
void bert_block(Builder& b, bool with_mask, bool scale_on_q) {
  b.input_dims("x", {sym("batch"), sym("seq"), num(kE)});
  if (with_mask) b.input_dims("attention_mask", {sym("batch"), sym("seq")});
  b.output("y");
  for (const std::string p : {"q", "k", "v"}) {
    b.weight("w" + p, {kE, kE});
    b.weight("b" + p, {kE});
  }
  b.add("MatMul", {"x", "wq"}, {"q_mm"});
  b.add("Add", {"bq", "q_mm"}, {"q_p"});
  b.add("MatMul", {"x", "wk"}, {"k_mm"});
  b.add("Add", {"k_mm", "bk"}, {"k_p"});
  b.add("MatMul", {"x", "wv"}, {"v_mm"});
  b.add("Add", {"bv", "v_mm"}, {"v_p"});
  bert_heads(b, with_mask, scale_on_q);
}

// ONNX Runtime's quantize_dynamic of that layer: X quantized once (DynamicQuantizeLinear, u8 per
// tensor) for three com.microsoft.MatMulIntegerToFloat projections with int8 weights and biases.
// They cannot merge into one int8 GEMM with per-row scales (MultiHeadAttention's) without changing
// the results, so the attention from the projected Q, K and V on is what fuses.
void ort_dynamic_block(Builder& b) {
  b.m.opsets["com.microsoft"] = 1;
  b.input_dims("x", {sym("batch"), sym("seq"), num(kE)});
  b.input_dims("attention_mask", {sym("batch"), sym("seq")});
  b.output("y");
  b.add("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  std::mt19937 rng(5);
  for (const std::string p : {"q", "k", "v"}) {
    Tensor w = Tensor::make(DType::kInt8, {kE, kE}).value();
    for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    b.m.graph.initializers["w" + p] = w;
    b.scalar("s" + p, 0.004f);
    b.weight("b" + p, {kE});
    ir::Node& n = b.add("MatMulIntegerToFloat", {"xq", "w" + p, "xs", "s" + p, "xz", "", "b" + p}, {p + "_p"});
    n.domain = "com.microsoft";
  }
  bert_heads(b, true, false);
}

// The heads of q_p, k_p and v_p ([b, s, E] each) on to y, through the output projection.
void bert_heads(Builder& b, bool with_mask, bool scale_on_q) {
  b.weight("wo", {kE, kE});
  b.weight("bo", {kE});
  b.ints("heads_shape", {0, 0, kHeads, kD});
  b.ints("merge_shape", {0, 0, kE});
  b.ints("i0", {0});
  b.ints("i1", {1});
  b.ints("hd", {kHeads, kD});
  b.scalar("sqrt_d", 2.0f);
  b.scalar("half", 0.5f);
  b.add("Shape", {"q_p"}, {"q_shape"});
  b.add("Gather", {"q_shape", "i0"}, {"q_b"});
  b.add("Gather", {"q_shape", "i1"}, {"q_s"});
  b.add("Concat", {"q_b", "q_s", "hd"}, {"q_target"}, {attr_i("axis", 0)});
  b.add("Reshape", {"q_p", "q_target"}, {"q_r"});
  b.add("Transpose", {"q_r"}, {"q_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  b.add("Reshape", {"k_p", "heads_shape"}, {"k_r"});
  b.add("Transpose", {"k_r"}, {"k_t"}, {attr_ints("perm", {0, 2, 3, 1})});
  b.add("Reshape", {"v_p", "heads_shape"}, {"v_r"});
  b.add("Transpose", {"v_r"}, {"v_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  if (scale_on_q) {
    b.add("Mul", {"half", "q_t"}, {"q_scaled"});
    b.add("MatMul", {"q_scaled", "k_t"}, {"scores"});
  } else {
    b.add("MatMul", {"q_t", "k_t"}, {"qk"});
    b.add("Div", {"qk", "sqrt_d"}, {"scores"});
  }
  std::string logits = "scores";
  if (with_mask) {
    b.ints("axes12", {1, 2});
    b.scalar("one", 1.0f);
    b.scalar("big", -10000.0f);
    b.add("Unsqueeze", {"attention_mask", "axes12"}, {"mask4"});
    b.add("Sub", {"one", "mask4"}, {"inv"});
    b.add("Mul", {"inv", "big"}, {"mask_add"});
    b.add("Add", {"mask_add", "scores"}, {"masked"});
    logits = "masked";
  }
  b.add("Softmax", {logits}, {"probs"});
  b.add("MatMul", {"probs", "v_t"}, {"ctx"});
  b.add("Transpose", {"ctx"}, {"ctx_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  b.add("Reshape", {"ctx_t", "merge_shape"}, {"merged"});
  b.add("MatMul", {"merged", "wo"}, {"o_mm"});
  b.add("Add", {"o_mm", "bo"}, {"y"});
}

// torchvision's MultiheadAttention: x [s, b, E], one packed projection sliced in three, heads as
// [s, b*h, d] then [b*h, s, d] (K straight to [b*h, d, s]), Q scaled before Q·K^T, merged back to
// [s*b, E]. With `batch_first` (torchvision's EncoderBlock), x is [b, s, E] transposed in first,
// the output projection is Reshape/Gemm/Reshape back to [s, b, E], and a Transpose ends it.
void vit_block(Builder& b, bool batch_first = false, int64_t seq = 6) {
  std::string x = "x";
  if (batch_first) {
    b.input_dims("x", {sym("batch"), num(seq), num(kE)});
    b.add("Transpose", {"x"}, {"xt"}, {attr_ints("perm", {1, 0, 2})});
    x = "xt";
  } else {
    b.input_dims("x", {sym("seq"), sym("batch"), num(kE)});
  }
  b.output("y");
  b.weight("w_in", {kE, 3 * kE});
  b.weight("b_in", {3 * kE});
  b.weight("w_out", {kE, kE});
  b.ints("heads_shape", {0, -1, kD});
  b.ints("merge_shape", {-1, kE});
  b.ints("axis", {-1});
  b.scalar("scale", std::sqrt(static_cast<float>(kD)));
  b.add("MatMul", {x, "w_in"}, {"p_mm"});
  b.add("Add", {"b_in", "p_mm"}, {"p"});
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const std::string s = names[i];
    b.ints(s + "_start", {i * kE});
    b.ints(s + "_end", {(i + 1) * kE});
    b.add("Slice", {"p", s + "_start", s + "_end", "axis"}, {s + "_p"});
    b.add("Reshape", {s + "_p", "heads_shape"}, {s + "_r"});
    if (s != "k") b.add("Transpose", {s + "_r"}, {s + "_t"}, {attr_ints("perm", {1, 0, 2})});
  }
  b.add("Div", {"q_t", "scale"}, {"q_s"});
  b.add("Transpose", {"k_r"}, {"k_tt"}, {attr_ints("perm", {1, 2, 0})});
  b.add("MatMul", {"q_s", "k_tt"}, {"scores"});
  b.add("Softmax", {"scores"}, {"probs"});
  b.add("MatMul", {"probs", "v_t"}, {"ctx"});
  b.add("Transpose", {"ctx"}, {"ctx_t"}, {attr_ints("perm", {1, 0, 2})});
  b.add("Reshape", {"ctx_t", "merge_shape"}, {"merged"});
  if (!batch_first) {
    b.add("MatMul", {"merged", "w_out"}, {"y"});
    return;
  }
  b.weight("b_out", {kE});
  b.ints("restore_shape", {seq, -1, kE});
  b.add("Gemm", {"merged", "w_out", "b_out"}, {"o"}, {attr_i("transB", 1)});
  b.add("Reshape", {"o", "restore_shape"}, {"o3"});
  b.add("Transpose", {"o3"}, {"y"}, {attr_ints("perm", {1, 0, 2})});
}

// A packed projection Split in three, batch first, with Q and K each scaled by d^-1/4 and a
// 2-D mask [batch, seq] reshaped to [batch, 1, 1, seq] by the model.
void split_block(Builder& b) {
  b.input_dims("x", {sym("batch"), sym("seq"), num(kE)});
  b.input_dims("mask", {sym("batch"), sym("seq")});
  b.output("y");
  b.weight("w_in", {kE, 3 * kE});
  b.weight("b_in", {3 * kE});
  b.ints("split", {kE, kE, kE});
  b.ints("heads_shape", {0, 0, kHeads, kD});
  b.ints("merge_shape", {0, 0, kE});
  b.ints("mask_shape", {0, 1, 1, -1});
  b.scalar("quarter", 1.0f / std::sqrt(2.0f));
  b.add("MatMul", {"x", "w_in"}, {"p_mm"});
  b.add("Add", {"p_mm", "b_in"}, {"p"});
  b.add("Split", {"p", "split"}, {"q_p", "k_p", "v_p"}, {attr_i("axis", -1)});
  for (const std::string s : {"q", "k", "v"}) {
    b.add("Reshape", {s + "_p", "heads_shape"}, {s + "_r"});
    b.add("Transpose", {s + "_r"}, {s + "_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  }
  b.add("Mul", {"q_t", "quarter"}, {"q_s"});
  b.add("Transpose", {"k_t"}, {"k_tt"}, {attr_ints("perm", {0, 1, 3, 2})});
  b.add("Mul", {"quarter", "k_tt"}, {"k_s"});
  b.add("MatMul", {"q_s", "k_s"}, {"scores"});
  b.add("Reshape", {"mask", "mask_shape"}, {"mask4"});
  b.add("Add", {"scores", "mask4"}, {"masked"});
  b.add("Softmax", {"masked"}, {"probs"});
  b.add("MatMul", {"probs", "v_t"}, {"ctx"});
  b.add("Transpose", {"ctx"}, {"ctx_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  b.add("Reshape", {"ctx_t", "merge_shape"}, {"y"});
}

// torch 2's scaled_dot_product_attention export: K^T by Reshape [b*h, s, d] / Transpose /
// Reshape [b, h, d, s], Q and K each scaled by d^-1/4, a boolean mask made additive by
// Where(keep, 0, -inf), and the probabilities guarded by Where(IsNaN(P), guard, P). With
// `dynamic_seq`, as the dynamo exporter writes a model of dynamic sequence: the heads split by
// [b, s, -1, d] and the K^T shapes ([-1, s, d] and [b, h, d, s]) come from Shape ops, and the
// model declares [b*h, s, d] as [unk__0, unk__1, d], the names it gives dims it could not infer.
constexpr int64_t kSdpaSeq = 5;
void sdpa_block(Builder& b, float guard = 0.0f, bool dynamic_seq = false) {
  const ir::Dim seq = dynamic_seq ? sym("seq") : num(kSdpaSeq);
  b.input_dims("x", {sym("batch"), seq, num(kE)});
  b.input_dims("keep", {sym("batch"), num(1), seq, seq}, DType::kBool);
  b.output("y");
  for (const std::string p : {"q", "k", "v"}) {
    b.weight("w" + p, {kE, kE});
    b.weight("b" + p, {kE});
  }
  b.ints("heads_shape", {0, 0, kHeads, kD});
  b.ints("flat_shape", {-1, kSdpaSeq, kD});
  b.ints("kt_shape", {-1, kHeads, kD, kSdpaSeq});
  b.ints("merge_shape", {0, 0, kE});
  b.scalar("root_scale", 1.0f / std::sqrt(std::sqrt(static_cast<float>(kD))));
  b.scalar("zero", 0.0f);
  b.scalar("guard", guard);
  b.scalar("neg_inf", -std::numeric_limits<float>::infinity());
  if (dynamic_seq) {
    b.ints("i0", {0});
    b.ints("i2", {2});
    b.ints("minus_one_d", {-1, kD});
    b.add("Shape", {"x"}, {"x_dims"});
    b.add("Slice", {"x_dims", "i0", "i2"}, {"x_batch_seq"});
    b.add("Concat", {"x_batch_seq", "minus_one_d"}, {"heads_shape"}, {attr_i("axis", 0)});
    b.m.graph.initializers.erase("heads_shape");
  }
  for (const std::string p : {"q", "k", "v"}) {
    b.add("MatMul", {"x", "w" + p}, {p + "_mm"});
    b.add("Add", {p + "_mm", "b" + p}, {p + "_p"});
    b.add("Reshape", {p + "_p", "heads_shape"}, {p + "_r"});
    b.add("Transpose", {p + "_r"}, {p + "_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  }
  if (dynamic_seq) {
    b.ints("minus_one", {-1});
    b.ints("d", {kD});
    b.ints("at_minus_2", {-2});
    b.ints("at_minus_1", {-1});
    b.ints("from_start", {std::numeric_limits<int64_t>::min()});
    b.add("Shape", {"k_t"}, {"k_dims"});
    b.add("Slice", {"k_dims", "at_minus_2", "at_minus_1"}, {"k_seq"});
    b.add("Slice", {"k_dims", "from_start", "at_minus_2"}, {"k_batch_heads"});
    b.add("Concat", {"minus_one", "k_seq", "d"}, {"flat_shape"}, {attr_i("axis", 0)});
    b.add("Concat", {"k_batch_heads", "d", "k_seq"}, {"kt_shape"}, {attr_i("axis", 0)});
    b.m.graph.initializers.erase("flat_shape");
    b.m.graph.initializers.erase("kt_shape");
    ir::ValueInfo declared{"k_flat", ir::TypeInfo::tensor(DType::kFloat32), ""};
    declared.type.has_shape = true;
    declared.type.shape = {sym("unk__0"), sym("unk__1"), num(kD)};
    b.m.graph.value_info.push_back(declared);
  }
  b.add("Reshape", {"k_t", "flat_shape"}, {"k_flat"});
  b.add("Transpose", {"k_flat"}, {"k_flat_t"}, {attr_ints("perm", {0, 2, 1})});
  b.add("Reshape", {"k_flat_t", "kt_shape"}, {"k_tt"});
  b.add("Mul", {"q_t", "root_scale"}, {"q_s"});
  b.add("Mul", {"k_tt", "root_scale"}, {"k_s"});
  b.add("Where", {"keep", "zero", "neg_inf"}, {"mask_add"});
  b.add("MatMul", {"q_s", "k_s"}, {"scores"});
  b.add("Add", {"scores", "mask_add"}, {"masked"});
  b.add("Softmax", {"masked"}, {"probs"}, {attr_i("axis", -1)});
  b.add("IsNaN", {"probs"}, {"is_nan"});
  b.add("Where", {"is_nan", "guard", "probs"}, {"guarded"});
  b.add("MatMul", {"guarded", "v_t"}, {"ctx"});
  b.add("Transpose", {"ctx"}, {"ctx_t"}, {attr_ints("perm", {0, 2, 1, 3})});
  b.add("Reshape", {"ctx_t", "merge_shape"}, {"y"});
}

// x, and a mask keeping every key but the last of each query, and no key of query 2 of the
// last batch element (a fully masked row).
std::vector<Tensor> sdpa_feeds(Builder& b, int64_t batch, int64_t seq = kSdpaSeq) {
  Tensor keep = Tensor::make(DType::kBool, {batch, 1, seq, seq}).value();
  bool* k = keep.data<bool>();
  for (int64_t i = 0; i < keep.numel(); ++i) {
    const int64_t bq = i / seq, key = i % seq;
    k[i] = key != seq - 1 && bq != (batch - 1) * seq + 2;
  }
  return {b.random({batch, seq, kE}), keep};
}

TEST(AttentionFusion, TorchSdpaExportWithNanGuard) {
  Builder b(18);
  sdpa_block(b);
  ir::Model m = b.m;
  EXPECT_EQ(run_fusion(m), 1);
  auto ops = qualified_histogram(m);
  EXPECT_EQ(ops["ai.kiln.MultiHeadAttention"], 1);
  EXPECT_EQ(ops["IsNaN"], 0);
  EXPECT_EQ(ops["Softmax"], 0);
  EXPECT_EQ(m.graph.nodes.size(), 2u);  // the mask's Where and the fused node
  for (const auto& n : m.graph.nodes)
    if (n.op_type == "MultiHeadAttention") {
      EXPECT_EQ(n.attr_int("zero_nan_rows", 0), 1);
      EXPECT_NEAR(n.attr_float("scale", 0), 1.0f / std::sqrt(static_cast<float>(kD)), 1e-6f);
    }
  for (int64_t batch : {1, 2}) {
    const std::vector<Tensor> f = sdpa_feeds(b, batch);
    expect_same_outputs(b.m, m, f);
    // The fully masked query comes out as zeros, as the guard makes it.
    const std::vector<Value> y = test::run_model(m, f);
    ASSERT_EQ(y.size(), 1u);
    const float* row = y[0].tensor.data<float>() + ((batch - 1) * kSdpaSeq + 2) * kE;
    for (int64_t c = 0; c < kE; ++c) EXPECT_EQ(row[c], 0.0f) << c;
  }
}

// The same with the sequence dynamic: the K^T reshapes are replayed through their inferred
// shapes ([?, seq, d] from a -1 among Shape values) and the exporter's unk__ names.
TEST(AttentionFusion, TorchSdpaExportOfDynamicSequence) {
  Builder b(18);
  sdpa_block(b, 0.0f, true);
  ir::Model m = b.m;
  EXPECT_EQ(run_fusion(m), 1);
  auto ops = qualified_histogram(m);
  EXPECT_EQ(ops["ai.kiln.MultiHeadAttention"], 1);
  EXPECT_EQ(ops["Softmax"], 0);
  for (int64_t seq : {3, 7}) expect_same_outputs(b.m, m, sdpa_feeds(b, 2, seq));
}

TEST(AttentionFusion, NanGuardToAnotherValueIsLeftAlone) {
  Builder b(18);
  sdpa_block(b, 1.0f);
  EXPECT_EQ(run_fusion(b.m), 0);
  EXPECT_EQ(qualified_histogram(b.m)["IsNaN"], 1);
}

TEST(AttentionFusion, BertWithMaskBecomesOneNode) {
  Builder b(17);
  bert_block(b, true, false);
  ir::Model m = b.m;
  EXPECT_EQ(run_fusion(m), 1);
  const ir::Graph& g = m.graph;
  auto ops = qualified_histogram(m);
  EXPECT_EQ(ops["ai.kiln.MultiHeadAttention"], 1);
  EXPECT_EQ(ops["Softmax"], 0);
  EXPECT_EQ(ops["Transpose"], 0);
  EXPECT_EQ(ops["Shape"], 0);
  // Mask chain (Unsqueeze, Sub, Mul), fused node, out projection (MatMul, Add).
  EXPECT_EQ(g.nodes.size(), 6u);
  EXPECT_EQ(m.opsets.at("ai.kiln"), 1);
  for (const auto& n : g.nodes)
    if (n.op_type == "MultiHeadAttention") {
      EXPECT_EQ(n.domain, "ai.kiln");
      EXPECT_EQ(n.attr_int("num_heads", 0), kHeads);
      EXPECT_FLOAT_EQ(n.attr_float("scale", 0), 0.5f);
      ASSERT_EQ(n.inputs.size(), 4u);
      EXPECT_EQ(n.inputs[3], "mask_add");
      EXPECT_EQ(g.initializers.at(n.inputs[1]).shape(), (Shape{kE, 3 * kE}));
    }
  expect_same_outputs(b.m, m, feeds(b, {2, 5, kE}, {2, 5}));
}

// `kiln quantize --dynamic` leaves the projections as DynamicQuantMatMul (bias taken in): Q, K
// and V merge into the int8 form (W int8 [E, 3E] with the three scales side by side), which
// quantizes X once per row for all three, to the projections' row_bits (8, or 7); the output
// projection stays one. The same outputs as the quantized model run op by op.
TEST(AttentionFusion, DynamicQuantProjectionsMergeIntoInt8Attention) {
  for (const int row_bits : {8, 7}) {
    SCOPED_TRACE(::testing::Message() << "row_bits " << row_bits);
    Builder b(17);
    bert_block(b, true, false);
    Model model = test::dynamically_quantized(b.m, row_bits);
    ASSERT_EQ(qualified_histogram(model.ir())["ai.kiln.DynamicQuantMatMul"], 4);
    ir::Model m = model.ir();
    EXPECT_EQ(run_fusion(m), 1);
    auto ops = qualified_histogram(m);
    EXPECT_EQ(ops["ai.kiln.MultiHeadAttention"], 1);
    EXPECT_EQ(ops["ai.kiln.DynamicQuantMatMul"], 1);
    EXPECT_EQ(ops["Softmax"], 0);
    for (const auto& n : m.graph.nodes)
      if (n.op_type == "MultiHeadAttention") {
        ASSERT_EQ(n.inputs.size(), 5u);
        EXPECT_EQ(n.inputs[3], "mask_add");
        const Tensor& w = m.graph.initializers.at(n.inputs[1]);
        EXPECT_EQ(w.dtype(), DType::kInt8);
        EXPECT_EQ(w.shape(), (Shape{kE, 3 * kE}));
        EXPECT_EQ(m.graph.initializers.at(n.inputs[4]).shape(), (Shape{3 * kE}));
        EXPECT_EQ(n.attr_int("row_bits", 8), row_bits);
      }
    expect_same_outputs(model.ir(), m, feeds(b, {2, 5, kE}, {2, 5}));
  }
}

TEST(AttentionFusion, OnnxRuntimeDynamicProjectionsKeepTheirsAndFuseTheRest) {
  Builder b(17);
  ort_dynamic_block(b);
  ir::Model m = b.m;
  EXPECT_EQ(run_fusion(m), 1);
  auto ops = qualified_histogram(m);
  EXPECT_EQ(ops["ai.kiln.ScaledDotProductAttention"], 1);
  EXPECT_EQ(ops["com.microsoft.MatMulIntegerToFloat"], 3);
  EXPECT_EQ(ops["Softmax"], 0);
  EXPECT_EQ(ops["Transpose"], 0);
  EXPECT_EQ(ops["Shape"], 0);
  for (const auto& n : m.graph.nodes)
    if (n.op_type == "ScaledDotProductAttention") {
      EXPECT_EQ(n.domain, "ai.kiln");
      EXPECT_EQ(n.inputs, (std::vector<std::string>{"q_p", "k_p", "v_p", "mask_add"}));
      EXPECT_EQ(n.attr_int("num_heads", 0), kHeads);
      EXPECT_FLOAT_EQ(n.attr_float("scale", 0), 0.5f);
    }
  expect_same_outputs(b.m, m, feeds(b, {2, 5, kE}, {2, 5}));
  expect_same_outputs(b.m, m, feeds(b, {1, 9, kE}, {1, 9}));
}

// V computed after the Softmax in node order (its projection, Reshape and Transpose): the fused
// node goes where P·V was, after all of it.
TEST(AttentionFusion, ValuesComputedAfterTheSoftmaxStayBeforeTheFusedNode) {
  Builder b(17);
  ort_dynamic_block(b);
  auto& nodes = b.m.graph.nodes;
  std::vector<ir::Node> v_chain;
  for (const std::string out : {"v_p", "v_r", "v_t"}) {
    auto v = std::find_if(nodes.begin(), nodes.end(), [&](const ir::Node& n) { return n.outputs[0] == out; });
    ASSERT_TRUE(v != nodes.end()) << out;
    v_chain.push_back(*v);
    nodes.erase(v);
  }
  auto sm = std::find_if(nodes.begin(), nodes.end(), [](const ir::Node& n) { return n.op_type == "Softmax"; });
  ASSERT_TRUE(sm != nodes.end());
  nodes.insert(sm + 1, v_chain.begin(), v_chain.end());
  ir::Model m = b.m;
  EXPECT_EQ(run_fusion(m), 1);
  // Already in an order the nodes can run in (a saved model must be).
  auto order = ir::topological_order(m.graph, {});
  ASSERT_TRUE(order.is_ok()) << order.status().message();
  for (size_t i = 0; i < order->size(); ++i) EXPECT_EQ((*order)[i], i) << m.graph.nodes[(*order)[i]].describe();
  expect_same_outputs(b.m, m, feeds(b, {2, 5, kE}, {2, 5}));
}

TEST(AttentionFusion, BertWithoutMaskScaledOnQ) {
  Builder b(17);
  bert_block(b, false, true);
  ir::Model m = b.m;
  EXPECT_EQ(run_fusion(m), 1);
  EXPECT_EQ(qualified_histogram(m)["ai.kiln.MultiHeadAttention"], 1);
  EXPECT_EQ(m.graph.nodes.size(), 3u);
  expect_same_outputs(b.m, m, feeds(b, {3, 7, kE}));
  expect_same_outputs(b.m, m, feeds(b, {1, 1, kE}));
}

TEST(AttentionFusion, PackedSequenceFirst) {
  Builder b(17);
  vit_block(b);
  ir::Model m = b.m;
  EXPECT_EQ(run_fusion(m), 1);
  auto ops = qualified_histogram(m);
  EXPECT_EQ(ops["ai.kiln.MultiHeadAttention"], 1);
  EXPECT_EQ(ops["Slice"], 0);
  EXPECT_EQ(ops["Softmax"], 0);
  for (const auto& n : m.graph.nodes) {
    if (n.op_type == "MultiHeadAttention") {
      EXPECT_EQ(n.attr_int("seq_first", 0), 1);
    }
  }
  expect_same_outputs(b.m, m, feeds(b, {6, 3, kE}));
}

TEST(AttentionFusion, PackedSplitScaledOnQAndK) {
  Builder b(17);
  split_block(b);
  ir::Model m = b.m;
  EXPECT_EQ(run_fusion(m), 1);
  auto ops = qualified_histogram(m);
  EXPECT_EQ(ops["ai.kiln.MultiHeadAttention"], 1);
  EXPECT_EQ(ops["Split"], 0);
  EXPECT_EQ(m.graph.nodes.size(), 2u);  // the mask Reshape and the fused node, which yields y
  for (const auto& n : m.graph.nodes)
    if (n.op_type == "MultiHeadAttention") {
      EXPECT_NEAR(n.attr_float("scale", 0), 0.5f, 1e-6f);
      EXPECT_EQ(n.outputs[0], "y");
    }
  expect_same_outputs(b.m, m, feeds(b, {2, 6, kE}, {2, 6}));
}

TEST(AttentionFusion, SharedIntermediateIsLeftAlone) {
  Builder b(17);
  bert_block(b, false, false);
  b.output("probs");
  EXPECT_EQ(run_fusion(b.m), 0);
  EXPECT_EQ(qualified_histogram(b.m)["Softmax"], 1);
}

TEST(AttentionFusion, BatchFirstOptimizesToAttentionAndOneMatMul) {
  // The whole -O2 pipeline: gemm-to-matmul keeps the real axes, attention reads x untransposed,
  // transpose-cancel drops the pair around the output projection, gemm-epilogue takes the bias.
  Builder b;
  vit_block(b, true, 6);
  ir::Model after = b.m;
  auto report = optimize(after, OptimizeOptions{});
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(test::op_types(after), (std::vector<std::string>{"MultiHeadAttention", "FusedMatMul"}));
  EXPECT_EQ(after.graph.nodes[0].attr_int("seq_first", 0), 0);
  EXPECT_EQ(after.graph.nodes[0].inputs[0], "x");
  for (int64_t batch : {1, 3}) expect_same_outputs(b.m, after, {b.random({batch, 6, kE})});
}

}  // namespace
}  // namespace kiln
