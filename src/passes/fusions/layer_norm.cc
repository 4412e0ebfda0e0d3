// LayerNorm and RMSNorm fusion: every decomposed spelling (ReduceMean, Sub, Pow/Mul, Add eps,
// Sqrt, Div or Reciprocal+Mul or Pow -0.5, optional gamma Mul and beta Add) becomes one
// LayerNormalization (opset >= 17; ai.kiln.LayerNorm below) and x / Sqrt(ReduceMean(x^2) + eps)
// * gamma ai.kiln.RMSNorm. The spellings are patterns (passes/pattern.h); shapes decide which
// axes are trailing and whether gamma and beta fit.
#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/kernel_util.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using ir::Node;
using P = Pattern;

P mul(P a, P b) { return P::op("Mul", {std::move(a), std::move(b)}).commutative(); }
P add(P a, P b) { return P::op("Add", {std::move(a), std::move(b)}).commutative(); }
P near(double v) { return P::scalar(v, 1e-6); }
// ReduceMean(v), its axes an attribute (opset < 18) or an input.
P reduce_mean(const P& v, const char* name) {
  return P::any_of({P::op("ReduceMean", {v}).bind(name), P::op("ReduceMean", {v, P::value("")}).bind(name)});
}

// The normalisation core num / Sqrt(ReduceMean(c^2) + eps), divided, or multiplied by
// Reciprocal(Sqrt), 1 / Sqrt or Pow(.., -0.5); `num` is the value c (captured as "c").
P core(const P& num) {
  const P c = P::value("c");
  const P square = P::any_of({P::op("Pow", {c, near(2.0)}), P::op("Mul", {c, c})});
  const P eps = P::constant([](const Tensor& t) {
    const Result<double> v = t.numel() == 1 && t.rank() <= 1 ? read_scalar(t) : Result<double>(Status::error(""));
    return v.is_ok() && v.value() >= 0;
  }, "eps");
  const P ve = add(reduce_mean(square, "var"), eps);
  const P root = P::op("Sqrt", {ve});
  return P::any_of({P::op("Div", {num, root}), mul(num, P::op("Reciprocal", {root})),
                    mul(num, P::op("Div", {near(1.0), root})), mul(num, P::op("Pow", {ve, near(-0.5)}))});
}

// LayerNorm's centred x: Sub(x, ReduceMean(x)). Shared: whatever else reads it keeps it.
P centred() {
  return P::op("Sub", {P::value("x"), reduce_mean(P::value("x"), "mean")}).shared().bind("c");
}

// A core with a gamma Mul and a beta Add, gamma only, beta only, or neither: each its own rule,
// longest first, so that one whose gamma or beta does not fit still fuses without it.
std::vector<P> with_affine(const P& norm) {
  const P gamma = P::value("gamma"), beta = P::value("beta");
  return {add(mul(norm, gamma), beta), mul(norm, gamma), add(norm, beta), norm};
}

