// com.microsoft.MatMulNBits (ONNX Runtime's weight-only quantized MatMul: what its int4 weight
// quantizer writes, and `kiln quantize --weight-only --weight-bits 4`): Y = A · W (+ bias), W
// [K, N] stored as `bits`-bit codes in blocks of block_size along K, a scale (and zero point) per
// block and column:
//   W[k, n] = (q[n, k] - zp[n, k / block_size]) * scales[n * k_blocks + k / block_size]
// B uint8 [N, k_blocks, block_size * bits / 8], each byte's codes low bits first; zero points
// uint8 packed the same way, ceil(k_blocks * bits / 8) bytes a column (absent: 2^(bits - 1)).
// bits 4 or 8. kiln widens W once, in prepare, and runs the float GEMM on it: the model file has
// the 4-bit size, the run the float32 speed (A times 8-bit codes on the fly is the decode-time
// kernel still to write).
#include <cstring>

#include "kernels/kernel_util.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

class MatMulNBits : public Kernel {
 public:
  explicit MatMulNBits(const ir::Node& node)
      : k_(node.attr_int("K", 0)), n_(node.attr_int("N", 0)), bits_(node.attr_int("bits", 4)),
        block_(node.attr_int("block_size", 0)) {}

  Status prepare(const std::vector<const Tensor*>& c, std::vector<bool>& absorbed) override {
    if (k_ <= 0 || n_ <= 0 || (bits_ != 4 && bits_ != 8) || block_ < 16 || (block_ & (block_ - 1)) != 0)
      return Status::error("MatMulNBits needs K, N > 0, bits 4 or 8 and a power-of-two block_size >= 16; got K " +
                           std::to_string(k_) + ", N " + std::to_string(n_) + ", bits " + std::to_string(bits_) +
                           ", block_size " + std::to_string(block_));
    const Tensor* b = c.size() > 1 ? c[1] : nullptr;
    const Tensor* scales = c.size() > 2 ? c[2] : nullptr;
    const Tensor* zp = c.size() > 3 ? c[3] : nullptr;
    if (!b || !scales) return Status::ok();  // run() names what is missing
    KILN_ASSIGN_OR_RETURN(Tensor w, widen(*b, *scales, zp));
    KILN_ASSIGN_OR_RETURN(packed_, pack_weight(w, false));
    absorbed[1] = true;
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (packed_.empty())
      return ctx.error("B, scales (and zero points) must be constants of the shapes K, N, bits and block_size give");
    if (ctx.num_inputs() > 4 && ctx.has_input(4)) return ctx.error("g_idx (act-order) is not supported");
    const Tensor& a = ctx.input(0);
    if (a.dtype() != DType::kFloat32 || a.rank() < 1 || a.dim(a.rank() - 1) != k_)
      return ctx.error("A must be float32 [..., " + std::to_string(k_) + "], got " + dtype_name(a.dtype()) + " " +
                       shape_str(a.shape()));
    const float* bias = nullptr;
    if (ctx.num_inputs() > 5 && ctx.has_input(5)) {
      const Tensor& t = ctx.input(5);
      if (t.dtype() != DType::kFloat32 || t.numel() != n_) return ctx.error("bias must be float32 [N]");
      bias = t.data<float>();
    }
    Shape out = a.shape();
    out.back() = n_;
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out));
    gemm_f32_prepacked(false, a.numel() / k_, 1.0f, a.data<float>(), k_, packed_, 0.0f, y->data<float>(), n_, bias,
                       nullptr, ctx.pool);
    return Status::ok();
  }

 private:
  // W [K, N] in float32 from the codes, scales and zero points.
  Result<Tensor> widen(const Tensor& b, const Tensor& scales, const Tensor* zp) const {
    const int64_t blocks = (k_ + block_ - 1) / block_, blob = block_ * bits_ / 8;
    if (b.dtype() != DType::kUInt8 || b.numel() != n_ * blocks * blob)
      return Status::error("B must be uint8 [N, k_blocks, block_size * bits / 8] = [" + std::to_string(n_) + ", " +
                           std::to_string(blocks) + ", " + std::to_string(blob) + "], got " + dtype_name(b.dtype()) +
                           " " + shape_str(b.shape()));
    if (scales.dtype() != DType::kFloat32 || scales.numel() != n_ * blocks)
      return Status::error("scales must be float32 with N * k_blocks = " + std::to_string(n_ * blocks) + " values");
    const int64_t zp_bytes = (blocks * bits_ + 7) / 8;  // a column's packed zero points
    if (zp && (zp->dtype() != DType::kUInt8 || zp->numel() != n_ * zp_bytes))
      return Status::error("zero_points must be uint8 with N * ceil(k_blocks * bits / 8) = " + std::to_string(n_ * zp_bytes) +
                           " values (float zero points are not supported)");
    const uint8_t* q = b.data<uint8_t>();
    const uint8_t* z = zp ? zp->data<uint8_t>() : nullptr;
    auto code = [&](const uint8_t* packed, int64_t i) {  // the i-th code of a packed run
      return bits_ == 8 ? packed[i] : (packed[i / 2] >> (4 * (i % 2))) & 15;
    };
    KILN_ASSIGN_OR_RETURN(Tensor w, Tensor::make_for_overwrite(DType::kFloat32, {k_, n_}));
    float* wd = w.data<float>();
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const float s = scales.data<float>()[n * blocks + blk];
        const int zero = z ? code(z + n * zp_bytes, blk) : 1 << (bits_ - 1);
        const uint8_t* codes = q + (n * blocks + blk) * blob;
        for (int64_t i = 0; i < block_ && blk * block_ + i < k_; ++i)
          wd[(blk * block_ + i) * n_ + n] = static_cast<float>(code(codes, i) - zero) * s;
      }
    return w;
  }

  int64_t k_, n_, bits_, block_;
  gemm::PackedMatrix packed_;
};

const KernelRegistrar kMatMulNBits(
    "com.microsoft", "MatMulNBits", "widened",
    [](const ir::Node& node, int64_t) {
      return Result<std::unique_ptr<Kernel>>(std::unique_ptr<Kernel>(std::make_unique<MatMulNBits>(node)));
    },
    {{0, {DType::kFloat32}}, {1, {DType::kUInt8}}, {2, {DType::kFloat32}}, {3, {DType::kUInt8}}, {5, {DType::kFloat32}}});

}  // namespace
}  // namespace kiln
