// ai.kiln.DynamicQuantMatMul (docs/ops.md): Y = A·B for float A [..., K] and int8 B [K, N]
// (constant, scaled per column), A quantized per row at every run. Each row of A gets its own u8
// scale and zero point from its range (zero included, as DynamicQuantizeLinear computes them for
// a whole tensor), so a token with small activations keeps its precision next to one with large
// ones; then
//   Y[i, j] = float(sum_k (aq[i,k] - za[i]) * B[k,j]) * (a_scale[i] * b_scale[j]) + bias[j],
// then the epilogue attributes' activation and residual Z (input 4), as FusedMatMul's.
// The product runs on gemm_u8s8 (VNNI; its per-row zero points) or gemm_s16 on A's codes minus
// their zero points, B packed once in prepare either way. What `kiln quantize --dynamic` writes
// for kiln's own form; its --portable form is ONNX Runtime's per-tensor chain instead.
#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/packed_int8.h"
#include "kernels/fast_path.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/quantize.h"

namespace kiln {
namespace {

class DynamicQuantMatMulKernel : public Kernel {
 public:
  Status prepare(const std::vector<const Tensor*>& c, std::vector<bool>& absorbed) override {
    const Tensor* b = c.size() > 1 ? c[1] : nullptr;
    if (!b || b->dtype() != DType::kInt8 || b->rank() != 2 || b->dim(0) > gemm::kMaxS16Depth) return Status::ok();
    k_ = b->dim(0), n_ = b->dim(1);
    packed_ = gemm::PackedInt8::pack(b->raw_data(), true, n_, k_, n_, {0});
    absorbed[1] = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (packed_.empty()) return ctx.error("B must be a constant int8 [K, N] with K <= 32768");
    if (ctx.num_inputs() < 3 || !ctx.has_input(0) || !ctx.has_input(2)) return ctx.error("needs A, B and b_scale");
    const Tensor& a = ctx.input(0);
    const Tensor& bs = ctx.input(2);
    const Tensor* bias = ctx.num_inputs() > 3 && ctx.has_input(3) ? &ctx.input(3) : nullptr;
    if (a.dtype() != DType::kFloat32 || a.rank() < 1 || a.dim(a.rank() - 1) != k_)
      return ctx.error("A must be float32 [..., " + std::to_string(k_) + "], got " + dtype_name(a.dtype()) + " " +
                       shape_str(a.shape()));
    if (bs.dtype() != DType::kFloat32 || (bs.numel() != 1 && bs.numel() != n_))
      return ctx.error("b_scale must be float32, one value or one per column of B");
    if (bias && (bias->dtype() != DType::kFloat32 || bias->numel() != n_))
      return ctx.error("bias must be float32 with one value per column of B");
    Shape out = a.shape();
    out.back() = n_;
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out));
    const int64_t rows = k_ == 0 ? 0 : a.numel() / k_;
    if (rows == 0 || n_ == 0) return Status::ok();
    // Each row's scale, zero point and codes.
    codes_.resize(static_cast<size_t>(rows * k_));
    scales_.resize(static_cast<size_t>(rows));
    zero_points_.resize(static_cast<size_t>(rows));
    auto quantize_rows = [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        float scale = 0, zp = 0;
        dynamic_quantize_u8(a.data<float>() + i * k_, k_, codes_.data() + i * k_, &scale, &zp);
        scales_[static_cast<size_t>(i)] = scale;
        zero_points_[static_cast<size_t>(i)] = static_cast<int32_t>(zp);
      }
    };
    if (ctx.pool && rows > 1 && rows * k_ > (1 << 14))
      ctx.pool->parallel_for(rows, 1, quantize_rows);
    else
      quantize_rows(0, rows);
    // The epilogue attributes (docs/ops.md), the residual Z as input 4, read as [rows, N].
    KILN_ASSIGN_OR_RETURN(gemm::Epilogue epilogue, kiln_ops::read_epilogue(ctx, out, 4));
    if (epilogue.residual) epilogue.ld_residual = n_;
    gemm::Dequantize dq;
    dq.epilogue = epilogue.empty() ? nullptr : &epilogue;
    dq.a_scale = scales_.data(), dq.a_per_row = true;
    dq.b_scale = bs.data<float>(), dq.b_per_column = bs.numel() != 1;
    dq.bias = bias ? bias->data<float>() : nullptr;
    packed_.multiply(rows, codes_.data(), false, k_, zero_points_, dq, y->data<float>(), ctx.pool);
    return Status::ok();
  }

 private:
  int64_t k_ = 0, n_ = 0;
  gemm::PackedInt8 packed_;
  std::vector<uint8_t> codes_;
  std::vector<float> scales_;
  std::vector<int32_t> zero_points_;
};

const KernelRegistrar kDynamicQuantMatMul("ai.kiln", "DynamicQuantMatMul", "ref", [](const ir::Node&, int64_t) {
  return Result<std::unique_ptr<Kernel>>(std::unique_ptr<Kernel>(std::make_unique<DynamicQuantMatMulKernel>()));
});

}  // namespace
}  // namespace kiln
