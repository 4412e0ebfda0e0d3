// The attention fusion on small attention blocks built in code (BERT-style with and without a
// mask, torchvision-style packed and sequence first): the structure after, and equal outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/graph.h"
#include "kiln/session.h"
#include "passes/pass.h"

namespace kiln {
namespace {

constexpr int64_t kE = 8, kHeads = 2, kD = 4;

ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  ir::Node n;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.name = n.outputs[0] + "_node";
  return n;
}

ir::Node with_ints(ir::Node n, const char* name, std::vector<int64_t> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::Attribute::Type::kInts;
  a.ints = std::move(v);
  n.attrs.push_back(a);
  return n;
}

Tensor random_tensor(Shape shape, std::mt19937& rng, float lo = -1, float hi = 1) {
  Tensor t = Tensor::make(DType::kFloat32, std::move(shape)).value();
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Tensor ints(std::vector<int64_t> v) {
  Tensor t = Tensor::make(DType::kInt64, {static_cast<int64_t>(v.size())}).value();
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

Tensor scalar(float v) { return Tensor::scalar(DType::kFloat32, v); }

ir::ValueInfo input(const std::string& name, std::vector<std::string> dims, int64_t last) {
  ir::ValueInfo vi{name, ir::TypeInfo::tensor(DType::kFloat32), ""};
  vi.type.has_shape = true;
  for (const auto& d : dims) vi.type.shape.push_back(ir::Dim{-1, d});
  if (last > 0) vi.type.shape.push_back(ir::Dim{last, ""});
  return vi;
}

// A BERT layer's self-attention: Q/K/V MatMul + bias, heads split by Reshape [b,s,h,d] (Q's shape
// computed by Shape/Gather/Concat, K's and V's constant), scores scaled and optionally masked.
std::shared_ptr<ir::Model> bert_block(bool with_mask, bool scale_on_q) {
  std::mt19937 rng(7);
  auto m = std::make_shared<ir::Model>();
  m->opsets[""] = 17;
  ir::Graph& g = m->graph;
  g.inputs.push_back(input("x", {"batch", "seq"}, kE));
  if (with_mask) g.inputs.push_back(input("attention_mask", {"batch", "seq"}, 0));
  g.outputs.push_back({"y", ir::TypeInfo::tensor(DType::kFloat32), ""});
  for (const char* p : {"q", "k", "v", "o"}) {
    g.initializers[std::string("w") + p] = random_tensor({kE, kE}, rng);
    g.initializers[std::string("b") + p] = random_tensor({kE}, rng);
  }
  g.initializers["heads_shape"] = ints({0, 0, kHeads, kD});
  g.initializers["merge_shape"] = ints({0, 0, kE});
  g.initializers["i0"] = ints({0});
  g.initializers["i1"] = ints({1});
  g.initializers["hd"] = ints({kHeads, kD});
  g.initializers["sqrt_d"] = scalar(2.0f);
  g.initializers["half"] = scalar(0.5f);
  auto& n = g.nodes;
  n.push_back(node("MatMul", {"x", "wq"}, {"q_mm"}));
  n.push_back(node("Add", {"bq", "q_mm"}, {"q_p"}));
  n.push_back(node("Shape", {"q_p"}, {"q_shape"}));
  n.push_back(node("Gather", {"q_shape", "i0"}, {"q_b"}));
  n.push_back(node("Gather", {"q_shape", "i1"}, {"q_s"}));
  n.push_back(node("Concat", {"q_b", "q_s", "hd"}, {"q_target"}));
  n.back().attrs.push_back(ir::Attribute{});
  n.back().attrs.back().name = "axis";
  n.back().attrs.back().type = ir::Attribute::Type::kInt;
  n.push_back(node("Reshape", {"q_p", "q_target"}, {"q_r"}));
  n.push_back(with_ints(node("Transpose", {"q_r"}, {"q_t"}), "perm", {0, 2, 1, 3}));
  n.push_back(node("MatMul", {"x", "wk"}, {"k_mm"}));
  n.push_back(node("Add", {"k_mm", "bk"}, {"k_p"}));
  n.push_back(node("Reshape", {"k_p", "heads_shape"}, {"k_r"}));
  n.push_back(with_ints(node("Transpose", {"k_r"}, {"k_t"}), "perm", {0, 2, 3, 1}));
  n.push_back(node("MatMul", {"x", "wv"}, {"v_mm"}));
  n.push_back(node("Add", {"bv", "v_mm"}, {"v_p"}));
  n.push_back(node("Reshape", {"v_p", "heads_shape"}, {"v_r"}));
  n.push_back(with_ints(node("Transpose", {"v_r"}, {"v_t"}), "perm", {0, 2, 1, 3}));
  if (scale_on_q) {
    n.push_back(node("Mul", {"half", "q_t"}, {"q_scaled"}));
    n.push_back(node("MatMul", {"q_scaled", "k_t"}, {"scores"}));
  } else {
    n.push_back(node("MatMul", {"q_t", "k_t"}, {"qk"}));
    n.push_back(node("Div", {"qk", "sqrt_d"}, {"scores"}));
  }
  std::string logits = "scores";
  if (with_mask) {
    g.initializers["axes12"] = ints({1, 2});
    g.initializers["one"] = scalar(1.0f);
    g.initializers["big"] = scalar(-10000.0f);
    n.push_back(node("Unsqueeze", {"attention_mask", "axes12"}, {"mask4"}));
    n.push_back(node("Sub", {"one", "mask4"}, {"inv"}));
    n.push_back(node("Mul", {"inv", "big"}, {"mask_add"}));
    n.push_back(node("Add", {"mask_add", "scores"}, {"masked"}));
    logits = "masked";
  }
  n.push_back(node("Softmax", {logits}, {"probs"}));
  n.push_back(node("MatMul", {"probs", "v_t"}, {"ctx"}));
  n.push_back(with_ints(node("Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3}));
  n.push_back(node("Reshape", {"ctx_t", "merge_shape"}, {"merged"}));
  n.push_back(node("MatMul", {"merged", "wo"}, {"o_mm"}));
  n.push_back(node("Add", {"o_mm", "bo"}, {"y"}));
  return m;
}

// torchvision's MultiheadAttention: x [s, b, E], one packed projection sliced in three, heads as
// [s, b*h, d] then [b*h, s, d], Q scaled before Q·K^T, merged back to [s*b, E].
std::shared_ptr<ir::Model> vit_block() {
  std::mt19937 rng(11);
  auto m = std::make_shared<ir::Model>();
  m->opsets[""] = 17;
  ir::Graph& g = m->graph;
  g.inputs.push_back(input("x", {"seq", "batch"}, kE));
  g.outputs.push_back({"y", ir::TypeInfo::tensor(DType::kFloat32), ""});
  g.initializers["w_in"] = random_tensor({kE, 3 * kE}, rng);
  g.initializers["b_in"] = random_tensor({3 * kE}, rng);
  g.initializers["w_out"] = random_tensor({kE, kE}, rng);
  g.initializers["heads_shape"] = ints({0, -1, kD});
  g.initializers["merge_shape"] = ints({-1, kE});
  g.initializers["axis"] = ints({-1});
  g.initializers["scale"] = scalar(std::sqrt(static_cast<float>(kD)));
  auto& n = g.nodes;
  n.push_back(node("MatMul", {"x", "w_in"}, {"p_mm"}));
  n.push_back(node("Add", {"b_in", "p_mm"}, {"p"}));
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const std::string s = names[i];
    g.initializers[s + "_start"] = ints({i * kE});
    g.initializers[s + "_end"] = ints({(i + 1) * kE});
    n.push_back(node("Slice", {"p", s + "_start", s + "_end", "axis"}, {s + "_p"}));
    n.push_back(node("Reshape", {s + "_p", "heads_shape"}, {s + "_r"}));
    n.push_back(with_ints(node("Transpose", {s + "_r"}, {s + "_t"}), "perm", {1, 0, 2}));
  }
  n.push_back(node("Div", {"q_t", "scale"}, {"q_s"}));
  n.push_back(with_ints(node("Transpose", {"k_r"}, {"k_tt"}), "perm", {1, 2, 0}));
  n.back().inputs[0] = "k_r";
  n.push_back(node("MatMul", {"q_s", "k_tt"}, {"scores"}));
  n.push_back(node("Softmax", {"scores"}, {"probs"}));
  n.push_back(node("MatMul", {"probs", "v_t"}, {"ctx"}));
  n.push_back(with_ints(node("Transpose", {"ctx"}, {"ctx_t"}), "perm", {1, 0, 2}));
  n.push_back(node("Reshape", {"ctx_t", "merge_shape"}, {"merged"}));
  n.push_back(node("MatMul", {"merged", "w_out"}, {"y"}));
  // K's [1,0,2] Transpose is unused here: torchvision transposes K straight to [b*h, d, s].
  std::erase_if(n, [](const ir::Node& x) { return x.outputs[0] == "k_t"; });
  return m;
}

// A packed projection Split in three, batch first, with Q and K each scaled by d^-1/4 and a
// 2-D mask [batch, seq] reshaped to [batch, 1, 1, seq] by the model.
std::shared_ptr<ir::Model> split_block() {
  std::mt19937 rng(5);
  auto m = std::make_shared<ir::Model>();
  m->opsets[""] = 17;
  ir::Graph& g = m->graph;
  g.inputs.push_back(input("x", {"batch", "seq"}, kE));
  g.inputs.push_back(input("mask", {"batch", "seq"}, 0));
  g.outputs.push_back({"y", ir::TypeInfo::tensor(DType::kFloat32), ""});
  g.initializers["w_in"] = random_tensor({kE, 3 * kE}, rng);
  g.initializers["b_in"] = random_tensor({3 * kE}, rng);
  g.initializers["split"] = ints({kE, kE, kE});
  g.initializers["heads_shape"] = ints({0, 0, kHeads, kD});
  g.initializers["merge_shape"] = ints({0, 0, kE});
  g.initializers["mask_shape"] = ints({0, 1, 1, -1});
  g.initializers["quarter"] = scalar(1.0f / std::sqrt(2.0f));
  auto& n = g.nodes;
  n.push_back(node("MatMul", {"x", "w_in"}, {"p_mm"}));
  n.push_back(node("Add", {"p_mm", "b_in"}, {"p"}));
  ir::Node split = node("Split", {"p", "split"}, {"q_p", "k_p", "v_p"});
  split.attrs.push_back(ir::Attribute{});
  split.attrs.back().name = "axis";
  split.attrs.back().type = ir::Attribute::Type::kInt;
  split.attrs.back().i = -1;
  n.push_back(split);
  for (const std::string s : {"q", "k", "v"}) {
    n.push_back(node("Reshape", {s + "_p", "heads_shape"}, {s + "_r"}));
    n.push_back(with_ints(node("Transpose", {s + "_r"}, {s + "_t"}), "perm", {0, 2, 1, 3}));
  }
  n.push_back(node("Mul", {"q_t", "quarter"}, {"q_s"}));
  n.push_back(with_ints(node("Transpose", {"k_t"}, {"k_tt"}), "perm", {0, 1, 3, 2}));
  n.push_back(node("Mul", {"quarter", "k_tt"}, {"k_s"}));
  n.push_back(node("MatMul", {"q_s", "k_s"}, {"scores"}));
  n.push_back(node("Reshape", {"mask", "mask_shape"}, {"mask4"}));
  n.push_back(node("Add", {"scores", "mask4"}, {"masked"}));
  n.push_back(node("Softmax", {"masked"}, {"probs"}));
  n.push_back(node("MatMul", {"probs", "v_t"}, {"ctx"}));
  n.push_back(with_ints(node("Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3}));
  n.push_back(node("Reshape", {"ctx_t", "merge_shape"}, {"y"}));
  return m;
}

int64_t run_fusion(ir::Model& m) {
  for (const auto* p : passes::PassRegistry::global().sorted())
    if (p->name == "attention-fusion") {
      auto r = p->create()->run(m, OptimizeOptions{});
      EXPECT_TRUE(r.is_ok()) << r.status().message();
      return r.is_ok() ? *r : -1;
    }
  ADD_FAILURE() << "attention-fusion is not registered";
  return -1;
}

int count_op(const ir::Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes) c += n.op_type == op;
  return c;
}

// Runs both models on the same random inputs and compares every output element.
void expect_same_outputs(const std::shared_ptr<ir::Model>& a, const std::shared_ptr<ir::Model>& b,
                         const std::vector<Shape>& shapes, bool mask) {
  std::mt19937 rng(3);
  std::vector<Value> feeds;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor t = random_tensor(shapes[i], rng);
    if (mask && i == 1)
      for (int64_t j = 0; j < t.numel(); ++j) t.data<float>()[j] = j % 3 == 2 ? 0.0f : 1.0f;
    feeds.push_back(Value::of(t));
  }
  auto sa = Session::create(a);
  auto sb = Session::create(b);
  ASSERT_TRUE(sa.is_ok()) << sa.status().message();
  ASSERT_TRUE(sb.is_ok()) << sb.status().message();
  auto ra = (*sa)->run(feeds);
  auto rb = (*sb)->run(feeds);
  ASSERT_TRUE(ra.is_ok()) << ra.status().message();
  ASSERT_TRUE(rb.is_ok()) << rb.status().message();
  const Tensor& ta = (*ra)[0].tensor;
  const Tensor& tb = (*rb)[0].tensor;
  ASSERT_EQ(ta.shape(), tb.shape());
  for (int64_t i = 0; i < ta.numel(); ++i) {
    const float x = ta.data<float>()[i], y = tb.data<float>()[i];
    EXPECT_NEAR(x, y, 1e-5f * std::max(1.0f, std::fabs(x))) << i;
  }
}

TEST(AttentionFusion, BertWithMaskBecomesOneNode) {
  auto m = bert_block(true, false);
  auto before = std::make_shared<ir::Model>(*m);
  EXPECT_EQ(run_fusion(*m), 1);
  const ir::Graph& g = m->graph;
  EXPECT_EQ(count_op(g, "MultiHeadAttention"), 1);
  EXPECT_EQ(count_op(g, "Softmax"), 0);
  EXPECT_EQ(count_op(g, "Transpose"), 0);
  EXPECT_EQ(count_op(g, "Shape"), 0);
  // Mask chain (Unsqueeze, Sub, Mul), fused node, out projection (MatMul, Add).
  EXPECT_EQ(g.nodes.size(), 6u);
  EXPECT_EQ(m->opsets.at("ai.kiln"), 1);
  for (const auto& n : g.nodes)
    if (n.op_type == "MultiHeadAttention") {
      EXPECT_EQ(n.domain, "ai.kiln");
      EXPECT_EQ(n.attr_int("num_heads", 0), kHeads);
      EXPECT_FLOAT_EQ(n.attr_float("scale", 0), 0.5f);
      ASSERT_EQ(n.inputs.size(), 4u);
      EXPECT_EQ(n.inputs[3], "mask_add");
      EXPECT_EQ(g.initializers.at(n.inputs[1]).shape(), (Shape{kE, 3 * kE}));
    }
  expect_same_outputs(before, m, {{2, 5, kE}, {2, 5}}, true);
}

TEST(AttentionFusion, BertWithoutMaskScaledOnQ) {
  auto m = bert_block(false, true);
  auto before = std::make_shared<ir::Model>(*m);
  EXPECT_EQ(run_fusion(*m), 1);
  EXPECT_EQ(count_op(m->graph, "MultiHeadAttention"), 1);
  EXPECT_EQ(m->graph.nodes.size(), 3u);
  expect_same_outputs(before, m, {{3, 7, kE}}, false);
  expect_same_outputs(before, m, {{1, 1, kE}}, false);
}

TEST(AttentionFusion, PackedSequenceFirst) {
  auto m = vit_block();
  auto before = std::make_shared<ir::Model>(*m);
  EXPECT_EQ(run_fusion(*m), 1);
  const ir::Graph& g = m->graph;
  EXPECT_EQ(count_op(g, "MultiHeadAttention"), 1);
  EXPECT_EQ(count_op(g, "Slice"), 0);
  EXPECT_EQ(count_op(g, "Softmax"), 0);
  for (const auto& n : g.nodes) {
    if (n.op_type == "MultiHeadAttention") {
      EXPECT_EQ(n.attr_int("seq_first", 0), 1);
    }
  }
  expect_same_outputs(before, m, {{6, 3, kE}}, false);
}

TEST(AttentionFusion, PackedSplitScaledOnQAndK) {
  auto m = split_block();
  auto before = std::make_shared<ir::Model>(*m);
  EXPECT_EQ(run_fusion(*m), 1);
  const ir::Graph& g = m->graph;
  EXPECT_EQ(count_op(g, "MultiHeadAttention"), 1);
  EXPECT_EQ(count_op(g, "Split"), 0);
  EXPECT_EQ(g.nodes.size(), 2u);  // the mask Reshape and the fused node, which yields y
  for (const auto& n : g.nodes)
    if (n.op_type == "MultiHeadAttention") {
      EXPECT_NEAR(n.attr_float("scale", 0), 0.5f, 1e-6f);
      EXPECT_EQ(n.outputs[0], "y");
    }
  expect_same_outputs(before, m, {{2, 6, kE}, {2, 6}}, true);
}

TEST(AttentionFusion, SharedIntermediateIsLeftAlone) {
  auto m = bert_block(false, false);
  m->graph.outputs.push_back({"probs", ir::TypeInfo::tensor(DType::kFloat32), ""});
  EXPECT_EQ(run_fusion(*m), 0);
  EXPECT_EQ(count_op(m->graph, "Softmax"), 1);
}

}  // namespace
}  // namespace kiln
