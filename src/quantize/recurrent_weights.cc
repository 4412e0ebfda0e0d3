// LSTM, GRU and RNN weights in 8 bits (static and dynamic quantization, kiln's form): each such
// node's constant float W [D, G*H, input] and R [D, G*H, H] become int8 with a scale per row
// (per direction and gate output, symmetric, max|w| / 127), written as standard ONNX:
//   int8 [D*G*H, K] -> DequantizeLinear(axis 0) -> Reshape [D, G*H, K] -> the node.
// kiln folds that back into float weights at load, and the recurrent kernel, finding every row a
// whole multiple of its scale, runs it from the codes: a quarter of the bytes a step rereads, and
// products on 16-bit pairs with h and x rounded to 16 bits (kernels/cpu/rnn/coded_rows.h), as
// ONNX Runtime's DynamicQuantizeLSTM runs its int8 weights (with h and x rounded to 8 bits).
#include "passes/graph_edit.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

bool is_recurrent(const ir::Node& n) {
  return n.domain.empty() && (n.op_type == "LSTM" || n.op_type == "GRU" || n.op_type == "RNN");
}

// The float32 rank-3 constant weight at input i of n, or null.
const Tensor* float_weight(const ir::Graph& g, const ir::Node& n, size_t i) {
  const Tensor* w = n.has_input(i) ? passes::constant_value(g, n.inputs[i]) : nullptr;
  return w && w->dtype() == DType::kFloat32 && w->rank() == 3 && w->numel() > 0 ? w : nullptr;
}

}  // namespace

bool has_recurrent_weights(const ir::Model& model) {
  for (const ir::Node& n : model.graph.nodes)
    if (is_recurrent(n) && float_weight(model.graph, n, 1) && float_weight(model.graph, n, 2)) return true;
  return false;
}

Status write_recurrent_weights(ir::Model& model, const QuantizeOptions& options, QuantizeReport* report) {
  ir::Graph& g = model.graph;
  std::vector<ir::Node> nodes;
  std::set<std::string> replaced;
  for (ir::Node& n : g.nodes) {
    const Tensor* w = is_recurrent(n) ? float_weight(g, n, 1) : nullptr;
    const Tensor* r = is_recurrent(n) ? float_weight(g, n, 2) : nullptr;
    if (!w || !r || asked_float(options, n)) {
      nodes.push_back(std::move(n));
      continue;
    }
    const std::string stem = node_label(n);
    for (size_t i : {size_t{1}, size_t{2}}) {
      const Tensor& t = *(i == 1 ? w : r);
      const Shape shape = t.shape();
      QuantizedWeight q = quantize_weight(t.reshaped({shape[0] * shape[1], shape[2]}), 0, true, 127.0f);
      const std::string base = n.inputs[i];
      const std::string qn = passes::fresh_name(g, base + "_quantized"), sn = passes::fresh_name(g, base + "_scale"),
                        zn = passes::fresh_name(g, base + "_zero_point"), dn = passes::fresh_name(g, base + "_dequantized"),
                        shn = passes::fresh_name(g, base + "_shape"), rn = passes::fresh_name(g, base + "_rows");
      Tensor dims = Tensor::make(DType::kInt64, {3}).value();
      for (int a = 0; a < 3; ++a) dims.data<int64_t>()[a] = shape[a];
      g.initializers[qn] = std::move(q.q), g.initializers[sn] = std::move(q.scale);
      g.initializers[zn] = std::move(q.zero_point), g.initializers[shn] = std::move(dims);
      ir::Node dq = passes::make_node(stem + (i == 1 ? "_W" : "_R") + "_DequantizeLinear", "DequantizeLinear",
                                      {qn, sn, zn}, {rn});
      dq.attrs.push_back(ir::Attribute::of_int("axis", 0));
      nodes.push_back(std::move(dq));
      nodes.push_back(passes::make_node(stem + (i == 1 ? "_W" : "_R") + "_Reshape", "Reshape", {rn, shn}, {dn}));
      replaced.insert(base);
      n.inputs[i] = dn;
    }
    report->recurrent_nodes.push_back(stem);
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  passes::drop_unread_initializers(g, replaced);
  return Status::ok();
}

}  // namespace kiln::quantize
