// The elementwise-fusion pass and the ai.kiln.FusedElementwise kernel: the chains the pass forms
// (and where it stops), and outputs bit-identical to running the unfused ops one by one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ir/shape_inference.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_ints;
using test::attr_floats;
using test::attr_strings;
using test::Builder;
using test::run_model;
using test::run_pass;

constexpr const char* kPass = "elementwise-fusion";

// Exact equality: every step replays its reference kernel in float, so nothing may differ.
ir::Model check(Builder& b, const std::vector<std::string>& want_ops,
                const std::vector<Shape>& shapes, float lo = -1, float hi = 1) {
  return test::check_pass(b, kPass, want_ops, shapes, lo, hi, /*tol=*/0.0f);
}

const ir::Node& only_node(const ir::Model& m) { return m.graph.nodes.at(0); }

TEST(ElementwiseFusion, AddRelu) {
  Builder b;
  b.input("x", {2, 3, 5});
  b.input("y", {2, 3, 5});
  b.add("Add", {"x", "y"}, {"s"});
  b.add("Relu", {"s"}, {"r"});
  b.output("r");
  ir::Model m = check(b, {"FusedElementwise"}, {{2, 3, 5}, {2, 3, 5}});
  const ir::Node& f = only_node(m);
  EXPECT_EQ(f.domain, "ai.kiln");
  EXPECT_EQ(f.inputs, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(f.outputs, (std::vector<std::string>{"r"}));
  EXPECT_EQ(f.attr_strings("ops"), (std::vector<std::string>{"Add", "Relu"}));
  EXPECT_EQ(f.attr_ints("operands"), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(f.attr_ints("swapped"), (std::vector<int64_t>{0, 0}));
  // The schema infers the output from the fused node alone.
  m.graph.value_info.clear();
  m.graph.outputs[0].type = ir::TypeInfo::tensor(DType::kFloat32);
  ASSERT_TRUE(ir::infer_shapes(m).is_ok());
  EXPECT_EQ(m.graph.outputs[0].type.static_shape(), (std::optional<Shape>{Shape{2, 3, 5}}));
}

TEST(ElementwiseFusion, OperandProducedBetweenTheChainsNodes) {
  // z is computed after Exp: the fused node goes where the last step was, after z.
  Builder b;
  b.input("x", {6});
  b.input("w", {6});
  b.add("Exp", {"x"}, {"e"});
  b.add("Neg", {"w"}, {"z"});
  b.add("Add", {"e", "z"}, {"a"});
  b.add("Relu", {"a"}, {"y"});
  b.output("y");
  check(b, {"Neg", "FusedElementwise"}, {{6}, {6}});
}

TEST(ElementwiseFusion, ClipBeforeOpset11ReadsAttributes) {
  // Clip-6: bounds are attributes, an absent one is the float range (not infinity).
  Builder b(10);
  b.input("x", {3, 4});
  b.add("Mul", {"x", "x"}, {"s"});
  b.add("Clip", {"s"}, {"c"}, {attr_f("max", 0.5f)});
  b.add("Sigmoid", {"c"}, {"y"});
  b.output("y");
  ir::Model m = check(b, {"FusedElementwise"}, {{3, 4}});
  EXPECT_EQ(only_node(m).inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(only_node(m).attr_ints("operands"), (std::vector<int64_t>{-1, -1, -1}));
  EXPECT_EQ(only_node(m).attr_floats("params"),
            (std::vector<float>{std::numeric_limits<float>::lowest(), 0.5f}));
}

TEST(ElementwiseFusion, IntegerChainsAreLeftAlone) {
  Builder b;
  b.m.graph.inputs.push_back(ir::ValueInfo{"i", ir::TypeInfo::tensor(DType::kInt64, {4}), ""});
  b.ints("k", {1, 2, 3, 4});
  b.add("Add", {"i", "k"}, {"a"});
  b.add("Relu", {"a"}, {"y"});
  b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kInt64), ""});
  ir::Model m = b.m;
  auto n = run_pass(m, kPass);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 0);
  EXPECT_EQ(test::op_types(m), (std::vector<std::string>{"Add", "Relu"}));
}

