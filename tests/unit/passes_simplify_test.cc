// The -O1 simplification passes (shape-resolution, cse, redundant-ops, transpose-matmul,
// fold-batchnorm): the structure each leaves, and the same numbers before and after.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/graph.h"
#include "kiln/session.h"
#include "passes/pass.h"

namespace kiln {
namespace {

ir::Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  ir::Node n;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.name = n.outputs.empty() ? op : n.outputs[0];
  return n;
}

ir::Attribute int_attr(const std::string& name, int64_t v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::Attribute::Type::kInt;
  a.i = v;
  return a;
}

ir::Attribute ints_attr(const std::string& name, std::vector<int64_t> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}

Tensor ints(std::vector<int64_t> v, bool scalar = false) {
  Tensor t =
      Tensor::make(DType::kInt64, scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())}).value();
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

Tensor random_f32(const Shape& shape, unsigned seed, float lo = -1, float hi = 1) {
  Tensor t = Tensor::make(DType::kFloat32, shape).value();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

ir::Dim sym(const std::string& s) { return ir::Dim{-1, s}; }
ir::Dim num(int64_t v) { return ir::Dim{v, ""}; }

ir::ValueInfo f32_value(const std::string& name, std::vector<ir::Dim> dims) {
  ir::TypeInfo t = ir::TypeInfo::tensor(DType::kFloat32);
  t.has_shape = true;
  t.shape = std::move(dims);
  return {name, t, ""};
}

ir::Model make_model() {
  ir::Model m;
  m.opsets[""] = 17;
  return m;
}

// Runs the named passes in order, as many rounds as they keep changing something.
void run_passes(ir::Model& m, const std::vector<std::string>& names) {
  OptimizeOptions options;
  options.level = 1;
  for (int round = 0; round < 8; ++round) {
    int64_t changed = 0;
    for (const auto& name : names) {
      bool found = false;
      for (const auto* p : passes::PassRegistry::global().sorted()) {
        if (p->name != name) continue;
        found = true;
        auto r = p->create()->run(m, options);
        ASSERT_TRUE(r.is_ok()) << name << ": " << r.status().message();
        changed += *r;
      }
      ASSERT_TRUE(found) << name;
    }
    if (changed == 0) break;
  }
}

std::map<std::string, int> histogram(const ir::Model& m) {
  std::map<std::string, int> h;
  for (const auto& n : m.graph.nodes) ++h[n.op_type];
  return h;
}

std::vector<Tensor> run_model(const ir::Model& m, const std::vector<Tensor>& feeds) {
  auto session = Session::create(std::make_shared<ir::Model>(m));
  EXPECT_TRUE(session.is_ok()) << session.status().message();
  if (!session.is_ok()) return {};
  std::vector<Value> in;
  for (const auto& t : feeds) in.push_back(Value::of(t));
  auto out = (*session)->run(in);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  if (!out.is_ok()) return {};
  std::vector<Tensor> r;
  for (const auto& v : *out) r.push_back(v.tensor);
  return r;
}

// Runs both models on the same feeds and compares within 1e-5 relative.
void expect_same(const ir::Model& before, const ir::Model& after,
                 const std::vector<Tensor>& feeds) {
  auto a = run_model(before, feeds), b = run_model(after, feeds);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape()) << "output " << i;
    ASSERT_EQ(a[i].dtype(), DType::kFloat32);
    for (int64_t k = 0; k < a[i].numel(); ++k) {
      const float x = a[i].data<float>()[k], y = b[i].data<float>()[k];
      EXPECT_NEAR(x, y, 1e-5 * std::max(1.0f, std::fabs(x))) << "output " << i << " element " << k;
    }
  }
}

