// Kernel of ai.kiln.BlockedSqueezeExcite: ai.kiln.SqueezeExcite (channel means, two small dense
// layers, X scaled per channel) on a blocked X, so EfficientNet's blocks stay in one region.
// The weights keep SqueezeExcite's plain layout. Semantics: docs/ops.md.
#include <immintrin.h>

#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

bool is_pointwise_weight(const Tensor& w, int64_t rows, int64_t cols) {
  return w.dtype() == DType::kFloat32 && w.rank() == 4 && w.dim(0) == rows && w.dim(1) == cols &&
         w.dim(2) == 1 && w.dim(3) == 1;
}

const float* bias_of(const KernelContext& ctx, size_t i, int64_t n, Status& st) {
  if (!ctx.has_input(i) || !ctx.input(i).defined()) return nullptr;
  const Tensor& b = ctx.input(i);
  if (b.dtype() != DType::kFloat32 || b.numel() != n)
    st = ctx.error("input " + std::to_string(i) + " must be float32 with " + std::to_string(n) +
                   " values, got " + shape_str(b.shape()));
  return b.data<float>();
}

class BlockedSqueezeExcite : public Kernel {
 public:
  BlockedSqueezeExcite(kiln_ops::Activation act, kiln_ops::Activation gate)
      : act_(act), gate_(gate) {}

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 4 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(3))
      return ctx.error("BlockedSqueezeExcite needs X, W1 and W2");
    auto d = blocked_dims(ctx.input(0), "X");
    if (!d) return ctx.error(d.status().message());
    const Tensor& w1 = ctx.input(1);
    const Tensor& w2 = ctx.input(3);
    const int64_t r = w1.rank() > 0 ? w1.dim(0) : 0, c = w1.rank() > 1 ? w1.dim(1) : 0;
    if (!is_pointwise_weight(w1, r, c) || !is_pointwise_weight(w2, c, r) || blocks_of(c) != d->cb)
      return ctx.error("W1 must be [R, C, 1, 1] and W2 [C, R, 1, 1] float32 with C filling X's " +
                       std::to_string(d->cb) + " channel blocks, got " + shape_str(w1.shape()) +
                       " and " + shape_str(w2.shape()));
    Status st = Status::ok();
    const float* b1 = bias_of(ctx, 2, r, st);
    const float* b2 = bias_of(ctx, 4, c, st);
    KILN_RETURN_IF_ERROR(st);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kFloat32, ctx.input(0).shape()));
    const int64_t hw = d->h * d->w;
    std::vector<float> mean(d->cb * kBlock), hidden(r), scale(d->cb * kBlock, 0.0f);
    for (int64_t n = 0; n < d->n; ++n) {
      const float* x = ctx.input(0).data<float>() + n * d->cb * d->plane();
      float* yn = y->data<float>() + n * d->cb * d->plane();
      for (int64_t b = 0; b < d->cb; ++b) {
        __m256 s = _mm256_setzero_ps();
        for (int64_t p = 0; p < hw; ++p) s = _mm256_add_ps(s, _mm256_loadu_ps(x + b * d->plane() + p * kBlock));
        _mm256_storeu_ps(mean.data() + b * kBlock, _mm256_div_ps(s, _mm256_set1_ps(static_cast<float>(hw))));
      }
      for (int64_t ri = 0; ri < r; ++ri) {
        double s = b1 ? b1[ri] : 0.0;
        for (int64_t ci = 0; ci < c; ++ci)
          s += static_cast<double>(w1.data<float>()[ri * c + ci]) * mean[ci];
        hidden[ri] = static_cast<float>(act_(static_cast<float>(s)));
      }
      for (int64_t ci = 0; ci < c; ++ci) {
        double s = b2 ? b2[ci] : 0.0;
        for (int64_t ri = 0; ri < r; ++ri)
          s += static_cast<double>(w2.data<float>()[ci * r + ri]) * hidden[ri];
        scale[ci] = static_cast<float>(gate_(static_cast<float>(s)));
      }
      parallel_range(ctx.pool, d->cb, d->cb * d->plane(), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const __m256 sv = _mm256_loadu_ps(scale.data() + b * kBlock);
          for (int64_t p = 0; p < hw; ++p) {
            const int64_t at = b * d->plane() + p * kBlock;
            _mm256_storeu_ps(yn + at, _mm256_mul_ps(_mm256_loadu_ps(x + at), sv));
          }
        }
      });
    }
    return Status::ok();
  }

 private:
  kiln_ops::Activation act_, gate_;
};

Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return Status::error(node.describe() + ": " + act.status().message());
  auto gate = kiln_ops::read_activation(node, "gate", "gate_params");
  if (!gate) return Status::error(node.describe() + ": " + gate.status().message());
  return std::unique_ptr<Kernel>(std::make_unique<BlockedSqueezeExcite>(*act, *gate));
}

const KernelRegistrar kRegistrar("ai.kiln", "BlockedSqueezeExcite", "avx2", create);

}  // namespace
}  // namespace kiln::nchwc
