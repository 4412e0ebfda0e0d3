// -O2 fusion of a float Conv or ConvTranspose with what follows it elementwise (an activation
// and/or a residual Add, in either order) into one ai.kiln.FusedConv or FusedConvTranspose
// (docs/ops.md).
#include "ir/shape_inference.h"
#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using namespace epilogue;

class ConvEpilogue : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (!has_op(model.graph, {"Conv", "ConvTranspose"})) return int64_t{0};
    // Residuals need shapes and every fusion needs types.
    return fuse_sweep(model, ctx, [](const ir::Graph& g, const GraphIndex& idx, const Types& types,
                                const ir::Node& n, Rewrites& rw) {
      if (!n.domain.empty() || (n.op_type != "Conv" && n.op_type != "ConvTranspose")) return;
      if (n.inputs.size() < 2 || n.inputs.size() > 3 || !n.has_input(0) || !n.has_input(1) ||
          n.outputs.size() != 1)
        return;
      const std::string& y = n.outputs[0];
      if (!types.is_float32(y) || !types.is_float32(n.inputs[0])) return;
      auto e = match_epilogue(g, idx, types, y, rw.drop);
      if (!e) return;
      ir::Node f;
      f.name = n.name;
      f.op_type = n.op_type == "Conv" ? "FusedConv" : "FusedConvTranspose";
      f.domain = "ai.kiln";
      f.inputs = {n.inputs[0], n.inputs[1], n.has_input(2) ? n.inputs[2] : ""};
      if (!e->z.empty()) f.inputs.push_back(e->z);
      trim_inputs(f);
      f.outputs = {e->output};
      f.attrs = n.attrs;
      add_epilogue_attrs(f, *e);
      std::vector<const ir::Node*> nodes{&n};
      nodes.insert(nodes.end(), e->nodes.begin(), e->nodes.end());
      rw.replace(nodes, std::move(f));
    });
  }
};

}  // namespace

KILN_REGISTER_PASS(ConvEpilogue, "conv-epilogue", 2, kFuse, 45, false);

}  // namespace kiln::passes
