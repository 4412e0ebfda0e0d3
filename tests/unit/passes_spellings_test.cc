// Other exporters' spellings of the patterns kiln fuses (paddle2onnx's HardSwish/HardSigmoid,
// decomposed LayerNorm, tanh GELU, SiLU): each canonicalises and fuses to the same ops as the
// usual spelling, and computes the same outputs as the graph it replaced.
#include <gtest/gtest.h>

#include <set>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_ints;
using test::Builder;

// Runs the pipeline with only `passes` enabled, at -O`level`.
ir::Model run_passes(const ir::Model& in, const std::set<std::string>& passes, int level = 2) {
  ir::Model m = in;
  OptimizeOptions o;
  o.level = level;
  for (const auto& [name, lvl] : list_passes())
    if (!passes.count(name)) o.disabled.insert(name);
  auto r = optimize(m, o);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return m;
}

// Structure (op types in order) and outputs on random inputs in [lo, hi] before and after.
ir::Model check(Builder& b, const std::set<std::string>& passes,
                const std::vector<std::string>& want_ops, const std::vector<Shape>& input_shapes,
                float lo = -1, float hi = 1, int level = 2) {
  std::vector<Tensor> feeds;
  for (const auto& s : input_shapes) feeds.push_back(b.random(s, lo, hi));
  ir::Model after = run_passes(b.m, passes, level);
  EXPECT_EQ(test::op_types(after), want_ops);
  test::expect_same_outputs(b.m, after, feeds);
  return after;
}

const ir::Node& find(const ir::Model& m, const std::string& op) {
  for (const auto& n : m.graph.nodes)
    if (n.op_type == op) return n;
  ADD_FAILURE() << "no " << op;
  return m.graph.nodes.at(0);
}

// Clip(v, lo, hi) as opset < 11 writes it (attributes) or as opset >= 11 does (constant inputs).
void clip(Builder& b, const std::string& v, float lo, float hi, const std::string& out) {
  if (b.m.opset("") < 11) {
    b.add("Clip", {v}, {out}, {attr_f("min", lo), attr_f("max", hi)});
    return;
  }
  b.scalar(out + "_lo", lo);
  b.scalar(out + "_hi", hi);
  b.add("Clip", {v, out + "_lo", out + "_hi"}, {out});
}

// A [1] float constant, as paddle2onnx writes its scalars.
void one_elem(Builder& b, const std::string& name, float v) {
  Tensor t = Tensor::make(DType::kFloat32, {1}).value();
  t.data<float>()[0] = v;
  b.m.graph.initializers[name] = t;
}

// paddle2onnx's HardSwish x * Clip(x + 3, 0, 6) / 6 on v, in `order`:
// 0 (x*c)/6, 1 x*(c/6), 2 (x*c)*(1/6), 3 (c*(1/6))*x; odd orders add 3 + x rather than x + 3.
std::string paddle_hard_swish(Builder& b, const std::string& v, int order) {
  one_elem(b, "three", 3.0f);
  one_elem(b, "six", 6.0f);
  one_elem(b, "sixth", 0.1666667f);
  if (order % 2)
    b.add("Add", {"three", v}, {"hs_a"});
  else
    b.add("Add", {v, "three"}, {"hs_a"});
  clip(b, "hs_a", 0, 6, "hs_c");
  if (order == 0) {
    b.add("Mul", {v, "hs_c"}, {"hs_m"});
    b.add("Div", {"hs_m", "six"}, {"hs"});
  } else if (order == 1) {
    b.add("Div", {"hs_c", "six"}, {"hs_d"});
    b.add("Mul", {v, "hs_d"}, {"hs"});
  } else if (order == 2) {
    b.add("Mul", {"hs_c", v}, {"hs_m"});
    b.add("Mul", {"hs_m", "sixth"}, {"hs"});
  } else {
    b.add("Mul", {"sixth", "hs_c"}, {"hs_d"});
    b.add("Mul", {"hs_d", v}, {"hs"});
  }
  return "hs";
}

