// Reference kernels for ops that generate tensors: ConstantOfShape, Range, EyeLike, OneHot and
// Trilu (which zeroes a triangle of its input).
#include <cmath>

#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

Status constant_of_shape(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, read_ints(ctx, 0, "input"));
  if (ctx.input(0).rank() > 1)
    return ctx.error("input must be 1-D, got shape " + shape_str(ctx.input(0).shape()));
  const ir::Attribute* value = ctx.node.attr("value");
  if (value != nullptr && value->type != ir::Attribute::Type::kTensor)
    return ctx.error("attribute 'value' must be a tensor");
  if (value != nullptr && value->t.numel() != 1)
    return ctx.error("attribute 'value' must hold one element, got shape " +
                     shape_str(value->t.shape()));
  const DType dtype = value != nullptr ? value->t.dtype() : DType::kFloat32;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dtype, shape));
  if (value != nullptr && y->numel() > 0) KILN_RETURN_IF_ERROR(fill_from(value->t, 0, y));
  return Status::ok();
}

// Integer range count, computed without overflow (it may exceed int64: callers check it).
uint64_t int_range_count(int64_t start, int64_t limit, int64_t delta) {
  const __int128 diff = static_cast<__int128>(limit) - start;
  if (diff == 0 || (diff > 0) != (delta > 0)) return 0;
  const __int128 a = diff < 0 ? -diff : diff, b = delta < 0 ? -static_cast<__int128>(delta) : delta;
  return static_cast<uint64_t>((a + b - 1) / b);
}

Status range(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 3));
  const DType t = ctx.input(0).dtype();
  for (size_t i = 0; i < 3; ++i) {
    if (ctx.input(i).dtype() != t)
      return ctx.error("start, limit and delta must have the same type, input " +
                       std::to_string(i) + " is " + dtype_name(ctx.input(i).dtype()));
    if (ctx.input(i).numel() != 1)
      return ctx.error("input " + std::to_string(i) + " must be a scalar, got shape " +
                       shape_str(ctx.input(i).shape()));
  }
  if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kInt16 && t != DType::kInt32 &&
      t != DType::kInt64)
    return ctx.error(std::string("unsupported type ") + dtype_name(t) +
                     ", expected float, double, int16, int32 or int64");
  return visit_numeric(t, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T start = *ctx.input(0).data<T>(), limit = *ctx.input(1).data<T>(),
            delta = *ctx.input(2).data<T>();
    if (delta == T(0)) return ctx.error("delta is 0");
    int64_t n = 0;
    if constexpr (std::is_floating_point_v<T>) {
      const T q = std::ceil((limit - start) / delta);
      if (!std::isfinite(q) || q > static_cast<T>(kMaxTensorBytes))
        return ctx.error("range has an invalid or too large element count");
      n = q > 0 ? static_cast<int64_t>(q) : 0;
    } else {
      const uint64_t count = int_range_count(
          static_cast<int64_t>(start), static_cast<int64_t>(limit), static_cast<int64_t>(delta));
      if (count > static_cast<uint64_t>(kMaxTensorBytes))
        return ctx.error("range has too many elements");
      n = static_cast<int64_t>(count);
    }
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, t, {n}));
    T* out = y->data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      } else {
        // In uint64 so that a step past the middle of the int64 range wraps instead of overflowing.
        out[i] = static_cast<T>(
            static_cast<int64_t>(static_cast<uint64_t>(static_cast<int64_t>(start)) +
                                 static_cast<uint64_t>(i) * static_cast<uint64_t>(delta)));
      }
    }
    return Status::ok();
  });
}

