// The 8-bit matrix products: ONNX's MatMulInteger (int32 out) and ONNX Runtime's
// com.microsoft.MatMulIntegerToFloat, which quantize_dynamic's graphs carry (and dynamic-quant-
// matmul makes of MatMulInteger -> Cast -> Mul(a_scale * b_scale) [-> Add(bias)]):
//   Y = float((A - a_zp)(B - b_zp)) * (a_scale * b_scale[j]) + bias[j]
// computed as fma(float(sum), a_scale * b_scale[j], bias[j]) on every route (gemm::Dequantize):
// one rounding where the unfused graph's Mul and Add have two. A constant 2-D B is packed once:
// in 8 bits for gemm_u8s8 on VNNI CPUs (K <= 8192), else minus its zero points widened for
// gemm_s16; a run makes one GEMM of all of A's rows (A [..., M, K] against B [K, N] is A's rows,
// in order, times B). crnn's [1024, 8210] classifier over 20 rows: 1.9 ms on gemm_s16, 0.91 on
// gemm_u8s8 (Zen 4, 2 threads). Any other B runs the reference product (gemm_s16 on widened
// copies, or a plain int32 loop past its depth). kiln's ai.kiln.MatMulIntegerToFloat (gemm-
// epilogue) is the same op with FusedMatMul's epilogue attributes and residual Z as input 7,
// applied to Y as the GEMM's tiles are dequantized.
#include <algorithm>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm_s16.h"
#include "kernels/cpu/gemm/packed_int8.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

// Zero point of an 8-bit quantized operand as int32 values, into v: scalar, or one per row/column.
Status read_zero_points(const Tensor& zp, DType want, std::vector<int32_t>& v) {
  if (zp.dtype() != want)
    return Status::error(std::string("zero point type ") + dtype_name(zp.dtype()) +
                         " differs from input " + dtype_name(want));
  v.resize(static_cast<size_t>(zp.numel()));
  for (int64_t i = 0; i < zp.numel(); ++i)
    v[static_cast<size_t>(i)] = static_cast<int32_t>(load_as_double(zp.dtype(), zp.raw_data(), i));
  return Status::ok();
}


// 8-bit t minus its zero point (zero_point(i) for element i) as int16.
template <typename ZeroPoint>
void widen_s16(const Tensor& t, ZeroPoint zero_point, int16_t* out) {
  auto run = [&](const auto* in) {
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int16_t>(static_cast<int32_t>(in[i]) - zero_point(i));
  };
  if (t.dtype() == DType::kInt8) run(t.data<int8_t>());
  else run(t.data<uint8_t>());
}

// Where each op keeps its operands: MatMulInteger (A, B, a_zero_point, b_zero_point) and ONNX
// Runtime's MatMulIntegerToFloat (A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias).
struct Operands {
  size_t a_zero_point, b_zero_point;
  int a_scale = -1, b_scale = -1, bias = -1;  // -1: the op has none (MatMulInteger)
  int residual = -1;                          // kiln's form: the epilogue's Z
  bool to_float() const { return a_scale >= 0; }
};
constexpr Operands kMatMulInteger{2, 3};
constexpr Operands kMatMulIntegerToFloat{4, 5, 2, 3, 6};
constexpr Operands kFusedMatMulIntegerToFloat{4, 5, 2, 3, 6, 7};

bool given(const KernelContext& ctx, size_t i) { return ctx.has_input(i) && ctx.input(i).defined(); }

