// Schemas of ai.kiln.FusedElementwise (a chain of elementwise steps evaluated in one loop) and
// ConcatElementwise (the same on a Concat's parts), and the decoding of their attributes.
// Semantics are in docs/ops.md.
#include "ir/schemas/kiln_elementwise.h"

#include <array>
#include <optional>

#include "ir/schemas/common.h"

namespace kiln::ir {
namespace {

constexpr std::array<EltwiseOpInfo, 23> kOps{{
    {"Add", EltwiseOp::kAdd, true, 0},
    {"Sub", EltwiseOp::kSub, true, 0},
    {"Mul", EltwiseOp::kMul, true, 0},
    {"Div", EltwiseOp::kDiv, true, 0},
    {"Pow", EltwiseOp::kPow, true, 0},
    {"Max", EltwiseOp::kMax, true, 0},
    {"Min", EltwiseOp::kMin, true, 0},
    {"Relu", EltwiseOp::kRelu, false, 0},
    {"Sigmoid", EltwiseOp::kSigmoid, false, 0},
    {"Tanh", EltwiseOp::kTanh, false, 0},
    {"Exp", EltwiseOp::kExp, false, 0},
    {"Log", EltwiseOp::kLog, false, 0},
    {"Sqrt", EltwiseOp::kSqrt, false, 0},
    {"Neg", EltwiseOp::kNeg, false, 0},
    {"Abs", EltwiseOp::kAbs, false, 0},
    {"Reciprocal", EltwiseOp::kReciprocal, false, 0},
    {"Erf", EltwiseOp::kErf, false, 0},
    {"Softplus", EltwiseOp::kSoftplus, false, 0},
    {"Clip", EltwiseOp::kClip, false, 2},
    {"LeakyRelu", EltwiseOp::kLeakyRelu, false, 1},
    {"HardSigmoid", EltwiseOp::kHardSigmoid, false, 2},
    {"HardSwish", EltwiseOp::kHardSwish, false, 0},
    {"Elu", EltwiseOp::kElu, false, 1},
}};

}  // namespace

std::span<const EltwiseOpInfo> eltwise_ops() { return kOps; }

const EltwiseOpInfo* eltwise_op_info(const std::string& name) {
  for (const EltwiseOpInfo& i : kOps)
    if (name == i.name) return &i;
  return nullptr;
}

Result<std::vector<EltwiseStep>> decode_fused_elementwise(const Node& n, size_t num_inputs) {
  const std::vector<std::string> ops = n.attr_strings("ops");
  const std::vector<int64_t> operands = n.attr_ints("operands");
  std::vector<int64_t> swapped = n.attr_ints("swapped");
  const std::vector<float> params = n.attr_floats("params");
  if (ops.empty()) return Status::error("FusedElementwise needs at least one step in `ops`");
  if (operands.size() != ops.size())
    return Status::error("FusedElementwise `operands` has " + std::to_string(operands.size()) +
                         " entries for " + std::to_string(ops.size()) + " ops");
  if (swapped.empty()) swapped.assign(ops.size(), 0);
  if (swapped.size() != ops.size())
    return Status::error("FusedElementwise `swapped` has " + std::to_string(swapped.size()) +
                         " entries for " + std::to_string(ops.size()) + " ops");
  std::vector<EltwiseStep> steps;
  size_t p = 0;
  for (size_t k = 0; k < ops.size(); ++k) {
    const std::string at = "FusedElementwise step " + std::to_string(k) + " (" + ops[k] + "): ";
    const EltwiseOpInfo* info = eltwise_op_info(ops[k]);
    if (!info) return Status::error(at + "not a supported op");
    EltwiseStep s{info->op, info->binary};
    s.operand = operands[k];
    if (info->binary) {
      if (s.operand < -1 || s.operand >= static_cast<int64_t>(num_inputs))
        return Status::error(at + "operand " + std::to_string(s.operand) +
                             " is not an input (the node has " + std::to_string(num_inputs) + ")");
    } else if (s.operand != -1) {
      return Status::error(at + "a unary step must have operand -1, got " +
                           std::to_string(s.operand));
    }
    if (swapped[k] != 0 && swapped[k] != 1)
      return Status::error(at + "swapped must be 0 or 1, got " + std::to_string(swapped[k]));
    s.swapped = swapped[k] == 1;
    if (s.swapped && !info->binary) return Status::error(at + "a unary step cannot be swapped");
    if (p + static_cast<size_t>(info->params) > params.size())
      return Status::error(at + "`params` ends before this step's " + std::to_string(info->params) +
                           " values");
    if (info->params > 0) s.p0 = params[p];
    if (info->params > 1) s.p1 = params[p + 1];
    p += static_cast<size_t>(info->params);
    steps.push_back(s);
  }
  if (p != params.size())
    return Status::error("FusedElementwise `params` has " + std::to_string(params.size()) +
                         " values, the steps take " + std::to_string(p));
  return steps;
}

Result<ConcatParts> decode_concat_parts(const Node& n, size_t num_inputs, int64_t rank) {
  ConcatParts c{n.attr_int("x0_parts", 0), n.attr_int("x0_axis", -1)};
  if (c.parts < 1 || c.parts > static_cast<int64_t>(num_inputs))
    return Status::error("ConcatElementwise `x0_parts` must be 1 to the input count " +
                         std::to_string(num_inputs) + ", got " + std::to_string(c.parts));
  if (c.axis < 0 || c.axis >= rank)
    return Status::error("ConcatElementwise `x0_axis` must be 0 to " + std::to_string(rank - 1) +
                         " (X0's rank less 1), got " + std::to_string(c.axis));
  return c;
}

namespace schemas::kiln_elementwise {
namespace {

// Every input given and float32 (or of unknown dtype): nullopt; else what the op infers, an error
// naming the first bad input, or an unranked float32 when an input is not a tensor.
std::optional<Outputs> check_inputs(InferContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is missing");
    const TypeInfo& t = ctx.input(i);
    if (t.kind != TypeInfo::Kind::kTensor) return one(tensor_type_unranked(DType::kFloat32));
    if (t.dtype != DType::kUndefined && t.dtype != DType::kFloat32)
      return ctx.error("input " + std::to_string(i) + " must be float32, got " +
                       dtype_name(t.dtype));
  }
  return std::nullopt;
}

// Y: float32, the numpy broadcast of `ts` (unranked when a shape is unknown).
Outputs broadcast_output(InferContext& ctx, const std::vector<const TypeInfo*>& ts) {
  if (ts.empty()) return ctx.error("FusedElementwise needs at least one input");
  auto b = broadcast_shapes(ts);
  if (!b) return ctx.error(b.status().message());
  if (!b->has_value()) return one(tensor_type_unranked(DType::kFloat32));
  return one(tensor_type(DType::kFloat32, std::move(**b)));
}

}  // namespace

// Y: float32, the numpy broadcast of every input.
Outputs infer_fused_elementwise(InferContext& ctx) {
  auto steps = decode_fused_elementwise(ctx.node, ctx.num_inputs());
  if (!steps) return ctx.error(steps.status().message());
  if (auto early = check_inputs(ctx)) return *early;
  std::vector<const TypeInfo*> ts;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) ts.push_back(&ctx.input(i));
  return broadcast_output(ctx, ts);
}