TEST(ElementwiseFusion, SubWithTheChainOnTheRight) {
  // 1 - relu(x), then * 0.25: the chain value is Sub's right operand.
  Builder b;
  b.input("x", {4, 9});
  b.scalar("one", 1.0f);
  b.scalar("q", 0.25f);
  b.add("Relu", {"x"}, {"r"});
  b.add("Sub", {"one", "r"}, {"d"});
  b.add("Mul", {"d", "q"}, {"y"});
  b.output("y");
  ir::Model m = check(b, {"FusedElementwise"}, {{4, 9}});
  const ir::Node& f = only_node(m);
  EXPECT_EQ(f.inputs, (std::vector<std::string>{"x", "one", "q"}));
  EXPECT_EQ(f.attr_ints("operands"), (std::vector<int64_t>{-1, 1, 2}));
  EXPECT_EQ(f.attr_ints("swapped"), (std::vector<int64_t>{0, 1, 0}));
}

TEST(ElementwiseFusion, HeadWithTheFullShapeOnTheRight) {
  // Sub(bias[7], x[3,7]): the chain starts from x (the output's shape) with Sub swapped.
  Builder b;
  b.input("x", {3, 7});
  b.weight("bias", {7});
  b.add("Sub", {"bias", "x"}, {"d"});
  b.add("Exp", {"d"}, {"y"});
  b.output("y");
  ir::Model m = check(b, {"FusedElementwise"}, {{3, 7}});
  EXPECT_EQ(only_node(m).inputs, (std::vector<std::string>{"x", "bias"}));
  EXPECT_EQ(only_node(m).attr_ints("swapped"), (std::vector<int64_t>{1, 0}));
}

TEST(ElementwiseFusion, DivByLastAxisVector) {
  Builder b;
  b.input("x", {2, 3, 7});
  b.weight("v", {7});
  b.add("Div", {"x", "v"}, {"d"});
  b.add("Tanh", {"d"}, {"t"});
  b.add("Add", {"t", "v"}, {"y"});  // the same vector again: one input, read twice
  b.output("y");
  ir::Model m = check(b, {"FusedElementwise"}, {{2, 3, 7}});
  EXPECT_EQ(only_node(m).inputs, (std::vector<std::string>{"x", "v"}));
  EXPECT_EQ(only_node(m).attr_ints("operands"), (std::vector<int64_t>{1, -1, 1}));
}

TEST(ElementwiseFusion, HardSwishPaddleSpellingOnANonConvInput) {
  // x * Clip(x + 3, 0, 6) / 6: the Mul's operand is the chain's start.
  Builder b;
  b.input("x", {1, 4, 5, 5});
  b.scalar("three", 3.0f);
  b.scalar("zero", 0.0f);
  b.scalar("six", 6.0f);
  b.add("Add", {"x", "three"}, {"a"});
  b.add("Clip", {"a", "zero", "six"}, {"c"});
  b.add("Mul", {"x", "c"}, {"m"});
  b.add("Div", {"m", "six"}, {"y"});
  b.output("y");
  ir::Model m = check(b, {"FusedElementwise"}, {{1, 4, 5, 5}}, -5, 5);
  const ir::Node& f = only_node(m);
  EXPECT_EQ(f.inputs, (std::vector<std::string>{"x", "three", "six"}));
  EXPECT_EQ(f.attr_strings("ops"), (std::vector<std::string>{"Add", "Clip", "Mul", "Div"}));
  EXPECT_EQ(f.attr_ints("operands"), (std::vector<int64_t>{1, -1, 0, 2}));
  EXPECT_EQ(f.attr_ints("swapped"), (std::vector<int64_t>{0, 0, 1, 0}));
  EXPECT_EQ(f.attr_floats("params"), (std::vector<float>{0.0f, 6.0f}));
}

