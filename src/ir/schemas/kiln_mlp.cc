// Schema of ai.kiln.FusedMLP (docs/ops.md): Y = act(X·W1 + B1)·W2 + B2 (+ R) with X [..., K],
// W1 [K, H], W2 [H, N]; Y and R are [..., N]. Cost: both products, the biases and the activation.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas {
namespace {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

// Two dims that must be equal: an error when both are known and differ.
Status check_equal(const InferContext& ctx, const Dim& a, const Dim& b, const std::string& what) {
  if (a.known() && b.known() && a.value != b.value)
    return ctx.error(what + " differ: " + std::to_string(a.value) + " vs " +
                     std::to_string(b.value));
  return Status::ok();
}

// A bias holds exactly `n` values (any shape).
Status check_bias(const InferContext& ctx, size_t i, const Dim& n, const char* name) {
  if (!ctx.has_input(i)) return Status::ok();
  const TypeInfo& b = ctx.input(i);
  if (b.kind == TypeInfo::Kind::kTensor && b.dtype != DType::kUndefined &&
      b.dtype != DType::kFloat32)
    return ctx.error(std::string(name) + " must be float32");
  auto count = type_numel(b);
  if (count && n.known() && *count != n.value)
    return ctx.error(std::string(name) + " must hold " + std::to_string(n.value) + " values, got " +
                     std::to_string(*count));
  return Status::ok();
}

Outputs infer_mlp(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& w1 = ctx.input(1);
  const TypeInfo& w2 = ctx.input(3);
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}})
    if (!ctx.has_input(i)) return ctx.error("needs inputs X, W1 and W2");
  for (const TypeInfo* t : {&x, &w1, &w2})
    if (t->kind == TypeInfo::Kind::kTensor && t->dtype != DType::kUndefined &&
        t->dtype != DType::kFloat32)
      return ctx.error("X, W1 and W2 must be float32");
  if (has_rank(x) && x.shape.empty()) return ctx.error("X must have rank 1 or more");
  for (const TypeInfo* t : {&w1, &w2})
    if (has_rank(*t) && t->shape.size() != 2)
      return ctx.error("W1 and W2 must be 2-D, got " + dims_str(t->shape));
  Dim k = has_rank(x) ? x.shape.back() : unknown_dim();
  Dim h = unknown_dim(), n = unknown_dim();
  if (has_rank(w1)) {
    KILN_RETURN_IF_ERROR(check_equal(ctx, k, w1.shape[0], "X's last dim and W1's rows"));
    h = w1.shape[1];
  }
  if (has_rank(w2)) {
    KILN_RETURN_IF_ERROR(check_equal(ctx, h, w2.shape[0], "W1's columns and W2's rows"));
    h = dim_merge(h, w2.shape[0]);
    n = w2.shape[1];
  }
  KILN_RETURN_IF_ERROR(check_bias(ctx, 2, h, "B1"));
  KILN_RETURN_IF_ERROR(check_bias(ctx, 4, n, "B2"));
  if (ctx.has_input(5)) {
    const TypeInfo& r = ctx.input(5);
    if (r.kind == TypeInfo::Kind::kTensor && r.dtype != DType::kUndefined &&
        r.dtype != DType::kFloat32)
      return ctx.error("R must be float32");
    if (has_rank(r) && has_rank(x) && r.shape.size() != x.shape.size())
      return ctx.error("R must have Y's rank " + std::to_string(x.shape.size()) + ", got " +
                       dims_str(r.shape));
  }
  if (!has_rank(x)) return one(tensor_type_unranked(DType::kFloat32));
  Dims out(x.shape.begin(), x.shape.end() - 1);
  out.push_back(n);
  return one(tensor_type(DType::kFloat32, std::move(out)));
}

// Rows times (K·H + H·N) multiply-adds, plus the bias and activation on the intermediate.
Cost cost_mlp(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const TypeInfo& x = ctx.input(0);
  auto xs = x.static_shape();
  auto w1 = ctx.input(1).static_shape();
  auto w2 = ctx.input(3).static_shape();
  if (!xs || !w1 || !w2 || xs->empty() || w1->size() != 2 || w2->size() != 2)
    return Cost{0, io_bytes(ctx, outs), 1};
  double rows = 1;
  for (size_t i = 0; i + 1 < xs->size(); ++i) rows *= static_cast<double>((*xs)[i]);
  const double k = static_cast<double>((*w1)[0]), h = static_cast<double>((*w1)[1]),
               n = static_cast<double>((*w2)[1]);
  constexpr double kTailFlops = 4;  // bias and activation per intermediate element
  return Cost{rows * (2 * k * h + 2 * h * n + kTailFlops * h + n), io_bytes(ctx, outs), 0};
}

}  // namespace

KILN_REGISTER_OP_SCHEMA("ai.kiln", (OpSchema{.infer = infer_mlp, .cost = cost_mlp}), "FusedMLP");

}  // namespace kiln::ir::schemas
