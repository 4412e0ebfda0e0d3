// Kernel of ai.kiln.SkipLayerNorm: S = input + skip (+ bias), broadcast by numpy rules;
// Y = LayerNorm(S) over axes [axis, rank) with gamma and beta; the optional second output is S.
// float32 with input and skip alike (BERT, ViT) runs vectorised rows over the thread pool.
#include <array>
#include <vector>

#include "core/thread_scratch.h"
#include "kernels/kernel_util.h"
#include "kernels/kiln/normalize_row.h"

namespace kiln {
namespace {

// A row of S when the graph does not want S, one per thread.
std::vector<float>& row_sum() {
  thread_local std::vector<float> row;
  return row;
}

bool present(const KernelContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).defined();
}

// The common case in one pass per row: float32 input and skip of the same shape, a bias (if any)
// that is one row. S = (input + skip) + bias in float as the general path rounds it, then the
// row's statistics and Y while S is in L1. False when the case does not apply.
Result<bool> run_float32(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  const Tensor& skip = ctx.input(1);
  const Tensor* bias = present(ctx, 4) ? &ctx.input(4) : nullptr;
  if (in.dtype() != DType::kFloat32 || skip.dtype() != DType::kFloat32 ||
      skip.shape() != in.shape() || in.rank() == 0 ||
      (bias && (bias->dtype() != DType::kFloat32 || bias->rank() > in.rank())))
    return false;
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", -1), in.rank()));
  const Shape norm_shape(in.shape().begin() + axis, in.shape().end());
  const int64_t norm_rank = static_cast<int64_t>(norm_shape.size());
  if (bias) {
    // The bias must vary only along the normalised axes (and broadcast to them).
    for (int64_t i = 0; i < bias->rank() - norm_rank; ++i)
      if (bias->dim(i) != 1) return false;
    auto bs = broadcast_shapes(bias->shape(), norm_shape);
    if (!bs || *bs != norm_shape) return false;
  }
  int64_t len = 1;
  for (int64_t d : norm_shape) len *= d;
  const int64_t outer = len == 0 ? 0 : in.numel() / len;
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  std::vector<float> storage[3];
  const float* row[3] = {nullptr, nullptr, nullptr};  // gamma, beta, bias
  KILN_ASSIGN_OR_RETURN(row[0], broadcast_row(ctx, ctx.input(2), norm_shape,
                                              "SkipLayerNorm gamma", storage[0]));
  if (present(ctx, 3)) {
    KILN_ASSIGN_OR_RETURN(row[1], broadcast_row(ctx, ctx.input(3), norm_shape,
                                                "SkipLayerNorm beta", storage[1]));
  }
  if (bias) {
    Shape trimmed(bias->shape().end() - std::min<int64_t>(bias->rank(), norm_rank),
                  bias->shape().end());
    KILN_ASSIGN_OR_RETURN(row[2], broadcast_row(ctx, bias->reshaped(trimmed), norm_shape,
                                                "SkipLayerNorm bias", storage[2]));
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, in.shape()));
  float* sum_out = nullptr;
  if (ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(Tensor * s,
                          ctx.make_output_for_overwrite(1, DType::kFloat32, in.shape()));
    sum_out = s->data<float>();
  }
  const float* a = in.data<float>();
  const float* b = skip.data<float>();
  const float* gamma = row[0];
  const float* beta = row[1];
  const float* c = row[2];
  float* yd = y->data<float>();
  if (!sum_out) {  // every thread that may take rows has its row of S sized first
    thread_local ScratchReservation<1> reservation;
    reservation.ensure(ctx.pool, {len}, [](const std::array<int64_t, 1>& n) {
      row_sum().resize(static_cast<size_t>(n[0]));
    });
  }
  for_rows(ctx.pool, outer, len, [&](int64_t r0, int64_t r1) {
    std::vector<float>& buf = row_sum();
    if (!sum_out) buf.resize(static_cast<size_t>(len));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r * len;
      float* s = sum_out ? sum_out + o : buf.data();
      for (int64_t i = 0; i < len; ++i) s[i] = a[o + i] + b[o + i];
      if (c)
        for (int64_t i = 0; i < len; ++i) s[i] += c[i];
      normalize_row_f32(s, len, layer_norm_stats(s, len, eps), gamma, beta, yd + o);
    }
  });
  return true;
}

Status skip_layer_norm(KernelContext& ctx) {
  if (ctx.num_inputs() < 3 || !present(ctx, 0) || !present(ctx, 1) || !present(ctx, 2))
    return ctx.error("SkipLayerNorm needs input, skip and gamma");
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (present(ctx, i) && !dtype_is_compute_float(ctx.input(i).dtype()))
      return ctx.error("SkipLayerNorm input " + std::to_string(i) +
                       " must be a float tensor, got " + dtype_name(ctx.input(i).dtype()));
  if (Result<bool> done = run_float32(ctx); !done || *done) return done.status();
  // The general path (broadcast inputs, half and double types). The sum: input + skip + bias.
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
  std::vector<float> storage[2];
  const float* row[2] = {nullptr, nullptr};
  for (int i = 0; i < (has_beta ? 2 : 1); ++i) {
    KILN_ASSIGN_OR_RETURN(row[i], broadcast_row(ctx, ctx.input(2 + i), norm_shape,
                                                i ? "SkipLayerNorm beta" : "SkipLayerNorm gamma",
                                                storage[i]));
  }
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(DType::kFloat32, *s_shape));
  for (int64_t g = 0; g < outer; ++g)
    normalize_row(s.data<float>() + g * len, len, eps, row[0], row[1], y.data<float>() + g * len);
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