TEST(ElementwiseFusion, MiddleValueWithTwoReadersSplitsTheChain) {
  // m is read by Sigmoid and by Tanh: x+c -> *d ends at m; Sigmoid -> Abs is a chain of its own.
  Builder b;
  b.input("x", {3, 11});
  b.weight("c", {3, 11});
  b.weight("d", {11});
  b.add("Add", {"x", "c"}, {"a"});
  b.add("Mul", {"a", "d"}, {"m"});
  b.add("Sigmoid", {"m"}, {"s"});
  b.add("Abs", {"s"}, {"y1"});
  b.add("Tanh", {"m"}, {"y2"});
  b.output("y1");
  b.output("y2");
  ir::Model m = check(b, {"FusedElementwise", "FusedElementwise", "Tanh"}, {{3, 11}});
  EXPECT_EQ(m.graph.nodes[0].outputs, (std::vector<std::string>{"m"}));
  EXPECT_EQ(m.graph.nodes[1].inputs, (std::vector<std::string>{"m"}));
}

TEST(ElementwiseFusion, GraphOutputInTheMiddleStopsTheChain) {
  Builder b;
  b.input("x", {5});
  b.add("Neg", {"x"}, {"n"});
  b.add("Exp", {"n"}, {"e"});
  b.add("Sqrt", {"e"}, {"y"});
  b.output("n");
  b.output("y");
  check(b, {"Neg", "FusedElementwise"}, {{5}});
}

TEST(ElementwiseFusion, ChannelOperandTakesTheGeneralPath) {
  // [1,C,1,1] scale and shift on [N,C,H,W], with sizes that are not multiples of anything.
  Builder b;
  b.input("x", {2, 3, 5, 7});
  b.weight("s", {1, 3, 1, 1});
  b.weight("t", {1, 3, 1, 1});
  b.add("Mul", {"x", "s"}, {"m"});
  b.add("Add", {"t", "m"}, {"a"});
  b.add("Sigmoid", {"a"}, {"y"});
  b.output("y");
  ir::Model m = check(b, {"FusedElementwise"}, {{2, 3, 5, 7}}, -4, 4);
  EXPECT_EQ(only_node(m).attr_ints("swapped"), (std::vector<int64_t>{0, 1, 0}));
}

TEST(ElementwiseFusion, OperandThatWouldGrowTheChainIsNotFused) {
  // relu(x[3]) + y[2,3] would recompute the Relu on the larger shape: not fused.
  Builder b;
  b.input("x", {3});
  b.input("y", {2, 3});
  b.add("Relu", {"x"}, {"r"});
  b.add("Add", {"r", "y"}, {"a"});
  b.output("a");
  check(b, {"Relu", "Add"}, {{3}, {2, 3}});
}

