// Kernel of ai.kiln.RMSNorm: Y = X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * Scale.
// float32: vectorised rows over the thread pool (normalize_row.h); half and double types are
// computed in float32 with the mean accumulated in double.
#include <cmath>

#include "kernels/kernel_util.h"
#include "kernels/kiln/normalize_row.h"

namespace kiln {
namespace {

Status rms_norm(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("RMSNorm needs X");
  const Tensor& x = ctx.input(0);
  const bool has_scale = ctx.has_input(1) && ctx.input(1).defined();
  for (size_t i = 0; i < (has_scale ? 2u : 1u); ++i)
    if (!dtype_is_compute_float(ctx.input(i).dtype()))
      return ctx.error("RMSNorm input " + std::to_string(i) + " must be a float tensor, got " +
                       dtype_name(ctx.input(i).dtype()));
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", -1), x.rank()));
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const Shape norm_shape(x.shape().begin() + axis, x.shape().end());
  int64_t len = 1;
  for (int64_t d : norm_shape) len *= d;
  const int64_t outer = len == 0 ? 0 : x.numel() / len;
  std::vector<float> storage;
  const float* scale = nullptr;
  if (has_scale) {
    KILN_ASSIGN_OR_RETURN(scale,
                          broadcast_row(ctx, ctx.input(1), norm_shape, "RMSNorm Scale", storage));
  }
  if (x.dtype() == DType::kFloat32) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, x.shape()));
    const float* xd = x.data<float>();
    float* yd = y->data<float>();
    for_rows(ctx.pool, outer, len, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = xd + r * len;
        const double sq = row_sum_f32(xr, len, 0.0f, true);
        const RowStats st{0.0f,
                          static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(len) + eps))};
        normalize_row_f32(xr, len, st, scale, nullptr, yd + r * len);
      }
    });
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor xf, to_float32(x));
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(DType::kFloat32, x.shape()));
  for (int64_t g = 0; g < outer; ++g) {
    const float* xr = xf.data<float>() + g * len;
    double sq = 0;
    for (int64_t i = 0; i < len; ++i) sq += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(len) + eps);
    for (int64_t i = 0; i < len; ++i) {
      double v = xr[i] * inv;
      if (has_scale) v *= scale[static_cast<size_t>(i)];
      y.data<float>()[g * len + i] = static_cast<float>(v);
    }
  }
  KILN_ASSIGN_OR_RETURN(Tensor out, cast_float_to(y, x.dtype()));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.kiln", "RMSNorm", rms_norm);

}  // namespace kiln
