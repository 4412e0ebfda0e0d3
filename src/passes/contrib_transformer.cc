// The transformer ops ONNX Runtime's optimizer writes (onnxruntime.transformers.optimizer, and
// Optimum's ORT-optimized exports), and its quantizer's 8-bit forms of them, become the ops
// kiln runs:
//
//   EmbedLayerNormalization(ids, segment_ids, word, position, segment, gamma, beta [, mask])
//       -> ai.kiln.EmbedLayerNorm; with position_ids: Gathers, their sum, ai.kiln.LayerNorm
//       mask_index (output 1) -> ReduceSum(mask, axis 1): each row's token count
//   QEmbedLayerNormalization -> the same on rows gathered as codes and dequantized
//   Attention(x, W [E_in, 3E], B [, mask_index]) -> ai.kiln.MultiHeadAttention(x, W, B, additive mask)
//   QAttention(xq, Wq, B, x_scale, W_scale [, mask_index], x_zp, W_zp)
//       -> MatMulIntegerToFloat -> ai.kiln.ScaledDotProductAttention (Q, K, V packed)
//   SkipLayerNormalization -> ai.kiln.SkipLayerNorm (its sum as output 1)
//   BiasGelu, Gelu, FastGelu -> [Add(x, bias) ->] ai.kiln.Gelu (erf; tanh for FastGelu): the Add
//       left for the GEMM before it to take as its bias, the GELU as its epilogue
//   QuickGelu(x) -> x * Sigmoid(alpha * x)
//
// Attention's mask_index as ONNX Runtime reads it: a row's token count (from EmbedLayerNormalization:
// keys at or past it masked), a [batch, keys] 0/1 mask, or [batch, queries, keys]; masked scores
// get `mask_filter_value` (-10000) added. Attentions with a past, a causal mask (unidirectional),
// rotary embeddings or unequal Q/K/V sizes stay (and are refused by name at load). -O1.
#include <cmath>

#include "passes/graph_edit.h"
#include "passes/node_lowering.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

bool is_ms(const ir::Node* n, const char* op) { return n && n->domain == "com.microsoft" && n->op_type == op; }

std::string int64s(NodeLowering& l, const std::vector<int64_t>& v, const std::string& what) {
  Tensor t = Tensor::make(DType::kInt64, {static_cast<int64_t>(v.size())}).value();
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return l.constant(std::move(t), what);
}

// Unsqueeze of x at `axes`: an attribute before opset 13, an input from 13 on.
std::string unsqueeze(NodeLowering& l, const std::string& x, const std::vector<int64_t>& axes) {
  if (l.model.opset("") < 13) return l.add("Unsqueeze", {x}, "", {ir::Attribute::of_ints("axes", axes)});
  return l.add("Unsqueeze", {x, int64s(l, axes, "axes")});
}

// Positions 0 .. seq-1 of x [batch, seq, ...]: Range(0, Shape(x)[1], 1).
std::string positions(NodeLowering& l, const std::string& x) {
  auto i64 = [&](int64_t v, const char* what) { return l.constant(Tensor::scalar<int64_t>(DType::kInt64, v), what); };
  const std::string seq = l.add("Gather", {l.add("Shape", {x}), i64(1, "one")}, "", {ir::Attribute::of_int("axis", 0)});
  return l.add("Range", {i64(0, "start"), seq, i64(1, "step")});
}

// The rows of the embedding tables an EmbedLayerNormalization adds: given as values [batch, seq, E]
// (or broadcasting to it), "" where a table is absent.
struct EmbeddingRows {
  std::string word, position, segment;
};

