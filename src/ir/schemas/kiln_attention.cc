// Schemas of ai.kiln.MultiHeadAttention and ai.kiln.ScaledDotProductAttention (docs/ops.md):
// output shape and cost of the fused QKV projection (the first only) plus per-head scaled
// dot-product attention.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas {
namespace {

Outputs infer_mha(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& w = ctx.input(1);
  if (x.kind != TypeInfo::Kind::kTensor) return one(tensor_type_unranked(DType::kFloat32));
  if (x.dtype != DType::kFloat32) return ctx.error("X must be float32");
  if (ctx.node.attr_int("num_heads", 0) <= 0) return ctx.error("num_heads must be positive");
  if (!x.has_shape) return one(tensor_type_unranked(x.dtype));
  if (x.shape.size() != 3) return ctx.error("X must have rank 3, got " + dims_str(x.shape));
  Dim e = unknown_dim();
  if (w.kind == TypeInfo::Kind::kTensor && w.has_shape) {
    if (w.shape.size() != 2) return ctx.error("W must have rank 2, got " + dims_str(w.shape));
    if (w.shape[1].known()) {
      if (w.shape[1].value % 3 != 0) return ctx.error("W.shape[1] must be 3 * E");
      e = known_dim(w.shape[1].value / 3);
    }
  }
  return one(shaped_like(x, {x.shape[0], x.shape[1], e}));
}

Cost cost_mha(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& w = ctx.input(1);
  auto xs = x.static_shape();
  auto ws = w.static_shape();
  if (!xs || !ws || xs->size() != 3 || ws->size() != 2) return Cost{0, io_bytes(ctx, outs), 1};
  const double tokens = static_cast<double>((*xs)[0] * (*xs)[1]);
  const double seq = static_cast<double>(ctx.node.attr_int("seq_first", 0) ? (*xs)[0] : (*xs)[1]);
  const double e = static_cast<double>((*ws)[1] / 3);
  // The projection, Q·K^T and P·V (2 flops per multiply-add), and ~5 flops per score.
  const double flops = 2 * tokens * static_cast<double>((*ws)[0]) * 3 * e + 4 * tokens * seq * e +
                       5 * tokens * seq * static_cast<double>(ctx.node.attr_int("num_heads", 1));
  return Cost{flops, io_bytes(ctx, outs), 0};
}

Outputs infer_sdpa(InferContext& ctx) {
  const TypeInfo& q = ctx.input(0);
  if (q.kind != TypeInfo::Kind::kTensor) return one(tensor_type_unranked(DType::kFloat32));
  if (q.dtype != DType::kFloat32) return ctx.error("Q must be float32");
  if (ctx.node.attr_int("num_heads", 0) <= 0) return ctx.error("num_heads must be positive");
  if (q.has_shape && q.shape.size() != 3) return ctx.error("Q must have rank 3, got " + dims_str(q.shape));
  // Q alone (K and V omitted) is packed [batch, seq, 3E]: Y is [batch, seq, E].
  const bool packed = !ctx.node.has_input(1) && !ctx.node.has_input(2);
  if (!packed || !q.has_shape) return one(packed ? tensor_type_unranked(DType::kFloat32) : q);
  TypeInfo y = q;
  ir::Dim& e = y.shape[2];
  if (e.value >= 0) {
    if (e.value % 3 != 0) return ctx.error("packed Q, K, V needs a last dim of 3E, got " + dims_str(q.shape));
    e.value /= 3;
  } else {
    e = ir::Dim{};  // unknown
  }
  return one(y);
}

Cost cost_sdpa(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  auto qs = ctx.input(0).static_shape();
  if (!qs || qs->size() != 3) return Cost{0, io_bytes(ctx, outs), 1};
  const double tokens = static_cast<double>((*qs)[0] * (*qs)[1]);
  const double seq = static_cast<double>(ctx.node.attr_int("seq_first", 0) ? (*qs)[0] : (*qs)[1]);
  // Q·K^T and P·V (2 flops per multiply-add), and ~5 flops per score.
  const double e = static_cast<double>((*qs)[2]) / (ctx.node.has_input(1) ? 1 : 3);  // packed: 3E
  const double flops = 4 * tokens * seq * e +
                       5 * tokens * seq * static_cast<double>(ctx.node.attr_int("num_heads", 1));
  return Cost{flops, io_bytes(ctx, outs), 0};
}

}  // namespace

KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_mha, .cost = cost_mha}),
                        "MultiHeadAttention");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_sdpa, .cost = cost_sdpa}),
                        "ScaledDotProductAttention");

}  // namespace kiln::ir::schemas
