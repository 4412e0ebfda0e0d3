// Schemas of the ai.kiln epilogue ops (FusedConv, FusedConvTranspose, FusedGemm, FusedMatMul,
// SqueezeExcite): shapes and cost are those of the standard op they extend, plus the elementwise
// tail.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas::kiln_epilogue {
namespace {

// The schema of the standard op a fused op wraps; registered at start-up like this one.
const OpSchema* base_of(const Node& n) {
  const char* base = n.op_type == "FusedConv"            ? "Conv"
                     : n.op_type == "FusedConvTranspose" ? "ConvTranspose"
                     : n.op_type == "FusedGemm"          ? "Gemm"
                                                         : "MatMul";
  return OpSchemaRegistry::global().find("", base);
}

Outputs infer_fused(InferContext& ctx) {
  const OpSchema* base = base_of(ctx.node);
  if (!base || !base->infer) return ctx.error("the schema of the standard op is missing");
  KILN_ASSIGN_OR_RETURN(std::vector<TypeInfo> outs, base->infer(ctx));
  // The residual (input 3) has the result's shape; it may know dims the inference did not.
  const TypeInfo& z = ctx.input(3);
  if (outs.size() == 1 && ctx.has_input(3) && z.has_shape && outs[0].has_shape) {
    if (z.shape.size() != outs[0].shape.size())
      return ctx.error("residual rank differs from the result's: " + dims_str(z.shape) + " vs " +
                       dims_str(outs[0].shape));
    for (size_t i = 0; i < z.shape.size(); ++i) {
      const Dim& a = outs[0].shape[i];
      const Dim& b = z.shape[i];
      if (a.known() && b.known() && a.value != b.value)
        return ctx.error("residual shape " + dims_str(z.shape) + " differs from the result's " +
                         dims_str(outs[0].shape));
      outs[0].shape[i] = dim_merge(a, b);
    }
  }
  return outs;
}

// The activation and residual add: a few flops per output element.
constexpr double kTailFlops = 4;

Cost cost_fused(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const OpSchema* base = base_of(ctx.node);
  Cost c = base ? (base->cost ? base->cost(ctx, outs) : default_cost(*base, ctx, outs)) : Cost{};
  if (!outs.empty()) c.flops += kTailFlops * numel_or_zero(outs[0]);
  c.bytes = io_bytes(ctx, outs);
  return c;
}

// Y has X's type.
Outputs infer_squeeze_excite(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (x.has_shape && x.shape.size() < 3)
    return ctx.error("X must have rank 3 or more, got " + dims_str(x.shape));
  return one(x);
}

// The mean, the two small layers and the scaling.
Cost cost_squeeze_excite(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const TypeInfo& x = ctx.input(0);
  double layers = 0;
  if (x.has_shape && !x.shape.empty() && x.shape[0].known())
    layers = 2 * 2 * static_cast<double>(x.shape[0].value) * numel_or_zero(ctx.input(1));
  return Cost{2 * numel_or_zero(x) + layers, io_bytes(ctx, outs), 0};
}

}  // namespace

KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_fused, .cost = cost_fused}),
                        "FusedConv", "FusedConvTranspose", "FusedGemm", "FusedMatMul");
KILN_REGISTER_OP_SCHEMA("ai.kiln",
                        (OpSchema{.infer = infer_squeeze_excite, .cost = cost_squeeze_excite}),
                        "SqueezeExcite");

}  // namespace kiln::ir::schemas::kiln_epilogue