// The int32 product (A - a_zp)(B - b_zp) with numpy's batch broadcasting, into *y (made here,
// shaped as the product); any B, on gemm_s16 or the plain loop past its depth.
Status integer_product(KernelContext& ctx, const Operands& ops, Tensor* y) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1)) return ctx.error("needs inputs A and B");
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (!dtype_is_8bit_integer(a.dtype()) || !dtype_is_8bit_integer(b.dtype())) return ctx.error("needs int8/uint8 A and B");
  auto plan_r = plan_matmul(a.shape(), b.shape());
  if (!plan_r) return ctx.error(plan_r.status().message());
  const MatMulPlan& p = *plan_r;
  std::vector<int32_t> azp{0}, bzp{0};
  if (given(ctx, ops.a_zero_point)) {
    KILN_RETURN_IF_ERROR(read_zero_points(ctx.input(ops.a_zero_point), a.dtype(), azp));
    if (azp.size() != 1 && static_cast<int64_t>(azp.size()) != p.m)
      return ctx.error("a_zero_point must be a scalar or have M elements");
  }
  if (given(ctx, ops.b_zero_point)) {
    KILN_RETURN_IF_ERROR(read_zero_points(ctx.input(ops.b_zero_point), b.dtype(), bzp));
    if (bzp.size() != 1 && static_cast<int64_t>(bzp.size()) != p.n)
      return ctx.error("b_zero_point must be a scalar or have N elements");
  }
  KILN_ASSIGN_OR_RETURN(*y, Tensor::make(DType::kInt32, p.out_shape));
  if (p.k <= gemm::kMaxS16Depth) {
    // 16-bit copies minus the zero points (A's per row, B's per column), then gemm_s16.
    KILN_ASSIGN_OR_RETURN(Tensor a16, Tensor::make_for_overwrite(DType::kInt16, a.shape()));
    KILN_ASSIGN_OR_RETURN(Tensor b16, Tensor::make_for_overwrite(DType::kInt16, b.shape()));
    widen_s16(a, [&](int64_t i) { return azp.size() == 1 ? azp[0] : azp[(i / std::max<int64_t>(p.k, 1)) % p.m]; },
          a16.data<int16_t>());
    widen_s16(b, [&](int64_t i) { return bzp.size() == 1 ? bzp[0] : bzp[i % p.n]; }, b16.data<int16_t>());
    for (size_t bi = 0; bi < p.a_offsets.size(); ++bi)
      gemm::gemm_s16(p.m, p.n, p.k, a16.data<int16_t>() + p.a_offsets[bi], p.k, b16.data<int16_t>() + p.b_offsets[bi],
                     p.n, y->data<int32_t>() + bi * p.m * p.n, p.n, ctx.pool);
    return Status::ok();
  }
  // Exact int32 sums, the loop the compiler vectorizes: a task owns a block of output columns for
  // every row, so that its slice of B (k x 256 bytes) stays in cache while all rows read it.
  constexpr int64_t kCols = 256;
  auto typed = [&](auto a_tag, auto b_tag) {
    using A = typename decltype(a_tag)::type;
    using B = typename decltype(b_tag)::type;
    for (size_t bi = 0; bi < p.a_offsets.size(); ++bi) {
      const A* ad = a.data<A>() + p.a_offsets[bi];
      const B* bd = b.data<B>() + p.b_offsets[bi];
      int32_t* yd = y->data<int32_t>() + bi * p.m * p.n;
      auto columns = [&](int64_t c0, int64_t c1) {
        for (int64_t blk = c0; blk < c1; ++blk) {
          const int64_t j0 = blk * kCols, j1 = std::min(p.n, j0 + kCols);
          int32_t zb[kCols];
          for (int64_t j = j0; j < j1; ++j) zb[j - j0] = bzp.size() == 1 ? bzp[0] : bzp[j];
          for (int64_t i = 0; i < p.m; ++i) {
            const int32_t za = azp.size() == 1 ? azp[0] : azp[i];
            int32_t* __restrict yr = yd + i * p.n + j0;
            for (int64_t q = 0; q < p.k; ++q) {
              const int32_t av = static_cast<int32_t>(ad[i * p.k + q]) - za;
              if (av == 0) continue;
              const B* __restrict br = bd + q * p.n + j0;
              for (int64_t j = 0; j < j1 - j0; ++j) yr[j] += av * (static_cast<int32_t>(br[j]) - zb[j]);
            }
          }
        }
      };
      const int64_t blocks = (p.n + kCols - 1) / kCols;
      if (ctx.pool != nullptr && blocks > 1 && p.m * p.n * p.k > (1 << 16)) ctx.pool->parallel_for(blocks, 1, columns);
      else columns(0, blocks);
    }
  };
  auto with_b = [&](auto a_tag) {
    if (b.dtype() == DType::kInt8) typed(a_tag, TypeTag<int8_t>{});
    else typed(a_tag, TypeTag<uint8_t>{});
  };
  if (a.dtype() == DType::kInt8) with_b(TypeTag<int8_t>{});
  else with_b(TypeTag<uint8_t>{});
  return Status::ok();
}

