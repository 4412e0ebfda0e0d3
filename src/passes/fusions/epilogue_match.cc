// Matchers for the elementwise tails the epilogue fusions absorb: activation spellings, residual
// Adds, and the edit list that swaps a matched group of nodes for one fused node.
#include "passes/fusions/epilogue_match.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/float_convert.h"
#include "ir/op_schema.h"
#include "passes/graph_edit.h"

namespace kiln::passes::epilogue {
namespace {

bool near(double a, double b) { return std::fabs(a - b) <= 1e-6 * std::max(1.0, std::fabs(b)); }

// For a binary node reading `v` once: its other operand, or "" when v is not exactly one input.
std::string other_operand(const ir::Node& n, const std::string& v) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return "";
  if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
  if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
  return "";
}

// Single-input, single-output activations reading v as input 0.
std::optional<Activation> unary_activation(const GraphIndex& idx, const ir::Node& n,
                                           const std::string& v) {
  if (n.inputs.empty() || n.inputs[0] != v || n.outputs.size() != 1) return std::nullopt;
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (n.inputs[i] == v) return std::nullopt;
  if (n.domain == "ai.kiln" && n.op_type == "Gelu") {
    // The GELU canonicalisation's op: only the approximate attribute is understood here.
    for (const auto& a : n.attrs)
      if (a.name != "approximate") return std::nullopt;
    if (n.inputs.size() != 1) return std::nullopt;
  } else if (!n.domain.empty()) {
    return std::nullopt;
  }
  const std::string& op = n.op_type;
  if (op == "Gelu") {
    const std::string approx = n.attr_string("approximate", "none");
    if (approx == "none") return Activation{"Gelu", {}};
    if (approx == "tanh") return Activation{"GeluTanh", {}};
    return std::nullopt;
  }
  if (n.inputs.size() != 1 && op != "Clip") return std::nullopt;
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "HardSwish")
    return Activation{op, {}};
  if (op == "LeakyRelu") return Activation{op, {n.attr_float("alpha", 0.01f)}};
  if (op == "HardSigmoid")
    return Activation{op, {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)}};
  if (op != "Clip") return std::nullopt;
  const auto bounds = clamp_bounds(idx, n);
  if (!bounds) return std::nullopt;
  return Activation{"Clip", {bounds->first, bounds->second}};
}

}  // namespace

bool clamp_is_saturation(float lo, float hi, float scale, int32_t zero_point, DType type) {
  const float qmin = type == DType::kInt8 ? -128.0f : 0.0f, qmax = type == DType::kInt8 ? 127.0f : 255.0f;
  // QuantizeLinear's arithmetic: x / scale, rounded half to even, plus the zero point, saturated.
  auto code = [&](float x) { return std::min(qmax, std::max(qmin, std::nearbyint(x / scale) + static_cast<float>(zero_point))); };
  return scale > 0 && code(lo) == qmin && code(hi) == qmax;
}

std::optional<std::pair<float, float>> clamp_bounds(const GraphIndex& idx, const ir::Node& n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (!n.domain.empty() || n.inputs.empty() || n.outputs.size() != 1) return std::nullopt;
  if (n.op_type == "Relu") return n.inputs.size() == 1 ? std::optional(std::pair(0.0f, kInf)) : std::nullopt;
  if (n.op_type != "Clip") return std::nullopt;
  float lo = -kInf, hi = kInf;
  if (n.has_attr("min") || n.has_attr("max")) {  // Clip-6: bounds are attributes
    if (n.inputs.size() != 1) return std::nullopt;
    lo = n.attr_float("min", lo);
    hi = n.attr_float("max", hi);
  } else {
    if (n.inputs.size() > 3) return std::nullopt;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      auto s = scalar_constant(idx, n.inputs[i]);
      if (!s) return std::nullopt;
      (i == 1 ? lo : hi) = static_cast<float>(*s);
    }
  }
  return std::pair(lo, hi);
}

const ir::Node* sole_consumer(const GraphIndex& idx, const std::string& v, const Taken& taken) {
  const ir::Node* n = idx.sole_consumer(v);
  return n && !taken.count(n) ? n : nullptr;
}