TEST(ElementwiseFusion, EveryStepOpMatchesTheUnfusedOps) {
  // One long chain through every step op, compared bit for bit.
  Builder b(20);
  b.input("x", {4, 37});
  b.input("p", {4, 37});
  b.scalar("half", 0.5f);
  b.scalar("lo", -0.75f);
  b.scalar("hi", 0.8f);
  b.weight("w", {37});
  b.add("Abs", {"x"}, {"v0"});
  b.add("Add", {"v0", "half"}, {"v1"});
  b.add("Log", {"v1"}, {"v2"});
  b.add("Sqrt", {"v1"}, {"v2b"});  // v1 has two readers: a second chain starts below
  b.add("Mul", {"v2", "v2b"}, {"v3"});
  b.add("Exp", {"v3"}, {"v4"});
  b.add("Neg", {"v4"}, {"v5"});
  b.add("Sigmoid", {"v5"}, {"v6"});
  b.add("Tanh", {"v6"}, {"v7"});
  b.add("Erf", {"v7"}, {"v8"});
  b.add("Softplus", {"v8"}, {"v9"});
  b.add("Reciprocal", {"v9"}, {"v10"});
  b.add("Sub", {"v10", "p"}, {"v11"});
  b.add("Relu", {"v11"}, {"v12"});
  b.add("Sub", {"half", "v12"}, {"v13"});
  b.add("LeakyRelu", {"v13"}, {"v14"}, {attr_f("alpha", 0.3f)});
  b.add("HardSigmoid", {"v14"}, {"v15"}, {attr_f("alpha", 0.7f), attr_f("beta", 0.1f)});
  b.add("HardSwish", {"v15"}, {"v16"});
  b.add("Mul", {"v16", "p"}, {"v17"});
  b.add("Elu", {"v17"}, {"v18"}, {attr_f("alpha", 0.9f)});
  b.add("Clip", {"v18", "lo", "hi"}, {"v19"});
  b.add("Max", {"w", "v19"}, {"v20"});
  b.add("Min", {"v20", "p"}, {"v21"});
  b.add("Abs", {"v21"}, {"v22"});
  b.add("Pow", {"v22", "half"}, {"v23"});
  b.add("Pow", {"half", "v23"}, {"v24"});
  b.add("Mul", {"v24", "v24"}, {"v25"});
  b.add("Div", {"v25", "w"}, {"y"});
  b.output("y");
  // Abs -> Add stops at v1 (two readers). Log heads the long chain, which takes the Mul with Sqrt's
  // output as an operand; Sqrt is left alone.
  ir::Model m =
      check(b, {"FusedElementwise", "Sqrt", "FusedElementwise"}, {{4, 37}, {4, 37}}, -2, 2);
  EXPECT_EQ(m.graph.nodes[2].attr_strings("ops").size(), 25u);
}

// ---- the kernel on hand-built nodes, against the same ops unfused ----

struct ChainCase {
  Shape x0;
  std::vector<Shape> extra;
  std::vector<std::string> ops;
  std::vector<int64_t> operands, swapped;
  std::vector<float> params;
};

// "<prefix><i>" (built by appending, so that GCC 12 sees no false -Wrestrict).
std::string numbered(char prefix, size_t i) {
  std::string s(1, prefix);
  s += std::to_string(i);
  return s;
}
std::string input_name(size_t i) { return numbered('x', i); }

// The unfused model of a chain case: one standard node per step.
ir::Model unfused_model(const ChainCase& c) {
  Builder b;
  b.input("x0", c.x0);
  for (size_t i = 0; i < c.extra.size(); ++i) b.input(input_name(i + 1), c.extra[i]);
  std::string v = "x0";
  size_t p = 0;
  for (size_t k = 0; k < c.ops.size(); ++k) {
    const std::string out = numbered('s', k);
    const std::string& op = c.ops[k];
    if (c.operands[k] != -1 || op == "Add" || op == "Sub" || op == "Mul" || op == "Div" ||
        op == "Pow" || op == "Max" || op == "Min") {
      const std::string o = c.operands[k] < 0 ? v : input_name(static_cast<size_t>(c.operands[k]));
      b.add(op, c.swapped[k] ? std::vector<std::string>{o, v} : std::vector<std::string>{v, o},
            {out});
    } else if (op == "Clip") {
      b.scalar(out + "_lo", c.params[p]);
      b.scalar(out + "_hi", c.params[p + 1]);
      b.add(op, {v, out + "_lo", out + "_hi"}, {out});
      p += 2;
    } else if (op == "LeakyRelu") {
      b.add(op, {v}, {out}, {attr_f("alpha", c.params[p++])});
    } else {
      b.add(op, {v}, {out});
    }
    v = out;
  }
  b.output(v);
  return b.m;
}

ir::Model fused_model(const ChainCase& c) {
  Builder b;
  b.m.opsets["ai.kiln"] = 1;
  std::vector<std::string> in{"x0"};
  b.input("x0", c.x0);
  for (size_t i = 0; i < c.extra.size(); ++i) {
    in.push_back(input_name(i + 1));
    b.input(in.back(), c.extra[i]);
  }
  ir::Node& n = b.add("FusedElementwise", in, {"y"},
                      {attr_strings("ops", c.ops), attr_ints("operands", c.operands),
                       attr_ints("swapped", c.swapped)});
  if (!c.params.empty()) n.attrs.push_back(attr_floats("params", c.params));
  n.domain = "ai.kiln";
  b.output("y");
  return b.m;
}