TEST(PaddleSpellings, HardSwishAfterConvInEveryOrderAndClipForm) {
  for (int64_t opset : {10, 13, 14}) {
    for (int order = 0; order < 4; ++order) {
      SCOPED_TRACE("opset " + std::to_string(opset) + " order " + std::to_string(order));
      Builder b(opset);
      b.input("x", {1, 2, 5, 5});
      b.conv("x", "y", 2, 3);
      b.output(paddle_hard_swish(b, "y", order));
      // The canonical form: x * HardSigmoid(x; 1/6, 1/2), one HardSwish where the opset has it.
      std::vector<std::string> canonical = {"Conv", "HardSigmoid", "Mul"};
      if (opset >= 14) canonical = {"Conv", "HardSwish"};
      ir::Model c = check(b, {"hard-sigmoid-canonical"}, canonical, {{1, 2, 5, 5}}, -5, 5, 1);
      if (opset < 14) {
        EXPECT_NEAR(find(c, "HardSigmoid").attr_float("alpha", 0), 1.0 / 6.0, 1e-7);
        EXPECT_NEAR(find(c, "HardSigmoid").attr_float("beta", 0), 0.5, 1e-7);
      }
      ir::Model f = check(b, {"hard-sigmoid-canonical", "conv-epilogue"}, {"FusedConv"},
                          {{1, 2, 5, 5}}, -5, 5);
      EXPECT_EQ(f.graph.nodes[0].attr_string("activation", ""), "HardSwish");
    }
  }
}