std::optional<ir::TypeInfo> Types::of(const std::string& value) const {
  auto it = g_.initializers.find(value);
  if (it != g_.initializers.end())
    return ir::TypeInfo::tensor(it->second.dtype(), it->second.shape());
  const ir::TypeInfo* t = inferred_.tensor(value);
  if (!t) return std::nullopt;
  return *t;
}

bool Types::is_float32(const std::string& value) const {
  auto t = of(value);
  return t && t->dtype == DType::kFloat32;
}

bool Types::same_float_shape(const std::string& a, const std::string& b) const {
  auto ta = of(a), tb = of(b);
  if (!ta || !tb || ta->dtype != DType::kFloat32 || tb->dtype != DType::kFloat32) return false;
  if (!ta->has_shape || !tb->has_shape || ta->shape.size() != tb->shape.size()) return false;
  for (size_t i = 0; i < ta->shape.size(); ++i)
    if (!ir::same_dim(ta->shape[i], tb->shape[i])) return false;
  return true;
}

std::optional<double> scalar_constant(const GraphIndex& idx, const std::string& v) {
  const Tensor* t = idx.constant(v);
  if (!t || t->numel() != 1 || t->rank() > 1) return std::nullopt;
  if (!dtype_is_float(t->dtype()) && t->dtype() != DType::kInt32 && t->dtype() != DType::kInt64)
    return std::nullopt;
  return load_as_double(t->dtype(), t->raw_data(), 0);
}