void expect_bit_exact(const ChainCase& c) {
  Builder feeds_from;
  std::vector<Tensor> feeds{feeds_from.random(c.x0, -3, 3)};
  for (const Shape& s : c.extra) feeds.push_back(feeds_from.random(s, -3, 3));
  const std::vector<Value> want = run_model(unfused_model(c), feeds),
                           got = run_model(fused_model(c), feeds);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  const Tensor& a = want[0].tensor;
  const Tensor& b = got[0].tensor;
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float p = a.data<float>()[i], q = b.data<float>()[i];
    if (std::isnan(p) && std::isnan(q)) continue;
    ASSERT_EQ(std::memcmp(&p, &q, sizeof(float)), 0) << "element " << i << ": " << p << " vs " << q;
  }
}

TEST(FusedElementwiseKernel, OddSizesAllOperandKinds) {
  // 4·3·257 = 3084 elements: neither a multiple of 8 (AVX) nor of the 256-element block.
  expect_bit_exact({{4, 3, 257},
                    {{4, 3, 257}, {257}, {}, {1, 3, 1}},
                    {"Mul", "Add", "Sub", "Div", "Tanh", "Max"},
                    {1, 2, 3, 4, -1, 1},
                    {0, 1, 0, 1, 0, 1},
                    {}});
}

TEST(FusedElementwiseKernel, InnerDimRepeatedOverTheNextIsPeriodic) {
  // Per-channel operands of a blocked [N, C/8, H, W, 8] value ([1, C/8, 1, 1, 8] and without the
  // leading 1), and an odd period of 5 whose runs straddle the 256-element blocks.
  expect_bit_exact({{2, 3, 5, 7, 8},
                    {{1, 3, 1, 1, 8}, {3, 1, 1, 8}},
                    {"Mul", "Add", "Relu"},
                    {1, 2, -1},
                    {0, 1, 0},
                    {}});
  expect_bit_exact({{3, 4, 9, 5}, {{4, 1, 5}, {1, 9, 1}}, {"Sub", "Mul"}, {1, 2}, {1, 0}, {}});
  // Periods of whole vectors (copied a vector at a time): 24 starts a 256-element block 16
  // elements into a period, and 16 with a scalar-tail output size.
  expect_bit_exact({{2, 3, 5, 7, 24}, {{1, 3, 1, 1, 24}}, {"Mul", "Relu"}, {1, -1}, {1, 0}, {}});
  expect_bit_exact({{3, 2, 3, 16}, {{2, 1, 16}, {1}}, {"Add", "Mul"}, {1, 2}, {0, 0}, {}});
}

TEST(FusedElementwiseKernel, LargeOddSizeRunsInParallel) {
  // 70001 elements: past the parallel threshold, with a partial last block.
  expect_bit_exact({{70001},
                    {{70001}, {1}},
                    {"Sub", "Relu", "Mul", "LeakyRelu", "Clip"},
                    {1, -1, 2, -1, -1},
                    {1, 0, 0, 0, 0},
                    {0.2f, -0.5f, 2.5f}});
}

TEST(FusedElementwiseKernel, StartSmallerThanTheOutput) {
  // X0 [5] broadcasts against X1 [3, 1]: the output is [3, 5], computed with strided reads.
  expect_bit_exact({{5}, {{3, 1}, {3, 5}}, {"Add", "Mul", "Exp"}, {1, 2, -1}, {0, 1, 0}, {}});
}

TEST(FusedElementwiseKernel, SmallAndEmpty) {
  expect_bit_exact({{1}, {{}}, {"Add", "Sigmoid"}, {1, -1}, {0, 0}, {}});
  expect_bit_exact({{0, 3}, {{3}}, {"Add", "Relu"}, {1, -1}, {0, 0}, {}});
}

