// ai.kiln.DynamicQuantMatMul (docs/ops.md): Y = A·B for float A [..., K] and int8 B [K, N]
// (constant, scaled per column), A quantized per row at every run. Each row of A gets its own u8
// scale and zero point from its range (zero included, as DynamicQuantizeLinear computes them for
// a whole tensor), so a token with small activations keeps its precision next to one with large
// ones; then
//   Y[i, j] = float(sum_k (aq[i,k] - za[i]) * B[k,j]) * (a_scale[i] * b_scale[j]) + bias[j],
// then the epilogue attributes' activation and residual Z (input 4), as FusedMatMul's. Attribute
// row_bits 7 quantizes the rows to codes 0-127 instead of 0-255.
// The product is gemm::DynamicQuantGemm (gemm_u8s8 on VNNI CPUs, or on 7-bit rows, its per-row
// zero points, else gemm_s16), B packed once in prepare. What `kiln quantize --dynamic` writes
// for kiln's own form; its --portable form is ONNX Runtime's per-tensor chain instead.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/dynamic_quant_gemm.h"
#include "kernels/fast_path.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

class DynamicQuantMatMulKernel : public Kernel {
 public:
  explicit DynamicQuantMatMulKernel(int row_bits) : row_bits_(row_bits) {}

  Status prepare(const std::vector<const Tensor*>& c, std::vector<bool>& absorbed) override {
    const Tensor* b = c.size() > 1 ? c[1] : nullptr;
    if (!b || b->dtype() != DType::kInt8 || b->rank() != 2 || b->dim(0) > gemm::kMaxS16Depth) return Status::ok();
    gemm_ = gemm::DynamicQuantGemm::pack(b->data<int8_t>(), b->dim(0), b->dim(1), row_bits_);
    absorbed[1] = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (gemm_.empty()) return ctx.error("B must be a constant int8 [K, N] with K <= 32768");
    if (ctx.num_inputs() < 3 || !ctx.has_input(0) || !ctx.has_input(2)) return ctx.error("needs A, B and b_scale");
    const int64_t k = gemm_.k(), n = gemm_.n();
    const Tensor& a = ctx.input(0);
    const Tensor& bs = ctx.input(2);
    const Tensor* bias = ctx.num_inputs() > 3 && ctx.has_input(3) ? &ctx.input(3) : nullptr;
    if (a.dtype() != DType::kFloat32 || a.rank() < 1 || a.dim(a.rank() - 1) != k)
      return ctx.error("A must be float32 [..., " + std::to_string(k) + "], got " + dtype_name(a.dtype()) + " " +
                       shape_str(a.shape()));
    if (bs.dtype() != DType::kFloat32 || (bs.numel() != 1 && bs.numel() != n))
      return ctx.error("b_scale must be float32, one value or one per column of B");
    if (bias && (bias->dtype() != DType::kFloat32 || bias->numel() != n))
      return ctx.error("bias must be float32 with one value per column of B");
    Shape out = a.shape();
    out.back() = n;
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out));
    // The epilogue attributes (docs/ops.md), the residual Z as input 4, read as [rows, N].
    KILN_ASSIGN_OR_RETURN(gemm::Epilogue epilogue, kiln_ops::read_epilogue(ctx, out, 4));
    if (epilogue.residual) epilogue.ld_residual = n;
    const int64_t rows = k == 0 ? 0 : a.numel() / k;
    gemm_.run(a.data<float>(), rows, bs.data<float>(), bs.numel() != 1, bias ? bias->data<float>() : nullptr,
              epilogue.empty() ? nullptr : &epilogue, y->data<float>(), ctx.pool);
    return Status::ok();
  }

 private:
  int row_bits_;
  gemm::DynamicQuantGemm gemm_;
};

const KernelRegistrar kDynamicQuantMatMul(
    "ai.kiln", "DynamicQuantMatMul", "ref",
    [](const ir::Node& node, int64_t) -> Result<std::unique_ptr<Kernel>> {
      KILN_ASSIGN_OR_RETURN(const int row_bits, gemm::checked_row_bits(node.attr_int("row_bits", 8)));
      return std::unique_ptr<Kernel>(std::make_unique<DynamicQuantMatMulKernel>(row_bits));
    },
    {{0, {DType::kFloat32}}, {1, {DType::kInt8}}, {2, {DType::kFloat32}}, {3, {DType::kFloat32}}, {4, {DType::kFloat32}}});

}  // namespace
}  // namespace kiln