// x [batch, seq, 8] reshaped to [batch, seq, 2, 4] through a Shape/Gather/Concat chain.
ir::Model shape_chain_model() {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("x", {sym("batch"), sym("seq"), num(8)})};
  g.outputs = {f32_value("y", {})};
  g.outputs[0].type.has_shape = false;
  g.initializers["i0"] = ints({0}, true);
  g.initializers["i1"] = ints({1}, true);
  g.initializers["ax"] = ints({0});
  g.initializers["c2"] = ints({2});
  g.initializers["c4"] = ints({4});
  g.nodes.push_back(node("Shape", {"x"}, {"s"}));
  g.nodes.push_back(node("Gather", {"s", "i0"}, {"b"}));
  g.nodes.back().attrs.push_back(int_attr("axis", 0));
  g.nodes.push_back(node("Gather", {"s", "i1"}, {"q"}));
  g.nodes.back().attrs.push_back(int_attr("axis", 0));
  g.nodes.push_back(node("Unsqueeze", {"b", "ax"}, {"b1"}));
  g.nodes.push_back(node("Unsqueeze", {"q", "ax"}, {"q1"}));
  g.nodes.push_back(node("Concat", {"b1", "q1", "c2", "c4"}, {"shape"}));
  g.nodes.back().attrs.push_back(int_attr("axis", 0));
  g.nodes.push_back(node("Reshape", {"x", "shape"}, {"r"}));
  g.nodes.push_back(node("Relu", {"r"}, {"y"}));
  return m;
}