// EmbedLayerNormalization and QEmbedLayerNormalization: gamma and beta at `gamma`, `beta`; the
// rows gathered by `rows` (nullopt: the float tables at inputs 2..4 are read by ai.kiln.EmbedLayerNorm).
bool embed_layer_norm(NodeLowering& l, const std::optional<EmbeddingRows>& rows, const std::string& gamma,
                      const std::string& beta) {
  const ir::Node& n = l.node;
  const float epsilon = n.attr_float("epsilon", 1e-12f);
  const std::string mask = l.input(7);
  const bool wants_mask_index = l.output_read(1);
  const bool wants_sum = l.output_read(2);
  if (wants_mask_index && (mask.empty() || n.attr_int("mask_index_type", 1) != 1)) return false;
  if (rows) {  // their sum, in ONNX Runtime's order, then the norm
    std::string sum = l.add("Add", {rows->word, rows->position});
    if (!rows->segment.empty()) sum = l.add("Add", {sum, rows->segment});
    if (wants_sum) sum = l.add("Identity", {sum}, n.outputs[2]);
    l.add("LayerNorm", {sum, gamma, beta}, n.outputs[0],
          {ir::Attribute::of_int("axis", -1), ir::Attribute::of_float("epsilon", epsilon)}, "ai.kiln");
  } else {
    if (wants_sum) return false;
    l.add("EmbedLayerNorm", {n.inputs[0], l.input(1), n.inputs[2], n.inputs[3], l.input(1).empty() ? "" : l.input(4),
                             gamma, beta},
          n.outputs[0], {ir::Attribute::of_float("epsilon", epsilon)}, "ai.kiln");
  }
  if (wants_mask_index) {
    const std::vector<ir::Attribute> keep = {ir::Attribute::of_int("keepdims", 0)};
    if (l.model.opset("") < 13) {
      std::vector<ir::Attribute> attrs = keep;
      attrs.push_back(ir::Attribute::of_ints("axes", {1}));
      l.add("ReduceSum", {mask}, n.outputs[1], attrs);
    } else {
      l.add("ReduceSum", {mask, int64s(l, {1}, "axes")}, n.outputs[1], keep);
    }
  }
  l.model.opsets.emplace("ai.kiln", 1);
  return true;
}

bool float_embed_layer_norm(NodeLowering& l) {
  const ir::Node& n = l.node;
  if (n.inputs.size() < 7) return false;
  const bool wants_sum = l.output_read(2);
  if (!n.has_input(8) && !wants_sum) return embed_layer_norm(l, std::nullopt, n.inputs[5], l.input(6));
  // Given positions (or the sum wanted): the rows gathered here.
  const std::string ids = n.inputs[0], segment_ids = l.input(1);
  EmbeddingRows rows{l.add("Gather", {n.inputs[2], ids}),
                     l.add("Gather", {n.inputs[3], n.has_input(8) ? n.inputs[8] : positions(l, ids)}), ""};
  if (!segment_ids.empty() && n.has_input(4)) rows.segment = l.add("Gather", {n.inputs[4], segment_ids});
  return embed_layer_norm(l, rows, n.inputs[5], l.input(6));
}

// The 8-bit tables' rows are gathered as codes and dequantized (the word table, 23 M values in
// bert, is not widened whole at each run), gamma and beta dequantized (constant folding makes them float).
bool qembed_layer_norm(NodeLowering& l) {
  const ir::Node& n = l.node;
  if (n.inputs.size() < 18 || !n.has_input(2) || !n.has_input(3) || !n.has_input(5)) return false;
  // Table t (word, position, segment, gamma, beta): codes at input 2 + t, scale 8 + t, zero point 13 + t.
  auto dequantized = [&](size_t t, const std::string& codes) {
    return l.add("DequantizeLinear", {codes, l.input(8 + t), l.input(13 + t)});
  };
  auto gathered = [&](size_t t, const std::string& indices) {
    return dequantized(t, l.add("Gather", {n.inputs[2 + t], indices}));
  };
  const std::string ids = n.inputs[0], segment_ids = l.input(1);
  EmbeddingRows rows{gathered(0, ids), gathered(1, positions(l, ids)), ""};
  if (!segment_ids.empty() && n.has_input(4)) rows.segment = gathered(2, segment_ids);
  return embed_layer_norm(l, rows, dequantized(3, n.inputs[5]), n.has_input(6) ? dequantized(4, n.inputs[6]) : "");
}

