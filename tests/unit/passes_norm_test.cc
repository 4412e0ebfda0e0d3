// Tests of the norm-family fusions (layer-norm, layer-norm-kiln, skip-layer-norm, gelu, bias-gelu):
// the graph's structure after each pass, and equal outputs before and after on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ir/graph.h"
#include "kiln/optimize.h"
#include "kiln/session.h"

namespace kiln {
namespace {

using ir::Model;
using ir::Node;

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.op_type = op;
  n.name = out[0] + "_node";
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

Node with_ints(Node n, const std::string& name, std::vector<int64_t> v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::Attribute::Type::kInts;
  a.ints = std::move(v);
  n.attrs.push_back(a);
  return n;
}

void add_init(Model& m, const std::string& name, Shape shape, std::vector<float> v) {
  Tensor t = Tensor::make(DType::kFloat32, shape).value();
  if (v.size() == 1 && t.numel() != 1) v.assign(static_cast<size_t>(t.numel()), v[0]);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v[static_cast<size_t>(i)];
  m.graph.initializers[name] = t;
}

void add_init_i64(Model& m, const std::string& name, std::vector<int64_t> v) {
  Tensor t = Tensor::make(DType::kInt64, {static_cast<int64_t>(v.size())}).value();
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  m.graph.initializers[name] = t;
}

std::vector<float> ramp(int n, float a, float b) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(a + b * static_cast<float>(i));
  return v;
}

// A model with float input x [2,3,8] and the given outputs [2,3,8].
Model base_model(int64_t opset, std::vector<std::string> outputs) {
  Model m;
  m.opsets[""] = opset;
  m.graph.inputs = {{"x", ir::TypeInfo::tensor(DType::kFloat32, {2, 3, 8}), ""}};
  for (const auto& o : outputs) m.graph.outputs.push_back({o, ir::TypeInfo::tensor(DType::kFloat32, {2, 3, 8}), ""});
  return m;
}

// Runs only the named passes at `level`.
Model optimized(const Model& in, const std::set<std::string>& only, int level = 2, bool portable = false) {
  Model m = in;
  OptimizeOptions o;
  o.level = level;
  o.portable = portable;
  for (const auto& [name, lvl] : list_passes())
    if (!only.count(name)) o.disabled.insert(name);
  auto r = optimize(m, o);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return m;
}

std::map<std::string, int> histogram(const Model& m) {
  std::map<std::string, int> h;
  for (const auto& n : m.graph.nodes) ++h[(n.domain.empty() ? "" : n.domain + ".") + n.op_type];
  return h;
}

std::vector<Tensor> run(const Model& m, const std::vector<Tensor>& feeds) {
  auto s = Session::create(std::make_shared<const Model>(m));
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  if (!s.is_ok()) return {};
  std::vector<Value> in;
  for (const auto& t : feeds) in.push_back(Value::of(t));
  auto out = (*s)->run(in);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  std::vector<Tensor> r;
  if (out.is_ok())
    for (auto& v : *out) r.push_back(v.tensor);
  return r;
}

// Outputs of `before` and `after` agree on random x within 1e-5 relative (1e-5 absolute floor).
void expect_same_outputs(const Model& before, const Model& after, float scale = 2.0f) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Tensor x = Tensor::make(DType::kFloat32, {2, 3, 8}).value();
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = dist(rng);
  auto a = run(before, {x});
  auto b = run(after, {x});
  ASSERT_EQ(a.size(), b.size());
  for (size_t o = 0; o < a.size(); ++o) {
    ASSERT_EQ(a[o].shape(), b[o].shape()) << o;
    for (int64_t i = 0; i < a[o].numel(); ++i) {
      const float u = a[o].data<float>()[i], v = b[o].data<float>()[i];
      EXPECT_NEAR(u, v, 1e-5f * std::max(1.0f, std::abs(u))) << "output " << o << " element " << i;
    }
  }
}

