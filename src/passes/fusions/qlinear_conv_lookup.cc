// An 8-bit conv whose codes go only through a table (ai.kiln.QLinearLookup: a SiLU after
// efficientnet's convs) takes the table as its epilogue (-O3, after the layout passes, which
// still see the plain ops):
//
//   QLinearLookup(QLinearConv(x, ...), table)  ->  ai.kiln.QLinearConv(x, ..., table)
//
// (docs/ops.md): the kernel looks the codes up right after writing them, while they are in
// cache, without the separate op's node (kiln's int8 efficientnet_b0, 49 tables: 3.29-3.50 ->
// 3.12-3.16 ms, Intel Xeon model 207). The table must be a constant of the conv's output type,
// and the conv one the tiles run.
#include "kernels/cpu/qconv/qlinear_conv.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

bool is_qlinear_conv(const ir::Node* n) {
  return n && n->op_type == "QLinearConv" && (n->domain.empty() || n->domain == "com.microsoft") && n->outputs.size() == 1;
}

class QLinearConvLookup : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ir::Graph& g = model.graph;
    const ValueTypes& types = ctx.types();
    const int64_t fused = rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& lookup) {
      if (lookup.domain != "ai.kiln" || lookup.op_type != "QLinearLookup" || lookup.inputs.size() != 2) return false;
      const ir::Node* conv = idx.producer(lookup.inputs[0]);
      const Tensor* table = idx.constant(lookup.inputs[1]);
      if (!is_qlinear_conv(conv) || !idx.single_use(conv->outputs[0]) || is_graph_output(g, conv->outputs[0]) || !table ||
          table->numel() != 256)
        return false;
      const ir::TypeInfo* y = types.tensor(conv->outputs[0]);
      if (!y || y->dtype != table->dtype()) return false;
      std::vector<const Tensor*> constants;  // the conv must run on the tile, which looks up
      for (const std::string& in : conv->inputs) constants.push_back(in.empty() ? nullptr : idx.constant(in));
      if (!qlinear_conv_tileable(*conv, constants)) return false;
      ir::Node n = *conv;
      n.name = fresh_name(g, conv->name.empty() ? lookup.outputs[0] : conv->name + "_lookup");
      n.domain = "ai.kiln";
      n.inputs.resize(9);
      n.inputs.push_back(lookup.inputs[1]);
      n.outputs = lookup.outputs;
      std::vector<NodeReplacement> found{{{conv, &lookup}, {n}}};
      replace_nodes(g, found);
      return true;
    });
    if (fused > 0) model.opsets.emplace("ai.kiln", 1);
    return fused;
  }
};

}  // namespace

// After channels-last (15), which moves Transposes through the plain QLinearLookup.
KILN_REGISTER_PASS(QLinearConvLookup, "qlinear-conv-lookup", 3, kLayout, 18, false);

}  // namespace kiln::passes
