// Canonical hard activations: every Clip(a*x + b, 0, M) / M spelling (Paddle's Add/Clip/Div,
// Clip(x*0.1666667 + 0.5, 0, 1), the scale before or after a Mul by x) becomes HardSigmoid, and
// x * HardSigmoid(x; 1/6, 1/2) becomes HardSwish from opset 14, so fusions match one form each.
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using ir::Node;

bool is_op(const Node* n, const char* op) {
  return n && n->domain.empty() && n->op_type == op && n->outputs.size() == 1 &&
         !n->outputs[0].empty();
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-6 * std::max(1.0, std::abs(b)); }

// A float constant holding one number, with its rank (0 or 1).
struct Scalar {
  double value;
  int64_t rank;
};

std::optional<Scalar> float_scalar(const GraphIndex& idx, const std::string& v) {
  const Tensor* t = idx.constant(v);
  if (!t || t->numel() != 1 || t->rank() > 1 || !dtype_is_float(t->dtype())) return std::nullopt;
  auto r = read_scalar(*t);
  if (!r || !std::isfinite(*r)) return std::nullopt;
  return Scalar{*r, t->rank()};
}

// v = a*x + b, spelt as up to two Add/Sub/Mul/Div nodes with scalar constants, each read once.
struct Affine {
  std::string x;
  double a = 1, b = 0;
  std::vector<const Node*> nodes;
  bool rank1_constant = false;  // a [1] constant: x must have rank >= 1 for the shape to hold
};

Affine affine_source(const GraphIndex& idx, const std::string& v) {
  Affine f;
  f.x = v;
  for (int step = 0; step < 2; ++step) {
    const Node* p = idx.producer(f.x);
    if (!p || p->inputs.size() != 2 || !idx.single_use(f.x)) break;
    const bool add = is_op(p, "Add"), sub = is_op(p, "Sub"), mul = is_op(p, "Mul"),
               div = is_op(p, "Div");
    if (!add && !sub && !mul && !div) break;
    // Which operand is the constant; Div only by a constant, Sub either way round.
    std::optional<Scalar> c;
    int var = -1;
    for (int i = 0; i < 2 && var < 0; ++i)
      if ((c = float_scalar(idx, p->inputs[1 - i])) && !idx.constant(p->inputs[i]) &&
          !p->inputs[i].empty())
        var = i;
    if (var < 0 || (div && var != 0) || (div && c->value == 0)) break;
    // f.x = op(w, c) and v = a*f.x + b, so v in terms of w:
    if (add) {
      f.b += f.a * c->value;
    } else if (sub && var == 0) {
      f.b -= f.a * c->value;
    } else if (sub) {  // c - w
      f.b += f.a * c->value;
      f.a = -f.a;
    } else if (mul) {
      f.a *= c->value;
    } else {
      f.a /= c->value;
    }
    f.rank1_constant |= c->rank == 1;
    f.nodes.push_back(p);
    f.x = p->inputs[var];
  }
  return f;
}

// Clip's bounds from attributes (opset < 11) or constant inputs; nullopt when not both fixed.
std::optional<std::pair<double, double>> clip_bounds(const GraphIndex& idx, const Node& clip) {
  if (clip.has_attr("min") || clip.has_attr("max")) {
    if (clip.inputs.size() != 1) return std::nullopt;
    return std::make_pair(double{clip.attr_float("min", -INFINITY)},
                          double{clip.attr_float("max", INFINITY)});
  }
  if (clip.inputs.size() != 3) return std::nullopt;
  auto lo = float_scalar(idx, clip.inputs[1]), hi = float_scalar(idx, clip.inputs[2]);
  if (!lo || !hi) return std::nullopt;
  return std::make_pair(lo->value, hi->value);
}

// `n` scales `v` by 1/m: Div(v, m) or Mul(v, 1/m) either way round.
bool scales_down_by(const GraphIndex& idx, const Node* n, const std::string& v, double m) {
  if (!n || n->inputs.size() != 2) return false;
  if (is_op(n, "Div") && n->inputs[0] == v && n->inputs[1] != v) {
    auto c = float_scalar(idx, n->inputs[1]);
    return c && near(c->value, m);
  }
  if (!is_op(n, "Mul")) return false;
  auto o = other_operand(*n, v);
  auto c = o && *o != v ? float_scalar(idx, *o) : std::nullopt;
  return c && near(c->value, 1.0 / m);
}

// A match: `nodes` go, `put` (in order) takes the place of the latest of them.
struct Found {
  std::vector<const Node*> nodes;
  std::vector<Node> put;
  std::string x;
  bool rank1_constant = false;
};

bool is_hard_swish_gate(const Node& h) {
  return is_op(&h, "HardSigmoid") && h.inputs.size() == 1 &&
         near(h.attr_float("alpha", 0.2f), 1.0 / 6.0) && near(h.attr_float("beta", 0.5f), 0.5);
}