// x -> ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div -> Mul(gamma) -> Add(beta),
// with axes as attribute (opset < 18) or input (opset >= 18), and the commutative operands swapped.
Model decomposed_layer_norm(int64_t opset) {
  Model m = base_model(opset, {"y"});
  auto reduce = [&](const std::string& in, const std::string& out) {
    if (opset >= 18) return node("ReduceMean", {in, "axes"}, {out});
    return with_ints(node("ReduceMean", {in}, {out}), "axes", {-1});
  };
  if (opset >= 18) add_init_i64(m, "axes", {2});
  add_init(m, "two", {}, {2.0f});
  add_init(m, "eps", {}, {1e-5f});
  add_init(m, "gamma", {8}, ramp(8, 0.5f, 0.25f));
  add_init(m, "beta", {8}, ramp(8, -1.0f, 0.3f));
  m.graph.nodes = {reduce("x", "mean"), node("Sub", {"x", "mean"}, {"d"}), node("Pow", {"d", "two"}, {"sq"}),
                   reduce("sq", "var"), node("Add", {"eps", "var"}, {"ve"}), node("Sqrt", {"ve"}, {"std"}),
                   node("Div", {"d", "std"}, {"n"}), node("Mul", {"gamma", "n"}, {"g"}),
                   node("Add", {"g", "beta"}, {"y"})};
  return m;
}

TEST(LayerNormFusion, Opset17BecomesLayerNormalizationAtLevel1) {
  Model before = decomposed_layer_norm(17);
  Model after = optimized(before, {"layer-norm"}, 1, true);
  EXPECT_EQ(histogram(after), (std::map<std::string, int>{{"LayerNormalization", 1}}));
  EXPECT_EQ(after.graph.nodes[0].inputs, (std::vector<std::string>{"x", "gamma", "beta"}));
  EXPECT_EQ(after.graph.nodes[0].attr_int("axis", 0), -1);
  EXPECT_FALSE(after.opsets.count("ai.kiln"));
  expect_same_outputs(before, after);
}

TEST(LayerNormFusion, Opset18AxesInputMulSquareAndReciprocal) {
  Model m = base_model(18, {"y"});
  add_init_i64(m, "axes", {2});
  add_init(m, "eps", {1}, {1e-6f});
  add_init(m, "gamma", {8}, ramp(8, 1.0f, -0.1f));
  m.graph.nodes = {node("ReduceMean", {"x", "axes"}, {"mean"}), node("Sub", {"x", "mean"}, {"d"}),
                   node("Mul", {"d", "d"}, {"sq"}), node("ReduceMean", {"sq", "axes"}, {"var"}),
                   node("Add", {"var", "eps"}, {"ve"}), node("Sqrt", {"ve"}, {"std"}),
                   node("Reciprocal", {"std"}, {"r"}), node("Mul", {"r", "d"}, {"n"}),
                   node("Mul", {"n", "gamma"}, {"y"})};
  Model after = optimized(m, {"layer-norm"}, 1, true);
  EXPECT_EQ(histogram(after), (std::map<std::string, int>{{"LayerNormalization", 1}}));
  EXPECT_EQ(after.graph.nodes[0].inputs, (std::vector<std::string>{"x", "gamma"}));
  EXPECT_FLOAT_EQ(after.graph.nodes[0].attr_float("epsilon", 0), 1e-6f);
  expect_same_outputs(m, after);
}

TEST(LayerNormFusion, Opset11AxesAttributeBecomesKilnLayerNorm) {
  Model before = decomposed_layer_norm(11);
  // -O1 keeps standard ops: there is no LayerNormalization before opset 17, so nothing changes.
  EXPECT_EQ(optimized(before, {"layer-norm", "layer-norm-kiln"}, 1).graph.nodes.size(), 9u);
  Model after = optimized(before, {"layer-norm", "layer-norm-kiln"});
  EXPECT_EQ(histogram(after), (std::map<std::string, int>{{"ai.kiln.LayerNorm", 1}}));
  EXPECT_EQ(after.opsets["ai.kiln"], 1);
  expect_same_outputs(before, after);
}

