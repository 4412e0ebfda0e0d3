// Reference kernels of ai.kiln.FusedGemm and ai.kiln.FusedMatMul: the reference Gemm / MatMul
// (same kernels, same attributes), a per-column bias for FusedMatMul, then the activation/residual
// tail. Semantics: docs/ops.md.
#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"

namespace kiln {
namespace {

class FusedGemm : public Kernel {
 public:
  FusedGemm(kiln_ops::StandardOp op, bool matmul) : op_(std::move(op)), matmul_(matmul) {}

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
      return ctx.error("needs inputs A and B");
    if (ctx.input(0).dtype() != DType::kFloat32) return ctx.error("supports float32 only");
    const Value* c = ctx.has_input(2) ? &ctx.value(2) : nullptr;
    std::vector<const Value*> in{&ctx.value(0), &ctx.value(1)};
    if (!matmul_) in.push_back(c);
    KILN_ASSIGN_OR_RETURN(Tensor y, op_.run(ctx, std::move(in)));
    if (matmul_ && c != nullptr) KILN_RETURN_IF_ERROR(add_bias(ctx, c->tensor, y));
    KILN_RETURN_IF_ERROR(kiln_ops::apply_epilogue(ctx, y, 3));
    ctx.set_output(0, std::move(y));
    return Status::ok();
  }

 private:
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
};

template <bool kMatMul>
Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  auto act = kiln_ops::read_activation(node, "activation", "activation_params");
  if (!act) return Status::error(node.describe() + ": " + act.status().message());
  KILN_ASSIGN_OR_RETURN(kiln_ops::StandardOp op,
                        kiln_ops::StandardOp::create(kMatMul ? "MatMul" : "Gemm", node));
  return std::unique_ptr<Kernel>(std::make_unique<FusedGemm>(std::move(op), kMatMul));
}

const KernelRegistrar kGemm("ai.kiln", "FusedGemm", "ref", create<false>);
const KernelRegistrar kMatMul("ai.kiln", "FusedMatMul", "ref", create<true>);

}  // namespace
}  // namespace kiln
