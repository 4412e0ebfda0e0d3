// LayerNorm and RMSNorm fusion: every decomposed spelling (ReduceMean, Sub, Pow/Mul, Add eps,
// Sqrt, Div or Reciprocal+Mul, optional gamma Mul and beta Add) becomes one LayerNormalization
// (opset >= 17; ai.kiln.LayerNorm below) and x / Sqrt(ReduceMean(x^2) + eps) * gamma ai.kiln.RMSNorm.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "ir/shape_inference.h"
#include "kernels/kernel_util.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using ir::Node;

// A default-domain node of type `op` with its usual number of inputs, all named.
bool is_op(const Node* n, const char* op) {
  if (!n || !n->domain.empty() || n->op_type != op || n->outputs.empty() || n->inputs.empty()) return false;
  const std::string t = op;
  const size_t arity = t == "Sqrt" || t == "Reciprocal" ? 1 : t == "ReduceMean" ? n->inputs.size() : 2;
  if (n->inputs.size() != arity) return false;
  for (size_t i = 0; i < std::min<size_t>(arity, 2); ++i)
    if (n->inputs[i].empty()) return false;
  return true;
}

// The declared or inferred type of a value of this graph, or nullopt.
std::optional<ir::TypeInfo> type_of(const ir::Graph& g, const std::string& v) {
  if (const Tensor* t = constant_value(g, v)) return ir::TypeInfo::tensor(t->dtype(), t->shape());
  for (const auto* list : {&g.inputs, &g.outputs, &g.value_info})
    for (const auto& vi : *list)
      if (vi.name == v && vi.type.kind == ir::TypeInfo::Kind::kTensor) return vi.type;
  return std::nullopt;
}

// A constant holding one number (rank 0 or 1), as double.
std::optional<double> scalar_const(const GraphIndex& idx, const std::string& v) {
  const Tensor* t = idx.constant(v);
  if (!t || t->numel() != 1 || t->rank() > 1) return std::nullopt;
  auto r = read_scalar(*t);
  if (!r) return std::nullopt;
  return *r;
}

bool near(double v, double want) { return std::abs(v - want) <= 1e-6 * std::max(1.0, std::abs(want)); }

// The reduced axes of a ReduceMean with keepdims, as the first of the trailing axes (negative),
// when they are exactly the last k axes of a tensor of rank `rank` (-1: unknown rank).
std::optional<int64_t> trailing_axis(const GraphIndex& idx, const Node& rm, int64_t opset, int64_t rank) {
  if (rm.attr_int("keepdims", 1) != 1) return std::nullopt;
  std::vector<int64_t> axes;
  if (opset >= 18) {
    if (!rm.has_input(1)) return std::nullopt;
    const Tensor* t = idx.constant(rm.inputs[1]);
    if (!t) return std::nullopt;
    auto r = read_int64s(*t);
    if (!r) return std::nullopt;
    axes = *r;
  } else {
    axes = rm.attr_ints("axes");
  }
  if (axes.empty()) return std::nullopt;
  for (auto& a : axes) {
    if (a >= 0) {
      if (rank < 0 || a >= rank) return std::nullopt;
      a -= rank;
    } else if (rank >= 0 && a < -rank) {
      return std::nullopt;
    }
  }
  std::sort(axes.begin(), axes.end());
  const int64_t k = static_cast<int64_t>(axes.size());
  for (int64_t i = 0; i < k; ++i)
    if (axes[i] != -k + i) return std::nullopt;
  return -k;
}

// The normalisation core n = c / Sqrt(ReduceMean(c^2) + eps), spelt with Div, Mul by Reciprocal or
// Mul by Pow(.., -0.5); `c` is the numerator (the centred x for LayerNorm, x for RMSNorm).
struct Core {
  std::string c;
  int64_t axis = -1;  // first normalised axis, negative
  double eps = 0;
  int c_uses = 0;  // reads of c inside the core
  std::vector<const Node*> nodes;
  const Node* last = nullptr;
};