// MatMulIntegerToFloat's y = float(c) * (a_scale * b_scale[j]) + bias[j] over n columns, its
// inputs checked.
Result<gemm::Dequantize> dequantize_inputs(KernelContext& ctx, const Operands& ops, int64_t n, const Shape& y_shape,
                                           gemm::Epilogue* epilogue) {
  if (!given(ctx, static_cast<size_t>(ops.a_scale)) || !given(ctx, static_cast<size_t>(ops.b_scale)))
    return ctx.error("needs a_scale and b_scale");
  const Tensor& as = ctx.input(static_cast<size_t>(ops.a_scale));
  const Tensor& bs = ctx.input(static_cast<size_t>(ops.b_scale));
  const Tensor* bias = given(ctx, static_cast<size_t>(ops.bias)) ? &ctx.input(static_cast<size_t>(ops.bias)) : nullptr;
  if (as.dtype() != DType::kFloat32 || as.numel() != 1) return ctx.error("a_scale must be one float32 value");
  if (bs.dtype() != DType::kFloat32 || (bs.numel() != 1 && bs.numel() != n))
    return ctx.error("b_scale must be float32, one value or one per column of B");
  if (bias && (bias->dtype() != DType::kFloat32 || bias->numel() != n))
    return ctx.error("bias must be float32 with one value per column of B");
  gemm::Dequantize dq;
  dq.a_scale = as.data<float>();
  dq.b_scale = bs.data<float>(), dq.b_per_column = bs.numel() != 1;
  dq.bias = bias ? bias->data<float>() : nullptr;
  if (ops.residual >= 0) {  // kiln's form: its epilogue, Z read as [rows, N]
    KILN_ASSIGN_OR_RETURN(*epilogue, kiln_ops::read_epilogue(ctx, y_shape, static_cast<size_t>(ops.residual)));
    if (epilogue->residual) epilogue->ld_residual = n;
    if (!epilogue->empty()) dq.epilogue = epilogue;
  }
  return dq;
}

class MatMulIntegerKernel : public Kernel {
 public:
  MatMulIntegerKernel(const ir::Node& node, Operands ops)
      : ops_(ops), b_zero_point_input_(node.has_input(ops.b_zero_point)) {}

  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>& absorbed) override {
    const Tensor* b = constants.size() > 1 ? constants[1] : nullptr;
    const Tensor* zp = constants.size() > ops_.b_zero_point ? constants[ops_.b_zero_point] : nullptr;
    if (!b || !dtype_is_8bit_integer(b->dtype()) || b->rank() != 2 || b->dim(0) > gemm::kMaxS16Depth ||
        (b_zero_point_input_ && !zp))
      return Status::ok();
    std::vector<int32_t> bzp{0};
    if (zp && (!read_zero_points(*zp, b->dtype(), bzp).is_ok() ||
               (bzp.size() != 1 && static_cast<int64_t>(bzp.size()) != b->dim(1))))
      return Status::ok();  // run() reports it
    const int64_t n = b->dim(1);
    absorbed[1] = true;
    if (zp) absorbed[ops_.b_zero_point] = true;
    packed_ = gemm::PackedInt8::pack(b->raw_data(), b->dtype() == DType::kInt8, n, b->dim(0), n, bzp);
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (!packed_.empty()) {
      if (ctx.num_inputs() < 2 || !ctx.has_input(0)) return ctx.error("needs inputs A and B");
      return packed_product(ctx);
    }
    Tensor product;
    KILN_RETURN_IF_ERROR(integer_product(ctx, ops_, &product));
    if (!ops_.to_float()) {
      ctx.set_output(0, std::move(product));
      return Status::ok();
    }
    const int64_t n = product.rank() >= 1 ? product.dim(product.rank() - 1) : 1;
    gemm::Epilogue epilogue;  // kiln's form: what dq applies after dequantizing
    KILN_ASSIGN_OR_RETURN(gemm::Dequantize dq, dequantize_inputs(ctx, ops_, n, product.shape(), &epilogue));
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, product.shape()));
    gemm::dequantize_rows(product.data<int32_t>(), n == 0 ? 0 : product.numel() / n, n, dq, y->data<float>(), ctx.pool);
    return Status::ok();
  }

 private:
  // A times the packed B, all of A's rows in one GEMM: int32 sums, or (MatMulIntegerToFloat)
  // dequantized as the GEMM's tiles finish.
  Status packed_product(KernelContext& ctx) {
    const Tensor& a = ctx.input(0);
    const int64_t k = packed_.k(), n = packed_.n();
    if (!dtype_is_8bit_integer(a.dtype())) return ctx.error("needs int8/uint8 A");
    if (a.rank() < 1 || a.dim(a.rank() - 1) != k)
      return ctx.error("A " + shape_str(a.shape()) + " does not match B [" + std::to_string(k) + ", " +
                       std::to_string(n) + "]");
    const int64_t rows = k == 0 ? 0 : a.numel() / k, m = a.rank() >= 2 ? a.dim(a.rank() - 2) : 1;
    std::vector<int32_t>& azp = a_zero_points_;  // kept from run to run
    azp.assign(1, 0);
    if (given(ctx, ops_.a_zero_point)) {
      KILN_RETURN_IF_ERROR(read_zero_points(ctx.input(ops_.a_zero_point), a.dtype(), azp));
      if (azp.size() != 1 && static_cast<int64_t>(azp.size()) != m)
        return ctx.error("a_zero_point must be a scalar or have M elements");
    }
    Shape out = a.shape();
    if (a.rank() >= 2) out.back() = n;
    else out = {n};
    // One zero point per row of the GEMM: A's per-row points repeat over its leading dims.
    if (azp.size() != 1) {
      row_zero_points_.resize(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i) row_zero_points_[static_cast<size_t>(i)] = azp[static_cast<size_t>(i % m)];
    }
    const std::vector<int32_t>& za = azp.size() == 1 ? azp : row_zero_points_;
    const bool a_signed = a.dtype() == DType::kInt8;
    if (ops_.to_float()) {
      gemm::Epilogue epilogue;  // kiln's form: what dq applies after dequantizing
      KILN_ASSIGN_OR_RETURN(gemm::Dequantize dq, dequantize_inputs(ctx, ops_, n, out, &epilogue));
      KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out));
      packed_.multiply(rows, a.raw_data(), a_signed, k, za, dq, y->data<float>(), ctx.pool);
      return Status::ok();
    }
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kInt32, out));
    packed_.multiply(rows, a.raw_data(), a_signed, k, za, y->data<int32_t>(), ctx.pool);
    return Status::ok();
  }

  Operands ops_;
  bool b_zero_point_input_;
  gemm::PackedInt8 packed_;
  std::vector<int32_t> a_zero_points_, row_zero_points_;
};

}  // namespace

