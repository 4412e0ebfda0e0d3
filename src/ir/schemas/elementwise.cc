// Schemas of elementwise operators: unary math and activations, broadcasting binary and variadic
// ops, comparisons, Where, Cast and the (de)quantizers.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas::elementwise {

Outputs infer_same(InferContext& ctx) {
  TypeInfo t = ctx.input(0);
  if (t.kind == TypeInfo::Kind::kUnknown) t = tensor_type_unranked(DType::kUndefined);
  if (ctx.node.op_type == "Identity")
    if (auto v = ctx.dims_value(0)) ctx.set_output_value(0, *v);
  if (ctx.node.op_type == "Neg" && rank_of(t) <= 1 && dtype_is_integer(t.dtype))
    if (auto v = ctx.int_values(0)) {
      Dims n;
      for (int64_t x : *v) n.push_back(Dim{-x, ""});
      // A negative "dim" is not a dim: only non-negative results stay usable as shape values.
      bool ok = true;
      for (const Dim& d : n) ok = ok && d.value >= 0;
      if (ok) ctx.set_output_value(0, std::move(n));
    }
  return one(t);
}

Outputs infer_bool_same_shape(InferContext& ctx) { return one(with_dtype(ctx.input(0), DType::kBool)); }

Result<TypeInfo> broadcast_all(InferContext& ctx, size_t first, DType dtype) {
  std::vector<const TypeInfo*> ts;
  for (size_t i = first; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.input(i).kind != TypeInfo::Kind::kTensor) return tensor_type_unranked(dtype);
    ts.push_back(&ctx.inputs[i]);
  }
  if (ts.empty()) return tensor_type_unranked(dtype);
  auto b = broadcast_shapes(ts);
  if (!b) return ctx.error(b.status().message());
  if (!b->has_value()) return tensor_type_unranked(dtype);
  return tensor_type(dtype, std::move(**b));
}

// Arithmetic on shape values: Shape(x)[0] * Shape(x)[1] and the like.
void propagate_arith(InferContext& ctx, const TypeInfo& out) {
  if (!dtype_is_integer(out.dtype) || rank_of(out) > 1 || ctx.num_inputs() != 2) return;
  auto a = ctx.dims_value(0), b = ctx.dims_value(1);
  if (!a || !b) return;
  if (a->size() != b->size() && a->size() != 1 && b->size() != 1) return;
  const size_t n = std::max(a->size(), b->size());
  const std::string& op = ctx.node.op_type;
  Dims r;
  for (size_t i = 0; i < n; ++i) {
    const Dim& x = (*a)[a->size() == 1 ? 0 : i];
    const Dim& y = (*b)[b->size() == 1 ? 0 : i];
    if (op == "Add") r.push_back(dim_add(x, y));
    else if (op == "Mul") r.push_back(dim_mul(x, y));
    else if (op == "Sub") r.push_back(x.known() && y.known() ? known_dim(x.value - y.value)
                                       : (y.known() && y.value == 0 ? x : unknown_dim()));
    else if (op == "Div") r.push_back(x.known() && y.known() && y.value > 0 && x.value >= 0
                                          ? known_dim(x.value / y.value)
                                          : (y.known() && y.value == 1 ? x : unknown_dim()));
    else return;
  }
  ctx.set_output_value(0, std::move(r));
}

Outputs infer_broadcast(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(TypeInfo t, broadcast_all(ctx, 0, ctx.input(0).dtype));
  propagate_arith(ctx, t);
  return one(std::move(t));
}

Outputs infer_compare(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(TypeInfo t, broadcast_all(ctx, 0, DType::kBool));
  return one(std::move(t));
}

Outputs infer_where(InferContext& ctx) {
  DType dt = ctx.input(1).dtype != DType::kUndefined ? ctx.input(1).dtype : ctx.input(2).dtype;
  KILN_ASSIGN_OR_RETURN(TypeInfo t, broadcast_all(ctx, 0, dt));
  return one(std::move(t));
}

