// Reference kernel for Slice: strided windows along chosen axes, with negative steps and the
// ONNX clamping rules; starts/ends/axes are attributes before opset 10 and inputs from 10 on.
// The window is a strided view of the input, copied by copy_strided.
#include <algorithm>

#include "kernels/fast_path.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

Status slice(KernelContext& ctx) {
  const bool attrs = ctx.opset < 10;
  KILN_RETURN_IF_ERROR(require_inputs(ctx, attrs ? 1 : 3));
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  bool has_axes = false, has_steps = false;
  if (attrs) {
    if (!ctx.node.has_attr("starts") || !ctx.node.has_attr("ends"))
      return ctx.error("attributes 'starts' and 'ends' are required");
    starts = ctx.node.attr_ints("starts");
    ends = ctx.node.attr_ints("ends");
    has_axes = ctx.node.has_attr("axes");
    axes = ctx.node.attr_ints("axes");
  } else {
    KILN_ASSIGN_OR_RETURN(starts, read_ints(ctx, 1, "starts"));
    KILN_ASSIGN_OR_RETURN(ends, read_ints(ctx, 2, "ends"));
    KILN_ASSIGN_OR_RETURN(has_axes, optional_input(ctx, 3));
    if (has_axes) {
      KILN_ASSIGN_OR_RETURN(axes, read_ints(ctx, 3, "axes"));
    }
    KILN_ASSIGN_OR_RETURN(has_steps, optional_input(ctx, 4));
    if (has_steps) {
      KILN_ASSIGN_OR_RETURN(steps, read_ints(ctx, 4, "steps"));
    }
  }
  const size_t n = starts.size();
  if (ends.size() != n || (has_axes && axes.size() != n) || (has_steps && steps.size() != n))
    return ctx.error("starts, ends, axes and steps must have the same length, got " +
                     std::to_string(n) + ", " + std::to_string(ends.size()) + ", " +
                     std::to_string(axes.size()) + ", " + std::to_string(steps.size()));
  if (!has_axes) {
    if (static_cast<int64_t>(n) > r)
      return ctx.error(std::to_string(n) + " starts for an input of rank " + std::to_string(r));
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (!has_steps) steps.assign(n, 1);
  KILN_ASSIGN_OR_RETURN(axes, axes_of(ctx, axes, r));

  Shape out = x.shape();
  std::vector<int64_t> first(r, 0), step(r, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = axes[i], dim = x.dim(a), st = steps[i];
    if (st == 0) return ctx.error("step for axis " + std::to_string(a) + " is 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    int64_t len = 0;
    if (dim == 0) {
      b = 0;
    } else if (st > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      if (e > b) len = (e - b) / st + ((e - b) % st != 0);
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      if (b > e) len = (b - e) / -st + ((b - e) % -st != 0);
    }
    out[a] = len;
    first[a] = b;
    step[a] = st;
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, x.dtype(), out));
  const Shape strides = strides_of(x.shape());
  int64_t offset = 0;
  Shape view(r);
  for (int64_t d = 0; d < r; ++d) {
    offset += first[d] * strides[d];
    view[d] = step[d] * strides[d];
  }
  return copy_strided(x, offset, view, y, ctx.pool);
}

}  // namespace

KILN_REGISTER_KERNEL("", "Slice", slice);

KILN_REGISTER_FAST_PATH("", "Slice", always_fast);  // copy_strided

}  // namespace kiln
