// A residual add of 8-bit codes after a conv (resnet's, mobilenet's and efficientnet's blocks:
// QLinearAdd of a conv's output and the block's input, as ONNX Runtime's QOperator quantizer,
// qdq-fusion and `kiln quantize` write them) becomes the conv's epilogue (-O3, after the layout
// passes, which still see the plain ops):
//
//   QLinearAdd(QLinearConv(x, ...), as, az, r, bs, bz, cs, cz)  ->  ai.kiln.QLinearConv(x, ..., "",
//   as, az, r, bs, bz, cs, cz)
//
// (the conv's output may be either operand: the add's float sum is the same either way). The
// tile's store adds r to the codes in registers, QLinearAdd's float steps in its order, so the
// codes are the two nodes' bit for bit (qlinear_conv.cc), and the conv's codes never travel
// through memory. The conv must be one the tiles run, of group 1, its output read by the add
// alone; r of the conv output's type and shape; the add's scales and zero points constants.
// The fused node sits where the add was, after whatever computes r.
#include "ir/shape_inference.h"
#include "kernels/cpu/qconv/qlinear_conv.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

bool is_qlinear_conv(const ir::Node* n) {
  return n && n->op_type == "QLinearConv" && (n->domain.empty() || n->domain == "com.microsoft") &&
         n->outputs.size() == 1 && n->attr_int("group", 1) == 1;
}

bool same_8bit_shape(const ir::TypeInfo* a, const ir::TypeInfo* b) {
  if (!a || !b || a->dtype != b->dtype || !dtype_is_8bit_integer(a->dtype)) return false;
  if (!a->has_shape || !b->has_shape || a->shape.size() != b->shape.size()) return false;
  for (size_t i = 0; i < a->shape.size(); ++i)
    if (!ir::same_dim(a->shape[i], b->shape[i])) return false;
  return true;
}

class QLinearConvResidual : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ir::Graph& g = model.graph;
    const ValueTypes& types = ctx.types();
    const int64_t fused = rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& add) {
      if (add.domain != "com.microsoft" || add.op_type != "QLinearAdd" || add.inputs.size() < 7 ||
          add.outputs.size() != 1)
        return false;
      auto input = [&](int i) {
        return static_cast<size_t>(i) < add.inputs.size() ? add.inputs[static_cast<size_t>(i)]
                                                          : std::string();
      };
      // The add's scales (1, 4, 6) constants, and its zero points (2, 5, 7) constants or absent.
      for (const int i : {1, 4, 6})
        if (!idx.constant(input(i))) return false;
      for (const int i : {2, 5, 7})
        if (!input(i).empty() && !idx.constant(input(i))) return false;
      for (const int side : {0, 3}) {  // the conv's output as A, or as B
        const ir::Node* conv = idx.producer(add.inputs[side]);
        const std::string& r = add.inputs[3 - side];
        if (!is_qlinear_conv(conv) || !idx.single_use(conv->outputs[0]) ||
            is_graph_output(g, conv->outputs[0]) || r == conv->outputs[0] ||
            !same_8bit_shape(types.tensor(conv->outputs[0]), types.tensor(r)))
          continue;
        std::vector<const Tensor*> constants;  // the conv must run on the tile, which adds
        for (const std::string& in : conv->inputs)
          constants.push_back(in.empty() ? nullptr : idx.constant(in));
        if (!qlinear_conv_tileable(*conv, constants)) continue;
        ir::Node n = *conv;
        n.name = fresh_name(g, conv->name.empty() ? add.outputs[0] : conv->name + "_residual");
        n.domain = "ai.kiln";
        n.inputs.resize(10);  // input 9, the table, absent
        for (const int i : {side + 1, side + 2, 3 - side, 4 - side, 5 - side, 6, 7})
          n.inputs.push_back(input(i));
        n.outputs = add.outputs;
        std::vector<NodeReplacement> found{{{conv, &add}, {n}}};
        replace_nodes(g, found);
        return true;
      }
      return false;
    });
    if (fused > 0) model.opsets.emplace("ai.kiln", 1);
    return fused;
  }
};

}  // namespace

// After channels-last (15), which gives the conv and the add one layout, and beside
// qlinear-conv-lookup (18), whose tables take the plain convs first.
KILN_REGISTER_PASS(QLinearConvResidual, "qlinear-conv-residual", 3, kLayout, 19, false);

}  // namespace kiln::passes