// Clip(a*x + b, 0, m) then /m (or m == 1): HardSigmoid(x; a/m, b/m). Also x * Clip(..) / m, the
// scale after the Mul by x: x * HardSigmoid(x).
std::optional<Found> match_clip(const ir::Graph& g, const GraphIndex& idx, const Node& clip) {
  if (!is_op(&clip, "Clip") || clip.inputs.empty() || clip.inputs[0].empty()) return std::nullopt;
  auto bounds = clip_bounds(idx, clip);
  if (!bounds || bounds->first != 0 || !(bounds->second > 0) || !std::isfinite(bounds->second))
    return std::nullopt;
  const double m = bounds->second;
  Affine f = affine_source(idx, clip.inputs[0]);
  if (f.nodes.empty() || idx.constant(f.x) || f.a == 0) return std::nullopt;
  Found found;
  found.nodes = f.nodes;
  found.nodes.push_back(&clip);
  found.x = f.x;
  found.rank1_constant = f.rank1_constant;
  const std::string& s = clip.outputs[0];
  const std::string base = clip.name.empty() ? s : clip.name;
  const Node* next = idx.sole_consumer(s);
  auto hard_sigmoid = [&](const std::string& out) {
    Node h = make_node(base + "_HardSigmoid", "HardSigmoid", {f.x}, {out});
    h.attrs = {ir::Attribute::of_float("alpha", static_cast<float>(f.a / m)),
               ir::Attribute::of_float("beta", static_cast<float>(f.b / m))};
    return h;
  };
  if (scales_down_by(idx, next, s, m)) {
    found.nodes.push_back(next);
    found.put = {hard_sigmoid(next->outputs[0])};
    return found;
  }
  if (next && is_op(next, "Mul") && next->inputs.size() == 2 && other_operand(*next, s) == f.x &&
      f.x != s) {
    const Node* scale = idx.sole_consumer(next->outputs[0]);
    if (!scales_down_by(idx, scale, next->outputs[0], m)) return std::nullopt;
    found.nodes.push_back(next);
    found.nodes.push_back(scale);
    const std::string& y = scale->outputs[0];
    Node h = hard_sigmoid(fresh_name(g, s + "_hard_sigmoid"));
    found.put = {h, make_node(base + "_Mul", "Mul", {f.x, h.outputs[0]}, {y})};
    return found;
  }
  if (m == 1) {
    found.put = {hard_sigmoid(s)};
    return found;
  }
  return std::nullopt;
}

// x * HardSigmoid(x; 1/6, 1/2), the gate read only by the Mul: HardSwish(x).
const Rule& hard_swish_rule() {
  static const Rule rule{
      "hard-swish",
      Pattern::op("Mul", {Pattern::value("x"),
                          Pattern::op("HardSigmoid", {Pattern::value("x")}).where(is_hard_swish_gate)})
          .commutative(),
      [](const Match& m, RuleContext&) -> std::optional<std::vector<Node>> {
        return std::vector<Node>{replacement_node(m, "HardSwish", {m.value("x")})};
      }};
  return rule;
}

// Replaces each match's nodes by its new nodes, placed where the latest matched node was.
int64_t apply(ir::Graph& g, std::vector<Found>& found) {
  std::vector<NodeReplacement> rs;
  for (Found& f : found) rs.push_back({f.nodes, std::move(f.put)});
  replace_nodes(g, rs);
  return static_cast<int64_t>(found.size());
}

class HardSigmoidCanonical : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    const bool hard_swish_op = model.opset("") >= 14;
    // Types, asked for only when a [1] constant needs x to be at least 1-D.
    const ValueTypes* types = nullptr;
    auto rank_at_least_1 = [&](const std::string& x) {
      if (!types) types = &ctx.types();
      const std::optional<int64_t> r = types->rank(x);
      return r && *r >= 1;
    };
    int64_t rewrites = 0;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      std::vector<Found> found;
      {
        GraphIndex idx(g);
        std::set<const Node*> taken;
        for (const auto& n : g.nodes) {
          auto f = match_clip(g, idx, n);
          if (!f) continue;
          bool overlap = false;
          for (const Node* r : f->nodes) overlap |= taken.count(r) > 0;
          if (overlap) continue;
          if (f->rank1_constant && !rank_at_least_1(f->x)) continue;
          taken.insert(f->nodes.begin(), f->nodes.end());
          found.push_back(std::move(*f));
        }
      }
      rewrites += apply(g, found);
    });
    // Then HardSwish, over the gates just made too.
    if (rewrites > 0) ctx.invalidate();
    if (hard_swish_op) rewrites += apply_rules(model, ctx, {hard_swish_rule()});
    return rewrites;
  }
};

}  // namespace

// Standard ops only, exact up to float rounding: -O1 and portable. After redundant-ops, so the
// scalars it reads are folded; before the fusions, which match only the canonical forms.
KILN_REGISTER_PASS(HardSigmoidCanonical, "hard-sigmoid-canonical", 1, kSimplify, 55, true);

}  // namespace kiln::passes
