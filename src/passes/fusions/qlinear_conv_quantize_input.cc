// An 8-bit image model's first conv takes its float input as it is (-O3, after the layout passes
// and the conv's other epilogues). Every quantizer writes the network's input as a
// QuantizeLinear, and qlinear-nhwc puts a Transpose to channels-last after it; both pass over the
// whole image before the conv stages it once more:
//
//   QLinearConv(Transpose(QuantizeLinear(x, s, z), perm 0 2 3 1), s, z, ..., channels_last=1)
//     ->  ai.kiln.QLinearConv(x, s, z, ..., channels_last=1)
//
// whose kernel quantizes float NCHW x while staging it, QuantizeLinear's rule and loops (so the
// codes are the three nodes' bit for bit). x has at most 4 channels (an image, whose staged pixel
// is one quad: the staging interleaves those 16 pixels a step); QuantizeLinear's scale and zero
// point are the conv's x_scale and x_zero_point (per tensor, constant); the quantized and the
// transposed image are read by the conv alone.
#include <cstring>

#include "kernels/cpu/qconv/qlinear_conv.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// A tiled channels-last QLinearConv, ONNX Runtime's or kiln's (a table or residual add already
// in it), whose X is 8-bit.
bool is_channels_last_qlinear_conv(const ir::Node* n) {
  return n && n->op_type == "QLinearConv" && (n->domain == "com.microsoft" || n->domain == "ai.kiln") &&
         n->outputs.size() == 1 && n->attr_int("channels_last", 0) != 0;
}

// Whether two constants hold the same one value (both absent: a u8 zero point of 0 each).
bool same_scalar(const Tensor* a, const Tensor* b) {
  if (!a || !b) return !a && !b;
  return a->dtype() == b->dtype() && a->numel() == 1 && b->numel() == 1 &&
         std::memcmp(a->raw_data(), b->raw_data(), dtype_size(a->dtype())) == 0;
}

class QLinearConvQuantizeInput : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ir::Graph& g = model.graph;
    const ValueTypes& types = ctx.types();
    const int64_t fused = rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& conv) {
      if (!is_channels_last_qlinear_conv(&conv) || conv.inputs.size() < 8) return false;
      const ir::Node* transpose = idx.producer(conv.inputs[0]);
      if (!is_onnx_op(transpose, "Transpose") || transpose->attr_ints("perm") != std::vector<int64_t>{0, 2, 3, 1} ||
          !idx.single_use(transpose->outputs[0]) || is_graph_output(g, transpose->outputs[0]))
        return false;
      const ir::Node* quantize = idx.producer(transpose->inputs[0]);
      if (!is_onnx_op(quantize, "QuantizeLinear") || quantize->inputs.size() < 2 || quantize->outputs.size() != 1 ||
          !idx.single_use(quantize->outputs[0]) || is_graph_output(g, quantize->outputs[0]) ||
          quantize->attr_int("block_size", 0) != 0)
        return false;
      const ir::TypeInfo* x = types.tensor(quantize->inputs[0]);
      if (!x || x->dtype != DType::kFloat32 || !x->has_shape || x->shape.size() != 4 || !x->shape[1].known() ||
          x->shape[1].value > 4)
        return false;
      // QuantizeLinear's parameters are the conv's X ones: one value each, constant.
      auto constant = [&](const ir::Node& n, size_t i) {
        return i < n.inputs.size() && !n.inputs[i].empty() ? idx.constant(n.inputs[i]) : nullptr;
      };
      const Tensor* scale = constant(*quantize, 1);
      const bool named_zero_point = quantize->inputs.size() > 2 && !quantize->inputs[2].empty();
      if (!scale || !same_scalar(scale, constant(conv, 1)) || (named_zero_point && !constant(*quantize, 2)) ||
          !same_scalar(constant(*quantize, 2), constant(conv, 2)))
        return false;
      const ir::TypeInfo* codes = types.tensor(quantize->outputs[0]);
      if (!codes || codes->dtype != (constant(conv, 2) ? constant(conv, 2)->dtype() : DType::kUInt8)) return false;
      std::vector<const Tensor*> constants;  // the conv must run on the tile, whose staging quantizes
      for (const std::string& in : conv.inputs) constants.push_back(in.empty() ? nullptr : idx.constant(in));
      if (!qlinear_conv_tileable(conv, constants)) return false;
      ir::Node n = conv;
      n.name = fresh_name(g, conv.name.empty() ? conv.outputs[0] : conv.name + "_from_float");
      n.domain = "ai.kiln";
      n.inputs[0] = quantize->inputs[0];
      std::vector<NodeReplacement> found{{{quantize, transpose, &conv}, {n}}};
      replace_nodes(g, found);
      return true;
    });
    if (fused > 0) model.opsets.emplace("ai.kiln", 1);
    return fused;
  }
};

}  // namespace

// After qlinear-conv-lookup (18) and qlinear-conv-residual (19), whose forms it keeps.
KILN_REGISTER_PASS(QLinearConvQuantizeInput, "qlinear-conv-quantize-input", 3, kLayout, 20, false);

}  // namespace kiln::passes