TEST(LayerNormFusion, Opset13PositiveAxesWithoutGammaOrBeta) {
  Model m = base_model(13, {"y"});
  add_init(m, "two", {1}, {2.0f});
  add_init(m, "eps", {}, {1e-5f});
  m.graph.nodes = {with_ints(node("ReduceMean", {"x"}, {"mean"}), "axes", {1, 2}),
                   node("Sub", {"x", "mean"}, {"d"}), node("Pow", {"d", "two"}, {"sq"}),
                   with_ints(node("ReduceMean", {"sq"}, {"var"}), "axes", {2, 1}),
                   node("Add", {"var", "eps"}, {"ve"}), node("Sqrt", {"ve"}, {"std"}),
                   node("Div", {"d", "std"}, {"y"})};
  Model after = optimized(m, {"layer-norm", "layer-norm-kiln"});
  ASSERT_EQ(histogram(after), (std::map<std::string, int>{{"ai.kiln.LayerNorm", 1}}));
  EXPECT_EQ(after.graph.nodes[0].attr_int("axis", 0), -2);
  ASSERT_EQ(after.graph.nodes[0].inputs.size(), 2u);  // a ones Scale was made
  EXPECT_EQ(after.graph.initializers.at(after.graph.nodes[0].inputs[1]).shape(), (Shape{3, 8}));
  expect_same_outputs(m, after);
}

TEST(LayerNormFusion, CentredValueReadElsewhereIsNotAbsorbed) {
  Model m = decomposed_layer_norm(17);
  m.graph.outputs.push_back({"d", ir::TypeInfo::tensor(DType::kFloat32, {2, 3, 8}), ""});
  Model after = optimized(m, {"layer-norm"}, 1, true);
  EXPECT_EQ(after.graph.nodes.size(), 9u);
  // At -O2 the part after the Sub is still exactly an RMSNorm of d.
  Model kiln = optimized(m, {"layer-norm", "layer-norm-kiln"});
  EXPECT_EQ(histogram(kiln), (std::map<std::string, int>{{"ReduceMean", 1}, {"Sub", 1}, {"ai.kiln.RMSNorm", 1},
                                                          {"Add", 1}}));
  expect_same_outputs(m, kiln);
}

TEST(RmsNormFusion, PowAndMulSpellings) {
  for (bool pow : {true, false}) {
    Model m = base_model(17, {"y"});
    add_init(m, "two", {}, {2.0f});
    add_init(m, "eps", {}, {1e-6f});
    add_init(m, "gamma", {8}, ramp(8, 0.3f, 0.2f));
    m.graph.nodes = {pow ? node("Pow", {"x", "two"}, {"sq"}) : node("Mul", {"x", "x"}, {"sq"}),
                     with_ints(node("ReduceMean", {"sq"}, {"ms"}), "axes", {-1}),
                     node("Add", {"ms", "eps"}, {"ve"}), node("Sqrt", {"ve"}, {"rms"})};
    if (pow) {
      m.graph.nodes.push_back(node("Div", {"x", "rms"}, {"n"}));
    } else {
      m.graph.nodes.push_back(node("Reciprocal", {"rms"}, {"r"}));
      m.graph.nodes.push_back(node("Mul", {"x", "r"}, {"n"}));
    }
    m.graph.nodes.push_back(node("Mul", {"n", "gamma"}, {"y"}));
    EXPECT_EQ(optimized(m, {"layer-norm"}, 1).graph.nodes.size(), m.graph.nodes.size());
    Model after = optimized(m, {"layer-norm", "layer-norm-kiln"});
    EXPECT_EQ(histogram(after), (std::map<std::string, int>{{"ai.kiln.RMSNorm", 1}})) << pow;
    EXPECT_EQ(after.graph.nodes[0].inputs, (std::vector<std::string>{"x", "gamma"}));
    expect_same_outputs(m, after);
  }
}

