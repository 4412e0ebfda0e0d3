// The pattern matcher and rule rewriter (passes/pattern.h): commutative operands, one name for
// one value, interior nodes absorbed only when the match is their sole reader (read once, or
// several times when shared()), alternatives and captured constants; apply_rules() reaching into If branches and
// keeping the model's outputs; and the pass context caching its analyses until invalidated.
#include <gtest/gtest.h>

#include "passes/graph_index.h"
#include "passes/pass_context.h"
#include "passes/pattern.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using passes::Match;
using passes::Pattern;
using passes::Rule;
using passes::RuleContext;
using test::Builder;

// Mul(x, Sigmoid(x)), either operand order.
Pattern silu() {
  return Pattern::op("Mul", {Pattern::value("x"), Pattern::op("Sigmoid", {Pattern::value("x")}).bind("gate")})
      .commutative();
}

const ir::Node& node_writing(const ir::Model& m, const std::string& v) {
  for (const auto& n : m.graph.nodes)
    for (const auto& o : n.outputs)
      if (o == v) return n;
  ADD_FAILURE() << "no node writes " << v;
  return m.graph.nodes.front();
}

TEST(Pattern, MatchesEitherOperandOrderAndCaptures) {
  for (bool swapped : {false, true}) {
    Builder b;
    b.input("x", {4});
    b.add("Sigmoid", {"x"}, {"s"});
    b.add("Mul", swapped ? std::vector<std::string>{"s", "x"} : std::vector<std::string>{"x", "s"}, {"y"});
    b.output("y");
    const passes::GraphIndex idx(b.m.graph);
    auto m = passes::match_pattern(silu(), idx, node_writing(b.m, "y"));
    ASSERT_TRUE(m.has_value()) << "swapped " << swapped;
    EXPECT_EQ(m->value("x"), "x");
    EXPECT_EQ(m->node("gate").op_type, "Sigmoid");
    ASSERT_EQ(m->absorbed.size(), 2u);
    EXPECT_EQ(m->absorbed.back(), m->root);  // root last
    EXPECT_FALSE(passes::match_pattern(silu(), idx, node_writing(b.m, "s")).has_value());
  }
}

TEST(Pattern, OneNameIsOneValue) {
  Builder b;
  b.input("x", {4});
  b.input("z", {4});
  b.add("Sigmoid", {"z"}, {"s"});
  b.add("Mul", {"x", "s"}, {"y"});
  b.output("y");
  const passes::GraphIndex idx(b.m.graph);
  EXPECT_FALSE(passes::match_pattern(silu(), idx, node_writing(b.m, "y")).has_value());
}

TEST(Pattern, InteriorNodesMustBeReadOnlyByTheMatch) {
  for (bool gate_is_output : {false, true}) {
    Builder b;
    b.input("x", {4});
    b.add("Sigmoid", {"x"}, {"s"});
    b.add("Mul", {"x", "s"}, {"y"});
    b.add("Mul", {"s", "s"}, {"q"});  // s read twice by one node
    b.output("y");
    b.output("q");
    if (gate_is_output) b.output("s");
    const passes::GraphIndex idx(b.m.graph);
    EXPECT_FALSE(passes::match_pattern(silu(), idx, node_writing(b.m, "y")).has_value());  // s also read by q
    // Sigmoid(x)^2 as Mul(s, s): the gate read twice, by the match only, unless also an output.
    const Pattern square = Pattern::op("Mul", {Pattern::op("Sigmoid", {Pattern::value("x")}).shared().bind("s"),
                                                Pattern::value("s")});
    Builder c = b;
    c.m.graph.nodes.erase(c.m.graph.nodes.begin() + 1);  // drop y = x * s
    c.m.graph.outputs.erase(c.m.graph.outputs.begin());
    const passes::GraphIndex cidx(c.m.graph);
    auto m = passes::match_pattern(square, cidx, node_writing(c.m, "q"));
    EXPECT_EQ(m.has_value(), !gate_is_output);
    if (m) EXPECT_EQ(m->absorbed.size(), 2u);
  }
}

TEST(Pattern, AlternativesAndConstants) {
  // Div(x, 2) or Mul(x, 0.5), x halved.
  const Pattern half = Pattern::any_of({Pattern::op("Div", {Pattern::value("x"), Pattern::scalar(2.0)}),
                                        Pattern::op("Mul", {Pattern::value("x"), Pattern::scalar(0.5)}).commutative()});
  Builder b;
  b.input("x", {4});
  b.scalar("two", 2.0f);
  b.scalar("half", 0.5f);
  b.scalar("third", 1.0f / 3);
  b.add("Div", {"x", "two"}, {"a"});
  b.add("Mul", {"half", "x"}, {"c"});
  b.add("Mul", {"x", "third"}, {"d"});
  b.add("Div", {"two", "x"}, {"e"});
  for (const char* v : {"a", "c", "d", "e"}) b.output(v);
  const passes::GraphIndex idx(b.m.graph);
  EXPECT_TRUE(passes::match_pattern(half, idx, node_writing(b.m, "a")).has_value());
  EXPECT_TRUE(passes::match_pattern(half, idx, node_writing(b.m, "c")).has_value());
  EXPECT_FALSE(passes::match_pattern(half, idx, node_writing(b.m, "d")).has_value());
  EXPECT_FALSE(passes::match_pattern(half, idx, node_writing(b.m, "e")).has_value());  // Div is not commutative
  const Pattern captured = Pattern::op("Div", {Pattern::value("x"), Pattern::constant([](const Tensor&) { return true; }, "k")});
  auto m = passes::match_pattern(captured, idx, node_writing(b.m, "a"));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->constant("k").data<float>()[0], 2.0f);
}

