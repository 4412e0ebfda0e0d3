// GELU fusion: 0.5*x*(1+Erf(x/sqrt(2))) and 0.5*x*(1+Tanh(sqrt(2/pi)*(x+0.044715*x^3))), with
// their factors in any order, become ai.kiln.Gelu (approximate "none" / "tanh"); then
// Gelu(Add(x, 1-D constant bias)) becomes ai.kiln.BiasGelu.
#include <cmath>
#include <optional>

#include "kernels/kernel_util.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using ir::Node;

// A default-domain node of type `op` with its usual number of inputs, all named.
bool is_op(const Node* n, const char* op) {
  if (!n || !n->domain.empty() || n->op_type != op || n->outputs.empty()) return false;
  const size_t arity = std::string(op) == "Erf" || std::string(op) == "Tanh" ? 1 : 2;
  if (n->inputs.size() != arity) return false;
  for (const auto& i : n->inputs)
    if (i.empty()) return false;
  return true;
}

// True when `v` is a constant holding one number (rank 0 or 1) within 1e-4 relative of `want`.
bool const_near(const GraphIndex& idx, const std::string& v, double want) {
  const Tensor* t = idx.constant(v);
  if (!t || t->numel() != 1 || t->rank() > 1) return false;
  auto r = read_scalar(*t);
  return r && std::abs(*r - want) <= 1e-4 * std::abs(want);
}

// For commutative binary n: the operand that is not a constant near `c`, or nullopt.
std::optional<std::string> times_const(const GraphIndex& idx, const Node& n, double c) {
  for (int i = 0; i < 2; ++i)
    if (const_near(idx, n.inputs[1 - i], c) && !n.inputs[i].empty()) return n.inputs[i];
  return std::nullopt;
}

struct GeluMatch {
  std::string x;
  std::vector<const Node*> nodes;
  const Node* last = nullptr;
};

// Is `v` = x * 0.5 (Mul either way round, or Div by 2), read once?
bool is_half_of(const GraphIndex& idx, const std::string& v, const std::string& x, const Node** node) {
  const Node* p = idx.producer(v);
  if (!p || !idx.single_use(v)) return false;
  if (is_op(p, "Mul") && times_const(idx, *p, 0.5) == x) {
    *node = p;
    return true;
  }
  if (is_op(p, "Div") && p->inputs[0] == x && const_near(idx, p->inputs[1], 2.0)) {
    *node = p;
    return true;
  }
  return false;
}

// From `inner` = Erf(..) or Tanh(..) output: 1 + inner, then times x and times 0.5 in any order.
bool match_tail(const GraphIndex& idx, const std::string& inner, GeluMatch& m) {
  const Node* one = idx.sole_consumer(inner);
  if (!is_op(one, "Add") || !const_near(idx, *other_operand(*one, inner), 1.0)) return false;
  m.nodes.push_back(one);
  const std::string a = one->outputs[0];
  const Node* m1 = idx.sole_consumer(a);
  if (!is_op(m1, "Mul")) return false;
  m.nodes.push_back(m1);
  const std::string p = *other_operand(*m1, a);
  const Node* half = nullptr;
  if (p == m.x) {  // (x * a) * 0.5, or (x * a) / 2
    const Node* m2 = idx.sole_consumer(m1->outputs[0]);
    const bool mul_half = is_op(m2, "Mul") && times_const(idx, *m2, 0.5) == m1->outputs[0];
    const bool div_two = is_op(m2, "Div") && m2->inputs[0] == m1->outputs[0] && const_near(idx, m2->inputs[1], 2.0);
    if (!mul_half && !div_two) return false;
    m.nodes.push_back(m2);
    m.last = m2;
    return true;
  }
  if (is_half_of(idx, p, m.x, &half)) {  // (x * 0.5) * a
    m.nodes.push_back(half);
    m.last = m1;
    return true;
  }
  if (const_near(idx, p, 0.5)) {  // (a * 0.5) * x
    const Node* m2 = idx.sole_consumer(m1->outputs[0]);
    if (!is_op(m2, "Mul") || other_operand(*m2, m1->outputs[0]) != m.x) return false;
    m.nodes.push_back(m2);
    m.last = m2;
    return true;
  }
  return false;
}

// Erf(x / sqrt(2)) or Erf(x * (1/sqrt(2))).
std::optional<GeluMatch> match_erf(const GraphIndex& idx, const Node& erf) {
  if (!is_op(&erf, "Erf") || !idx.single_use(erf.inputs[0])) return std::nullopt;
  const Node* scale = idx.producer(erf.inputs[0]);
  GeluMatch m;
  if (is_op(scale, "Div") && const_near(idx, scale->inputs[1], std::sqrt(2.0))) {
    m.x = scale->inputs[0];
  } else if (is_op(scale, "Mul")) {
    auto x = times_const(idx, *scale, std::sqrt(0.5));
    if (!x) return std::nullopt;
    m.x = *x;
  } else {
    return std::nullopt;
  }
  m.nodes = {scale, &erf};
  if (!match_tail(idx, erf.outputs[0], m)) return std::nullopt;
  return m;
}