// y = LayerNorm(x + bias + r) where r = x * 2, and the sum s also feeds z = s + x.
Model skip_model(bool sum_reused) {
  Model m = base_model(17, sum_reused ? std::vector<std::string>{"y", "z"} : std::vector<std::string>{"y"});
  add_init(m, "bias", {8}, ramp(8, -0.4f, 0.1f));
  add_init(m, "two", {}, {2.0f});
  add_init(m, "gamma", {8}, ramp(8, 0.5f, 0.1f));
  add_init(m, "beta", {8}, ramp(8, 0.1f, 0.05f));
  Node ln = node("LayerNormalization", {"s", "gamma", "beta"}, {"y"});
  m.graph.nodes = {node("Mul", {"x", "two"}, {"r"}), node("Add", {"bias", "x"}, {"xb"}),
                   node("Add", {"r", "xb"}, {"s"}), ln};
  if (sum_reused) m.graph.nodes.push_back(node("Add", {"s", "x"}, {"z"}));
  return m;
}

TEST(SkipLayerNormFusion, BiasAbsorbedAndSumKeptWhenReused) {
  for (bool reused : {false, true}) {
    Model m = skip_model(reused);
    Model after = optimized(m, {"skip-layer-norm"});
    std::map<std::string, int> want{{"Mul", 1}, {"ai.kiln.SkipLayerNorm", 1}};
    if (reused) want["Add"] = 1;
    EXPECT_EQ(histogram(after), want) << reused;
    const Node& f = after.graph.nodes[1];
    ASSERT_EQ(f.op_type, "SkipLayerNorm");
    EXPECT_EQ(f.inputs, (std::vector<std::string>{"x", "r", "gamma", "beta", "bias"}));
    EXPECT_EQ(f.outputs.size(), reused ? 2u : 1u);
    expect_same_outputs(m, after);
  }
}

TEST(SkipLayerNormFusion, LayerNormStatisticsOutputsBlockFusion) {
  Model m = skip_model(false);
  m.graph.nodes[3].outputs.push_back("mean");
  m.graph.outputs.push_back({"mean", ir::TypeInfo::tensor(DType::kFloat32, {2, 3, 1}), ""});
  EXPECT_EQ(optimized(m, {"skip-layer-norm"}).graph.nodes.size(), 4u);
}

// 0.5 * x * (1 + Erf(x / sqrt 2)) spelt in `order` 0..3.
Model erf_gelu(int order) {
  Model m = base_model(17, {"y"});
  add_init(m, "sqrt2", {}, {1.4142135f});
  add_init(m, "rsqrt2", {}, {0.70710678f});
  add_init(m, "one", {}, {1.0f});
  add_init(m, "half", {}, {0.5f});
  m.graph.nodes = {order % 2 ? node("Mul", {"rsqrt2", "x"}, {"t"}) : node("Div", {"x", "sqrt2"}, {"t"}),
                   node("Erf", {"t"}, {"e"}), node("Add", {"one", "e"}, {"a"})};
  auto& n = m.graph.nodes;
  if (order == 0) {  // PyTorch: (x * a) * 0.5
    n.push_back(node("Mul", {"x", "a"}, {"p"}));
    n.push_back(node("Mul", {"p", "half"}, {"y"}));
  } else if (order == 1) {  // (0.5 * x) * a
    n.insert(n.begin(), node("Mul", {"half", "x"}, {"h"}));
    n.push_back(node("Mul", {"a", "h"}, {"y"}));
  } else {  // x * (a * 0.5)
    n.push_back(node("Mul", {"a", "half"}, {"p"}));
    n.push_back(node("Mul", {"x", "p"}, {"y"}));
  }
  return m;
}

