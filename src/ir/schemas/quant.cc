// Schemas of the 8-bit ops beyond ONNX's: kiln's DynamicQuantMatMul (MatMul's shapes, float32),
// and the com.microsoft (ONNX Runtime contrib) ones kiln reads and writes:
// QLinearConv (ONNX's inputs; channels_last makes X and Y [N, H, W, C]; kiln's form has a table
// of Y's codes as input 9, or a residual add's inputs, and may take a float32 NCHW X) and NhwcMaxPool (MaxPool
// on channels-last 8-bit X), whose shapes come from the standard op's schema run on the NCHW
// view; QLinearAdd and QLinearMul (A and B broadcast, C of A's type); QLinearGlobalAveragePool
// (one pixel of X's channels, either layout); MatMulIntegerToFloat
// (MatMulInteger's shapes, float32; kiln's form with an epilogue too).
#include <optional>

#include "ir/schemas/common.h"

namespace kiln::ir::schemas::quant {
namespace {

bool ranked(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

// [N, H, W, C] <-> [N, C, H, W] (any spatial rank).
Dims channels_first(const Dims& d) {
  Dims r = {d.front(), d.back()};
  r.insert(r.end(), d.begin() + 1, d.end() - 1);
  return r;
}
Dims channels_last(const Dims& d) {
  Dims r = {d.front()};
  r.insert(r.end(), d.begin() + 2, d.end());
  r.push_back(d[1]);
  return r;
}

// The standard op `op`'s inference on X's NCHW view, its result made channels-last again (X
// NCHW already where x_last is false; X of type x_type where given).
Outputs infer_channels_last(InferContext& ctx, const char* op, bool last, bool x_last,
                            std::optional<DType> x_type = std::nullopt) {
  const OpSchema* base = OpSchemaRegistry::global().find("", op);
  if (!base || !base->infer) return ctx.error(std::string("the schema of ") + op + " is missing");
  InferContext inner(ctx.node, 21);
  inner.inputs = ctx.inputs;
  inner.constants = ctx.constants;
  inner.values = ctx.values;
  const TypeInfo& x = ctx.input(0);
  if (x_type && !inner.inputs.empty()) inner.inputs[0].dtype = *x_type;
  if (x_last && ranked(x)) {
    if (x.shape.size() < 3) return ctx.error("X must be [N, spatial..., C], got " + dims_str(x.shape));
    inner.inputs[0] = tensor_type(x_type ? *x_type : x.dtype, channels_first(x.shape));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<TypeInfo> outs, base->infer(inner));
  if (outs.empty()) return ctx.error(std::string(op) + " inferred no output");
  TypeInfo y = outs[0];
  if (last && ranked(y) && y.shape.size() >= 3) y.shape = channels_last(y.shape);
  return one(y);
}

Outputs infer_qlinear_conv(InferContext& ctx) {
  const bool last = ctx.node.attr_int("channels_last", 0) != 0;
  return infer_channels_last(ctx, "QLinearConv", last, last);
}
// ai.kiln's: com.microsoft's, but a float32 X is NCHW whatever channels_last says, quantized to
// x_zero_point's type (u8 where absent) by the node; without y_scale, Y is float32.
Outputs infer_kiln_qlinear_conv(InferContext& ctx) {
  const bool last = ctx.node.attr_int("channels_last", 0) != 0;
  const DType codes = ctx.input(2).dtype != DType::kUndefined ? ctx.input(2).dtype : DType::kUInt8;
  Outputs out = ctx.input(0).dtype != DType::kFloat32 ? infer_channels_last(ctx, "QLinearConv", last, last)
                                                      : infer_channels_last(ctx, "QLinearConv", last, false, codes);
  if (out && !out->empty() && (ctx.node.inputs.size() < 7 || ctx.node.inputs[6].empty()))
    (*out)[0].dtype = DType::kFloat32;
  return out;
}
Outputs infer_nhwc_max_pool(InferContext& ctx) { return infer_channels_last(ctx, "MaxPool", true, true); }

Outputs infer_qlinear_binary(InferContext& ctx) {
  const TypeInfo &a = ctx.input(0), &b = ctx.input(3);
  KILN_ASSIGN_OR_RETURN(std::optional<Dims> shape, broadcast_shapes({&a, &b}));
  if (!shape) return one(tensor_type_unranked(a.dtype));
  return one(tensor_type(a.dtype, std::move(*shape)));
}

// X's type, [N, C, 1...] (channels_last: [N, 1..., C]).
Outputs infer_qlinear_global_average_pool(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!ranked(x)) return one(tensor_type_unranked(x.dtype));
  if (x.shape.size() < 3) return ctx.error("X must have rank 3 or more, got " + dims_str(x.shape));
  const size_t c = ctx.node.attr_int("channels_last", 0) ? x.shape.size() - 1 : 1;
  Dims y(x.shape.size(), known_dim(1));
  y[0] = x.shape[0], y[c] = x.shape[c];
  return one(tensor_type(x.dtype, std::move(y)));
}

// X's type and shape (QLinearSigmoid).
Outputs infer_same_as_x(InferContext& ctx) { return one(ctx.input(0)); }

// X's shape, the table's type (QLinearLookup).
Outputs infer_lookup(InferContext& ctx) {
  TypeInfo y = ctx.input(0);
  y.dtype = ctx.input(1).dtype;
  return one(y);
}

// A's shape with its last dim N (MatMulNBits: Y = A · W, W [K, N]), float32.
Outputs infer_matmul_nbits(InferContext& ctx) {
  const TypeInfo& a = ctx.input(0);
  if (!ranked(a) || a.shape.empty()) return one(tensor_type_unranked(DType::kFloat32));
  Dims shape = a.shape;
  shape.back() = Dim{ctx.node.attr_int("N", -1), ""};
  return one(tensor_type(DType::kFloat32, std::move(shape)));
}

// MatMulInteger's shapes of inputs 0 and 1, float32 (MatMulIntegerToFloat, DynamicQuantMatMul).
Outputs infer_matmul_integer_to_float(InferContext& ctx) {
  const OpSchema* base = OpSchemaRegistry::global().find("", "MatMulInteger");
  if (!base || !base->infer) return ctx.error("the schema of MatMulInteger is missing");
  InferContext inner(ctx.node, 21);
  inner.inputs = {ctx.input(0), ctx.input(1)};
  KILN_ASSIGN_OR_RETURN(std::vector<TypeInfo> outs, base->infer(inner));
  if (outs.empty()) return ctx.error("MatMulInteger inferred no output");
  return one(with_dtype(outs[0], DType::kFloat32));
}

Cost cost_as(const char* op, const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const OpSchema* base = OpSchemaRegistry::global().find("", op);
  return base && base->cost ? base->cost(ctx, outs) : Cost{0, io_bytes(ctx, outs), 0};
}

Cost cost_conv(const InferContext& ctx, const std::vector<TypeInfo>& outs) { return cost_as("QLinearConv", ctx, outs); }
Cost cost_pool(const InferContext& ctx, const std::vector<TypeInfo>& outs) { return cost_as("MaxPool", ctx, outs); }
Cost cost_matmul(const InferContext& ctx, const std::vector<TypeInfo>& outs) { return cost_as("MatMulInteger", ctx, outs); }

}  // namespace

KILN_REGISTER_OP_SCHEMA("com.microsoft", (OpSchema{.infer = infer_qlinear_conv, .cost = cost_conv}), "QLinearConv");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_kiln_qlinear_conv, .cost = cost_conv}), "QLinearConv");
KILN_REGISTER_OP_SCHEMA("com.microsoft", (OpSchema{.infer = infer_nhwc_max_pool, .cost = cost_pool}), "NhwcMaxPool");
KILN_REGISTER_OP_SCHEMA("com.microsoft", (OpSchema{.infer = infer_qlinear_binary}), "QLinearAdd", "QLinearMul");
KILN_REGISTER_OP_SCHEMA("com.microsoft", (OpSchema{.infer = infer_same_as_x}), "QLinearSigmoid");
KILN_REGISTER_OP_SCHEMA("com.microsoft", (OpSchema{.infer = infer_qlinear_global_average_pool}),
                        "QLinearGlobalAveragePool");
KILN_REGISTER_OP_SCHEMA("com.microsoft", (OpSchema{.infer = infer_matmul_nbits}), "MatMulNBits");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_lookup}), "QLinearLookup");
KILN_REGISTER_OP_SCHEMA("com.microsoft", (OpSchema{.infer = infer_matmul_integer_to_float, .cost = cost_matmul}),
                        "MatMulIntegerToFloat");
KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_matmul_integer_to_float, .cost = cost_matmul}),
                        "DynamicQuantMatMul", "MatMulIntegerToFloat");

}  // namespace kiln::ir::schemas::quant
