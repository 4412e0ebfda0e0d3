// Reference kernel of ai.kiln.SqueezeExcite: channel means, two small dense layers with an
// activation and a gate, then X scaled per channel. Semantics: docs/ops.md.
#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"

namespace kiln {
namespace {

// True when `w` is [rows, cols, 1, ...] with rank `rank`.
bool is_pointwise_weight(const Tensor& w, int64_t rank, int64_t rows, int64_t cols) {
  if (w.dtype() != DType::kFloat32 || w.rank() != rank || w.dim(0) != rows || w.dim(1) != cols)
    return false;
  for (int64_t i = 2; i < rank; ++i)
    if (w.dim(i) != 1) return false;
  return true;
}

const float* bias_of(const KernelContext& ctx, size_t i, int64_t n, Status& st) {
  if (!ctx.has_input(i) || !ctx.input(i).defined()) return nullptr;
  const Tensor& b = ctx.input(i);
  if (b.dtype() != DType::kFloat32 || b.numel() != n)
    st = ctx.error("input " + std::to_string(i) + " must be float32 with " + std::to_string(n) +
                   " values, got " + shape_str(b.shape()));
  return b.data<float>();
}

Status squeeze_excite(KernelContext& ctx) {
  if (ctx.num_inputs() < 4 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(3))
    return ctx.error("SqueezeExcite needs X, W1 and W2");
  auto act = kiln_ops::read_activation(ctx.node, "activation", "activation_params");
  if (!act) return ctx.error(act.status().message());
  auto gate = kiln_ops::read_activation(ctx.node, "gate", "gate_params");
  if (!gate) return ctx.error(gate.status().message());
  const Tensor& x = ctx.input(0);
  const Tensor& w1 = ctx.input(1);
  const Tensor& w2 = ctx.input(3);
  if (x.dtype() != DType::kFloat32 || x.rank() < 3)
    return ctx.error("X must be float32 of rank 3 or more, got " + shape_str(x.shape()));
  const int64_t n = x.dim(0), c = x.dim(1), r = w1.rank() > 0 ? w1.dim(0) : 0;
  if (!is_pointwise_weight(w1, x.rank(), r, c) || !is_pointwise_weight(w2, x.rank(), c, r))
    return ctx.error("W1 must be [R, C, 1, ...] and W2 [C, R, 1, ...] float32 for X " +
                     shape_str(x.shape()) + ", got " + shape_str(w1.shape()) + " and " +
                     shape_str(w2.shape()));
  Status st = Status::ok();
  const float* b1 = bias_of(ctx, 2, r, st);
  const float* b2 = bias_of(ctx, 4, c, st);
  KILN_RETURN_IF_ERROR(st);
  const int64_t spatial = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kFloat32, x.shape()));
  const float* xd = x.data<float>();
  float* yd = y->data<float>();
  std::vector<float> mean(c), hidden(r);
  for (int64_t ni = 0; ni < n; ++ni) {
    const float* xn = xd + ni * c * spatial;
    for (int64_t ci = 0; ci < c; ++ci) {
      double s = 0;
      for (int64_t i = 0; i < spatial; ++i) s += xn[ci * spatial + i];
      mean[ci] = static_cast<float>(s / static_cast<double>(spatial));
    }
    for (int64_t ri = 0; ri < r; ++ri) {
      double s = b1 ? b1[ri] : 0.0;
      for (int64_t ci = 0; ci < c; ++ci)
        s += static_cast<double>(w1.data<float>()[ri * c + ci]) * mean[ci];
      hidden[ri] = static_cast<float>((*act)(static_cast<float>(s)));
    }
    for (int64_t ci = 0; ci < c; ++ci) {
      double s = b2 ? b2[ci] : 0.0;
      for (int64_t ri = 0; ri < r; ++ri)
        s += static_cast<double>(w2.data<float>()[ci * r + ri]) * hidden[ri];
      const float scale = static_cast<float>((*gate)(static_cast<float>(s)));
      for (int64_t i = 0; i < spatial; ++i)
        yd[(ni * c + ci) * spatial + i] = xn[ci * spatial + i] * scale;
    }
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.kiln", "SqueezeExcite", squeeze_excite);

}  // namespace kiln