// x * Sigmoid(x) rewritten as x / (1 + exp(-x)): a rewrite into several nodes, same values.
Rule silu_to_swish_rule() {
  return {"test-silu", silu(), [](const Match& m, RuleContext&) -> std::optional<std::vector<ir::Node>> {
            ir::Node neg = passes::replacement_node(m, "Neg", {m.value("x")});
            neg.outputs = {m.root->outputs[0] + "_neg"};
            ir::Node ex = passes::replacement_node(m, "Exp", {neg.outputs[0]});
            ex.outputs = {m.root->outputs[0] + "_exp"};
            ir::Node den = passes::replacement_node(m, "Add", {ex.outputs[0], "one"});
            den.outputs = {m.root->outputs[0] + "_den"};
            ir::Node div = passes::replacement_node(m, "Div", {m.value("x"), den.outputs[0]});
            return std::vector<ir::Node>{neg, ex, den, div};
          }};
}

TEST(Pattern, RulesRewriteTheGraphAndIfBranchesKeepingOutputs) {
  Builder b(17);
  b.input("x", {6});
  b.input("cond", {});
  b.m.graph.inputs.back().type.dtype = DType::kBool;
  b.scalar("one", 1.0f);
  b.add("Sigmoid", {"x"}, {"s"});
  b.add("Mul", {"s", "x"}, {"y"});
  // An If whose then-branch computes the same SiLU of the outer x.
  auto then_g = std::make_shared<ir::Graph>();
  then_g->name = "then";
  ir::Node sg;
  sg.op_type = "Sigmoid";
  sg.inputs = {"x"};
  sg.outputs = {"ts"};
  ir::Node mul;
  mul.op_type = "Mul";
  mul.inputs = {"x", "ts"};
  mul.outputs = {"ty"};
  then_g->nodes = {sg, mul};
  then_g->outputs = {ir::ValueInfo{"ty", ir::TypeInfo::tensor(DType::kFloat32), ""}};
  auto else_g = std::make_shared<ir::Graph>();
  else_g->name = "else";
  ir::Node id;
  id.op_type = "Identity";
  id.inputs = {"x"};
  id.outputs = {"ey"};
  else_g->nodes = {id};
  else_g->outputs = {ir::ValueInfo{"ey", ir::TypeInfo::tensor(DType::kFloat32), ""}};
  ir::Attribute then_a, else_a;
  then_a.name = "then_branch";
  then_a.type = ir::Attribute::Type::kGraph;
  then_a.g = then_g;
  else_a.name = "else_branch";
  else_a.type = ir::Attribute::Type::kGraph;
  else_a.g = else_g;
  b.add("If", {"cond"}, {"z"}, {then_a, else_a});
  b.output("y");
  b.output("z");

  ir::Model before = b.m;
  before.graph.nodes.back().attrs[0].g = std::make_shared<ir::Graph>(*then_g);  // not shared with `after`
  ir::Model after = b.m;
  OptimizeOptions opts;
  passes::PassContext ctx(after, opts);
  EXPECT_EQ(passes::apply_rules(after, ctx, {silu_to_swish_rule()}), 2);
  EXPECT_EQ(test::op_types(after), (std::vector<std::string>{"Neg", "Exp", "Add", "Div", "If"}));
  const ir::Graph& branch = *after.graph.nodes.back().attrs[0].g;
  ASSERT_EQ(branch.nodes.size(), 4u);
  EXPECT_EQ(branch.nodes.back().op_type, "Div");
  EXPECT_EQ(branch.nodes.back().outputs[0], "ty");
  Tensor x = b.random({6}, -4, 4);
  Tensor cond = Tensor::make(DType::kBool, {}).value();
  *cond.data<bool>() = true;
  test::expect_same_outputs(before, after, {x, cond}, 1e-6f);
}

TEST(PassContext, AnalysesAreComputedOnceUntilInvalidated) {
  Builder b;
  b.input("x", {2, 3});
  b.add("Relu", {"x"}, {"y"});
  b.output("y");
  OptimizeOptions opts;
  passes::PassContext ctx(b.m, opts);
  const ir::TypeInfo* t = ctx.types().tensor("y");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape.size(), 2u);
  EXPECT_EQ(ctx.types().rank("x"), 2);
  EXPECT_EQ(ctx.inferences(), 1);
  EXPECT_TRUE(b.m.graph.value_info.empty());  // inferred on a copy: the model is as it was
  const passes::GraphIndex* idx = &ctx.index(b.m.graph);
  EXPECT_EQ(&ctx.index(b.m.graph), idx);
  ctx.invalidate();
  EXPECT_EQ(ctx.types().rank("y"), 2);
  EXPECT_EQ(ctx.inferences(), 2);
}

}  // namespace
}  // namespace kiln