// The reduced axes of a ReduceMean with keepdims, as the first of the trailing axes (negative),
// when they are exactly the last k axes of a tensor of rank `rank` (-1: unknown rank).
std::optional<int64_t> trailing_axis(const ir::Graph& g, const Node& rm, int64_t opset, int64_t rank) {
  if (rm.attr_int("keepdims", 1) != 1) return std::nullopt;
  std::vector<int64_t> axes;
  if (opset >= 18) {
    const Tensor* t = rm.has_input(1) ? constant_value(g, rm.inputs[1]) : nullptr;
    if (!t) return std::nullopt;
    auto r = read_int64s(*t);
    if (!r) return std::nullopt;
    axes = *r;
  } else {
    if (rm.inputs.size() != 1) return std::nullopt;
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

int64_t rank_or_unknown(const ir::TypeInfo* t) { return t && t->has_shape ? static_cast<int64_t>(t->shape.size()) : -1; }

// True when `w` (a gamma or beta) broadcast against x keeps x's shape and matches the trailing
// -axis dims: rank at most -axis, each dim 1 or equal to x's.
bool fits_norm_dims(const ValueTypes& types, const std::string& w, const std::string& x, int64_t axis) {
  const ir::TypeInfo *wt = types.tensor(w), *xt = types.tensor(x);
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

void add_norm_attrs(Node& n, int64_t axis_value, double eps_value) {
  n.attrs = {ir::Attribute::of_int("axis", axis_value),
             ir::Attribute::of_float("epsilon", static_cast<float>(eps_value))};
}

enum class Mode { kCanonical, kKiln };

// The fused node for a match of a LayerNorm (`layer_norm`) or RMSNorm rule, or nullopt when the
// axes, types or the gamma and beta shapes do not allow it.
std::optional<std::vector<Node>> fuse_norm(const Match& m, RuleContext& rc, bool layer_norm, Mode mode) {
  const int64_t opset = rc.model.opset("");
  const bool standard = opset >= 17;
  if (layer_norm && mode == Mode::kCanonical && !standard) return std::nullopt;
  const ValueTypes& types = rc.ctx.types();
  const std::string& c = m.value("c");
  const ir::TypeInfo* ct = types.tensor(c);
  if (!ct || !dtype_is_compute_float(ct->dtype)) return std::nullopt;
  const std::optional<int64_t> axis = trailing_axis(rc.graph, m.node("var"), opset, rank_or_unknown(ct));
  if (!axis) return std::nullopt;
  const std::string x = layer_norm ? m.value("x") : c;
  if (layer_norm && trailing_axis(rc.graph, m.node("mean"), opset, rank_or_unknown(types.tensor(x))) != axis)
    return std::nullopt;
  for (const char* w : {"gamma", "beta"})
    if (m.values.count(w) && !fits_norm_dims(types, m.value(w), x, *axis)) return std::nullopt;
  if (!layer_norm && m.values.count("beta")) return std::nullopt;
  std::vector<std::string> inputs = {x};
  if (m.values.count("gamma")) {
    inputs.push_back(m.value("gamma"));
  } else if (layer_norm) {
    // LayerNormalization needs a Scale: ones over the normalised dims, when they are known.
    const ir::TypeInfo* xt = types.tensor(x);
    if (!xt || !xt->has_shape) return std::nullopt;
    Shape s;
    for (int64_t i = static_cast<int64_t>(xt->shape.size()) + *axis; i < static_cast<int64_t>(xt->shape.size()); ++i) {
      if (i < 0 || !xt->shape[i].known()) return std::nullopt;
      s.push_back(xt->shape[i].value);
    }
    auto ones = Tensor::make(DType::kFloat32, s);
    if (!ones) return std::nullopt;
    for (int64_t i = 0; i < ones->numel(); ++i) ones->data<float>()[i] = 1.0f;
    auto typed = cast_float_to(*ones, xt->dtype);
    if (!typed) return std::nullopt;
    const std::string gamma = rc.fresh_name(m.root->outputs[0] + "_ln_scale");
    rc.graph.initializers[gamma] = *typed;
    inputs.push_back(gamma);
  }
  if (m.values.count("beta")) inputs.push_back(m.value("beta"));
  const char* op = !layer_norm ? "RMSNorm" : standard ? "LayerNormalization" : "LayerNorm";
  Node n = replacement_node(m, op, std::move(inputs), layer_norm && standard ? "" : "ai.kiln");
  add_norm_attrs(n, *axis, read_scalar(m.constant("eps")).value());
  return std::vector<Node>{std::move(n)};
}

std::vector<Rule> norm_rules(Mode mode) {
  std::vector<Rule> rules;
  for (P& p : with_affine(core(centred())))
    rules.push_back({"layer-norm", std::move(p), [mode](const Match& m, RuleContext& rc) { return fuse_norm(m, rc, true, mode); }});
  if (mode == Mode::kKiln)
    for (P& p : with_affine(core(P::value("c"))))
      rules.push_back({"rms-norm", std::move(p), [mode](const Match& m, RuleContext& rc) { return fuse_norm(m, rc, false, mode); }});
  return rules;
}

template <Mode kMode>
class LayerNormFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (kMode == Mode::kCanonical && model.opset("") < 17) return 0;
    static const std::vector<Rule> rules = norm_rules(kMode);
    const int64_t rewrites = apply_rules(model, ctx, rules);
    bool kiln_ops = false;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      for (const Node& n : g.nodes) kiln_ops |= n.domain == "ai.kiln" && (n.op_type == "LayerNorm" || n.op_type == "RMSNorm");
    });
    if (kiln_ops && !model.opsets.count("ai.kiln")) model.opsets["ai.kiln"] = 1;
    return rewrites;
  }
};

using LayerNormCanonical = LayerNormFusion<Mode::kCanonical>;
using LayerNormKiln = LayerNormFusion<Mode::kKiln>;

}  // namespace

// Standard ops only (LayerNormalization, opset >= 17): exact up to float rounding, so -O1.
KILN_REGISTER_PASS(LayerNormCanonical, "layer-norm", 1, kFuse, 10, true);
// Older opsets get ai.kiln.LayerNorm; RMSNorm spellings become ai.kiln.RMSNorm.
KILN_REGISTER_PASS(LayerNormKiln, "layer-norm-kiln", 2, kFuse, 11, false);

}  // namespace kiln::passes