namespace {

// The activation alone, without a clamp after it.
std::optional<ActivationMatch> match_unclamped(const GraphIndex& idx, const std::string& v,
                                               const Taken& taken) {
  if (const ir::Node* n = sole_consumer(idx, v, taken)) {
    auto act = unary_activation(idx, *n, v);
    if (!act) return std::nullopt;
    ActivationMatch m;
    m.act = *act;
    m.nodes = {n};
    m.output = n->outputs[0];
    return m;
  }
  // Two readers: x * f(x) spellings.
  const auto& cs = idx.consumers(v);
  if (idx.use_count(v) != 2 || cs.size() != 2 || cs[0] == cs[1] || taken.count(cs[0]) ||
      taken.count(cs[1]))
    return std::nullopt;
  for (int first = 0; first < 2; ++first) {
    const ir::Node* f = cs[first];
    const ir::Node* mul = cs[1 - first];
    if (!is_onnx_op(mul, "Mul") || f->outputs.size() != 1) continue;
    auto act = unary_activation(idx, *f, v);
    if (!act) continue;
    Activation fused;
    if (act->name == "Sigmoid") {
      fused = Activation{"Silu", {}};
    } else if (act->name == "HardSigmoid" && near(act->params[0], 1.0 / 6.0) &&
               near(act->params[1], 0.5)) {
      fused = Activation{"HardSwish", {}};
    } else {
      continue;
    }
    if (other_operand(*mul, v) != f->outputs[0] || sole_consumer(idx, f->outputs[0], taken) != mul)
      continue;
    ActivationMatch m;
    m.act = fused;
    m.nodes = {f, mul};
    m.output = mul->outputs[0];
    return m;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ActivationMatch> match_activation(const ir::Graph&, const GraphIndex& idx,
                                                const std::string& v, const Taken& taken) {
  auto m = match_unclamped(idx, v, taken);
  if (!m) return m;
  // A Clip after the activation (tf2onnx writes Max(LeakyRelu(x), -0.4), which clip-canonical
  // makes a Clip): its bounds clamp the activation's result.
  if (const ir::Node* n = sole_consumer(idx, m->output, taken)) {
    auto clamp = unary_activation(idx, *n, m->output);
    if (clamp && clamp->name == "Clip" && clamp->params[0] <= clamp->params[1]) {
      m->act.clip = clamp->params;
      m->nodes.push_back(n);
      m->output = n->outputs[0];
    }
  }
  return m;
}

std::optional<ResidualMatch> match_residual(const ir::Graph&, const GraphIndex& idx,
                                            const Types& types, const std::string& v,
                                            const Taken& taken) {
  const ir::Node* add = sole_consumer(idx, v, taken);
  if (!is_onnx_op(add, "Add")) return std::nullopt;
  const std::string z = other_operand(*add, v);
  if (z.empty() || !types.same_float_shape(v, z)) return std::nullopt;
  ResidualMatch m;
  m.nodes = {add};
  m.output = add->outputs[0];
  m.z = z;
  return m;
}

std::optional<EpilogueMatch> match_epilogue(const ir::Graph& g, const GraphIndex& idx,
                                            const Types& types, const std::string& v,
                                            const Taken& taken) {
  EpilogueMatch e;
  if (auto a = match_activation(g, idx, v, taken)) {
    e.act = a->act;
    e.nodes = a->nodes;
    e.output = a->output;
    if (auto r = match_residual(g, idx, types, a->output, taken)) {
      e.z = r->z;
      e.nodes.insert(e.nodes.end(), r->nodes.begin(), r->nodes.end());
      e.output = r->output;
    }
    return e;
  }
  auto r = match_residual(g, idx, types, v, taken);
  if (!r) return std::nullopt;
  e.z = r->z;
  e.nodes = r->nodes;
  e.output = r->output;
  e.residual_first = true;
  if (auto a = match_activation(g, idx, r->output, taken)) {
    e.act = a->act;
    e.nodes.insert(e.nodes.end(), a->nodes.begin(), a->nodes.end());
    e.output = a->output;
  }
  return e;
}

void add_activation_attrs(ir::Node& n, const Activation& act, const std::string& name_attr,
                          const std::string& params_attr) {
  n.attrs.push_back(ir::Attribute::of_string(name_attr, act.name));
  if (!act.params.empty()) n.attrs.push_back(ir::Attribute::of_floats(params_attr, act.params));
  if (!act.clip.empty()) n.attrs.push_back(ir::Attribute::of_floats(name_attr + "_clip", act.clip));
}

void add_epilogue_attrs(ir::Node& n, const EpilogueMatch& e) {
  if (e.act) add_activation_attrs(n, *e.act);
  if (!e.z.empty()) {
    n.attrs.push_back(ir::Attribute::of_int("residual_before_activation", e.residual_first ? 1 : 0));
  }
}

void trim_inputs(ir::Node& n) {
  while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
}

void Rewrites::replace(const std::vector<const ir::Node*>& nodes, ir::Node fused) {
  for (const ir::Node* n : nodes) drop.insert(n);
  put.emplace_back(nodes, std::move(fused));
}

int64_t Rewrites::apply(ir::Graph& g) {
  if (put.empty()) return 0;
  std::vector<NodeReplacement> rs;
  for (auto& [nodes, fused] : put) rs.push_back({nodes, {std::move(fused)}});
  replace_nodes(g, rs);
  const auto n = static_cast<int64_t>(put.size());
  drop.clear();
  put.clear();
  return n;
}

int64_t fuse_sweep(ir::Model& model, PassContext& ctx, const Visit& visit) {
  const ValueTypes& inferred = ctx.types();
  if (!inferred.inferred) return 0;
  int64_t fused = 0;
  for_each_graph(model.graph, [&](ir::Graph& g) {
    const GraphIndex idx(g);
    const Types types(g, inferred);
    Rewrites rw;
    for (const ir::Node& n : g.nodes)
      if (!rw.drop.count(&n)) visit(g, idx, types, n, rw);
    fused += rw.apply(g);
  });
  if (fused > 0) model.opsets.emplace("ai.kiln", 1);
  return fused;
}

bool has_op(const ir::Graph& g, const std::set<std::string>& ops, const std::string& domain) {
  for (const auto& n : g.nodes) {
    if (n.domain == domain && ops.count(n.op_type)) return true;
    for (const auto& a : n.attrs) {
      if (a.g && has_op(*a.g, ops, domain)) return true;
      for (const auto& sg : a.graphs)
        if (sg && has_op(*sg, ops, domain)) return true;
    }
  }
  return false;
}

}  // namespace kiln::passes::epilogue
