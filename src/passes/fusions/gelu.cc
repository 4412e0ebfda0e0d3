// GELU fusion: 0.5*x*(1+Erf(x/sqrt(2))) and 0.5*x*(1+Tanh(sqrt(2/pi)*(x+0.044715*x^3))), with
// their factors in any order, become ai.kiln.Gelu (approximate "none" / "tanh"); then
// Gelu(Add(x, 1-D constant bias)) becomes ai.kiln.BiasGelu. Both are pattern rules
// (passes/pattern.h).
#include <cmath>
#include <optional>

#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using P = Pattern;

const P x = P::value("x");
P mul(P a, P b) { return P::op("Mul", {std::move(a), std::move(b)}).commutative(); }
P add(P a, P b) { return P::op("Add", {std::move(a), std::move(b)}).commutative(); }
P div(P a, P b) { return P::op("Div", {std::move(a), std::move(b)}); }
P c(double v) { return P::scalar(v); }

// 0.5 * x * (1 + inner), its factors in any order and grouping, the halving a Mul by 0.5 or a
// Div by 2; the 1 of any rank ("one": the rule checks the rank).
P gelu_of(const P& inner) {
  const P a = add(inner, P::scalar_any_rank(1.0, "one"));
  return P::any_of({mul(mul(x, a), c(0.5)),                           // (x * a) * 0.5
                    div(mul(x, a), c(2.0)),                           // (x * a) / 2
                    mul(P::any_of({mul(x, c(0.5)), div(x, c(2.0))}), a),  // (x * 0.5) * a
                    mul(mul(a, c(0.5)), x)});                         // (a * 0.5) * x
}

// Erf(x / sqrt(2)), or Erf(x * (1/sqrt(2))).
P erf_gelu() { return gelu_of(P::op("Erf", {P::any_of({div(x, c(std::sqrt(2.0))), mul(x, c(std::sqrt(0.5)))})})); }

// Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)), the cube Pow(x, 3) or x * (x * x) in either order,
// or the factor taken in first, x * (x * (0.044715 * x)) (Flax's spelling, via tf2onnx).
P tanh_gelu() {
  const P cube = P::any_of({P::op("Pow", {x, c(3.0)}), mul(x, P::op("Mul", {x, x}))});
  const P term = P::any_of({mul(cube, c(0.044715)), mul(x, mul(x, mul(x, c(0.044715))))});
  return gelu_of(P::op("Tanh", {mul(add(x, term), c(std::sqrt(2.0 / M_PI)))}));
}

// Whether the "one" of rank > 1 leaves x's rank as it is (a [1, 1, 1] on a rank-3 x does).
bool one_keeps_rank(const Match& m, RuleContext& rc) {
  const Tensor& one = m.constant("one");
  if (one.rank() <= 1) return true;
  const ir::TypeInfo* t = rc.ctx.types().find(m.value("x"));
  return t && t->has_shape && static_cast<int64_t>(t->shape.size()) >= one.rank();
}

Rule gelu_rule(const char* name, P pattern, const char* approximate) {
  return {name, std::move(pattern), [approximate](const Match& m, RuleContext& rc) -> std::optional<std::vector<ir::Node>> {
            if (!one_keeps_rank(m, rc)) return std::nullopt;
            ir::Node g = replacement_node(m, "Gelu", {m.value("x")}, "ai.kiln");
            g.attrs = {ir::Attribute::of_string("approximate", approximate)};
            return std::vector<ir::Node>{std::move(g)};
          }};
}

int64_t fuse(ir::Model& model, PassContext& ctx, const std::vector<Rule>& rules) {
  const int64_t rewrites = apply_rules(model, ctx, rules);
  if (rewrites > 0 && !model.opsets.count("ai.kiln")) model.opsets["ai.kiln"] = 1;
  return rewrites;
}

class GeluFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    static const std::vector<Rule> rules = {gelu_rule("gelu-erf", erf_gelu(), "none"),
                                            gelu_rule("gelu-tanh", tanh_gelu(), "tanh")};
    return fuse(model, ctx, rules);
  }
};

// Gelu(x + b), b a 1-D constant: ai.kiln.Gelu, or ONNX Gelu (opset 20), which has the same
// attribute.
class BiasGeluFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    static const P biased = add(x, P::constant([](const Tensor& t) { return t.rank() == 1; }, "b"));
    static const std::vector<Rule> rules = {
        {"bias-gelu", P::any_of({P::op_in("ai.kiln", "Gelu", {biased}), P::op("Gelu", {biased})}),
         [](const Match& m, RuleContext&) -> std::optional<std::vector<ir::Node>> {
           ir::Node n = *m.root;
           n.name = (n.name.empty() ? n.outputs[0] : n.name) + "_Bias";
           n.op_type = "BiasGelu";
           n.domain = "ai.kiln";
           n.inputs = {m.value("x"), m.value("b")};
           return std::vector<ir::Node>{std::move(n)};
         }}};
    return fuse(model, ctx, rules);
  }
};

}  // namespace

KILN_REGISTER_PASS(GeluFusion, "gelu", 2, kFuse, 13, false);
KILN_REGISTER_PASS(BiasGeluFusion, "bias-gelu", 2, kFuse, 14, false);

}  // namespace kiln::passes