std::optional<Core> match_core(const GraphIndex& idx, const ir::Graph& g, const Node& n, int64_t opset) {
  Core core;
  std::string denom;  // the value the numerator is divided by: Sqrt(ve) or ve itself
  bool denom_is_rsqrt = false;
  if (is_op(&n, "Div") && n.inputs.size() == 2) {
    core.c = n.inputs[0];
    denom = n.inputs[1];
  } else if (is_op(&n, "Mul") && n.inputs.size() == 2) {
    // One operand is 1/Sqrt(...): Reciprocal(Sqrt), Div(1, Sqrt) or Pow(ve, -0.5).
    for (int i = 0; i < 2 && denom.empty(); ++i) {
      const Node* r = idx.producer(n.inputs[i]);
      if (!r || !idx.single_use(n.inputs[i])) continue;
      if (is_op(r, "Reciprocal")) {
        denom = r->inputs[0];
      } else if (is_op(r, "Div") && r->inputs.size() == 2 && scalar_const(idx, r->inputs[0]) &&
                 near(*scalar_const(idx, r->inputs[0]), 1.0)) {
        denom = r->inputs[1];
      } else if (is_op(r, "Pow") && r->inputs.size() == 2 && scalar_const(idx, r->inputs[1]) &&
                 near(*scalar_const(idx, r->inputs[1]), -0.5)) {
        denom = r->inputs[0];
        denom_is_rsqrt = true;
      } else {
        continue;
      }
      core.nodes.push_back(r);
      core.c = n.inputs[1 - i];
    }
    if (denom.empty()) return std::nullopt;
  } else {
    return std::nullopt;
  }
  core.nodes.push_back(&n);
  core.last = &n;
  std::string ve = denom;
  if (!denom_is_rsqrt) {
    const Node* sq = idx.producer(denom);
    if (!is_op(sq, "Sqrt") || !idx.single_use(denom)) return std::nullopt;
    core.nodes.push_back(sq);
    ve = sq->inputs[0];
  }
  const Node* add = idx.producer(ve);
  if (!is_op(add, "Add") || add->inputs.size() != 2 || !idx.single_use(ve)) return std::nullopt;
  std::string var;
  for (int i = 0; i < 2 && var.empty(); ++i) {
    auto e = scalar_const(idx, add->inputs[1 - i]);
    const Node* p = idx.producer(add->inputs[i]);
    if (e && *e >= 0 && is_op(p, "ReduceMean")) {
      var = add->inputs[i];
      core.eps = *e;
    }
  }
  if (var.empty() || !idx.single_use(var)) return std::nullopt;
  core.nodes.push_back(add);
  const Node* rm = idx.producer(var);
  core.nodes.push_back(rm);
  const std::string sq_v = rm->inputs[0];
  const Node* sq = idx.producer(sq_v);
  if (!sq || !idx.single_use(sq_v) || sq->inputs.size() != 2) return std::nullopt;
  if (is_op(sq, "Pow") && sq->inputs[0] == core.c) {
    auto p = scalar_const(idx, sq->inputs[1]);
    if (!p || !near(*p, 2.0)) return std::nullopt;
    core.c_uses = 2;
  } else if (is_op(sq, "Mul") && sq->inputs[0] == core.c && sq->inputs[1] == core.c) {
    core.c_uses = 3;
  } else {
    return std::nullopt;
  }
  core.nodes.push_back(sq);
  auto ct = type_of(g, core.c);
  if (!ct || !dtype_is_compute_float(ct->dtype)) return std::nullopt;
  auto axis = trailing_axis(idx, *rm, opset, ct->has_shape ? static_cast<int64_t>(ct->shape.size()) : -1);
  if (!axis) return std::nullopt;
  core.axis = *axis;
  return core;
}

// True when `w` (a gamma or beta) broadcast against x keeps x's shape and matches the trailing
// -axis dims: rank at most -axis, each dim 1 or equal to x's.
bool fits_norm_dims(const ir::Graph& g, const std::string& w, const std::string& x, int64_t axis) {
  auto wt = type_of(g, w), xt = type_of(g, x);
  if (!wt || !xt || !wt->has_shape || !xt->has_shape || wt->dtype != xt->dtype) return false;
  const int64_t k = -axis, wr = static_cast<int64_t>(wt->shape.size()), xr = static_cast<int64_t>(xt->shape.size());
  if (wr > k || xr < k) return false;
  for (int64_t i = 0; i < wr; ++i) {
    const ir::Dim& d = wt->shape[wr - 1 - i];
    const ir::Dim& xd = xt->shape[xr - 1 - i];
    if (!d.known()) return false;
    if (d.value != 1 && !(xd.known() && xd.value == d.value)) return false;
  }
  return true;
}