// Y: float32, the broadcast of X0 (the Concat of the first x0_parts inputs) and the rest.
Outputs infer_concat_elementwise(InferContext& ctx) {
  if (auto early = check_inputs(ctx)) return *early;
  if (ctx.num_inputs() == 0) return ctx.error("ConcatElementwise needs its inputs");
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (!ctx.input(i).has_shape) return one(tensor_type_unranked(DType::kFloat32));
  TypeInfo x0 = ctx.input(0);
  auto parts = decode_concat_parts(ctx.node, ctx.num_inputs(), static_cast<int64_t>(x0.shape.size()));
  if (!parts) return ctx.error(parts.status().message());
  auto steps = decode_fused_elementwise(ctx.node, parts->chain_inputs(ctx.num_inputs()));
  if (!steps) return ctx.error(steps.status().message());
  for (size_t i = 1; i < static_cast<size_t>(parts->parts); ++i) {
    const std::vector<Dim>& part = ctx.input(i).shape;
    if (part.size() != x0.shape.size()) return ctx.error("the parts of X0 differ in rank");
    for (size_t d = 0; d < part.size(); ++d) {
      Dim& x = x0.shape[d];
      if (static_cast<int64_t>(d) == parts->axis) {
        x = x.known() && part[d].known() ? Dim{x.value + part[d].value, ""} : Dim{};
      } else if (x.known() && part[d].known() && x.value != part[d].value) {
        return ctx.error("the parts of X0 differ in dim " + std::to_string(d));
      }
    }
  }
  std::vector<const TypeInfo*> ts{&x0};
  for (size_t i = static_cast<size_t>(parts->parts); i < ctx.num_inputs(); ++i) ts.push_back(&ctx.input(i));
  return broadcast_output(ctx, ts);
}

// One flop per step per output element (what the unfused nodes count); bytes are the inputs read
// once and the output written once, which is the point of the fusion.
Cost cost_fused_elementwise(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const double steps = static_cast<double>(ctx.node.attr_strings("ops").size());
  return Cost{outs.empty() ? 0 : steps * numel_or_zero(outs[0]), io_bytes(ctx, outs), 0};
}

KILN_REGISTER_OP_SCHEMA("ai.kiln",
                        (OpSchema{.infer = infer_fused_elementwise,
                                  .cost = cost_fused_elementwise,
                                  .elementwise = true,
                                  .broadcast = Broadcast::kMultidirectional}),
                        "FusedElementwise");

KILN_REGISTER_OP_SCHEMA("ai.kiln",
                        (OpSchema{.infer = infer_concat_elementwise, .cost = cost_fused_elementwise}),
                        "ConcatElementwise");

}  // namespace schemas::kiln_elementwise
}  // namespace kiln::ir