// The additive mask [batch, 1, 1 or queries, keys] from Attention's mask_index input i, or "" when
// there is none; nullopt when its form is not one read here.
std::optional<std::string> additive_mask(NodeLowering& l, size_t i, const std::string& x) {
  const std::string m = l.input(i);
  if (m.empty()) return std::string();
  const float filter = l.node.attr_float("mask_filter_value", -10000.0f);
  auto masked = [&] { return l.constant(Tensor::scalar<float>(DType::kFloat32, filter), "filter"); };
  const ir::Node* from = l.index.producer(m);
  if ((is_ms(from, "EmbedLayerNormalization") || is_ms(from, "QEmbedLayerNormalization")) && from->outputs.size() > 1 &&
      from->outputs[1] == m) {
    // Token counts [batch]: key t of row b is kept while t < count[b].
    const std::string keys = positions(l, x);
    const std::string counts = unsqueeze(l, l.add("Cast", {m}, "", {ir::Attribute::of_int("to", 7)}), {1});
    const std::string kept = l.add("Less", {keys, counts});
    const std::string zero = l.constant(Tensor::scalar<float>(DType::kFloat32, 0.0f), "zero");
    return unsqueeze(l, l.add("Where", {kept, zero, masked()}), {1, 2});
  }
  // A 0/1 mask: (1 - mask) * filter, [batch, keys] or [batch, queries, keys].
  const ir::ValueInfo* vi = nullptr;
  for (const ir::ValueInfo& in : l.graph.inputs)
    if (in.name == m) vi = &in;
  if (!vi || !vi->type.has_shape || (vi->type.shape.size() != 2 && vi->type.shape.size() != 3)) return std::nullopt;
  const std::string one = l.constant(Tensor::scalar<float>(DType::kFloat32, 1.0f), "one");
  const std::string add =
      l.add("Mul", {l.add("Sub", {one, l.add("Cast", {m}, "", {ir::Attribute::of_int("to", 1)})}), masked()});
  return unsqueeze(l, add, vi->type.shape.size() == 2 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1});
}

// What Attention and QAttention share: the conditions on the node and its weights (input 1,
// [E_in, 3E] constant), and its scale.
std::optional<std::vector<ir::Attribute>> attention_attrs(const NodeLowering& l, size_t past_input) {
  const ir::Node& n = l.node;
  const int64_t heads = n.attr_int("num_heads", 0);
  const Tensor* w = l.index.constant(n.inputs[1]);
  if (heads <= 0 || !w || w->rank() != 2 || w->dim(1) % 3 != 0 || (w->dim(1) / 3) % heads != 0) return std::nullopt;
  const std::vector<int64_t> sizes = n.attr_ints("qkv_hidden_sizes");
  if (!sizes.empty() && (sizes.size() != 3 || sizes[0] != w->dim(1) / 3 || sizes[1] != sizes[0] || sizes[2] != sizes[0]))
    return std::nullopt;
  if (n.attr_int("unidirectional", 0) != 0 || n.attr_int("do_rotary", 0) != 0 || l.input(past_input) != "" ||
      l.output_read(1))
    return std::nullopt;
  float scale = n.attr_float("scale", 0.0f);
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(w->dim(1) / 3 / heads));
  return std::vector<ir::Attribute>{ir::Attribute::of_int("num_heads", heads), ir::Attribute::of_float("scale", scale)};
}

bool attention(NodeLowering& l) {
  const ir::Node& n = l.node;
  if (n.inputs.size() < 2 || l.input(5) != "" || l.input(6) != "") return false;  // attention_bias, past_sequence_length
  auto attrs = attention_attrs(l, 4);
  auto mask = attrs ? additive_mask(l, 3, n.inputs[0]) : std::nullopt;
  if (!mask) return false;
  l.add("MultiHeadAttention", {n.inputs[0], n.inputs[1], l.input(2), *mask}, n.outputs[0], *attrs, "ai.kiln");
  l.model.opsets.emplace("ai.kiln", 1);
  return true;
}

