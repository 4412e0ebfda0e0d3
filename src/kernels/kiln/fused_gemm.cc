// Kernels of ai.kiln.FusedGemm and ai.kiln.FusedMatMul. A constant 2-D float32 weight B is
// packed once in prepare, and each run is one GEMM whose write-out adds the bias and applies
// the activation and residual to every tile while it is in cache (kernels/cpu/gemm/epilogue.h).
// Otherwise (B computed at run time, or batched B): the reference Gemm / MatMul (same kernels,
// same attributes), a per-column bias for FusedMatMul, then the activation/residual tail.
// Semantics: docs/ops.md.
#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

class FusedGemm : public Kernel {
 public:
  FusedGemm(kiln_ops::StandardOp op, bool matmul, kiln_ops::Activation act, const ir::Node& node,
            const gemm::MicroKernel* tile)
      : op_(std::move(op)),
        matmul_(matmul),
        act_(act),
        tile_(tile),
        residual_first_(node.attr_int("residual_before_activation", 0) != 0),
        trans_a_(!matmul && node.attr_int("transA", 0) != 0),
        trans_b_(!matmul && node.attr_int("transB", 0) != 0),
        alpha_(matmul ? 1.0f : node.attr_float("alpha", 1.0f)),
        beta_(matmul ? 1.0f : node.attr_float("beta", 1.0f)) {}

  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    if (constants.size() < 2 || constants[1] == nullptr) return Status::ok();
    const Tensor& b = *constants[1];
    if (b.rank() != 2 || b.dtype() != DType::kFloat32) return Status::ok();
    KILN_ASSIGN_OR_RETURN(packed_, pack_weight(b, trans_b_, tile_));
    absorbed[1] = true;  // every run that can succeed takes the packed path
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
      return ctx.error("needs inputs A and B");
    if (ctx.input(0).dtype() != DType::kFloat32) return ctx.error("supports float32 only");
    if (!packed_.empty()) return run_packed(ctx);
    const Value* c = ctx.has_input(2) ? &ctx.value(2) : nullptr;
    KILN_ASSIGN_OR_RETURN(Tensor y, matmul_ ? op_.run(ctx, {&ctx.value(0), &ctx.value(1)})
                                            : op_.run(ctx, {&ctx.value(0), &ctx.value(1), c}));
    if (matmul_ && c != nullptr) KILN_RETURN_IF_ERROR(add_bias(ctx, c->tensor, y));
    KILN_RETURN_IF_ERROR(kiln_ops::apply_epilogue(ctx, y, 3));
    ctx.set_output(0, std::move(y));
    return Status::ok();
  }

 private:
  // One GEMM against the packed B, everything after the product fused into its write-out.
  Status run_packed(KernelContext& ctx) const {
    const Tensor& a = ctx.input(0);
    const int64_t k = packed_.k(), n = packed_.n();
    int64_t m = 0;
    Shape out;
    if (matmul_) {  // [..., M, K] x [K, N]: all leading dims are rows of one GEMM
      if (a.rank() < 1 || a.dim(a.rank() - 1) != k)
        return ctx.error("inner dimensions differ: A " + shape_str(a.shape()) + " x B [" +
                         std::to_string(k) + ", " + std::to_string(n) + "]");
      out.assign(a.shape().begin(), a.shape().end() - 1);
      m = 1;
      for (int64_t d : out) m *= d;
      out.push_back(n);
    } else {
      if (a.rank() != 2 || (trans_a_ ? a.dim(0) : a.dim(1)) != k)
        return ctx.error("Gemm needs a 2-D A with " + std::to_string(k) +
                         " columns of op(A), got " + shape_str(a.shape()));
      m = trans_a_ ? a.dim(1) : a.dim(0);
      out = {m, n};
    }
    const Tensor* c = ctx.has_input(2) && ctx.input(2).defined() ? &ctx.input(2) : nullptr;
    const Tensor* z = ctx.has_input(3) && ctx.input(3).defined() ? &ctx.input(3) : nullptr;
    if (c && c->dtype() != DType::kFloat32) return ctx.error("bias (C) must be float32");
    if (z && (z->dtype() != DType::kFloat32 || z->shape() != out))
      return ctx.error("residual input must be float32 of the result's shape " + shape_str(out) +
                       ", got " + shape_str(z->shape()));
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out));
    float* yd = y->data<float>();
    // FusedMatMul's bias: n values, whatever the shape. Gemm's C: a per-column C is the bias too;
    // any other broadcast of it is written into Y first and accumulated onto (beta 1).
    const float* bias = nullptr;
    std::vector<float> scaled;
    float beta_y = 0.0f;
    if (c && matmul_) {
      if (c->numel() != n)
        return ctx.error("bias must be float32 with " + std::to_string(n) +
                         " values (one per column), got " + shape_str(c->shape()));
      bias = c->data<float>();
    } else if (c && beta_ != 0.0f) {
      auto bs = broadcast_shapes(c->shape(), out);
      if (!bs || *bs != out)
        return ctx.error("Gemm C of shape " + shape_str(c->shape()) + " does not broadcast to " +
                         shape_str(out));
      const float* cd = c->data<float>();
      if (c->numel() == n && (c->rank() == 1 || (c->rank() == 2 && c->dim(0) == 1)) &&
          beta_ == 1.0f) {
        bias = cd;  // C itself: nothing to scale, nothing to allocate
      } else if (c->numel() == n && (c->rank() == 1 || (c->rank() == 2 && c->dim(0) == 1))) {
        scaled.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) scaled[j] = beta_ * cd[j];
        bias = scaled.data();
      } else {
        const auto off = broadcast_offsets(c->shape(), out);
        for (int64_t i = 0; i < m * n; ++i) yd[i] = beta_ * cd[off[i]];
        beta_y = 1.0f;
      }
    }
    gemm::Epilogue epilogue = kiln_ops::gemm_epilogue(act_);
    if (z) epilogue.residual = z->data<float>(), epilogue.ld_residual = n;
    epilogue.residual_first = residual_first_;
    const int64_t lda = matmul_ ? k : a.dim(1);
    gemm_f32_prepacked(trans_a_, m, alpha_, a.data<float>(), lda, packed_, beta_y, yd, n, bias,
                       &epilogue, ctx.pool);
    return Status::ok();
  }

  // y[..., j] += bias[j]: the bias holds one value per column, whatever its (broadcastable) shape.
  static Status add_bias(const KernelContext& ctx, const Tensor& bias, Tensor& y) {
    const int64_t n = y.rank() == 0 ? 1 : y.dim(y.rank() - 1);
    if (bias.dtype() != DType::kFloat32 || bias.numel() != n)
      return ctx.error("bias must be float32 with " + std::to_string(n) +
                       " values (one per column), got " + shape_str(bias.shape()));
    float* yd = y.data<float>();
    const float* bd = bias.data<float>();
    for (int64_t i = 0; i < y.numel(); ++i) yd[i] += bd[i % n];
    return Status::ok();
  }

  kiln_ops::StandardOp op_;
  bool matmul_;
  kiln_ops::Activation act_;
  const gemm::MicroKernel* tile_;  // the packed product's micro-kernel; null: the best
  bool residual_first_, trans_a_, trans_b_;
  float alpha_, beta_;
  gemm::PackedMatrix packed_;
};

template <bool kMatMul, bool kNarrowTile>
Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return Status::error(node.describe() + ": " + act.status().message());
  KILN_ASSIGN_OR_RETURN(kiln_ops::StandardOp op,
                        kiln_ops::StandardOp::create(kMatMul ? "MatMul" : "Gemm", node));
  return std::unique_ptr<Kernel>(std::make_unique<FusedGemm>(
      std::move(op), kMatMul, *act, node, kNarrowTile ? narrow_tile() : nullptr));
}

const KernelRegistrar kGemm("ai.kiln", "FusedGemm", "ref", create<false, false>);
const KernelRegistrar kMatMul("ai.kiln", "FusedMatMul", "ref", create<true, false>);

// kiln's narrow-tile variant for the tuner (ref/gemm_f32.h).
const KernelVariantRegistrar kGemmNarrow("ai.kiln", "FusedGemm", kNarrowTileVariant, create<false, true>,
                                         takes_narrow_tile);
const KernelVariantRegistrar kMatMulNarrow("ai.kiln", "FusedMatMul", kNarrowTileVariant, create<true, true>,
                                           takes_narrow_tile);

}  // namespace
}  // namespace kiln
