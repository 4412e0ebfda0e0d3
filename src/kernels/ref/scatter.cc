// Reference kernels for Scatter, ScatterElements and ScatterND: a copy of data with updates
// written (or reduced: add, mul, max, min) at bounds-checked, possibly negative, indices.
#include <algorithm>
#include <type_traits>

#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

enum class Reduce { kNone, kAdd, kMul, kMax, kMin };

Result<Reduce> reduction_of(const KernelContext& ctx) {
  const std::string r = ctx.node.attr_string("reduction", "none");
  if (r == "none") return Reduce::kNone;
  if (ctx.opset >= 16 && r == "add") return Reduce::kAdd;
  if (ctx.opset >= 16 && r == "mul") return Reduce::kMul;
  if (ctx.opset >= 18 && r == "max") return Reduce::kMax;
  if (ctx.opset >= 18 && r == "min") return Reduce::kMin;
  return ctx.error("unsupported reduction '" + r + "' at opset " + std::to_string(ctx.opset));
}

// a (op) b in T; integers wrap around instead of overflowing.
template <typename T>
T combine(Reduce r, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    const uint64_t ua = static_cast<U>(a), ub = static_cast<U>(b);
    switch (r) {
      case Reduce::kAdd:
        return static_cast<T>(static_cast<U>(ua + ub));
      case Reduce::kMul:
        return static_cast<T>(static_cast<U>(ua * ub));
      case Reduce::kMax:
        return std::max(a, b);
      case Reduce::kMin:
        return std::min(a, b);
      default:
        return b;
    }
  } else {
    switch (r) {
      case Reduce::kAdd:
        return a + b;
      case Reduce::kMul:
        return a * b;
      case Reduce::kMax:
        return std::max(a, b);
      case Reduce::kMin:
        return std::min(a, b);
      default:
        return b;
    }
  }
}

// Writes updates[u] into out[targets[u]] for every u, reducing with `r`. `out` and `updates`
// have the same dtype.
Status apply_updates(Reduce r, const std::vector<int64_t>& targets, int64_t run,
                     const Tensor& updates, Tensor* out) {
  const DType t = out->dtype();
  auto typed = [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* u = updates.data<T>();
    T* o = out->data<T>();
    for (size_t j = 0; j < targets.size(); ++j)
      for (int64_t i = 0; i < run; ++i) {
        T& dst = o[targets[j] + i];
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
          dst = r == Reduce::kNone ? u[j * run + i] : combine(r, dst, u[j * run + i]);
        } else {
          dst = u[j * run + i];
        }
      }
    return Status::ok();
  };
  if (r == Reduce::kNone) return visit_any(t, typed);
  if (visit_numeric(t, [](auto) { return Status::ok(); }).is_ok()) return visit_numeric(t, typed);
  if (t == DType::kString || t == DType::kUndefined)
    return Status::error(std::string("reduction is not defined for ") + dtype_name(t));
  // float16, bfloat16, float8, bool, int4: reduce in double and round back.
  for (size_t j = 0; j < targets.size(); ++j)
    for (int64_t i = 0; i < run; ++i) {
      const int64_t d = targets[j] + i;
      const double a = load_as_double(t, out->raw_data(), d);
      const double b = load_as_double(t, updates.raw_data(), static_cast<int64_t>(j) * run + i);
      store_from_double(t, out->raw_data(), d, combine(r, a, b));
    }
  return Status::ok();
}

Status scatter_elements(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 3));
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& updates = ctx.input(2);
  KILN_ASSIGN_OR_RETURN(Reduce red, ctx.node.op_type == "Scatter" ? Result<Reduce>(Reduce::kNone)
                                                                  : reduction_of(ctx));
  const int64_t r = data.rank();
  if (r == 0) return ctx.error("data must have rank >= 1");
  if (updates.dtype() != data.dtype())
    return ctx.error(std::string("updates type ") + dtype_name(updates.dtype()) +
                     " differs from data type " + dtype_name(data.dtype()));
  if (indices.rank() != r || updates.shape() != indices.shape())
    return ctx.error("indices " + shape_str(indices.shape()) + " and updates " +
                     shape_str(updates.shape()) +
                     " must have the same shape, of the rank of data " + shape_str(data.shape()));
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, ctx.node.attr_int("axis", 0), r));
  for (int64_t d = 0; d < r; ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      return ctx.error("indices " + shape_str(indices.shape()) + " exceed data " +
                       shape_str(data.shape()) + " on axis " + std::to_string(d));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_ints(ctx, 1, "indices"));
  const Shape strides = strides_of(data.shape());
  const int64_t dim = data.dim(axis);
  std::vector<int64_t> targets(idx.size()), pos(r, 0);
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t v = idx[i];
    if (v < -dim || v >= dim)
      return ctx.error("index " + std::to_string(v) + " is out of range for axis " +
                       std::to_string(axis) + " of size " + std::to_string(dim));
    if (v < 0) v += dim;
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) off += (d == axis ? v : pos[d]) * strides[d];
    targets[i] = off;
    next_index(pos, indices.shape());
  }
  Tensor out = data.clone();
  Status st = apply_updates(red, targets, 1, updates, &out);
  if (!st) return ctx.error(st.message());
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

Status scatter_nd(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 3));
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& updates = ctx.input(2);
  KILN_ASSIGN_OR_RETURN(Reduce red, reduction_of(ctx));
  const int64_t r = data.rank(), q = indices.rank();
  if (r < 1 || q < 1) return ctx.error("data and indices must have rank >= 1");
  if (updates.dtype() != data.dtype())
    return ctx.error(std::string("updates type ") + dtype_name(updates.dtype()) +
                     " differs from data type " + dtype_name(data.dtype()));
  const int64_t k = indices.dim(q - 1);
  if (k < 1 || k > r)
    return ctx.error("last dim of indices " + shape_str(indices.shape()) + " must be in [1, " +
                     std::to_string(r) + "]");
  Shape want(indices.shape().begin(), indices.shape().end() - 1);
  want.insert(want.end(), data.shape().begin() + k, data.shape().end());
  if (updates.shape() != want)
    return ctx.error("updates shape " + shape_str(updates.shape()) + " should be " +
                     shape_str(want));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_ints(ctx, 1, "indices"));
  const Shape strides = strides_of(data.shape());
  const int64_t run = product(data.shape(), k, r);
  const int64_t tuples = product(indices.shape(), 0, q - 1);
  std::vector<int64_t> targets(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t dim = data.dim(j);
      int64_t v = idx[t * k + j];
      if (v < -dim || v >= dim)
        return ctx.error("index " + std::to_string(v) + " is out of range for axis " +
                         std::to_string(j) + " of size " + std::to_string(dim));
      if (v < 0) v += dim;
      off += v * strides[j];
    }
    targets[t] = off;
  }
  Tensor out = data.clone();
  Status st = apply_updates(red, targets, run, updates, &out);
  if (!st) return ctx.error(st.message());
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "Scatter", scatter_elements);
KILN_REGISTER_KERNEL("", "ScatterElements", scatter_elements);
KILN_REGISTER_KERNEL("", "ScatterND", scatter_nd);

}  // namespace kiln
