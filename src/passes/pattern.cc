#include "passes/pattern.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "kernels/kernel_util.h"
#include "passes/graph_edit.h"

namespace kiln::passes {

Pattern Pattern::op(std::string op_type, std::vector<Pattern> inputs) {
  return op_in("", std::move(op_type), std::move(inputs));
}

Pattern Pattern::op_in(std::string domain, std::string op_type, std::vector<Pattern> inputs) {
  Pattern p;
  p.kind_ = Kind::kOp;
  p.domain_ = std::move(domain);
  p.op_type_ = std::move(op_type);
  p.children_ = std::move(inputs);
  return p;
}

Pattern Pattern::value(std::string name) {
  Pattern p;
  p.kind_ = Kind::kValue;
  p.name_ = std::move(name);
  return p;
}

Pattern Pattern::constant(std::function<bool(const Tensor&)> accept, std::string name) {
  Pattern p;
  p.kind_ = Kind::kConstant;
  p.constant_accept_ = std::move(accept);
  p.name_ = std::move(name);
  return p;
}

static bool is_scalar_near(const Tensor& t, double v, double rtol) {
  if (t.numel() != 1 || !dtype_is_float(t.dtype())) return false;
  const Result<double> r = read_scalar(t);
  return r.is_ok() && std::abs(r.value() - v) <= rtol * std::max(std::abs(v), 1e-30);
}

Pattern Pattern::scalar(double v, double rtol) {
  return constant([v, rtol](const Tensor& t) { return t.rank() <= 1 && is_scalar_near(t, v, rtol); });
}

Pattern Pattern::scalar_any_rank(double v, std::string name, double rtol) {
  return constant([v, rtol](const Tensor& t) { return is_scalar_near(t, v, rtol); }, std::move(name));
}

Pattern Pattern::any_of(std::vector<Pattern> alternatives) {
  Pattern p;
  p.kind_ = Kind::kAnyOf;
  p.children_ = std::move(alternatives);
  return p;
}

Pattern& Pattern::commutative() {
  commutative_ = true;
  return *this;
}

Pattern& Pattern::bind(std::string name) {
  name_ = std::move(name);
  return *this;
}

Pattern& Pattern::where(std::function<bool(const ir::Node&)> accept) {
  node_accept_ = std::move(accept);
  return *this;
}

Pattern& Pattern::shared() {
  shared_ = true;
  return *this;
}

Pattern& Pattern::kept() {
  kept_ = true;
  return *this;
}

// Matching with backtracking: each alternative (any_of, or the other operand order) works on a
// copy of the captures so far and commits only on success.
class Matcher {
 public:
  explicit Matcher(const GraphIndex& idx) : idx_(idx) {}

  // Matches `p` against value `v`.
  bool value(const Pattern& p, const std::string& v, const ir::Node* root, Match& m) const {
    if (v.empty()) return p.kind_ == Pattern::Kind::kValue && p.name_.empty();  // an omitted optional input
    switch (p.kind_) {
      case Pattern::Kind::kValue:
        return capture(m.values, p.name_, v);
      case Pattern::Kind::kConstant: {
        const Tensor* t = idx_.constant(v);
        if (!t || !p.constant_accept_(*t)) return false;
        if (!p.name_.empty()) m.constants[p.name_] = t;
        return capture(m.values, p.name_, v);
      }
      case Pattern::Kind::kAnyOf:
        for (const Pattern& alt : p.children_) {
          Match trial = m;
          if (value(alt, v, root, trial)) {
            m = std::move(trial);
            return true;
          }
        }
        return false;
      case Pattern::Kind::kOp:
        return op(p, v, root, m);
    }
    return false;
  }

 private:
  static bool capture(std::map<std::string, std::string>& values, const std::string& name, const std::string& v) {
    if (name.empty()) return true;
    auto [it, inserted] = values.emplace(name, v);
    return inserted || it->second == v;
  }