bool qattention(NodeLowering& l) {
  const ir::Node& n = l.node;
  if (n.inputs.size() < 5) return false;
  auto attrs = attention_attrs(l, 8);
  auto mask = attrs ? additive_mask(l, 5, n.inputs[0]) : std::nullopt;
  if (!mask) return false;
  const std::string p = l.add("MatMulIntegerToFloat",
                              {n.inputs[0], n.inputs[1], n.inputs[3], n.inputs[4], l.input(6), l.input(7), l.input(2)},
                              "", {}, "com.microsoft");
  // Q, K and V packed in P's rows, as the attention reads them.
  l.add("ScaledDotProductAttention", {p, "", "", *mask}, n.outputs[0], *attrs, "ai.kiln");
  l.model.opsets.emplace("ai.kiln", 1);
  l.model.opsets.emplace("com.microsoft", 1);
  return true;
}

bool skip_layer_norm(NodeLowering& l) {
  const ir::Node& n = l.node;
  if (n.inputs.size() < 3) return false;
  for (size_t i = 1; i < 3 && i < n.outputs.size(); ++i)
    if (l.output_read(i)) return false;  // mean and inverse deviation: not computed
  ir::Node s = make_node(n.name + "_kiln", "SkipLayerNorm", {n.inputs[0], n.inputs[1], n.inputs[2], l.input(3), l.input(4)},
                         {n.outputs[0]}, "ai.kiln");
  if (n.outputs.size() > 3 && !n.outputs[3].empty()) s.outputs.push_back(n.outputs[3]);
  s.attrs = {ir::Attribute::of_int("axis", -1), ir::Attribute::of_float("epsilon", n.attr_float("epsilon", 1e-12f))};
  l.nodes.push_back(std::move(s));
  l.model.opsets.emplace("ai.kiln", 1);
  return true;
}

bool gelu(NodeLowering& l, bool tanh) {
  const ir::Node& n = l.node;
  std::vector<ir::Attribute> attrs;
  if (tanh) attrs.push_back(ir::Attribute::of_string("approximate", "tanh"));
  const std::string x = n.has_input(1) ? l.add("Add", {n.inputs[0], n.inputs[1]}) : n.inputs[0];
  l.add("Gelu", {x}, n.outputs[0], attrs, "ai.kiln");
  l.model.opsets.emplace("ai.kiln", 1);
  return true;
}

bool lower(NodeLowering& l) {
  const ir::Node& n = l.node;
  if (n.domain != "com.microsoft" || n.inputs.empty()) return false;
  const std::string& op = n.op_type;
  if (op == "EmbedLayerNormalization") return float_embed_layer_norm(l);
  if (op == "QEmbedLayerNormalization") return qembed_layer_norm(l);
  if (op == "Attention") return attention(l);
  if (op == "QAttention") return qattention(l);
  if (op == "SkipLayerNormalization") return skip_layer_norm(l);
  if (op == "BiasGelu" && n.inputs.size() == 2) return gelu(l, false);
  if (op == "Gelu" && n.inputs.size() == 1) return gelu(l, false);
  if (op == "FastGelu" && n.inputs.size() <= 2) return gelu(l, true);
  if (op == "QuickGelu" && n.inputs.size() == 1) {
    const float alpha = n.attr_float("alpha", 1.702f);
    const std::string a = l.constant(Tensor::scalar<float>(DType::kFloat32, alpha), "alpha");
    l.add("Mul", {n.inputs[0], l.add("Sigmoid", {l.add("Mul", {n.inputs[0], a})})}, n.outputs[0]);
    return true;
  }
  return false;
}

class ContribTransformer : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override { return lower_nodes(model, lower); }
};

}  // namespace

KILN_REGISTER_PASS(ContribTransformer, "contrib-transformer", 1, kSimplify, 3, false);

}  // namespace kiln::passes
