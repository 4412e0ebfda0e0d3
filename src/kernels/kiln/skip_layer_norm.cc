// Reference kernel of ai.kiln.SkipLayerNorm: S = input + skip (+ bias), broadcast by numpy rules;
// Y = LayerNorm(S) over axes [axis, rank) with gamma and beta; the optional second output is S.
#include "kernels/kernel_util.h"
#include "kernels/kiln/normalize_row.h"

namespace kiln {
namespace {

bool present(const KernelContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).defined();
}

Status skip_layer_norm(KernelContext& ctx) {
  if (ctx.num_inputs() < 3 || !present(ctx, 0) || !present(ctx, 1) || !present(ctx, 2))
    return ctx.error("SkipLayerNorm needs input, skip and gamma");
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (present(ctx, i) && !dtype_is_compute_float(ctx.input(i).dtype()))
      return ctx.error("SkipLayerNorm input " + std::to_string(i) +
                       " must be a float tensor, got " + dtype_name(ctx.input(i).dtype()));
  // The sum: input + skip + bias.
  std::vector<const Tensor*> terms = {&ctx.input(0), &ctx.input(1)};
  if (present(ctx, 4)) terms.push_back(&ctx.input(4));
  std::vector<Shape> shapes;
  for (const Tensor* t : terms) shapes.push_back(t->shape());
  auto s_shape = broadcast_shapes(shapes);
  if (!s_shape) return ctx.error("SkipLayerNorm: " + s_shape.status().message());
  KILN_ASSIGN_OR_RETURN(Tensor s, Tensor::make(DType::kFloat32, *s_shape));
  for (const Tensor* t : terms) {
    KILN_ASSIGN_OR_RETURN(Tensor tf, to_float32(*t));
    const auto off = broadcast_offsets(t->shape(), *s_shape);
    for (int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] += tf.data<float>()[off[i]];
  }
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", -1), s.rank()));
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const Shape norm_shape(s_shape->begin() + axis, s_shape->end());
  int64_t len = 1;
  for (int64_t d : norm_shape) len *= d;
  const int64_t outer = len == 0 ? 0 : s.numel() / len;
  const bool has_beta = present(ctx, 3);
  // gamma and beta broadcast to one row of len values.
  std::vector<float> row[2];
  for (int i = 0; i < (has_beta ? 2 : 1); ++i) {
    KILN_ASSIGN_OR_RETURN(row[i], broadcast_row(ctx, ctx.input(2 + i), norm_shape,
                                                i ? "SkipLayerNorm beta" : "SkipLayerNorm gamma"));
  }
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(DType::kFloat32, *s_shape));
  for (int64_t g = 0; g < outer; ++g)
    normalize_row(s.data<float>() + g * len, len, eps, row[0].data(),
                  has_beta ? row[1].data() : nullptr, y.data<float>() + g * len);
  const DType dt = ctx.input(0).dtype();
  KILN_ASSIGN_OR_RETURN(Tensor out, cast_float_to(y, dt));
  ctx.set_output(0, std::move(out));
  if (ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(Tensor sum_out, cast_float_to(s, dt));
    ctx.set_output(1, std::move(sum_out));
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.kiln", "SkipLayerNorm", skip_layer_norm);

}  // namespace kiln