Status eye_like(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) return ctx.error("input must be 2-D, got shape " + shape_str(x.shape()));
  DType dtype = x.dtype();
  if (ctx.node.has_attr("dtype")) {
    const int64_t d = ctx.node.attr_int("dtype", 0);
    if (!dtype_is_valid(static_cast<int32_t>(d)))
      return ctx.error("invalid dtype " + std::to_string(d));
    dtype = static_cast<DType>(d);
  }
  if (dtype == DType::kString || dtype == DType::kUndefined)
    return ctx.error(std::string("unsupported output type ") + dtype_name(dtype));
  const int64_t k = ctx.node.attr_int("k", 0);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dtype, x.shape()));
  const int64_t rows = x.dim(0), cols = x.dim(1);
  for (int64_t i = 0; i < rows; ++i) {
    if (k > cols || k < -rows) break;
    const int64_t j = i + k;
    if (j >= 0 && j < cols) store_from_double(dtype, y->raw_data(), i * cols + j, 1.0);
  }
  return Status::ok();
}

Status one_hot(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 3));
  const Tensor& indices = ctx.input(0);
  const Tensor& values = ctx.input(2);
  if (indices.dtype() == DType::kString) return ctx.error("indices must be numeric");
  auto depth_r = read_scalar(ctx.input(1));
  if (!depth_r) return ctx.error("input 'depth': " + depth_r.status().message());
  const double depth_d = *depth_r;
  if (!(depth_d >= 0) || depth_d > static_cast<double>(kMaxTensorBytes))
    return ctx.error("depth " + std::to_string(depth_d) + " is out of range");
  const int64_t depth = static_cast<int64_t>(depth_d);
  if (values.numel() != 2)
    return ctx.error("values must hold 2 elements, got shape " + shape_str(values.shape()));
  const int64_t r = indices.rank();
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (axis < -r - 1 || axis > r)
    return ctx.error("axis " + std::to_string(axis) + " is out of range for output rank " +
                     std::to_string(r + 1));
  if (axis < 0) axis += r + 1;
  Shape out = indices.shape();
  out.insert(out.begin() + axis, depth);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, values.dtype(), out));
  if (y->numel() == 0) return Status::ok();
  KILN_RETURN_IF_ERROR(fill_from(values, 0, y));
  const int64_t outer = product(indices.shape(), 0, axis),
                inner = product(indices.shape(), axis, r);
  return visit_any(values.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T on = values.data<T>()[1];
    T* o = y->data<T>();
    for (int64_t a = 0; a < outer; ++a)
      for (int64_t b = 0; b < inner; ++b) {
        const double raw = load_as_double(indices.dtype(), indices.raw_data(), a * inner + b);
        if (!(raw > -static_cast<double>(depth) - 1 && raw < static_cast<double>(depth))) continue;
        int64_t v = static_cast<int64_t>(raw);
        if (v < 0) v += depth;
        if (v < 0 || v >= depth) continue;
        o[(a * depth + v) * inner + b] = on;
      }
    return Status::ok();
  });
}

Status trilu(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  if (r < 2) return ctx.error("input must have rank >= 2, got shape " + shape_str(x.shape()));
  int64_t k = 0;
  KILN_ASSIGN_OR_RETURN(bool has_k, optional_input(ctx, 1));
  if (has_k) {
    KILN_ASSIGN_OR_RETURN(k, read_int(ctx, 1, "k"));
  }
  const bool upper = ctx.node.attr_int("upper", 1) != 0;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), x.shape()));
  int64_t i = 0;
  return gather_by_index(x, y, [&](const Shape& idx) -> int64_t {
    const int64_t off = i++;
    const int64_t diag = idx[r - 1] - idx[r - 2];  // column - row
    const bool keep = upper ? diag >= k : diag <= k;
    return keep ? off : -1;
  });
}

}  // namespace

KILN_REGISTER_KERNEL("", "ConstantOfShape", constant_of_shape);
KILN_REGISTER_KERNEL("", "Range", range);
KILN_REGISTER_KERNEL("", "EyeLike", eye_like);
KILN_REGISTER_KERNEL("", "OneHot", one_hot);
KILN_REGISTER_KERNEL("", "Trilu", trilu);

}  // namespace kiln
