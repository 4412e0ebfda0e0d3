// Schemas of the ai.kiln NCHWc layout ops (ReorderToBlocked, ReorderFromBlocked, BlockedConv,
// BlockedMaxPool, BlockedAveragePool, BlockedGlobalAveragePool, BlockedSqueezeExcite,
// BlockedResize): a blocked tensor is [N, ceil(C/8), H, W, 8]; shapes come from the standard op's
// schema run on the NCHW view.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas::kiln_nchwc {
namespace {

constexpr int64_t kBlock = 8;

bool ranked(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

Dim blocks_of(const Dim& c) {
  return c.known() ? known_dim((c.value + kBlock - 1) / kBlock) : unknown_dim();
}

// [N, Cb, H, W, 8] -> [N, Cb*8, H, W]; an error for another rank.
Result<TypeInfo> nchw_view(const InferContext& ctx, const TypeInfo& t) {
  if (!ranked(t)) return t;
  if (t.shape.size() != 5 || (t.shape[4].known() && t.shape[4].value != kBlock))
    return ctx.error("a blocked input must be [N, C/8, H, W, 8], got " + dims_str(t.shape));
  return tensor_type(t.dtype, {t.shape[0], dim_mul(t.shape[1], known_dim(kBlock)), t.shape[2],
                               t.shape[3]});
}

// [N, C, H, W] of the standard op's result -> [N, blocks, H, W, 8].
Outputs blocked_result(const TypeInfo& plain, const Dim& blocks) {
  if (!ranked(plain) || plain.shape.size() != 4) return one(tensor_type_unranked(plain.dtype));
  return one(tensor_type(plain.dtype,
                         {plain.shape[0], blocks, plain.shape[2], plain.shape[3], known_dim(kBlock)}));
}

// Runs the schema of standard op `op` on `inputs` with this node's attributes, and the values of
// inputs after the first (Resize's scales and sizes).
Result<TypeInfo> infer_as(const InferContext& ctx, const char* op, std::vector<TypeInfo> inputs) {
  const OpSchema* base = OpSchemaRegistry::global().find("", op);
  if (!base || !base->infer) return ctx.error(std::string("the schema of ") + op + " is missing");
  InferContext inner(ctx.node, 21);
  inner.inputs = std::move(inputs);
  inner.constants = ctx.constants;
  inner.values = ctx.values;
  if (!inner.constants.empty()) inner.constants[0] = nullptr;  // the blocked X is not the view
  if (!inner.values.empty()) inner.values[0].reset();
  KILN_ASSIGN_OR_RETURN(std::vector<TypeInfo> outs, base->infer(inner));
  if (outs.empty()) return ctx.error(std::string(op) + " inferred no output");
  return outs[0];
}

// With channels_last the plain side is NHWC.
Outputs infer_to_blocked(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!ranked(x)) return one(tensor_type_unranked(x.dtype));
  const bool last = ctx.node.attr_int("channels_last", 0) != 0;
  if (x.shape.size() != 4)
    return ctx.error(std::string("X must be ") + (last ? "NHWC" : "NCHW") + ", got " +
                     dims_str(x.shape));
  const Dims& d = x.shape;
  return one(last ? tensor_type(x.dtype, {d[0], blocks_of(d[3]), d[1], d[2], known_dim(kBlock)})
                  : tensor_type(x.dtype, {d[0], blocks_of(d[1]), d[2], d[3], known_dim(kBlock)}));
}

Outputs infer_from_blocked(InferContext& ctx) {
  const int64_t c = ctx.node.attr_int("channels", -1);
  if (c < 0) return ctx.error("the channels attribute is required");
  KILN_ASSIGN_OR_RETURN(TypeInfo x, nchw_view(ctx, ctx.input(0)));
  if (!ranked(x)) return one(tensor_type_unranked(x.dtype));
  if (x.shape[1].known() && blocks_of(known_dim(c)).value * kBlock != x.shape[1].value)
    return ctx.error("channels " + std::to_string(c) + " does not fit " +
                     dims_str(ctx.input(0).shape));
  if (ctx.node.attr_int("channels_last", 0))
    return one(tensor_type(x.dtype, {x.shape[0], x.shape[2], x.shape[3], known_dim(c)}));
  return one(tensor_type(x.dtype, {x.shape[0], known_dim(c), x.shape[2], x.shape[3]}));
}

// The NCHW view of W: dense [Mb, Cb, KH, KW, 8, 8] is [Mb*8, Cb*8, KH, KW]; depthwise
// [Cb, KH, KW, 8] is [Cb*8, 1, KH, KW].
Result<TypeInfo> conv_weight_view(const InferContext& ctx, const TypeInfo& w, bool depthwise) {
  if (!ranked(w)) return w;
  const Dim b = known_dim(kBlock);
  if (depthwise) {
    if (w.shape.size() != 4) return ctx.error("depthwise W must be [C/8, KH, KW, 8]");
    return tensor_type(w.dtype, {dim_mul(w.shape[0], b), known_dim(1), w.shape[1], w.shape[2]});
  }
  if (w.shape.size() != 6) return ctx.error("W must be [M/8, C/8, KH, KW, 8, 8]");
  return tensor_type(w.dtype, {dim_mul(w.shape[0], b), dim_mul(w.shape[1], b), w.shape[2], w.shape[3]});
}

Outputs infer_blocked_conv(InferContext& ctx) {
  // Depthwise W is [C/8, KH, KW, 8]; dense W [M/8, C/8/group, KH, KW, 8, 8], also for groups of
  // whole blocks (group > 1: regnet's, resnext's), which were taken for depthwise, failing
  // inference and leaving every type after the first grouped conv unknown.
  const TypeInfo& w_blocked = ctx.input(1);
  const bool depthwise =
      ctx.node.attr_int("group", 1) != 1 && ranked(w_blocked) && w_blocked.shape.size() == 4;
  // X is blocked, or plain NCHW with at most 8 channels (read as one block).
  const TypeInfo& xin = ctx.input(0);
  const bool plain = ranked(xin) && xin.shape.size() == 4;
  if (plain && xin.shape[1].known() && xin.shape[1].value > kBlock)
    return ctx.error("a plain NCHW X may have at most 8 channels, got " + dims_str(xin.shape));
  KILN_ASSIGN_OR_RETURN(TypeInfo x, plain ? Result<TypeInfo>(xin) : nchw_view(ctx, xin));
  KILN_ASSIGN_OR_RETURN(TypeInfo w, conv_weight_view(ctx, ctx.input(1), depthwise));
  KILN_ASSIGN_OR_RETURN(TypeInfo y, infer_as(ctx, "Conv", {x, w}));
  const TypeInfo& wb = ctx.input(1);
  Dim blocks = unknown_dim();
  if (ranked(wb) && !wb.shape.empty()) blocks = wb.shape[0];
  return blocked_result(y, blocks);
}

Cost cost_blocked_conv(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  // The convolution's own multiply-adds, as the profiler's % of peak should count them: padding
  // lanes are computed but are not work (a plain 3-channel X read as a block of 8 would count
  // 8/3 of conv1's FLOPs). Per output element: C * KH*KW of W [Mb, Cb, KH, KW, 8, 8], with C
  // the plain X's channels or Cb*8; KH*KW of a depthwise W [Cb, KH, KW, 8]. A Winograd kernel
  // does fewer: its GFLOP/s are the direct convolution's, as is usual for Winograd.
  const auto w = ctx.input(1).static_shape();
  const auto x = ctx.input(0).static_shape();
  const auto y = outs.empty() ? std::nullopt : outs[0].static_shape();
  if (!w || !y || y->size() != 5) return Cost{0, io_bytes(ctx, outs), 0};
  const bool depthwise = w->size() == 4;
  double per = 1;
  for (size_t i = depthwise ? 1 : 2; i + (depthwise ? 1 : 2) < w->size(); ++i)
    per *= static_cast<double>((*w)[i]);
  if (!depthwise) {
    const bool plain = x && x->size() == 4;
    per *= static_cast<double>(plain ? (*x)[1] : (*w)[1] * kBlock);
  }
  const int64_t channels = ctx.node.attr_int("channels", (*y)[1] * kBlock);
  const double outputs = static_cast<double>((*y)[0] * channels * (*y)[2] * (*y)[3]);
  return Cost{2 * outputs * per + 4 * outputs, io_bytes(ctx, outs), 0};
}

Outputs infer_blocked_pool(InferContext& ctx) {
  const std::string& op = ctx.node.op_type;
  const char* base = op == "BlockedMaxPool"       ? "MaxPool"
                     : op == "BlockedAveragePool" ? "AveragePool"
                                                  : "GlobalAveragePool";
  KILN_ASSIGN_OR_RETURN(TypeInfo x, nchw_view(ctx, ctx.input(0)));
  KILN_ASSIGN_OR_RETURN(TypeInfo y, infer_as(ctx, base, {x}));
  const TypeInfo& xb = ctx.input(0);
  return blocked_result(y, ranked(xb) && xb.shape.size() == 5 ? xb.shape[1] : unknown_dim());
}

Cost cost_blocked_pool(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  double per = 1;
  for (int64_t k : ctx.node.attr_ints("kernel_shape")) per *= static_cast<double>(k);
  if (ctx.node.op_type == "BlockedGlobalAveragePool") return cost_per_input(ctx, outs, 1);
  return Cost{numel_or_zero(outs[0]) * per, io_bytes(ctx, outs), 0};
}

// Y is X (blocked, any shape the kernel accepts).
Outputs infer_blocked_squeeze_excite(InferContext& ctx) {
  KILN_RETURN_IF_ERROR(nchw_view(ctx, ctx.input(0)).status());
  return one(ctx.input(0));
}

// The Resize of the NCHW view; the blocks of X.
Outputs infer_blocked_resize(InferContext& ctx) {
  std::vector<TypeInfo> inputs;
  KILN_ASSIGN_OR_RETURN(TypeInfo x, nchw_view(ctx, ctx.input(0)));
  inputs.push_back(x);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.input(i));
  KILN_ASSIGN_OR_RETURN(TypeInfo y, infer_as(ctx, "Resize", std::move(inputs)));
  const TypeInfo& xb = ctx.input(0);
  return blocked_result(y, ranked(xb) && xb.shape.size() == 5 ? xb.shape[1] : unknown_dim());
}

