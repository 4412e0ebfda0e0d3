// Canonical clamps: Max(x, c) and Min(x, c) with a one-element float constant c (tf2onnx's
// spelling of ReLU-like floors and caps, c often shaped [1,1,1,1]) become Clip(x, c, ) and
// Clip(x, , c), so that the epilogue fusions see one activation instead of an elementwise op that
// splits a conv region (the tf2onnx speech embedding's 19 convs each ended in one). Exact: for
// a float x, Max(x, c) is Clip(x, c, +inf), NaN included (both propagate it). Needs the rank of x
// to be at least c's, so that dropping c's shape keeps the output's; opset 11+ (Clip's bounds as
// inputs). Top-level graph only.
#include <cmath>

#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

class ClipCanonical : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ir::Graph& g = model.graph;
    if (model.opset("") < 11) return int64_t{0};
    bool any = false;
    for (const ir::Node& n : g.nodes) any |= n.domain.empty() && (n.op_type == "Max" || n.op_type == "Min");
    if (!any) return int64_t{0};
    const ValueTypes& types = ctx.types();
    if (!types.inferred) return int64_t{0};
    const GraphIndex& idx = ctx.index(g);
    int64_t rewrites = 0;
    for (ir::Node& n : g.nodes) {
      if (!n.domain.empty() || (n.op_type != "Max" && n.op_type != "Min") || n.inputs.size() != 2 ||
          n.outputs.size() != 1)
        continue;
      for (int side = 0; side < 2; ++side) {
        const std::string x = n.inputs[1 - side];
        const Tensor* c = idx.constant(n.inputs[side]);
        const ir::TypeInfo* t = types.tensor(x);
        if (!c || idx.constant(x) || c->numel() != 1 || c->dtype() != DType::kFloat32 || !t ||
            t->dtype != DType::kFloat32 || !t->has_shape || static_cast<int64_t>(t->shape.size()) < c->rank())
          continue;
        const float bound = c->data<float>()[0];
        if (std::isnan(bound)) continue;
        const std::string name = fresh_name(g, n.inputs[side] + "_scalar");
        g.initializers[name] = Tensor::scalar<float>(DType::kFloat32, bound);
        const bool floor = n.op_type == "Max";
        n.op_type = "Clip";
        n.inputs = floor ? std::vector<std::string>{x, name} : std::vector<std::string>{x, "", name};
        ++rewrites;
        break;
      }
    }
    return rewrites;
  }
};

}  // namespace

KILN_REGISTER_PASS(ClipCanonical, "clip-canonical", 1, kSimplify, 56, true);

}  // namespace kiln::passes
