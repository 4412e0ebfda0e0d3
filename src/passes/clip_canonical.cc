// Canonical clamps: Max(x, c) and Min(x, c) with a one-element float constant c (tf2onnx's
// spelling of ReLU-like floors and caps, c often shaped [1,1,1,1]) become Clip(x, c, ) and
// Clip(x, , c), so that the epilogue fusions see one activation instead of an elementwise op that
// splits a conv region (the tf2onnx speech embedding's 19 convs each ended in one). Exact: for
// a float x, Max(x, c) is Clip(x, c, +inf), NaN included (both propagate it). Needs the rank of x
// to be at least c's, so that dropping c's shape keeps the output's; opset 11+ (Clip's bounds as
// inputs). Pattern rules (passes/pattern.h), subgraphs included.
#include <cmath>

#include "passes/graph_edit.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

// A one-element float32 constant that is a number.
bool scalar_bound(const Tensor& t) {
  return t.numel() == 1 && t.dtype() == DType::kFloat32 && !std::isnan(t.data<float>()[0]);
}

// Max(x, c) -> Clip(x, c, ), Min(x, c) -> Clip(x, , c), x a float32 non-constant of rank >= c's.
Rule clamp_rule(const char* op) {
  const bool floor = std::string(op) == "Max";
  return {std::string("clip-from-") + op,
          Pattern::op(op, {Pattern::value("x"), Pattern::constant(scalar_bound, "c")}).commutative(),
          [floor](const Match& m, RuleContext& rc) -> std::optional<std::vector<ir::Node>> {
            const std::string& x = m.value("x");
            const Tensor& c = m.constant("c");
            const ir::TypeInfo* t = rc.ctx.types().tensor(x);
            if (constant_value(rc.graph, x) || !t || t->dtype != DType::kFloat32 || !t->has_shape ||
                static_cast<int64_t>(t->shape.size()) < c.rank())
              return std::nullopt;
            const std::string bound = rc.fresh_name(m.value("c") + "_scalar");
            rc.graph.initializers[bound] = Tensor::scalar<float>(DType::kFloat32, c.data<float>()[0]);
            ir::Node clip = *m.root;
            clip.op_type = "Clip";
            clip.inputs = floor ? std::vector<std::string>{x, bound} : std::vector<std::string>{x, "", bound};
            return std::vector<ir::Node>{std::move(clip)};
          }};
}

class ClipCanonical : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (model.opset("") < 11) return int64_t{0};
    static const std::vector<Rule> rules = {clamp_rule("Max"), clamp_rule("Min")};
    return apply_rules(model, ctx, rules);
  }
};

}  // namespace

KILN_REGISTER_PASS(ClipCanonical, "clip-canonical", 1, kSimplify, 56, true);

}  // namespace kiln::passes