Outputs infer_cast(InferContext& ctx) {
  const DType to = attr_dtype(ctx.node, "to", DType::kUndefined);
  TypeInfo t = with_dtype(ctx.input(0), to);
  // Integers survive a cast to any numeric type (a size cast to float for Range, say).
  if ((dtype_is_integer(to) || dtype_is_float(to)) && dtype_is_integer(ctx.input(0).dtype))
    if (auto v = ctx.dims_value(0)) ctx.set_output_value(0, *v);
  return one(std::move(t));
}

Outputs infer_cast_like(InferContext& ctx) {
  TypeInfo t = with_dtype(ctx.input(0), ctx.input(1).dtype);
  if (dtype_is_integer(t.dtype))
    if (auto v = ctx.dims_value(0)) ctx.set_output_value(0, *v);
  return one(std::move(t));
}

Outputs infer_dropout(InferContext& ctx) {
  TypeInfo x = ctx.input(0);
  if (x.kind == TypeInfo::Kind::kUnknown) x = tensor_type_unranked(DType::kUndefined);
  return std::vector<TypeInfo>{x, with_dtype(x, DType::kBool)};
}

Outputs infer_quantize(InferContext& ctx) {
  DType dt = DType::kUInt8;
  if (ctx.has_input(2) && ctx.input(2).dtype != DType::kUndefined) dt = ctx.input(2).dtype;
  else dt = attr_dtype(ctx.node, "output_dtype", DType::kUInt8);
  if (dt == DType::kUndefined) dt = DType::kUInt8;
  return one(with_dtype(ctx.input(0), dt));
}

Outputs infer_dequantize(InferContext& ctx) {
  DType dt = attr_dtype(ctx.node, "output_dtype", DType::kUndefined);
  if (dt == DType::kUndefined) dt = ctx.input(1).dtype;
  if (dt == DType::kUndefined) dt = DType::kFloat32;
  return one(with_dtype(ctx.input(0), dt));
}

Outputs infer_dynamic_quantize(InferContext& ctx) {
  return std::vector<TypeInfo>{with_dtype(ctx.input(0), DType::kUInt8), tensor_type(DType::kFloat32, {}),
                               tensor_type(DType::kUInt8, {})};
}

const OpSchema kUnary{.infer = infer_same, .elementwise = true};

KILN_REGISTER_OP_SCHEMA("", kUnary, "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos",
                        "Cosh", "Erf", "Exp", "Floor", "Log", "Neg", "Reciprocal", "Relu", "Round", "Sigmoid",
                        "Sign", "Sin", "Sinh", "Sqrt", "Tan", "Tanh", "Softplus", "Softsign", "Elu", "Selu",
                        "Celu", "LeakyRelu", "HardSigmoid", "HardSwish", "Mish", "Gelu", "ThresholdedRelu",
                        "Shrink", "BitwiseNot", "Not", "Identity", "Clip");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_bool_same_shape, .elementwise = true}), "IsInf", "IsNaN");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_broadcast, .elementwise = true,
                                      .broadcast = Broadcast::kMultidirectional}),
                        "Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr",
                        "BitwiseXor", "And", "Or", "Xor", "Max", "Min", "Mean", "Sum");
// The output of PRelu has the shape of X (slope broadcasts to X; before opset 7, along channels).
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_same, .elementwise = true,
                                      .broadcast = Broadcast::kUnidirectional}),
                        "PRelu");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_compare, .elementwise = true,
                                      .broadcast = Broadcast::kMultidirectional}),
                        "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_where, .elementwise = true,
                                      .broadcast = Broadcast::kMultidirectional}),
                        "Where");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_cast, .elementwise = true}), "Cast");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_cast_like, .elementwise = true}), "CastLike");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_dropout, .elementwise = true}), "Dropout");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_quantize, .elementwise = true, .flops_per_element = 3}),
                        "QuantizeLinear");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_dequantize, .elementwise = true, .flops_per_element = 2}),
                        "DequantizeLinear");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_dynamic_quantize, .elementwise = true,
                                      .flops_per_element = 4}),
                        "DynamicQuantizeLinear");

}  // namespace kiln::ir::schemas::elementwise