TEST(GeluFusion, ErfSpellingsInEveryOrder) {
  for (int order = 0; order < 3; ++order) {
    Model m = erf_gelu(order);
    Model after = optimized(m, {"gelu"});
    ASSERT_EQ(histogram(after), (std::map<std::string, int>{{"ai.kiln.Gelu", 1}})) << order;
    EXPECT_EQ(after.graph.nodes[0].attr_string("approximate", ""), "none");
    EXPECT_EQ(after.graph.nodes[0].inputs, std::vector<std::string>{"x"});
    expect_same_outputs(m, after, 4.0f);
  }
}

TEST(GeluFusion, TanhSpellingsPowAndMulMul) {
  for (bool pow : {true, false}) {
    Model m = base_model(17, {"y"});
    add_init(m, "three", {}, {3.0f});
    add_init(m, "c", {}, {0.044715f});
    add_init(m, "k", {}, {0.7978845608f});
    add_init(m, "one", {}, {1.0f});
    add_init(m, "half", {}, {0.5f});
    auto& n = m.graph.nodes;
    if (pow) {
      n.push_back(node("Pow", {"x", "three"}, {"cube"}));
    } else {
      n.push_back(node("Mul", {"x", "x"}, {"sq"}));
      n.push_back(node("Mul", {"sq", "x"}, {"cube"}));
    }
    for (Node k : {node("Mul", {"c", "cube"}, {"w"}), node("Add", {"x", "w"}, {"in"}), node("Mul", {"in", "k"}, {"t"}),
                   node("Tanh", {"t"}, {"th"}), node("Add", {"th", "one"}, {"a"}), node("Mul", {"x", "half"}, {"h"}),
                   node("Mul", {"h", "a"}, {"y"})})
      n.push_back(k);
    Model after = optimized(m, {"gelu"});
    ASSERT_EQ(histogram(after), (std::map<std::string, int>{{"ai.kiln.Gelu", 1}})) << pow;
    EXPECT_EQ(after.graph.nodes[0].attr_string("approximate", ""), "tanh");
    expect_same_outputs(m, after, 4.0f);
  }
}

TEST(GeluFusion, WrongConstantIsLeftAlone) {
  Model m = erf_gelu(0);
  add_init(m, "half", {}, {0.25f});
  EXPECT_EQ(optimized(m, {"gelu"}).graph.nodes.size(), 5u);
}

TEST(BiasGeluFusion, AddOfOneDimConstantThenGelu) {
  Model m = erf_gelu(0);
  add_init(m, "bias", {8}, ramp(8, -0.5f, 0.13f));
  m.graph.nodes.insert(m.graph.nodes.begin(), node("Add", {"bias", "x0"}, {"xb"}));
  m.graph.inputs[0].name = "x0";
  for (auto& n : m.graph.nodes)
    for (auto& i : n.inputs)
      if (i == "x") i = "xb";
  Model after = optimized(m, {"gelu", "bias-gelu"});
  ASSERT_EQ(histogram(after), (std::map<std::string, int>{{"ai.kiln.BiasGelu", 1}}));
  EXPECT_EQ(after.graph.nodes[0].inputs, (std::vector<std::string>{"x0", "bias"}));
  expect_same_outputs(m, after, 4.0f);
}

TEST(BiasGeluFusion, OnnxGeluOfOpset20) {
  Model m = base_model(20, {"y"});
  add_init(m, "bias", {8}, ramp(8, -0.5f, 0.13f));
  Node g = node("Gelu", {"xb"}, {"y"});
  ir::Attribute a;
  a.name = "approximate";
  a.type = ir::Attribute::Type::kString;
  a.s = "tanh";
  g.attrs.push_back(a);
  m.graph.nodes = {node("Add", {"x", "bias"}, {"xb"}), g};
  Model after = optimized(m, {"bias-gelu"});
  ASSERT_EQ(histogram(after), (std::map<std::string, int>{{"ai.kiln.BiasGelu", 1}}));
  EXPECT_EQ(after.graph.nodes[0].attr_string("approximate", ""), "tanh");
  expect_same_outputs(m, after, 4.0f);
}

}  // namespace
}  // namespace kiln