TEST(FusedElementwiseKernel, BadAttributesAreErrors) {
  ChainCase c{{4}, {{4}}, {"Add", "Relu"}, {1, -1}, {0, 0}, {}};
  auto fails = [](const ChainCase& bad) {
    Tensor x = Tensor::make(DType::kFloat32, bad.x0).value();
    Tensor y = Tensor::make(DType::kFloat32, bad.extra[0]).value();
    auto s = Session::create(std::make_shared<const ir::Model>(fused_model(bad)));
    if (!s.is_ok()) return true;
    return !(*s)->run({Value::of(x), Value::of(y)}).is_ok();
  };
  EXPECT_FALSE(fails(c));
  ChainCase bad = c;
  bad.operands = {5, -1};  // no input 5
  EXPECT_TRUE(fails(bad));
  bad = c;
  bad.ops = {"Add", "Cosh"};  // not a step op
  EXPECT_TRUE(fails(bad));
  bad = c;
  bad.params = {1.0f};  // no step takes a param
  EXPECT_TRUE(fails(bad));
  bad = c;
  bad.swapped = {0, 1};  // a unary step cannot be swapped
  EXPECT_TRUE(fails(bad));
  bad = c;
  bad.extra = {{3}};  // [4] and [3] do not broadcast
  EXPECT_TRUE(fails(bad));
}

// ---- ai.kiln.ConcatElementwise: X0 read from the parts of a Concat ----

// The chain case c with its X0 the Concat of inputs p0, p1, ... of `parts` along `axis`: the
// unfused model (a Concat node feeding the steps) and the fused node.
std::pair<ir::Model, ir::Model> concat_models(const ChainCase& c, const std::vector<Shape>& parts,
                                              int64_t axis) {
  auto with_parts = [&](ir::Model m) {
    m.graph.inputs.erase(m.graph.inputs.begin());  // x0
    std::vector<ir::ValueInfo> ins;
    for (size_t i = 0; i < parts.size(); ++i) {
      Builder b;
      b.input(numbered('p', i), parts[i]);
      ins.push_back(b.m.graph.inputs[0]);
    }
    m.graph.inputs.insert(m.graph.inputs.begin(), ins.begin(), ins.end());
    return m;
  };
  ir::Model unfused = with_parts(unfused_model(c));
  ir::Node concat;
  concat.op_type = "Concat";
  concat.name = "concat";
  for (size_t i = 0; i < parts.size(); ++i) concat.inputs.push_back(numbered('p', i));
  concat.outputs = {"x0"};
  concat.attrs.push_back(ir::Attribute::of_int("axis", axis));
  unfused.graph.nodes.insert(unfused.graph.nodes.begin(), concat);
  ir::Model fused = with_parts(fused_model(c));
  ir::Node& f = fused.graph.nodes.at(0);
  f.op_type = "ConcatElementwise";
  f.inputs.erase(f.inputs.begin());
  f.inputs.insert(f.inputs.begin(), concat.inputs.begin(), concat.inputs.end());
  f.attrs.push_back(ir::Attribute::of_int("x0_parts", static_cast<int64_t>(parts.size())));
  f.attrs.push_back(ir::Attribute::of_int("x0_axis", axis));
  return {unfused, fused};
}

void expect_concat_bit_exact(const ChainCase& c, const std::vector<Shape>& parts, int64_t axis) {
  auto [unfused, fused] = concat_models(c, parts, axis);
  Builder feeds_from;
  std::vector<Tensor> feeds;
  for (const Shape& s : parts) feeds.push_back(feeds_from.random(s, -3, 3));
  for (const Shape& s : c.extra) feeds.push_back(feeds_from.random(s, -3, 3));
  const std::vector<Value> want = run_model(unfused, feeds), got = run_model(fused, feeds);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  const Tensor& a = want[0].tensor;
  const Tensor& b = got[0].tensor;
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << "element " << i;
}