// Is `v` = x^3 (Pow(x, 3), x*(x*x) or (x*x)*x), read once? Appends its nodes.
bool is_cube_of(const GraphIndex& idx, const std::string& v, const std::string& x, std::vector<const Node*>& nodes) {
  const Node* p = idx.producer(v);
  if (!p || !idx.single_use(v)) return false;
  if (is_op(p, "Pow") && p->inputs[0] == x && const_near(idx, p->inputs[1], 3.0)) {
    nodes.push_back(p);
    return true;
  }
  if (!is_op(p, "Mul")) return false;
  auto sq = other_operand(*p, x);
  if (!sq) return false;
  const Node* s = idx.producer(*sq);
  if (!is_op(s, "Mul") || s->inputs[0] != x || s->inputs[1] != x || !idx.single_use(*sq)) return false;
  nodes.push_back(p);
  nodes.push_back(s);
  return true;
}

// Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)).
std::optional<GeluMatch> match_tanh(const GraphIndex& idx, const Node& th) {
  if (!is_op(&th, "Tanh") || !idx.single_use(th.inputs[0])) return std::nullopt;
  const Node* scale = idx.producer(th.inputs[0]);
  if (!is_op(scale, "Mul")) return std::nullopt;
  auto inner = times_const(idx, *scale, std::sqrt(2.0 / M_PI));
  if (!inner || !idx.single_use(*inner)) return std::nullopt;
  const Node* add = idx.producer(*inner);
  if (!is_op(add, "Add")) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    GeluMatch m;
    m.x = add->inputs[i];
    const std::string& w = add->inputs[1 - i];
    const Node* wm = idx.producer(w);
    if (!is_op(wm, "Mul") || !idx.single_use(w)) continue;
    auto cube = times_const(idx, *wm, 0.044715);
    if (!cube) continue;
    m.nodes = {scale, &th, add, wm};
    if (!is_cube_of(idx, *cube, m.x, m.nodes)) continue;
    if (!match_tail(idx, th.outputs[0], m)) continue;
    return m;
  }
  return std::nullopt;
}

// Replaces each match's nodes by its fused node, placed where its last node was.
struct Rewrite {
  std::vector<const Node*> remove;
  const Node* at = nullptr;
  Node node;
};

int64_t apply(ir::Graph& g, std::vector<Rewrite>& found) {
  std::map<const Node*, Node*> at;
  std::set<const Node*> removed;
  for (auto& rw : found) {
    at[rw.at] = &rw.node;
    removed.insert(rw.remove.begin(), rw.remove.end());
  }
  std::vector<Node> kept;
  for (auto& n : g.nodes) {
    if (auto it = at.find(&n); it != at.end()) kept.push_back(std::move(*it->second));
    else if (!removed.count(&n)) kept.push_back(std::move(n));
  }
  g.nodes = std::move(kept);
  return static_cast<int64_t>(found.size());
}

ir::Attribute string_attr(const char* name, const char* value) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::Attribute::Type::kString;
  a.s = value;
  return a;
}

class GeluFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t rewrites = 0;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      std::vector<Rewrite> found;
      std::set<const Node*> taken;
      GraphIndex idx(g);
      for (const auto& n : g.nodes) {
        auto m = match_erf(idx, n);
        const bool tanh = !m;
        if (!m) m = match_tanh(idx, n);
        if (!m) continue;
        bool overlap = false;
        for (const Node* r : m->nodes) overlap |= taken.count(r) > 0;
        if (overlap) continue;
        taken.insert(m->nodes.begin(), m->nodes.end());
        Rewrite rw;
        rw.remove = m->nodes;
        rw.at = m->last;
        rw.node.name = (m->last->name.empty() ? m->last->outputs[0] : m->last->name) + "_Gelu";
        rw.node.op_type = "Gelu";
        rw.node.domain = "ai.kiln";
        rw.node.inputs = {m->x};
        rw.node.outputs = {m->last->outputs[0]};
        rw.node.attrs = {string_attr("approximate", tanh ? "tanh" : "none")};
        found.push_back(std::move(rw));
      }
      rewrites += apply(g, found);
    });
    if (rewrites > 0 && !model.opsets.count("ai.kiln")) model.opsets["ai.kiln"] = 1;
    return rewrites;
  }
};

class BiasGeluFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t rewrites = 0;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      std::vector<Rewrite> found;
      GraphIndex idx(g);
      for (const auto& n : g.nodes) {
        // ai.kiln.Gelu, or ONNX Gelu (opset 20), which has the same attribute.
        const bool gelu = (n.domain == "ai.kiln" || n.domain.empty()) && n.op_type == "Gelu";
        if (!gelu || n.inputs.size() != 1 || !n.has_input(0) || n.outputs.size() != 1) continue;
        const Node* add = idx.producer(n.inputs[0]);
        if (!is_op(add, "Add") || !idx.single_use(n.inputs[0])) continue;
        for (int i = 0; i < 2; ++i) {
          const Tensor* b = idx.constant(add->inputs[1 - i]);
          if (!b || b->rank() != 1 || add->inputs[i].empty()) continue;
          Rewrite rw;
          rw.remove = {add, &n};
          rw.at = &n;
          rw.node = n;
          rw.node.name = (n.name.empty() ? n.outputs[0] : n.name) + "_Bias";
          rw.node.op_type = "BiasGelu";
          rw.node.domain = "ai.kiln";
          rw.node.inputs = {add->inputs[i], add->inputs[1 - i]};
          found.push_back(std::move(rw));
          break;
        }
      }
      rewrites += apply(g, found);
    });
    if (rewrites > 0 && !model.opsets.count("ai.kiln")) model.opsets["ai.kiln"] = 1;
    return rewrites;
  }
};

}  // namespace

KILN_REGISTER_PASS(GeluFusion, "gelu", 2, kFuse, 13, false);
KILN_REGISTER_PASS(BiasGeluFusion, "bias-gelu", 2, kFuse, 14, false);

}  // namespace kiln::passes
