// Kernel for Transpose: permutes the axes of a tensor of any element type, as the strided view
// of the input whose strides are the input's permuted (copy_strided).
#include "kernels/fast_path.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

Status transpose(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  const ir::Attribute* given = ctx.node.attr("perm");
  Shape perm;
  if (given) {
    perm.assign(given->ints.begin(), given->ints.end());
  } else {
    for (int64_t i = r; i-- > 0;) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != r)
    return ctx.error("perm " + shape_str(perm) + " does not match input rank " + std::to_string(r));
  Shape seen(r, 0);  // 1 once an axis is taken
  for (int64_t& p : perm) {
    if (p < -r || p >= r || seen[p < 0 ? p + r : p])
      return ctx.error("perm " + shape_str(ctx.node.attr_ints("perm")) +
                       " is not a permutation of rank " + std::to_string(r));
    if (p < 0) p += r;
    seen[p] = 1;
  }
  Shape out(r);
  const Shape in_strides = strides_of(x.shape());
  Shape strides(r);  // input stride of each output axis
  for (int64_t i = 0; i < r; ++i) {
    out[i] = x.dim(perm[i]);
    strides[i] = in_strides[perm[i]];
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, x.dtype(), out));
  return copy_strided(x, 0, strides, y, ctx.pool);
}

}  // namespace

KILN_REGISTER_KERNEL("", "Transpose", transpose);

KILN_REGISTER_FAST_PATH("", "Transpose", always_fast);  // copy_strided

}  // namespace kiln