TEST(ConcatElementwiseKernel, PartsInterleavedOverOuterDims) {
  // Axis 1 of a batch of 2 (the parts interleave per image), parts of 3, 1 and 4 channels of
  // 5x7 (runs that straddle the 256-element blocks), a per-channel operand and the X0 read twice.
  const ChainCase c{{2, 8, 5, 7}, {{1, 8, 1, 1}}, {"Mul", "Relu", "Add"}, {1, -1, 0}, {0, 0, 1}, {}};
  expect_concat_bit_exact(c, {{2, 3, 5, 7}, {2, 1, 5, 7}, {2, 4, 5, 7}}, 1);
  // Axis 0 (one piece a part), and the last axis (pieces of a few elements).
  expect_concat_bit_exact({{5, 9}, {{9}}, {"Sub"}, {1}, {1}, {}}, {{2, 9}, {3, 9}}, 0);
  expect_concat_bit_exact({{6, 11}, {}, {"Tanh"}, {-1}, {0}, {}}, {{6, 4}, {6, 7}}, 1);
}

TEST(ConcatElementwiseKernel, BadPartsAreErrors) {
  const ChainCase c{{2, 8, 3}, {}, {"Relu"}, {-1}, {0}, {}};
  auto fails = [](const ir::Model& m, std::vector<Shape> shapes) {
    auto s = Session::create(std::make_shared<const ir::Model>(m));
    if (!s.is_ok()) return true;
    std::vector<Value> in;
    for (const Shape& sh : shapes) in.push_back(Value::of(Tensor::make(DType::kFloat32, sh).value()));
    return !(*s)->run(in).is_ok();
  };
  ir::Model fused = concat_models(c, {{2, 3, 3}, {2, 5, 3}}, 1).second;
  EXPECT_FALSE(fails(fused, {{2, 3, 3}, {2, 5, 3}}));
  EXPECT_TRUE(fails(fused, {{2, 3, 3}, {2, 5, 4}}));  // the parts differ off the axis
  EXPECT_TRUE(fails(fused, {{2, 3, 3}, {2, 5}}));     // and in rank
  for (int64_t parts : {0, 3}) {
    ir::Model bad = fused;
    for (auto& a : bad.graph.nodes[0].attrs)
      if (a.name == "x0_parts") a = ir::Attribute::of_int("x0_parts", parts);
    EXPECT_TRUE(fails(bad, {{2, 3, 3}, {2, 5, 3}})) << "x0_parts " << parts;
  }
  ir::Model bad = fused;
  for (auto& a : bad.graph.nodes[0].attrs)
    if (a.name == "x0_axis") a = ir::Attribute::of_int("x0_axis", 3);
  EXPECT_TRUE(fails(bad, {{2, 3, 3}, {2, 5, 3}}));
}

// The pass: a Concat read only by a chain fuses into it; one read by anything else stays.
TEST(ConcatElementwiseFusion, ConcatReadOnlyByTheChain) {
  for (bool shared : {false, true}) {
    Builder b;
    b.input("a", {1, 3, 4, 4});
    b.input("c", {1, 5, 4, 4});
    b.add("Concat", {"a", "c"}, {"x"}, {test::attr_i("axis", -3)});
    b.floats("scale", {8, 1, 1}, {1, 2, 3, 4, 5, 6, 7, 8});
    b.add("Mul", {"x", "scale"}, {"m"});
    b.add("Relu", {"m"}, {"y"});
    b.output("y");
    if (shared) b.output("x");
    ir::Model m = b.m;
    ASSERT_TRUE(run_pass(m, "elementwise-fusion").is_ok());
    ASSERT_TRUE(run_pass(m, "concat-elementwise").is_ok());
    const std::vector<std::string> want =
        shared ? std::vector<std::string>{"Concat", "FusedElementwise"}
               : std::vector<std::string>{"ConcatElementwise"};
    EXPECT_EQ(test::op_types(m), want);
    test::expect_same_outputs(b.m, m, {b.random({1, 3, 4, 4}), b.random({1, 5, 4, 4})}, 0);
  }
}

}  // namespace
}  // namespace kiln
