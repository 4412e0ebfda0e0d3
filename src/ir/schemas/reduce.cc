// Schemas of reductions: Reduce*, ArgMax/ArgMin, TopK and CumSum.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas::reduce {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

Outputs infer_reduce(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const bool keep = ctx.node.attr_int("keepdims", 1) != 0;
  const bool axes_input = ctx.node.op_type == "ReduceSum" ? ctx.opset >= 13 : ctx.opset >= 18;
  std::optional<std::vector<int64_t>> axes;
  if (axes_input) axes = ctx.has_input(1) ? ctx.int_values(1) : std::vector<int64_t>{};
  else axes = ctx.node.attr_ints("axes");
  const TypeInfo& at = ctx.input(1);
  if (axes_input && !axes && has_rank(at) && at.shape.size() == 1 && at.shape[0].known() && at.shape[0].value == 0)
    axes = std::vector<int64_t>{};
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size();
  if (!axes) {
    if (!keep) return one(tensor_type_unranked(x.dtype));
    Dims out = unknown_dims(r);  // each dim is kept or becomes 1
    for (int64_t i = 0; i < r; ++i)
      if (x.shape[i].known() && x.shape[i].value == 1) out[i] = known_dim(1);
    return one(shaped_like(x, std::move(out)));
  }
  if (axes->empty()) {
    if (axes_input && ctx.node.attr_int("noop_with_empty_axes", 0) != 0) return one(x);
    for (int64_t i = 0; i < r; ++i) axes->push_back(i);
  }
  std::vector<bool> reduced(r, false);
  for (int64_t a : *axes) {
    KILN_ASSIGN_OR_RETURN(int64_t k, normalize_axis(a, r, ctx.node));
    reduced[k] = true;
  }
  Dims out;
  for (int64_t i = 0; i < r; ++i) {
    if (!reduced[i]) out.push_back(x.shape[i]);
    else if (keep) out.push_back(known_dim(1));
  }
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_arg(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(DType::kInt64));
  const int64_t r = x.shape.size();
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), r, ctx.node));
  Dims out = x.shape;
  if (ctx.node.attr_int("keepdims", 1) != 0) out[axis] = known_dim(1);
  else out.erase(out.begin() + axis);
  return one(tensor_type(DType::kInt64, std::move(out)));
}

Outputs infer_topk(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return std::vector<TypeInfo>{tensor_type_unranked(x.dtype), tensor_type_unranked(DType::kInt64)};
  const int64_t r = x.shape.size();
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", -1), r, ctx.node));
  Dims out = x.shape;
  if (ctx.opset < 10) {
    out[axis] = known_dim(ctx.node.attr_int("k", 0));
  } else {
    auto k = ctx.int_values(1);
    out[axis] = k && k->size() == 1 ? known_dim((*k)[0]) : unknown_dim();
  }
  return std::vector<TypeInfo>{shaped_like(x, out), tensor_type(DType::kInt64, out)};
}

Outputs infer_same(InferContext& ctx) {
  TypeInfo y = ctx.input(0);
  if (y.kind == TypeInfo::Kind::kUnknown) y = tensor_type_unranked(DType::kUndefined);
  return one(y);
}

Cost cost_reduce(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const std::string& op = ctx.node.op_type;
  const double k = op == "ReduceLogSumExp" ? 3 : (op == "ReduceSumSquare" || op == "ReduceL2") ? 2 : 1;
  return cost_per_input(ctx, outs, k);
}

Cost cost_topk(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  return cost_per_input(ctx, outs, 2);
}

KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_reduce, .cost = cost_reduce}), "ReduceL1", "ReduceL2",
                        "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
                        "ReduceSum", "ReduceSumSquare");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_arg, .cost = cost_reduce}), "ArgMax", "ArgMin");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_topk, .cost = cost_topk}), "TopK");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_same, .cost = cost_reduce}), "CumSum");

}  // namespace kiln::ir::schemas::reduce