// Two taps a pixel and axis at most, 8 lanes a pixel.
Cost cost_blocked_resize(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  return Cost{outs.empty() ? 0 : 4 * numel_or_zero(outs[0]), io_bytes(ctx, outs), 0};
}

Cost cost_copy(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  return Cost{0, io_bytes(ctx, outs), 0};
}

}  // namespace

KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_to_blocked, .cost = cost_copy}),
                        "ReorderToBlocked");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_from_blocked, .cost = cost_copy}),
                        "ReorderFromBlocked");
KILN_REGISTER_OP_SCHEMA("ai.kiln",
                        (OpSchema{.infer = infer_blocked_conv, .cost = cost_blocked_conv}),
                        "BlockedConv");
KILN_REGISTER_OP_SCHEMA("ai.kiln",
                        (OpSchema{.infer = infer_blocked_squeeze_excite,
                                  .cost = [](const InferContext& ctx, const std::vector<TypeInfo>& outs) {
                                    return cost_per_input(ctx, outs, 2);
                                  }}),
                        "BlockedSqueezeExcite");
KILN_REGISTER_OP_SCHEMA("ai.kiln",
                        (OpSchema{.infer = infer_blocked_resize, .cost = cost_blocked_resize}),
                        "BlockedResize");
KILN_REGISTER_OP_SCHEMA("ai.kiln",
                        (OpSchema{.infer = infer_blocked_pool, .cost = cost_blocked_pool}),
                        "BlockedMaxPool", "BlockedAveragePool", "BlockedGlobalAveragePool");

}  // namespace kiln::ir::schemas::kiln_nchwc
