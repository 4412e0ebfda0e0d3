// Tests of the norm-family fusions (layer-norm, layer-norm-kiln, skip-layer-norm, gelu, bias-gelu):
// the graph's structure after each pass, and equal outputs before and after on random inputs.
#include <gtest/gtest.h>

#include <set>

#include "pass_test_util.h"

namespace kiln {
namespace {

using ir::Model;
using test::attr_ints;
using test::attr_s;
using test::Builder;
using test::num;
using test::qualified_histogram;
using Histogram = std::map<std::string, int>;

std::vector<float> ramp(int n, float a, float b) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(a + b * static_cast<float>(i));
  return v;
}

// A model with float input `x` [2,3,8] and the given outputs [2,3,8].
Builder base_model(int64_t opset, const std::vector<std::string>& outputs,
                   const std::string& x = "x") {
  Builder b(opset);
  b.input(x, {2, 3, 8});
  for (const auto& o : outputs) b.output_dims(o, {num(2), num(3), num(8)});
  return b;
}

// Runs only the named passes at `level`.
Model optimized(const Model& in, const std::set<std::string>& only, int level = 2,
                bool portable = false) {
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

// Outputs of b's model and `after` agree on random x in [-scale, scale] (1e-5 relative).
void expect_same_on_random_x(Builder& b, const Model& after, float scale = 2.0f) {
  test::expect_same_outputs(b.m, after, {b.random({2, 3, 8}, -scale, scale)});
}

// x -> ReduceMean -> Sub -> Pow(2) -> ReduceMean -> Add(eps) -> Sqrt -> Div -> Mul(gamma) ->
// Add(beta), with axes as attribute (opset < 18) or input (opset >= 18), and the commutative
// operands swapped.
Builder decomposed_layer_norm(int64_t opset) {
  Builder b = base_model(opset, {"y"});
  auto reduce = [&](const std::string& in, const std::string& out) {
    if (opset >= 18) {
      b.add("ReduceMean", {in, "axes"}, {out});
    } else {
      b.add("ReduceMean", {in}, {out}, {attr_ints("axes", {-1})});
    }
  };
  if (opset >= 18) b.ints("axes", {2});
  b.floats("two", {}, {2.0f});
  b.floats("eps", {}, {1e-5f});
  b.floats("gamma", {8}, ramp(8, 0.5f, 0.25f));
  b.floats("beta", {8}, ramp(8, -1.0f, 0.3f));
  reduce("x", "mean");
  b.add("Sub", {"x", "mean"}, {"d"});
  b.add("Pow", {"d", "two"}, {"sq"});
  reduce("sq", "var");
  b.add("Add", {"eps", "var"}, {"ve"});
  b.add("Sqrt", {"ve"}, {"std"});
  b.add("Div", {"d", "std"}, {"n"});
  b.add("Mul", {"gamma", "n"}, {"g"});
  b.add("Add", {"g", "beta"}, {"y"});
  return b;
}

TEST(LayerNormFusion, Opset17BecomesLayerNormalizationAtLevel1) {
  Builder b = decomposed_layer_norm(17);
  Model after = optimized(b.m, {"layer-norm"}, 1, true);
  EXPECT_EQ(qualified_histogram(after), (Histogram{{"LayerNormalization", 1}}));
  EXPECT_EQ(after.graph.nodes[0].inputs, (std::vector<std::string>{"x", "gamma", "beta"}));
  EXPECT_EQ(after.graph.nodes[0].attr_int("axis", 0), -1);
  EXPECT_FALSE(after.opsets.count("ai.kiln"));
  expect_same_on_random_x(b, after);
}

TEST(LayerNormFusion, Opset18AxesInputMulSquareAndReciprocal) {
  Builder b = base_model(18, {"y"});
  b.ints("axes", {2});
  b.floats("eps", {1}, {1e-6f});
  b.floats("gamma", {8}, ramp(8, 1.0f, -0.1f));
  b.add("ReduceMean", {"x", "axes"}, {"mean"});
  b.add("Sub", {"x", "mean"}, {"d"});
  b.add("Mul", {"d", "d"}, {"sq"});
  b.add("ReduceMean", {"sq", "axes"}, {"var"});
  b.add("Add", {"var", "eps"}, {"ve"});
  b.add("Sqrt", {"ve"}, {"std"});
  b.add("Reciprocal", {"std"}, {"r"});
  b.add("Mul", {"r", "d"}, {"n"});
  b.add("Mul", {"n", "gamma"}, {"y"});
  Model after = optimized(b.m, {"layer-norm"}, 1, true);
  EXPECT_EQ(qualified_histogram(after), (Histogram{{"LayerNormalization", 1}}));
  EXPECT_EQ(after.graph.nodes[0].inputs, (std::vector<std::string>{"x", "gamma"}));
  EXPECT_FLOAT_EQ(after.graph.nodes[0].attr_float("epsilon", 0), 1e-6f);
  expect_same_on_random_x(b, after);
}

TEST(LayerNormFusion, Opset11AxesAttributeBecomesKilnLayerNorm) {
  Builder b = decomposed_layer_norm(11);
  // -O1 keeps standard ops: there is no LayerNormalization before opset 17, so nothing changes.
  EXPECT_EQ(optimized(b.m, {"layer-norm", "layer-norm-kiln"}, 1).graph.nodes.size(), 9u);
  Model after = optimized(b.m, {"layer-norm", "layer-norm-kiln"});
  EXPECT_EQ(qualified_histogram(after), (Histogram{{"ai.kiln.LayerNorm", 1}}));
  EXPECT_EQ(after.opsets["ai.kiln"], 1);
  expect_same_on_random_x(b, after);
}

TEST(LayerNormFusion, Opset13PositiveAxesWithoutGammaOrBeta) {
  Builder b = base_model(13, {"y"});
  b.floats("two", {1}, {2.0f});
  b.floats("eps", {}, {1e-5f});
  b.add("ReduceMean", {"x"}, {"mean"}, {attr_ints("axes", {1, 2})});
  b.add("Sub", {"x", "mean"}, {"d"});
  b.add("Pow", {"d", "two"}, {"sq"});
  b.add("ReduceMean", {"sq"}, {"var"}, {attr_ints("axes", {2, 1})});
  b.add("Add", {"var", "eps"}, {"ve"});
  b.add("Sqrt", {"ve"}, {"std"});
  b.add("Div", {"d", "std"}, {"y"});
  Model after = optimized(b.m, {"layer-norm", "layer-norm-kiln"});
  ASSERT_EQ(qualified_histogram(after), (Histogram{{"ai.kiln.LayerNorm", 1}}));
  EXPECT_EQ(after.graph.nodes[0].attr_int("axis", 0), -2);
  ASSERT_EQ(after.graph.nodes[0].inputs.size(), 2u);  // a ones Scale was made
  EXPECT_EQ(after.graph.initializers.at(after.graph.nodes[0].inputs[1]).shape(), (Shape{3, 8}));
  expect_same_on_random_x(b, after);
}

TEST(LayerNormFusion, CentredValueReadElsewhereIsNotAbsorbed) {
  Builder b = decomposed_layer_norm(17);
  b.output_dims("d", {num(2), num(3), num(8)});
  Model after = optimized(b.m, {"layer-norm"}, 1, true);
  EXPECT_EQ(after.graph.nodes.size(), 9u);
  // At -O2 the part after the Sub is still exactly an RMSNorm of d.
  Model kiln = optimized(b.m, {"layer-norm", "layer-norm-kiln"});
  EXPECT_EQ(qualified_histogram(kiln),
            (Histogram{{"ReduceMean", 1}, {"Sub", 1}, {"ai.kiln.RMSNorm", 1}, {"Add", 1}}));
  expect_same_on_random_x(b, kiln);
}

TEST(RmsNormFusion, PowAndMulSpellings) {
  for (bool pow : {true, false}) {
    Builder b = base_model(17, {"y"});
    b.floats("two", {}, {2.0f});
    b.floats("eps", {}, {1e-6f});
    b.floats("gamma", {8}, ramp(8, 0.3f, 0.2f));
    if (pow) {
      b.add("Pow", {"x", "two"}, {"sq"});
    } else {
      b.add("Mul", {"x", "x"}, {"sq"});
    }
    b.add("ReduceMean", {"sq"}, {"ms"}, {attr_ints("axes", {-1})});
    b.add("Add", {"ms", "eps"}, {"ve"});
    b.add("Sqrt", {"ve"}, {"rms"});
    if (pow) {
      b.add("Div", {"x", "rms"}, {"n"});
    } else {
      b.add("Reciprocal", {"rms"}, {"r"});
      b.add("Mul", {"x", "r"}, {"n"});
    }
    b.add("Mul", {"n", "gamma"}, {"y"});
    EXPECT_EQ(optimized(b.m, {"layer-norm"}, 1).graph.nodes.size(), b.m.graph.nodes.size());
    Model after = optimized(b.m, {"layer-norm", "layer-norm-kiln"});
    EXPECT_EQ(qualified_histogram(after), (Histogram{{"ai.kiln.RMSNorm", 1}})) << pow;
    EXPECT_EQ(after.graph.nodes[0].inputs, (std::vector<std::string>{"x", "gamma"}));
    expect_same_on_random_x(b, after);
  }
}

// y = LayerNorm(x + bias + r) where r = x * 2, and the sum s also feeds z = s + x.
Builder skip_model(bool sum_reused) {
  Builder b = base_model(
      17, sum_reused ? std::vector<std::string>{"y", "z"} : std::vector<std::string>{"y"});
  b.floats("bias", {8}, ramp(8, -0.4f, 0.1f));
  b.floats("two", {}, {2.0f});
  b.floats("gamma", {8}, ramp(8, 0.5f, 0.1f));
  b.floats("beta", {8}, ramp(8, 0.1f, 0.05f));
  b.add("Mul", {"x", "two"}, {"r"});
  b.add("Add", {"bias", "x"}, {"xb"});
  b.add("Add", {"r", "xb"}, {"s"});
  b.add("LayerNormalization", {"s", "gamma", "beta"}, {"y"});
  if (sum_reused) b.add("Add", {"s", "x"}, {"z"});
  return b;
}

TEST(SkipLayerNormFusion, BiasAbsorbedAndSumKeptWhenReused) {
  for (bool reused : {false, true}) {
    Builder b = skip_model(reused);
    Model after = optimized(b.m, {"skip-layer-norm"});
    Histogram want{{"Mul", 1}, {"ai.kiln.SkipLayerNorm", 1}};
    if (reused) want["Add"] = 1;
    EXPECT_EQ(qualified_histogram(after), want) << reused;
    const ir::Node& f = after.graph.nodes[1];
    ASSERT_EQ(f.op_type, "SkipLayerNorm");
    EXPECT_EQ(f.inputs, (std::vector<std::string>{"x", "r", "gamma", "beta", "bias"}));
    EXPECT_EQ(f.outputs.size(), reused ? 2u : 1u);
    expect_same_on_random_x(b, after);
  }
}

TEST(SkipLayerNormFusion, LayerNormStatisticsOutputsBlockFusion) {
  Builder b = skip_model(false);
  b.m.graph.nodes[3].outputs.push_back("mean");
  b.output_dims("mean", {num(2), num(3), num(1)});
  EXPECT_EQ(optimized(b.m, {"skip-layer-norm"}).graph.nodes.size(), 4u);
}

// y = 0.5 * x * (1 + Erf(x / sqrt 2)) spelt in `order` 0..2, on a model whose input is `input`
// (x itself, or the input of a bias Add producing x when not "x").
Builder erf_gelu(int order, const std::string& input = "x") {
  Builder b = base_model(17, {"y"}, input);
  b.floats("sqrt2", {}, {1.4142135f});
  b.floats("rsqrt2", {}, {0.70710678f});
  b.floats("one", {}, {1.0f});
  b.floats("half", {}, {0.5f});
  std::string x = input;
  if (input != "x") {
    b.floats("bias", {8}, ramp(8, -0.5f, 0.13f));
    b.add("Add", {"bias", input}, {"xb"});
    x = "xb";
  }
  if (order == 1) b.add("Mul", {"half", x}, {"h"});
  if (order % 2) {
    b.add("Mul", {"rsqrt2", x}, {"t"});
  } else {
    b.add("Div", {x, "sqrt2"}, {"t"});
  }
  b.add("Erf", {"t"}, {"e"});
  b.add("Add", {"one", "e"}, {"a"});
  if (order == 0) {  // PyTorch: (x * a) * 0.5
    b.add("Mul", {x, "a"}, {"p"});
    b.add("Mul", {"p", "half"}, {"y"});
  } else if (order == 1) {  // (0.5 * x) * a
    b.add("Mul", {"a", "h"}, {"y"});
  } else {  // x * (a * 0.5)
    b.add("Mul", {"a", "half"}, {"p"});
    b.add("Mul", {x, "p"}, {"y"});
  }
  return b;
}

TEST(GeluFusion, ErfSpellingsInEveryOrder) {
  for (int order = 0; order < 3; ++order) {
    Builder b = erf_gelu(order);
    Model after = optimized(b.m, {"gelu"});
    ASSERT_EQ(qualified_histogram(after), (Histogram{{"ai.kiln.Gelu", 1}})) << order;
    EXPECT_EQ(after.graph.nodes[0].attr_string("approximate", ""), "none");
    EXPECT_EQ(after.graph.nodes[0].inputs, std::vector<std::string>{"x"});
    expect_same_on_random_x(b, after, 4.0f);
  }
}

TEST(GeluFusion, TanhSpellingsPowAndMulMul) {
  for (bool pow : {true, false}) {
    Builder b = base_model(17, {"y"});
    b.floats("three", {}, {3.0f});
    b.floats("c", {}, {0.044715f});
    b.floats("k", {}, {0.7978845608f});
    b.floats("one", {}, {1.0f});
    b.floats("half", {}, {0.5f});
    if (pow) {
      b.add("Pow", {"x", "three"}, {"cube"});
    } else {
      b.add("Mul", {"x", "x"}, {"sq"});
      b.add("Mul", {"sq", "x"}, {"cube"});
    }
    b.add("Mul", {"c", "cube"}, {"w"});
    b.add("Add", {"x", "w"}, {"in"});
    b.add("Mul", {"in", "k"}, {"t"});
    b.add("Tanh", {"t"}, {"th"});
    b.add("Add", {"th", "one"}, {"a"});
    b.add("Mul", {"x", "half"}, {"h"});
    b.add("Mul", {"h", "a"}, {"y"});
    Model after = optimized(b.m, {"gelu"});
    ASSERT_EQ(qualified_histogram(after), (Histogram{{"ai.kiln.Gelu", 1}})) << pow;
    EXPECT_EQ(after.graph.nodes[0].attr_string("approximate", ""), "tanh");
    expect_same_on_random_x(b, after, 4.0f);
  }
}

TEST(GeluFusion, WrongConstantIsLeftAlone) {
  Builder b = erf_gelu(0);
  b.floats("half", {}, {0.25f});
  EXPECT_EQ(optimized(b.m, {"gelu"}).graph.nodes.size(), 5u);
}

TEST(BiasGeluFusion, AddOfOneDimConstantThenGelu) {
  Builder b = erf_gelu(0, "x0");
  Model after = optimized(b.m, {"gelu", "bias-gelu"});
  ASSERT_EQ(qualified_histogram(after), (Histogram{{"ai.kiln.BiasGelu", 1}}));
  EXPECT_EQ(after.graph.nodes[0].inputs, (std::vector<std::string>{"x0", "bias"}));
  expect_same_on_random_x(b, after, 4.0f);
}

TEST(BiasGeluFusion, OnnxGeluOfOpset20) {
  Builder b = base_model(20, {"y"});
  b.floats("bias", {8}, ramp(8, -0.5f, 0.13f));
  b.add("Add", {"x", "bias"}, {"xb"});
  b.add("Gelu", {"xb"}, {"y"}, {attr_s("approximate", "tanh")});
  Model after = optimized(b.m, {"bias-gelu"});
  ASSERT_EQ(qualified_histogram(after), (Histogram{{"ai.kiln.BiasGelu", 1}}));
  EXPECT_EQ(after.graph.nodes[0].attr_string("approximate", ""), "tanh");
  expect_same_on_random_x(b, after, 4.0f);
}

}  // namespace
}  // namespace kiln
