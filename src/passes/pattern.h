// Declarative rewrites (DESIGN.md habit 6; tinygrad's UPat and PatternMatcher are the model): a
// Pattern describes a piece of data flow ending in one node — ops with input patterns, captured
// values, constants, alternatives, commutative operands — and a Rule says what replaces a match.
// apply_rules() runs rules over a model's graph and every subgraph until none matches.
//
//   const Pattern x = Pattern::value("x");
//   Rule hard_swish{"hard-swish",
//       Pattern::op("Mul", {x, Pattern::op("HardSigmoid", {x}).where(is_gate)}).commutative(),
//       [](const Match& m, RuleContext& rc) { return one_node("HardSwish", {m.value("x")}, m); }};
//
// Matching starts at a node (the pattern's outermost op) and follows inputs to their producers.
// The nodes a match passes through are absorbed (the rewrite replaces them), so each must have
// one output read only by the match, once (or, marked shared(), several times).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/graph_index.h"
#include "passes/pass_context.h"

namespace kiln::passes {

class Pattern {
 public:
  // A node of standard ONNX op `op_type` with exactly these inputs, each matching its pattern.
  static Pattern op(std::string op_type, std::vector<Pattern> inputs);
  // The same in another domain ("ai.kiln", "com.microsoft").
  static Pattern op_in(std::string domain, std::string op_type, std::vector<Pattern> inputs);
  // Any value, captured as `name`; every use of one name must be the same value. "" captures nothing
  // and also matches an omitted optional input.
  static Pattern value(std::string name);
  // A fixed initializer for which `accept` holds, captured as `name` ("" captures nothing).
  static Pattern constant(std::function<bool(const Tensor&)> accept, std::string name = "");
  // A one-element float constant of rank 0 or 1 (so it cannot broadcast its operand to a higher
  // rank) within `rtol` (relative) of `v`.
  static Pattern scalar(double v, double rtol = 1e-4);
  // The same of any rank ([1, 1, 1] from tf2onnx), captured as `name`: the rule checks that it
  // does not raise its operand's rank.
  static Pattern scalar_any_rank(double v, std::string name, double rtol = 1e-4);
  // The first of these alternatives that matches.
  static Pattern any_of(std::vector<Pattern> alternatives);

  // A two-input op whose inputs may match in either order (Add, Mul, Max, ...).
  Pattern& commutative();
  // An op whose node is captured as `name` (for the rewrite to read its attributes), and the
  // value it was reached through as the value `name`, which value(name) elsewhere must equal.
  Pattern& bind(std::string name);
  // An op node must also satisfy `accept` (attributes, input count, ...).
  Pattern& where(std::function<bool(const ir::Node&)> accept);
  // An op whose output the match reads more than once (LayerNorm's centred x, read by the square
  // and the division, value() naming it elsewhere): it needs no single use, only that every
  // reader is in the match.
  Pattern& shared();
  // An op the rewrite reads through but does not replace (a scale computed once for several
  // matches): it may have other readers and stays for them; dead-code removal drops it once none
  // is left.
  Pattern& kept();

 private:
  friend class Matcher;
  enum class Kind { kOp, kValue, kConstant, kAnyOf };
  Kind kind_ = Kind::kValue;
  std::string domain_, op_type_, name_;
  std::vector<Pattern> children_;  // op inputs, or alternatives
  bool commutative_ = false, shared_ = false, kept_ = false;
  std::function<bool(const ir::Node&)> node_accept_;
  std::function<bool(const Tensor&)> constant_accept_;
};

// What a pattern matched.
struct Match {
  std::map<std::string, std::string> values;       // captured value names
  std::map<std::string, const Tensor*> constants;  // captured constants
  std::map<std::string, const ir::Node*> nodes;    // captured (bound) nodes
  std::vector<const ir::Node*> absorbed;           // the nodes a rewrite replaces, root last
  std::vector<const ir::Node*> shared;             // absorbed nodes the match reads more than once
  const ir::Node* root = nullptr;

  const std::string& value(const std::string& name) const { return values.at(name); }
  const Tensor& constant(const std::string& name) const { return *constants.at(name); }
  const ir::Node& node(const std::string& name) const { return *nodes.at(name); }
};

// Matches `pattern` at `root`, reading the graph through `index`; nullopt when it does not match.
std::optional<Match> match_pattern(const Pattern& pattern, const GraphIndex& index, const ir::Node& root);

// What a rewrite may use: the model, the graph the match is in, the shared analyses.
struct RuleContext {
  ir::Model& model;
  ir::Graph& graph;
  PassContext& ctx;
  // A value name not yet used in the graph, from `base`.
  std::string fresh_name(const std::string& base) const;
};

// A rewrite: the nodes that replace a match's absorbed nodes (placed where its root was), which
// must produce the root's outputs; nullopt declines (a condition the pattern cannot express).
struct Rule {
  std::string name;
  Pattern pattern;
  std::function<std::optional<std::vector<ir::Node>>(const Match&, RuleContext&)> rewrite;
};

// Applies `rules` (the first that matches a node and does not decline wins) to every node of the
// model's graph and its subgraphs, in sweeps of non-overlapping matches, until a sweep matches
// nothing; invalidates `ctx` after each sweep that rewrote. A sweep visits consumers before
// producers, so that of two overlapping matches the one with the later root wins: list a
// pattern's longer forms as rules of their own to have them tried first at each root. Returns the
// number of rewrites.
int64_t apply_rules(ir::Model& model, PassContext& ctx, const std::vector<Rule>& rules);

// A node of `op_type` (default domain unless given) reading `inputs` and writing the match root's
// outputs, named after the root: the usual replacement of a fusion.
ir::Node replacement_node(const Match& m, const std::string& op_type, std::vector<std::string> inputs,
                          const std::string& domain = "");

}  // namespace kiln::passes
