// Reference kernels for ops that only change or report a shape: Shape, Size, Reshape, Flatten,
// Squeeze, Unsqueeze. Outputs share the input's storage where the data is unchanged.
#include <algorithm>

#include "kernels/fast_path.h"
#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

Status shape_op(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Shape& s = ctx.input(0).shape();
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t start = ctx.node.attr_int("start", 0), end = ctx.node.attr_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  const int64_t n = std::max<int64_t>(end - start, 0);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kInt64, {n}));
  for (int64_t i = 0; i < n; ++i) y->data<int64_t>()[i] = s[start + i];
  return Status::ok();
}

Status size_op(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kInt64, {}));
  *y->data<int64_t>() = ctx.input(0).numel();
  return Status::ok();
}

Status reshape(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, ctx.opset < 5 ? 1 : 2));
  const Tensor& x = ctx.input(0);
  Shape req;
  if (ctx.opset < 5) {
    const ir::Attribute* shape = ctx.node.attr("shape");
    if (!shape) return ctx.error("attribute 'shape' is missing");
    req.assign(shape->ints.begin(), shape->ints.end());
  } else {
    if (ctx.input(1).rank() != 1)
      return ctx.error("input 'shape' must be 1-D, got shape " + shape_str(ctx.input(1).shape()));
    KILN_ASSIGN_OR_RETURN(req, read_ints(ctx, 1, "shape"));
  }
  const bool allowzero = ctx.opset >= 14 && ctx.node.attr_int("allowzero", 0) != 0;
  Shape out(req.size());
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < req.size(); ++i) {
    int64_t d = req[i];
    if (d == -1) {
      if (infer >= 0) return ctx.error("shape " + shape_str(req) + " has more than one -1");
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (d < -1)
      return ctx.error("shape " + shape_str(req) + " has an invalid dim " + std::to_string(d));
    if (d == 0 && !allowzero) {
      if (i >= static_cast<size_t>(x.rank()))
        return ctx.error("shape " + shape_str(req) + " copies dim " + std::to_string(i) +
                         " (0) but the input " + shape_str(x.shape()) + " has rank " +
                         std::to_string(x.rank()));
      d = x.dim(static_cast<int64_t>(i));
    }
    out[i] = d;
    if (d != 0 && known > (int64_t{1} << 62) / d)
      return ctx.error("shape " + shape_str(req) + " is too large");
    known *= d;
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      return ctx.error("cannot infer the -1 dim of shape " + shape_str(req) + " for input " +
                       shape_str(x.shape()));
    out[infer] = x.numel() / known;
  } else if (known != x.numel()) {
    return ctx.error("cannot reshape input " + shape_str(x.shape()) + " to " + shape_str(req));
  }
  ctx.set_output(0, x.reshaped(std::move(out)));
  return Status::ok();
}

Status flatten(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  int64_t axis = ctx.node.attr_int("axis", 1);
  if (axis < -x.rank() || axis > x.rank())
    return ctx.error("axis " + std::to_string(axis) + " is out of range for rank " +
                     std::to_string(x.rank()));
  if (axis < 0) axis += x.rank();
  const int64_t outer = product(x.shape(), 0, axis), inner = product(x.shape(), axis, x.rank());
  ctx.set_output(0, x.reshaped({outer, inner}));
  return Status::ok();
}

// Axes from the attribute (before opset 13) or from optional input 1 (13 on). `given` is false
// when neither names any.
Result<Shape> axes_attr_or_input(const KernelContext& ctx, bool& given) {
  given = false;
  if (ctx.opset < 13) {
    const ir::Attribute* a = ctx.node.attr("axes");
    given = a != nullptr;
    return a ? Shape(a->ints.begin(), a->ints.end()) : Shape{};
  }
  KILN_ASSIGN_OR_RETURN(bool has, optional_input(ctx, 1));
  if (!has) return Shape{};
  given = true;
  return read_ints(ctx, 1, "axes");
}

Status squeeze(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  bool given = false;
  KILN_ASSIGN_OR_RETURN(Shape raw, axes_attr_or_input(ctx, given));
  Shape drop(x.rank(), 0);  // 1 on the dims to drop
  if (!given) {
    for (int64_t d = 0; d < x.rank(); ++d) drop[d] = x.dim(d) == 1;
  } else {
    KILN_ASSIGN_OR_RETURN(Shape axes, axes_of(ctx, raw, x.rank()));
    for (int64_t a : axes) {
      if (x.dim(a) != 1)
        return ctx.error("cannot squeeze axis " + std::to_string(a) + " of shape " +
                         shape_str(x.shape()) + ": its size is not 1");
      drop[a] = 1;
    }
  }
  Shape out;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (!drop[d]) out.push_back(x.dim(d));
  ctx.set_output(0, x.reshaped(std::move(out)));
  return Status::ok();
}

Status unsqueeze(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, ctx.opset < 13 ? 1 : 2));
  const Tensor& x = ctx.input(0);
  bool given = false;
  KILN_ASSIGN_OR_RETURN(Shape raw, axes_attr_or_input(ctx, given));
  if (!given) return ctx.error("axes are missing");
  const int64_t out_rank = x.rank() + static_cast<int64_t>(raw.size());
  KILN_ASSIGN_OR_RETURN(Shape axes, axes_of(ctx, raw, out_rank));
  Shape ones(out_rank, 0);  // 1 on the inserted dims
  for (int64_t a : axes) ones[a] = 1;
  Shape out;
  int64_t src = 0;
  for (int64_t d = 0; d < out_rank; ++d) out.push_back(ones[d] ? 1 : x.dim(src++));
  ctx.set_output(0, x.reshaped(std::move(out)));
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "Shape", shape_op);
KILN_REGISTER_KERNEL("", "Size", size_op);
KILN_REGISTER_KERNEL("", "Reshape", reshape);
KILN_REGISTER_KERNEL("", "Flatten", flatten);
KILN_REGISTER_KERNEL("", "Squeeze", squeeze);
KILN_REGISTER_KERNEL("", "Unsqueeze", unsqueeze);

// Shape ops move no data (Reshape, Flatten, Squeeze and Unsqueeze share or copy the buffer).
KILN_REGISTER_FAST_PATH("", "Shape", always_fast);
KILN_REGISTER_FAST_PATH("", "Size", always_fast);
KILN_REGISTER_FAST_PATH("", "Reshape", always_fast);
KILN_REGISTER_FAST_PATH("", "Flatten", always_fast);
KILN_REGISTER_FAST_PATH("", "Squeeze", always_fast);
KILN_REGISTER_FAST_PATH("", "Unsqueeze", always_fast);

}  // namespace kiln
