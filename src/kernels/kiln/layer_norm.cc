// Kernel of ai.kiln.LayerNorm: ONNX LayerNormalization's Y for models older than opset 17.
// float32: vectorised rows over the thread pool (normalize_row.h); half and double types are
// computed in float32 with statistics in double.
#include "kernels/kernel_util.h"
#include "kernels/kiln/normalize_row.h"

namespace kiln {

Status layer_norm_y(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("LayerNorm needs X and Scale");
  const Tensor& x = ctx.input(0);
  const bool has_b = ctx.has_input(2) && ctx.input(2).defined();
  for (size_t i = 0; i < (has_b ? 3u : 2u); ++i)
    if (!dtype_is_compute_float(ctx.input(i).dtype()))
      return ctx.error("LayerNorm input " + std::to_string(i) + " must be a float tensor, got " +
                       dtype_name(ctx.input(i).dtype()));
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", -1), x.rank()));
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const Shape norm_shape(x.shape().begin() + axis, x.shape().end());
  int64_t len = 1;
  for (int64_t d : norm_shape) len *= d;
  const int64_t outer = len == 0 ? 0 : x.numel() / len;
  // Scale and B broadcast to one row of len values.
  std::vector<float> storage[2];
  const float* row[2] = {nullptr, nullptr};
  for (int i = 0; i < (has_b ? 2 : 1); ++i) {
    KILN_ASSIGN_OR_RETURN(row[i], broadcast_row(ctx, ctx.input(1 + i), norm_shape,
                                                i ? "LayerNorm B" : "LayerNorm Scale", storage[i]));
  }
  if (x.dtype() == DType::kFloat32) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, x.shape()));
    const float* xd = x.data<float>();
    float* yd = y->data<float>();
    const float* gamma = row[0];
    const float* beta = row[1];
    for_rows(ctx.pool, outer, len, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = xd + r * len;
        normalize_row_f32(xr, len, layer_norm_stats(xr, len, eps), gamma, beta, yd + r * len);
      }
    });
    return Status::ok();
  }
  // Half and double types: through float32, statistics in double.
  KILN_ASSIGN_OR_RETURN(Tensor xf, to_float32(x));
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(DType::kFloat32, x.shape()));
  for (int64_t g = 0; g < outer; ++g)
    normalize_row(xf.data<float>() + g * len, len, eps, row[0], row[1], y.data<float>() + g * len);
  KILN_ASSIGN_OR_RETURN(Tensor out, cast_float_to(y, x.dtype()));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

KILN_REGISTER_KERNEL("ai.kiln", "LayerNorm", layer_norm_y);

}  // namespace kiln