const KernelRegistrar kMatMulIntegerKernel(
    "", "MatMulInteger", "s16",
    [](const ir::Node& node, int64_t) {
      return Result<std::unique_ptr<Kernel>>(std::unique_ptr<Kernel>(std::make_unique<MatMulIntegerKernel>(node, kMatMulInteger)));
    },
    {{0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kUInt8, DType::kInt8}}});
const KernelRegistrar kMatMulIntegerToFloatKernel(
    "com.microsoft", "MatMulIntegerToFloat", "s16",
    [](const ir::Node& node, int64_t) {
      return Result<std::unique_ptr<Kernel>>(
          std::unique_ptr<Kernel>(std::make_unique<MatMulIntegerKernel>(node, kMatMulIntegerToFloat)));
    },
    {{0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kUInt8, DType::kInt8}}, {2, {DType::kFloat32}}, {3, {DType::kFloat32}}, {6, {DType::kFloat32}}});

const KernelRegistrar kFusedMatMulIntegerToFloatKernel(
    "ai.kiln", "MatMulIntegerToFloat", "s16",
    [](const ir::Node& node, int64_t) {
      return Result<std::unique_ptr<Kernel>>(
          std::unique_ptr<Kernel>(std::make_unique<MatMulIntegerKernel>(node, kFusedMatMulIntegerToFloat)));
    },
    {{0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kUInt8, DType::kInt8}}, {2, {DType::kFloat32}}, {3, {DType::kFloat32}}, {6, {DType::kFloat32}}, {7, {DType::kFloat32}}});

// gemm_u8s8 or gemm_s16 (a column-blocked int32 loop past 32768-deep sums).
KILN_REGISTER_FAST_PATH("", "MatMulInteger", always_fast);
KILN_REGISTER_FAST_PATH("com.microsoft", "MatMulIntegerToFloat", always_fast);
KILN_REGISTER_FAST_PATH("ai.kiln", "MatMulIntegerToFloat", always_fast);

}  // namespace kiln
