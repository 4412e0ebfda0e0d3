// Schemas of kiln's normalisation and GELU ops (domain ai.kiln): LayerNorm, RMSNorm,
// SkipLayerNorm, EmbedLayerNorm, Gelu, BiasGelu. Semantics are in docs/ops.md.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas::kiln_norm {

// Y has X's type.
Outputs infer_same(InferContext& ctx) {
  TypeInfo t = ctx.input(0);
  if (t.kind != TypeInfo::Kind::kTensor) t = tensor_type_unranked(DType::kUndefined);
  return one(t);
}

// The numpy broadcast of the inputs listed, with input 0's element type.
Result<TypeInfo> broadcast_of(InferContext& ctx, std::initializer_list<size_t> which) {
  const DType dt = ctx.input(0).kind == TypeInfo::Kind::kTensor ? ctx.input(0).dtype : DType::kUndefined;
  std::vector<const TypeInfo*> ts;
  for (size_t i : which) {
    if (!ctx.has_input(i)) continue;
    if (ctx.input(i).kind != TypeInfo::Kind::kTensor) return tensor_type_unranked(dt);
    ts.push_back(&ctx.inputs[i]);
  }
  auto b = broadcast_shapes(ts);
  if (!b) return ctx.error(b.status().message());
  if (!b->has_value()) return tensor_type_unranked(dt);
  return tensor_type(dt, std::move(**b));
}

// SkipLayerNorm: Y and the optional sum S both have the shape of input + skip + bias.
Outputs infer_skip_layer_norm(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(TypeInfo s, broadcast_of(ctx, {0, 1, 4}));
  std::vector<TypeInfo> outs{s};
  if (ctx.node.outputs.size() > 1) outs.push_back(s);
  return outs;
}

Outputs infer_bias_gelu(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(TypeInfo y, broadcast_of(ctx, {0, 1}));
  return one(y);
}

// EmbedLayerNorm: [batch, seq] ids -> [batch, seq, E], E the word table's width.
Outputs infer_embed_layer_norm(InferContext& ctx) {
  const TypeInfo& ids = ctx.input(0);
  const TypeInfo& word = ctx.input(2);
  if (ids.kind != TypeInfo::Kind::kTensor || !ids.has_shape) return one(tensor_type_unranked(DType::kFloat32));
  if (ids.shape.size() != 2) return ctx.error("input_ids must be [batch, seq]");
  Dim e = unknown_dim();
  if (word.kind == TypeInfo::Kind::kTensor && word.has_shape) {
    if (word.shape.size() != 2) return ctx.error("the word embedding must be [vocab, E]");
    e = word.shape[1];
  }
  return one(tensor_type(DType::kFloat32, Dims{ids.shape[0], ids.shape[1], e}));
}

Cost cost_embed_layer_norm(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  return Cost{10 * numel_or_zero(outs.at(0)), io_bytes(ctx, outs), 0};
}

// Mean, variance, normalise, scale and shift: about 8 flops per element.
Cost cost_norm(const InferContext& ctx, const std::vector<TypeInfo>& outs) { return cost_per_input(ctx, outs, 8); }

KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_same, .cost = cost_norm}), "LayerNorm", "RMSNorm");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_embed_layer_norm, .cost = cost_embed_layer_norm}),
                        "EmbedLayerNorm");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_skip_layer_norm, .cost = cost_norm}), "SkipLayerNorm");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_same, .elementwise = true, .flops_per_element = 10}),
                        "Gelu");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_bias_gelu, .elementwise = true,
                                             .broadcast = Broadcast::kMultidirectional, .flops_per_element = 11}),
                        "BiasGelu");

}  // namespace kiln::ir::schemas::kiln_norm