// A fused node replacing matched nodes: it takes the place of `at`, the others are removed.
struct Rewrite {
  std::vector<const Node*> remove;
  const Node* at = nullptr;
  Node node;
  std::vector<std::pair<std::string, Tensor>> inits;  // new initializers the node reads
};

enum class Mode { kCanonical, kKiln };

class LayerNormFusion : public Pass {
 public:
  explicit LayerNormFusion(Mode mode) : mode_(mode) {}

  Result<int64_t> run(ir::Model& model, PassContext&) override {
    const int64_t opset = model.opset("");
    if (mode_ == Mode::kCanonical && opset < 17) return 0;
    // Shapes decide which axes are trailing and whether gamma and beta fit; a model whose shapes
    // cannot be inferred is matched with what its value_info already says.
    (void)ir::infer_shapes(model);
    int64_t rewrites = 0;
    bool kiln_ops = false;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      std::vector<Rewrite> found;
      {
        GraphIndex idx(g);
        std::set<const Node*> taken;
        for (const auto& n : g.nodes) {
          auto rw = match(idx, g, n, opset);
          if (!rw) continue;
          bool overlap = false;
          for (const Node* r : rw->remove) overlap |= taken.count(r) > 0;
          if (overlap) continue;
          taken.insert(rw->remove.begin(), rw->remove.end());
          found.push_back(std::move(*rw));
        }
      }
      std::map<const Node*, Node*> at;
      std::set<const Node*> removed;
      for (auto& rw : found) {
        at[rw.at] = &rw.node;
        removed.insert(rw.remove.begin(), rw.remove.end());
        kiln_ops |= rw.node.domain == "ai.kiln";
      }
      std::vector<Node> kept;
      for (const auto& n : g.nodes) {
        if (auto it = at.find(&n); it != at.end()) kept.push_back(std::move(*it->second));
        else if (!removed.count(&n)) kept.push_back(n);
      }
      for (auto& rw : found)
        for (auto& [name, t] : rw.inits) g.initializers[name] = t;
      g.nodes = std::move(kept);
      rewrites += static_cast<int64_t>(found.size());
    });
    if (kiln_ops && !model.opsets.count("ai.kiln")) model.opsets["ai.kiln"] = 1;
    return rewrites;
  }

 private:
  std::optional<Rewrite> match(const GraphIndex& idx, const ir::Graph& g, const Node& n, int64_t opset) {
    auto core = match_core(idx, g, n, opset);
    if (!core) return std::nullopt;
    // LayerNorm: c = Sub(x, ReduceMean(x)) over the same axes, c read only by the core.
    const Node* sub = idx.producer(core->c);
    if (is_op(sub, "Sub") && sub->inputs.size() == 2 && idx.use_count(core->c) == core->c_uses &&
        static_cast<int>(idx.consumers(core->c).size()) == core->c_uses) {
      const Node* rm = idx.producer(sub->inputs[1]);
      auto xt = type_of(g, sub->inputs[0]);
      const int64_t rank = xt && xt->has_shape ? static_cast<int64_t>(xt->shape.size()) : -1;
      if (is_op(rm, "ReduceMean") && rm->inputs[0] == sub->inputs[0] && idx.single_use(sub->inputs[1]) &&
          trailing_axis(idx, *rm, opset, rank) == core->axis) {
        auto rw = layer_norm(idx, g, *core, sub->inputs[0], opset);
        if (rw) {
          rw->remove.push_back(sub);
          rw->remove.push_back(rm);
          return rw;
        }
      }
    }
    if (mode_ == Mode::kKiln) return rms_norm(idx, g, *core);
    return std::nullopt;
  }

  // Optional Mul(n, gamma) then Add(., beta) after the core.
  std::optional<Rewrite> layer_norm(const GraphIndex& idx, const ir::Graph& g, const Core& core,
                                    const std::string& x, int64_t opset) {
    const bool standard = opset >= 17;
    if (mode_ == Mode::kCanonical && !standard) return std::nullopt;
    Rewrite rw;
    rw.remove = core.nodes;
    const Node* last = core.last;
    std::string gamma, beta;
    if (const Node* m = idx.sole_consumer(last->outputs[0]); is_op(m, "Mul")) {
      auto w = other_operand(*m, last->outputs[0]);
      if (w && *w != last->outputs[0] && fits_norm_dims(g, *w, x, core.axis)) {
        gamma = *w;
        rw.remove.push_back(m);
        last = m;
      }
    }
    if (const Node* a = idx.sole_consumer(last->outputs[0]); is_op(a, "Add")) {
      auto w = other_operand(*a, last->outputs[0]);
      if (w && *w != last->outputs[0] && fits_norm_dims(g, *w, x, core.axis)) {
        beta = *w;
        rw.remove.push_back(a);
        last = a;
      }
    }
    std::vector<std::pair<std::string, Tensor>> inits;
    if (gamma.empty()) {
      // LayerNormalization needs a Scale: ones over the normalised dims, when they are known.
      auto xt = type_of(g, x);
      if (!xt || !xt->has_shape) return std::nullopt;
      Shape s;
      for (int64_t i = static_cast<int64_t>(xt->shape.size()) + core.axis; i < static_cast<int64_t>(xt->shape.size()); ++i) {
        if (!xt->shape[i].known()) return std::nullopt;
        s.push_back(xt->shape[i].value);
      }
      auto ones = Tensor::make(DType::kFloat32, s);
      if (!ones) return std::nullopt;
      for (int64_t i = 0; i < ones->numel(); ++i) ones->data<float>()[i] = 1.0f;
      auto typed = cast_float_to(*ones, xt->dtype);
      if (!typed) return std::nullopt;
      gamma = fresh_name(g, last->outputs[0] + "_ln_scale");
      inits.emplace_back(gamma, *typed);
    }
    rw.at = last;
    rw.node.name = last->name.empty() ? last->outputs[0] + "_LayerNorm" : last->name + "_LayerNorm";
    rw.node.op_type = standard ? "LayerNormalization" : "LayerNorm";
    rw.node.domain = standard ? "" : "ai.kiln";
    rw.node.inputs = {x, gamma};
    if (!beta.empty()) rw.node.inputs.push_back(beta);
    rw.node.outputs = {last->outputs[0]};
    add_norm_attrs(rw.node, core);
    rw.inits = std::move(inits);
    return rw;
  }

  std::optional<Rewrite> rms_norm(const GraphIndex& idx, const ir::Graph& g, const Core& core) {
    Rewrite rw;
    rw.remove = core.nodes;
    const Node* last = core.last;
    std::string gamma;
    if (const Node* m = idx.sole_consumer(last->outputs[0]); is_op(m, "Mul")) {
      auto w = other_operand(*m, last->outputs[0]);
      if (w && *w != last->outputs[0] && fits_norm_dims(g, *w, core.c, core.axis)) {
        gamma = *w;
        rw.remove.push_back(m);
        last = m;
      }
    }
    rw.at = last;
    rw.node.name = last->name.empty() ? last->outputs[0] + "_RMSNorm" : last->name + "_RMSNorm";
    rw.node.op_type = "RMSNorm";
    rw.node.domain = "ai.kiln";
    rw.node.inputs = {core.c};
    if (!gamma.empty()) rw.node.inputs.push_back(gamma);
    rw.node.outputs = {last->outputs[0]};
    add_norm_attrs(rw.node, core);
    return rw;
  }

  static void add_norm_attrs(Node& n, const Core& core) {
    ir::Attribute axis;
    axis.name = "axis";
    axis.type = ir::Attribute::Type::kInt;
    axis.i = core.axis;
    ir::Attribute eps;
    eps.name = "epsilon";
    eps.type = ir::Attribute::Type::kFloat;
    eps.f = static_cast<float>(core.eps);
    n.attrs = {axis, eps};
  }

  Mode mode_;
};

class LayerNormCanonical : public LayerNormFusion {
 public:
  LayerNormCanonical() : LayerNormFusion(Mode::kCanonical) {}
};

class LayerNormKiln : public LayerNormFusion {
 public:
  LayerNormKiln() : LayerNormFusion(Mode::kKiln) {}
};

}  // namespace

// Standard ops only (LayerNormalization, opset >= 17): exact up to float rounding, so -O1.
KILN_REGISTER_PASS(LayerNormCanonical, "layer-norm", 1, kFuse, 10, true);
// Older opsets get ai.kiln.LayerNorm; RMSNorm spellings become ai.kiln.RMSNorm.
KILN_REGISTER_PASS(LayerNormKiln, "layer-norm-kiln", 2, kFuse, 11, false);

}  // namespace kiln::passes