TEST(ShapeResolution, ShapeChainBecomesConstantAndStaysDynamic) {
  ir::Model m = shape_chain_model();
  const ir::Model before = m;
  run_passes(m, {"shape-resolution", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Reshape", 1}, {"Relu", 1}}));
  const Tensor& shape = m.graph.initializers.at(m.graph.nodes[0].inputs[1]);
  EXPECT_EQ(std::vector<int64_t>(shape.data<int64_t>(), shape.data<int64_t>() + 4),
            (std::vector<int64_t>{0, 0, 2, 4}));
  expect_same(before, m, {random_f32({3, 5, 8}, 1)});
  expect_same(before, m, {random_f32({1, 7, 8}, 2)});
}

TEST(ShapeResolution, FixedDimsFoldToLiterals) {
  ir::Model m = shape_chain_model();
  for (auto& d : m.graph.inputs[0].type.shape) d = num(d.known() ? d.value : 2);
  const ir::Model before = m;
  run_passes(m, {"shape-resolution", "dead-code"});
  ASSERT_EQ(m.graph.nodes.size(), 2u);
  const Tensor& shape = m.graph.initializers.at(m.graph.nodes[0].inputs[1]);
  EXPECT_EQ(std::vector<int64_t>(shape.data<int64_t>(), shape.data<int64_t>() + 4),
            (std::vector<int64_t>{2, 2, 2, 4}));
  expect_same(before, m, {random_f32({2, 2, 8}, 3)});
}

TEST(Cse, DuplicateNodesAndConstantsMerge) {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("x", {num(2), num(3)})};
  g.outputs = {f32_value("y", {num(2), num(3)})};
  g.initializers["k1"] = random_f32({3}, 7);
  g.initializers["k2"] = g.initializers["k1"].clone();
  g.nodes.push_back(node("Mul", {"x", "k1"}, {"a"}));
  g.nodes.push_back(node("Mul", {"x", "k2"}, {"b"}));  // same once k2 merges into k1
  g.nodes.push_back(node("Relu", {"a"}, {"ra"}));
  g.nodes.push_back(node("Relu", {"b"}, {"rb"}));
  g.nodes.push_back(node("Softmax", {"ra"}, {"sa"}));
  g.nodes.back().attrs.push_back(int_attr("axis", 1));
  g.nodes.push_back(node("Softmax", {"rb"}, {"sb"}));
  g.nodes.back().attrs.push_back(int_attr("axis", 0));  // different attribute: stays
  g.nodes.push_back(node("Add", {"sa", "sb"}, {"y"}));
  const ir::Model before = m;
  run_passes(m, {"cse", "dead-code"});
  EXPECT_EQ(histogram(m),
            (std::map<std::string, int>{{"Mul", 1}, {"Relu", 1}, {"Softmax", 2}, {"Add", 1}}));
  expect_same(before, m, {random_f32({2, 3}, 8)});
}

TEST(RedundantOps, NoOpsAndChainsGo) {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("x", {sym("batch"), num(4), num(6)})};
  g.outputs = {f32_value("y", {sym("batch"), num(6), num(4)})};
  g.initializers["zero"] = Tensor::make(DType::kFloat32, {6}).value();
  g.initializers["one"] = Tensor::make(DType::kFloat32, {1}).value();
  g.initializers["one"].data<float>()[0] = 1;
  g.initializers["flat"] = ints({-1, 24});
  g.initializers["back"] = ints({-1, 4, 6});
  g.nodes.push_back(node("Cast", {"x"}, {"c"}));
  g.nodes.back().attrs.push_back(int_attr("to", static_cast<int64_t>(DType::kFloat32)));
  g.nodes.push_back(node("Add", {"zero", "c"}, {"a"}));  // commuted x + 0
  g.nodes.push_back(node("Mul", {"a", "one"}, {"mu"}));
  g.nodes.push_back(node("Reshape", {"mu", "flat"}, {"r1"}));
  g.nodes.push_back(node("Reshape", {"r1", "back"}, {"r2"}));  // back to [batch, 4, 6]
  g.nodes.push_back(node("Transpose", {"r2"}, {"t1"}));
  g.nodes.back().attrs.push_back(ints_attr("perm", {1, 0, 2}));
  g.nodes.push_back(node("Transpose", {"t1"}, {"t2"}));
  g.nodes.back().attrs.push_back(ints_attr("perm", {1, 2, 0}));  // composed: [0, 2, 1]
  g.nodes.push_back(node("Transpose", {"t2"}, {"t3"}));
  g.nodes.back().attrs.push_back(ints_attr("perm", {0, 1, 2}));
  g.nodes.push_back(node("Relu", {"t3"}, {"y"}));
  const ir::Model before = m;
  run_passes(m, {"redundant-ops", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Transpose", 1}, {"Relu", 1}}));
  for (const auto& n : m.graph.nodes)
    if (n.op_type == "Transpose") {
      EXPECT_EQ(n.attr_ints("perm"), (std::vector<int64_t>{0, 2, 1}));
    }
  expect_same(before, m, {random_f32({3, 4, 6}, 9)});
}

TEST(RedundantOps, UnsqueezeChainsMergeAndSqueezePairsGo) {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("x", {sym("batch"), sym("seq")})};
  g.outputs = {f32_value("y", {}), f32_value("z", {})};
  g.outputs[0].type.has_shape = g.outputs[1].type.has_shape = false;
  g.initializers["one"] = ints({1});
  g.nodes.push_back(node("Unsqueeze", {"x", "one"}, {"u1"}));
  g.nodes.push_back(node("Unsqueeze", {"u1", "one"}, {"u2"}));  // [batch, 1, 1, seq]
  g.nodes.push_back(node("Relu", {"u2"}, {"y"}));
  g.nodes.push_back(node("Squeeze", {"u1", "one"}, {"s"}));  // back to x
  g.nodes.push_back(node("Neg", {"s"}, {"z"}));
  const ir::Model before = m;
  run_passes(m, {"redundant-ops", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Unsqueeze", 1}, {"Relu", 1}, {"Neg", 1}}));
  for (const auto& n : m.graph.nodes) {
    if (n.op_type == "Neg") {
      EXPECT_EQ(n.inputs[0], "x");
    }
    if (n.op_type != "Unsqueeze") continue;
    const Tensor& axes = m.graph.initializers.at(n.inputs[1]);
    EXPECT_EQ(std::vector<int64_t>(axes.data<int64_t>(), axes.data<int64_t>() + axes.numel()),
              (std::vector<int64_t>{1, 2}));
  }
  expect_same(before, m, {random_f32({2, 5}, 21)});
}

TEST(RedundantOps, ShapeChangingNeutralOpsStay) {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("x", {num(3)})};
  g.outputs = {f32_value("y", {num(2), num(3)})};
  g.initializers["zero"] = Tensor::make(DType::kFloat32, {2, 3}).value();  // broadcasts x up
  g.nodes.push_back(node("Add", {"x", "zero"}, {"y"}));
  run_passes(m, {"redundant-ops", "dead-code"});
  EXPECT_EQ(m.graph.nodes.size(), 1u);
}

TEST(TransposeMatMul, TransposesFoldIntoGemm) {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("a", {num(4), num(3)}), f32_value("b", {num(5), num(4)})};
  g.outputs = {f32_value("y", {num(3), num(5)}), f32_value("z", {num(5), num(5)})};
  g.initializers["c"] = random_f32({5}, 4);
  g.nodes.push_back(node("Transpose", {"a"}, {"at"}));
  g.nodes.back().attrs.push_back(ints_attr("perm", {1, 0}));
  g.nodes.push_back(node("Transpose", {"b"}, {"bt"}));
  g.nodes.back().attrs.push_back(ints_attr("perm", {1, 0}));
  g.nodes.push_back(node("MatMul", {"at", "bt"}, {"y"}));
  g.nodes.push_back(node("Gemm", {"b", "bt", "c"}, {"z"}));
  const ir::Model before = m;
  run_passes(m, {"transpose-matmul", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Gemm", 2}}));
  EXPECT_EQ(m.graph.nodes[0].attr_int("transA", 0), 1);
  EXPECT_EQ(m.graph.nodes[0].attr_int("transB", 0), 1);
  EXPECT_EQ(m.graph.nodes[1].attr_int("transB", 0), 1);
  expect_same(before, m, {random_f32({4, 3}, 5), random_f32({5, 4}, 6)});
}

ir::Node batchnorm(const std::string& in, const std::string& out) {
  ir::Node bn = node("BatchNormalization", {in, "gamma", "beta", "mean", "var"}, {out});
  ir::Attribute eps;
  eps.name = "epsilon";
  eps.type = ir::Attribute::Type::kFloat;
  eps.f = 1e-3f;
  bn.attrs.push_back(eps);
  return bn;
}

void add_bn_params(ir::Graph& g, int64_t c) {
  g.initializers["gamma"] = random_f32({c}, 11, 0.5f, 2.0f);
  g.initializers["beta"] = random_f32({c}, 12);
  g.initializers["mean"] = random_f32({c}, 13);
  g.initializers["var"] = random_f32({c}, 14, 0.1f, 3.0f);
}

TEST(FoldBatchNorm, ConvAbsorbsBatchNorm) {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("x", {num(1), num(2), num(5), num(5)})};
  g.outputs = {f32_value("y", {num(1), num(3), num(5), num(5)})};
  g.initializers["w"] = random_f32({3, 2, 3, 3}, 15);
  add_bn_params(g, 3);
  g.nodes.push_back(node("Conv", {"x", "w"}, {"c"}));
  g.nodes.back().attrs.push_back(ints_attr("pads", {1, 1, 1, 1}));
  g.nodes.push_back(batchnorm("c", "y"));
  const ir::Model before = m;
  run_passes(m, {"fold-batchnorm", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Conv", 1}}));
  expect_same(before, m, {random_f32({1, 2, 5, 5}, 16)});
}

TEST(FoldBatchNorm, GemmAbsorbsBatchNorm) {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("x", {num(2), num(4)})};
  g.outputs = {f32_value("y", {num(2), num(3)})};
  g.initializers["w"] = random_f32({3, 4}, 17);
  g.initializers["bias"] = random_f32({3}, 18);
  add_bn_params(g, 3);
  g.nodes.push_back(node("Gemm", {"x", "w", "bias"}, {"c"}));
  g.nodes.back().attrs.push_back(int_attr("transB", 1));
  g.nodes.push_back(batchnorm("c", "y"));
  const ir::Model before = m;
  run_passes(m, {"fold-batchnorm", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Gemm", 1}}));
  expect_same(before, m, {random_f32({2, 4}, 19)});
}

TEST(FoldBatchNorm, MatMulBecomesGemmWithTheBatchNorm) {
  ir::Model m = make_model();
  auto& g = m.graph;
  g.inputs = {f32_value("x", {sym("batch"), num(4)})};
  g.outputs = {f32_value("y", {sym("batch"), num(3)})};
  g.initializers["w"] = random_f32({4, 3}, 22);
  add_bn_params(g, 3);
  g.nodes.push_back(node("MatMul", {"x", "w"}, {"c"}));
  g.nodes.push_back(batchnorm("c", "y"));
  const ir::Model before = m;
  run_passes(m, {"fold-batchnorm", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Gemm", 1}}));
  expect_same(before, m, {random_f32({5, 4}, 23)});
}

}  // namespace
}  // namespace kiln