TEST(PaddleSpellings, StandaloneHardSwishIsOneOpFromOpset14) {
  Builder b(14);
  b.input("x", {3, 7});
  b.output(paddle_hard_swish(b, "x", 0));
  ir::Model m = check(b, {"hard-sigmoid-canonical"}, {"HardSwish"}, {{3, 7}}, -5, 5, 1);
  EXPECT_EQ(m.graph.nodes[0].inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(m.graph.nodes[0].outputs, std::vector<std::string>{"hs"});
}

// HardSigmoid as Clip(x * 0.1666667 + 0.5, 0, 1) (mul_add) or Clip(x + 3, 0, 6) / 6.
std::string paddle_hard_sigmoid(Builder& b, const std::string& v, bool mul_add) {
  if (mul_add) {
    one_elem(b, "slope", 0.1666667f);
    one_elem(b, "offset", 0.5f);
    b.add("Mul", {v, "slope"}, {"hg_m"});
    b.add("Add", {"hg_m", "offset"}, {"hg_a"});
    clip(b, "hg_a", 0, 1, "hg");
  } else {
    b.scalar("three", 3.0f);
    b.scalar("six", 6.0f);
    b.add("Add", {"three", v}, {"hg_a"});
    clip(b, "hg_a", 0, 6, "hg_c");
    b.add("Div", {"hg_c", "six"}, {"hg"});
  }
  return "hg";
}

TEST(PaddleSpellings, HardSigmoidSpellingsBecomeHardSigmoid) {
  for (int64_t opset : {10, 13}) {
    for (bool mul_add : {true, false}) {
      SCOPED_TRACE("opset " + std::to_string(opset) + (mul_add ? " mul-add" : " add-clip-div"));
      Builder b(opset);
      b.input("x", {1, 2, 5, 5});
      b.conv("x", "y", 2, 3);
      b.output(paddle_hard_sigmoid(b, "y", mul_add));
      ir::Model c =
          check(b, {"hard-sigmoid-canonical"}, {"Conv", "HardSigmoid"}, {{1, 2, 5, 5}}, -5, 5, 1);
      EXPECT_NEAR(c.graph.nodes[1].attr_float("alpha", 0), 1.0 / 6.0, 1e-6);
      EXPECT_NEAR(c.graph.nodes[1].attr_float("beta", 0), 0.5, 1e-7);
      ir::Model f = check(b, {"hard-sigmoid-canonical", "conv-epilogue"}, {"FusedConv"},
                          {{1, 2, 5, 5}}, -5, 5);
      EXPECT_EQ(f.graph.nodes[0].attr_string("activation", ""), "HardSigmoid");
    }
  }
}

TEST(PaddleSpellings, HardSigmoidWithOtherSlopeAndSubtractedOffset) {
  // Clip((x - 2) * 0.25, 0, 1) = HardSigmoid(x; 0.25, -0.5).
  Builder b(13);
  b.input("x", {4, 6});
  b.scalar("two", 2.0f);
  b.scalar("quarter", 0.25f);
  b.add("Sub", {"x", "two"}, {"s"});
  b.add("Mul", {"s", "quarter"}, {"m"});
  clip(b, "m", 0, 1, "y");
  b.output("y");
  ir::Model c = check(b, {"hard-sigmoid-canonical"}, {"HardSigmoid"}, {{4, 6}}, -3, 8, 1);
  EXPECT_FLOAT_EQ(c.graph.nodes[0].attr_float("alpha", 0), 0.25f);
  EXPECT_FLOAT_EQ(c.graph.nodes[0].attr_float("beta", 0), -0.5f);
}

TEST(PaddleSpellings, ClipsThatAreNotHardSigmoidStay) {
  struct Case {
    float lo, hi, divisor;
  };
  // Shifted Relu6 without the scale; a scale that is not 1/hi; a lower bound that is not 0.
  for (const Case& k : {Case{0, 6, 0}, Case{0, 6, 5}, Case{-1, 6, 6}}) {
    Builder b(13);
    b.input("x", {4, 6});
    b.scalar("three", 3.0f);
    b.add("Add", {"x", "three"}, {"a"});
    clip(b, "a", k.lo, k.hi, "c");
    std::vector<std::string> want = {"Add", "Clip"};
    if (k.divisor != 0) {
      b.scalar("d", k.divisor);
      b.add("Div", {"c", "d"}, {"y"});
      want.push_back("Div");
    }
    b.output(k.divisor != 0 ? "y" : "c");
    check(b, {"hard-sigmoid-canonical"}, want, {{4, 6}}, -5, 5, 1);
  }
}

TEST(PaddleSpellings, ScalarInputWithOneElementConstantsKeepsItsShape) {
  // x of rank 0 plus [1] constants gives a [1] result; HardSigmoid(x) would be rank 0.
  Builder b(13);
  b.input("x", {});
  b.output(paddle_hard_sigmoid(b, "x", true));
  check(b, {"hard-sigmoid-canonical"}, {"Mul", "Add", "Clip"}, {{}}, -5, 5, 1);
}

TEST(PaddleSpellings, SqueezeExciteWithAddClipDivGate) {
  // MobileNetV3's SE block: GlobalAveragePool -> Conv -> Relu -> Conv -> Clip(v + 3, 0, 6) / 6 ->
  // Mul.
  Builder b(13);
  b.input("x", {2, 8, 5, 5});
  b.add("GlobalAveragePool", {"x"}, {"p"});
  b.conv("p", "h", 8, 2, 1);
  b.add("Relu", {"h"}, {"r"});
  b.conv("r", "e", 2, 8, 1);
  b.add("Mul", {"x", paddle_hard_sigmoid(b, "e", false)}, {"o"});
  b.output("o");
  ir::Model m = check(b, {"hard-sigmoid-canonical", "squeeze-excite"}, {"SqueezeExcite"},
                      {{2, 8, 5, 5}}, -3, 3);
  EXPECT_EQ(m.graph.nodes[0].attr_string("activation", ""), "Relu");
  EXPECT_EQ(m.graph.nodes[0].attr_string("gate", ""), "HardSigmoid");
}

// paddle2onnx's LayerNorm before opset 17 over the last axis (positive: axes [2]) with [1]
// constants: Sub(x, mean) squared as Mul(d, d) and read again by the Div; with `two_subs` the
// centred value is computed twice, once for the square and once for the numerator.
void paddle_layer_norm(Builder& b, bool two_subs) {
  b.input("x", {2, 3, 8});
  one_elem(b, "eps", 1e-5f);
  b.weight("gamma", {8});
  b.weight("beta", {8});
  b.add("ReduceMean", {"x"}, {"mean"}, {attr_ints("axes", {2})});
  b.add("Sub", {"x", "mean"}, {"d"});
  std::string num = "d";
  if (two_subs) {
    b.add("Sub", {"x", "mean"}, {"d2"});
    num = "d2";
  }
  b.add("Mul", {"d", "d"}, {"sq"});
  b.add("ReduceMean", {"sq"}, {"var"}, {attr_ints("axes", {2})});
  b.add("Add", {"var", "eps"}, {"ve"});
  b.add("Sqrt", {"ve"}, {"sd"});
  b.add("Div", {num, "sd"}, {"n"});
  b.add("Mul", {"n", "gamma"}, {"g"});
  b.add("Add", {"g", "beta"}, {"y"});
  b.output("y");
}

TEST(PaddleSpellings, LayerNormWithMulSquareBecomesKilnLayerNorm) {
  for (bool two_subs : {false, true}) {
    SCOPED_TRACE(two_subs ? "two Subs" : "one Sub");
    Builder b(11);
    paddle_layer_norm(b, two_subs);
    ir::Model m =
        check(b, {"cse", "layer-norm", "layer-norm-kiln"}, {"LayerNorm"}, {{2, 3, 8}}, -2, 2);
    EXPECT_EQ(m.graph.nodes[0].domain, "ai.kiln");
    EXPECT_EQ(m.graph.nodes[0].inputs, (std::vector<std::string>{"x", "gamma", "beta"}));
    EXPECT_EQ(m.graph.nodes[0].attr_int("axis", 0), -1);
  }
}

// paddle2onnx's tanh GELU: Pow(x, 3) (or x*x*x) * 0.044715 + x, * sqrt(2/pi), Tanh, + 1, * x, *
// 0.5.
TEST(PaddleSpellings, TanhGeluWithPowOrMulCube) {
  for (bool pow : {true, false}) {
    SCOPED_TRACE(pow ? "Pow" : "x*x*x");
    Builder b(13);
    b.input("x", {2, 3, 8});
    one_elem(b, "three", 3.0f);
    one_elem(b, "c", 0.044715f);
    one_elem(b, "k", 0.7978845608f);
    one_elem(b, "one", 1.0f);
    one_elem(b, "half", 0.5f);
    if (pow) {
      b.add("Pow", {"x", "three"}, {"cube"});
    } else {
      b.add("Mul", {"x", "x"}, {"sq"});
      b.add("Mul", {"sq", "x"}, {"cube"});
    }
    b.add("Mul", {"cube", "c"}, {"w"});
    b.add("Add", {"x", "w"}, {"in"});
    b.add("Mul", {"in", "k"}, {"t"});
    b.add("Tanh", {"t"}, {"th"});
    b.add("Add", {"th", "one"}, {"a"});
    b.add("Mul", {"x", "a"}, {"p"});
    b.add("Mul", {"p", "half"}, {"y"});
    b.output("y");
    ir::Model m = check(b, {"gelu"}, {"Gelu"}, {{2, 3, 8}}, -4, 4);
    EXPECT_EQ(m.graph.nodes[0].attr_string("approximate", ""), "tanh");
  }
}

// Flax's tanh GELU through tf2onnx: the factor taken in first, x * (x * (0.044715 * x)), and the
// 1 of 1 + tanh a [1, 1, 1] constant, which fuses on a rank-3 x and not on a rank-2 one (there it
// raises the rank).
void flax_tanh_gelu(Builder& b, const Shape& x_shape) {
  b.input("x", x_shape);
  one_elem(b, "c", 0.044715f);
  one_elem(b, "k", 0.7978846f);
  b.floats("one", {1, 1, 1}, {1.0f});
  one_elem(b, "half", 0.5f);
  b.add("Mul", {"c", "x"}, {"cx"});
  b.add("Mul", {"x", "cx"}, {"cx2"});
  b.add("Mul", {"x", "cx2"}, {"cx3"});
  b.add("Add", {"x", "cx3"}, {"in"});
  b.add("Mul", {"k", "in"}, {"t"});
  b.add("Tanh", {"t"}, {"th"});
  b.add("Add", {"one", "th"}, {"a"});
  b.add("Mul", {"half", "a"}, {"h"});
  b.add("Mul", {"x", "h"}, {"y"});
  b.output("y");
}

TEST(FlaxSpellings, TanhGeluFactorFirstWithARank3One) {
  Builder b(13);
  flax_tanh_gelu(b, {2, 3, 8});
  ir::Model m = check(b, {"gelu"}, {"Gelu"}, {{2, 3, 8}}, -4, 4);
  EXPECT_EQ(m.graph.nodes[0].attr_string("approximate", ""), "tanh");
  Builder low(13);
  flax_tanh_gelu(low, {3, 8});
  const Result<int64_t> fused = test::run_pass(low.m, "gelu");
  ASSERT_TRUE(fused.is_ok()) << fused.status().message();
  EXPECT_EQ(fused.value(), 0);
}

TEST(PaddleSpellings, SiluAfterMatMulBias) {
  Builder b(13);
  b.input("x", {4, 8});
  b.weight("w", {8, 6});
  b.weight("bias", {6});
  b.add("MatMul", {"x", "w"}, {"y"});
  b.add("Add", {"y", "bias"}, {"yb"});
  b.add("Sigmoid", {"yb"}, {"s"});
  b.add("Mul", {"yb", "s"}, {"o"});
  b.output("o");
  ir::Model m = check(b, {"gemm-epilogue"}, {"FusedMatMul"}, {{4, 8}}, -3, 3);
  EXPECT_EQ(m.graph.nodes[0].attr_string("activation", ""), "Silu");
}

}  // namespace
}  // namespace kiln