  bool op(const Pattern& p, const std::string& v, const ir::Node* root, Match& m) const {
    const ir::Node* n = idx_.producer(v);
    if (!n || n->domain != p.domain_ || n->op_type != p.op_type_ || n->inputs.size() != p.children_.size()) return false;
    const bool is_root = n == root;
    // An interior node feeds only the match: one output, read once (a shared one: read only by
    // the match, checked once the match is complete; a kept one: by anything).
    if (!is_root && (n->outputs.size() != 1 || (!p.shared_ && !p.kept_ && !idx_.single_use(v)))) return false;
    if (p.node_accept_ && !p.node_accept_(*n)) return false;
    if (!p.name_.empty()) {  // the node, and the value it was reached through
      auto [it, inserted] = m.nodes.emplace(p.name_, n);
      if ((!inserted && it->second != n) || !capture(m.values, p.name_, v)) return false;
    }
    for (const ir::Node* a : m.absorbed)
      if (a == n) return false;  // the same node reached twice: not a tree of single uses
    if (!p.kept_ || is_root) m.absorbed.push_back(n);
    if (p.shared_ && !is_root) m.shared.push_back(n);
    const size_t k = p.children_.size();
    auto inputs_match = [&](bool swapped, Match& trial) {
      for (size_t i = 0; i < k; ++i) {
        const size_t j = swapped ? k - 1 - i : i;
        if (!value(p.children_[i], n->inputs[j], nullptr, trial)) return false;
      }
      return true;
    };
    for (bool swapped : {false, true}) {
      if (swapped && !(p.commutative_ && k == 2)) break;
      Match trial = m;
      if (inputs_match(swapped, trial)) {
        m = std::move(trial);
        return true;
      }
    }
    return false;
  }

  const GraphIndex& idx_;
};

std::optional<Match> match_pattern(const Pattern& pattern, const GraphIndex& index, const ir::Node& root) {
  if (root.outputs.empty() || root.outputs[0].empty()) return std::nullopt;
  Match m;
  m.root = &root;
  // The root is reached through its first output; its absorption is pushed first, so it moves
  // to the back (the root is last) once the match is complete.
  if (!Matcher(index).value(pattern, root.outputs[0], &root, m) || m.absorbed.empty() || m.absorbed[0] != &root)
    return std::nullopt;
  m.absorbed.erase(m.absorbed.begin());
  // A shared node's readers must all be in the match, and nothing else (a subgraph, the graph's
  // outputs) may read it.
  for (const ir::Node* n : m.shared) {
    const std::string& o = n->outputs[0];
    const auto& readers = index.consumers(o);
    if (index.use_count(o) != static_cast<int>(readers.size())) return std::nullopt;
    for (const ir::Node* r : readers)
      if (r != &root && std::find(m.absorbed.begin(), m.absorbed.end(), r) == m.absorbed.end()) return std::nullopt;
  }
  m.absorbed.push_back(&root);
  return m;
}

std::string RuleContext::fresh_name(const std::string& base) const { return passes::fresh_name(graph, base); }

ir::Node replacement_node(const Match& m, const std::string& op_type, std::vector<std::string> inputs,
                          const std::string& domain) {
  ir::Node n;
  n.name = (m.root->name.empty() ? m.root->outputs[0] : m.root->name) + "_" + op_type;
  n.op_type = op_type;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = m.root->outputs;
  return n;
}

namespace {

// Safety bound on sweeps of one graph: rules whose outputs match again would otherwise cycle.
constexpr int kMaxSweeps = 16;

// Every root output is written by the replacement.
bool writes_root_outputs(const ir::Node& root, const std::vector<ir::Node>& put) {
  std::set<std::string> written;
  for (const ir::Node& n : put) written.insert(n.outputs.begin(), n.outputs.end());
  for (const std::string& o : root.outputs)
    if (!o.empty() && !written.count(o)) return false;
  return true;
}


}  // namespace

int64_t apply_rules(ir::Model& model, PassContext& ctx, const std::vector<Rule>& rules) {
  int64_t rewrites = 0;
  for_each_graph(model.graph, [&](ir::Graph& g) {
    for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
      std::vector<NodeReplacement> found;
      std::set<const ir::Node*> taken;
      const GraphIndex& idx = ctx.index(g);
      RuleContext rc{model, g, ctx};
      // Consumers before producers: the match with the furthest root absorbs the most.
      for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
        const ir::Node& n = *it;
        if (taken.count(&n)) continue;
        for (const Rule& rule : rules) {
          std::optional<Match> m = match_pattern(rule.pattern, idx, n);
          if (!m) continue;
          bool overlap = false;
          for (const ir::Node* a : m->absorbed) overlap |= taken.count(a) > 0;
          if (overlap) continue;
          std::optional<std::vector<ir::Node>> put = rule.rewrite(*m, rc);
          if (!put || !writes_root_outputs(n, *put)) continue;
          taken.insert(m->absorbed.begin(), m->absorbed.end());
          found.push_back({m->absorbed, std::move(*put)});
          break;
        }
      }
      if (found.empty()) break;
      replace_nodes(g, found);
      rewrites += static_cast<int64_t>(found.size());
      ctx.invalidate();
    }
  });
  return rewrites;
}

}  // namespace kiln::passes
