// Reference kernels for Expand (numpy broadcast to a shape) and Tile (repeat along each axis),
// for any element type. Expand is the strided view of its input with stride 0 on the broadcast
// dims (copy_strided).
#include "kernels/fast_path.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

Status expand(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
  const Tensor& x = ctx.input(0);
  if (ctx.input(1).rank() != 1)
    return ctx.error("input 'shape' must be 1-D, got shape " + shape_str(ctx.input(1).shape()));
  KILN_ASSIGN_OR_RETURN(Shape target, read_ints(ctx, 1, "shape"));
  for (int64_t d : target)
    if (d < 0) return ctx.error("shape " + shape_str(target) + " has a negative dim");
  auto out = broadcast_shapes(x.shape(), target);
  if (!out) return ctx.error(out.status().message());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, x.dtype(), *out));
  return copy_strided(x, 0, broadcast_strides(x.shape(), *out), y, ctx.pool);
}

Status tile(KernelContext& ctx) {
  const Tensor* xp = nullptr;
  std::vector<int64_t> repeats;
  if (ctx.opset < 6) {
    // Tile-1: a scalar count of tiles along one axis.
    KILN_RETURN_IF_ERROR(require_inputs(ctx, 3));
    xp = &ctx.input(0);
    KILN_ASSIGN_OR_RETURN(int64_t tiles, read_int(ctx, 1, "tiles"));
    KILN_ASSIGN_OR_RETURN(int64_t axis_raw, read_int(ctx, 2, "axis"));
    KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, axis_raw, xp->rank()));
    repeats.assign(xp->rank(), 1);
    repeats[axis] = tiles;
  } else {
    KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
    xp = &ctx.input(0);
    KILN_ASSIGN_OR_RETURN(repeats, read_ints(ctx, 1, "repeats"));
  }
  const Tensor& x = *xp;
  if (static_cast<int64_t>(repeats.size()) != x.rank())
    return ctx.error("repeats " + shape_str(repeats) + " must have one value per axis of input " +
                     shape_str(x.shape()));
  Shape out(x.rank());
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (repeats[d] < 0) return ctx.error("repeats " + shape_str(repeats) + " has a negative value");
    if (repeats[d] != 0 && x.dim(d) > kMaxTensorBytes / repeats[d])
      return ctx.error("repeats " + shape_str(repeats) + " make too large an output");
    out[d] = x.dim(d) * repeats[d];
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out));
  const Shape strides = strides_of(x.shape());
  return gather_by_index(x, y, [&](const Shape& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += (idx[d] % x.dim(d)) * strides[d];
    return off;
  });
}

}  // namespace

KILN_REGISTER_KERNEL("", "Expand", expand);
KILN_REGISTER_KERNEL("", "Tile", tile);

KILN_REGISTER_FAST_PATH("", "Expand", always_fast);  // copy_strided

}  // namespace kiln
