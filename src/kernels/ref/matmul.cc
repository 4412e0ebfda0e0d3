// Reference MatMul (numpy batch broadcasting, 1-D operands) and Gemm (transA/transB/alpha/beta,
// unidirectional C broadcast); the 8-bit products are kernels/cpu/matmul_integer.cc's. A
// constant 2-D float B (a weight) is packed once in prepare for the fast GEMM and then only the
// packed copy is read, so the runtime can free the original.
#include <algorithm>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

bool is_half(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

// B as a 2-D float weight prepacked at compile time, when it is a constant (else empty).
Status prepack_weight(const std::vector<const Tensor*>& constants, size_t index, bool trans,
                      const gemm::MicroKernel* tile, std::vector<bool>& absorbed,
                      gemm::PackedMatrix& packed) {
  if (constants.size() <= index || constants[index] == nullptr) return Status::ok();
  const Tensor& w = *constants[index];
  if (w.rank() != 2 || !(w.dtype() == DType::kFloat32 || is_half(w.dtype()))) return Status::ok();
  KILN_ASSIGN_OR_RETURN(packed, pack_weight(w, trans, tile));
  absorbed[index] = true;  // every run that can succeed reads the packed copy
  return Status::ok();
}

// numpy matmul; `packed` (or null) is B prepacked, whose data run() then never reads.
Status matmul(KernelContext& ctx, const gemm::PackedMatrix* packed) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("MatMul needs 2 inputs");
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != b.dtype())
    return ctx.error(std::string("MatMul input types differ: ") + dtype_name(a.dtype()) + " vs " +
                     dtype_name(b.dtype()));
  auto plan_r = plan_matmul(a.shape(), b.shape());
  if (!plan_r) return ctx.error(plan_r.status().message());
  const MatMulPlan& p = *plan_r;
  const int64_t batches = static_cast<int64_t>(p.a_offsets.size());
  if (a.dtype() == DType::kFloat32 || is_half(a.dtype())) {
    KILN_ASSIGN_OR_RETURN(Tensor af, to_float32(a));
    KILN_ASSIGN_OR_RETURN(Tensor yf, Tensor::make_for_overwrite(DType::kFloat32, p.out_shape));
    const float* ad = af.data<float>();
    float* yd = yf.data<float>();
    if (b.rank() <= 2 && a.rank() >= 1) {
      // One B for every batch of A: the batches are consecutive rows of one GEMM.
      const int64_t rows = batches * p.m;
      if (packed) {
        gemm_f32_prepacked(false, rows, 1.0f, ad, p.k, *packed, 0.0f, yd, p.n, nullptr, nullptr,
                           ctx.pool);
      } else {
        KILN_ASSIGN_OR_RETURN(Tensor bf, to_float32(b));
        gemm_f32(false, false, rows, p.n, p.k, 1.0f, ad, p.k, bf.data<float>(), p.n, 0.0f, yd, p.n,
                 ctx.pool);
      }
    } else {
      KILN_ASSIGN_OR_RETURN(Tensor bf, to_float32(b));
      const float* bd = bf.data<float>();
      auto one = [&](int64_t i) {
        gemm_f32(false, false, p.m, p.n, p.k, 1.0f, ad + p.a_offsets[i], p.k, bd + p.b_offsets[i],
                 p.n, 0.0f, yd + i * p.m * p.n, p.n, ctx.pool);
      };
      // Many small matrices (attention heads): parallel over the batch; otherwise inside GEMM.
      if (ctx.pool != nullptr && batches > 1 && p.m * p.n * p.k < (int64_t{1} << 20)) {
        // Every thread that may take a matrix has its GEMM buffers sized first, so that runs
        // after the first allocate nothing whichever threads take them.
        gemm::GemmF32Args g;
        g.m = p.m, g.n = p.n, g.k = p.k;
        gemm::reserve_single_thread_scratch(g, ctx.pool);
        ctx.pool->parallel_for(batches, 1, [&](int64_t b0, int64_t b1) {
          for (int64_t i = b0; i < b1; ++i) one(i);
        });
      } else {
        for (int64_t i = 0; i < batches; ++i) one(i);
      }
    }
    KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(yf, a.dtype()));
    ctx.set_output(0, std::move(y));
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, a.dtype(), p.out_shape));
  return visit_numeric(a.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> ||
                  std::is_same_v<T, int16_t> || std::is_same_v<T, uint16_t>) {
      return ctx.error(std::string("MatMul does not support ") + dtype_name(a.dtype()));
    } else {
      for (int64_t i = 0; i < batches; ++i)
        gemm_generic<T>(false, false, p.m, p.n, p.k, T(1), a.data<T>() + p.a_offsets[i], p.k,
                        b.data<T>() + p.b_offsets[i], p.n, T(0), y->data<T>() + i * p.m * p.n, p.n);
      return Status::ok();
    }
  });
}

class MatMulKernel : public Kernel {
 public:
  explicit MatMulKernel(const gemm::MicroKernel* tile) : tile_(tile) {}
  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    return prepack_weight(constants, 1, false, tile_, absorbed, packed_);
  }
  Status run(KernelContext& ctx) override {
    return matmul(ctx, packed_.empty() ? nullptr : &packed_);
  }

 private:
  const gemm::MicroKernel* tile_;  // the packed product's micro-kernel; null: the best
  gemm::PackedMatrix packed_;
};

// ONNX Gemm; `packed` (or null) is B prepacked (with transB applied). `bias_scratch` holds beta * C
// when C is a bias and beta is not 1; the kernel owns it so that runs reuse its storage.
Status gemm(KernelContext& ctx, const gemm::PackedMatrix* packed,
            std::vector<float>& bias_scratch) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("Gemm needs inputs A and B");
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const bool has_c = ctx.has_input(2) && ctx.input(2).defined();
  if (a.dtype() != b.dtype()) return ctx.error("Gemm A and B types differ");
  if (has_c && ctx.input(2).dtype() != a.dtype()) return ctx.error("Gemm C type differs from A");
  auto plan = plan_gemm(ctx.node, a.shape(), b.shape(), has_c ? &ctx.input(2).shape() : nullptr);
  if (!plan) return ctx.error(plan.status().message());
  const bool ta = plan->trans_a, tb = plan->trans_b;
  const float alpha = plan->alpha, beta = plan->beta;
  const int64_t m = plan->m, n = plan->n, k = plan->k;
  const Shape out_shape{m, n};
  std::vector<int64_t> c_off;
  if (a.dtype() == DType::kFloat32 || is_half(a.dtype())) {
    KILN_ASSIGN_OR_RETURN(Tensor af, to_float32(a));
    KILN_ASSIGN_OR_RETURN(Tensor yf, Tensor::make(DType::kFloat32, out_shape));
    float* yd = yf.data<float>();
    const bool add_c = has_c && beta != 0.0f;
    Tensor cf;
    if (add_c) {
      KILN_ASSIGN_OR_RETURN(cf, to_float32(ctx.input(2)));
    }
    // C holding one value per column (a bias) goes into the GEMM's write-out instead of a pass
    // over Y beforehand.
    const bool c_is_bias = add_c && packed && cf.numel() == n &&
                           (cf.rank() == 1 || (cf.rank() == 2 && cf.dim(0) == 1));
    const float* bias = nullptr;
    if (c_is_bias && beta == 1.0f) {
      bias = cf.data<float>();
    } else if (c_is_bias) {
      bias_scratch.resize(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) bias_scratch[j] = beta * cf.data<float>()[j];
      bias = bias_scratch.data();
    } else if (add_c) {
      c_off = broadcast_offsets(ctx.input(2).shape(), out_shape);
      for (int64_t i = 0; i < m * n; ++i) yd[i] = beta * cf.data<float>()[c_off[i]];
    }
    const float beta_y = add_c && !c_is_bias ? 1.0f : 0.0f;
    if (packed) {
      gemm_f32_prepacked(ta, m, alpha, af.data<float>(), a.dim(1), *packed, beta_y, yd, n, bias,
                         nullptr, ctx.pool);
    } else {
      KILN_ASSIGN_OR_RETURN(Tensor bf, to_float32(b));
      gemm_f32(ta, tb, m, n, k, alpha, af.data<float>(), a.dim(1), bf.data<float>(), b.dim(1),
               beta_y, yd, n, ctx.pool);
    }
    KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(yf, a.dtype()));
    ctx.set_output(0, std::move(y));
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, a.dtype(), out_shape));
  return visit_numeric(a.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T* yd = y->data<T>();
    if (has_c && beta != 0.0f) {
      c_off = broadcast_offsets(ctx.input(2).shape(), out_shape);
      const T* cd = ctx.input(2).data<T>();
      for (int64_t i = 0; i < m * n; ++i) yd[i] = static_cast<T>(beta * cd[c_off[i]]);
    }
    gemm_generic<T>(ta, tb, m, n, k, static_cast<T>(alpha), a.data<T>(), a.dim(1), b.data<T>(),
                    b.dim(1), has_c && beta != 0.0f ? T(1) : T(0), yd, n);
    return Status::ok();
  });
}

class GemmKernel : public Kernel {
 public:
  GemmKernel(bool trans_b, const gemm::MicroKernel* tile) : trans_b_(trans_b), tile_(tile) {}
  Status prepare(const std::vector<const Tensor*>& constants,
                 std::vector<bool>& absorbed) override {
    return prepack_weight(constants, 1, trans_b_, tile_, absorbed, packed_);
  }
  Status run(KernelContext& ctx) override {
    return gemm(ctx, packed_.empty() ? nullptr : &packed_, bias_scratch_);
  }

 private:
  bool trans_b_;
  const gemm::MicroKernel* tile_;  // the packed product's micro-kernel; null: the best
  gemm::PackedMatrix packed_;
  std::vector<float> bias_scratch_;
};

}  // namespace

template <bool kNarrowTile>
Result<std::unique_ptr<Kernel>> create_matmul(const ir::Node&, int64_t) {
  return std::unique_ptr<Kernel>(
      std::make_unique<MatMulKernel>(kNarrowTile ? narrow_tile() : nullptr));
}
template <bool kNarrowTile>
Result<std::unique_ptr<Kernel>> create_gemm(const ir::Node& node, int64_t) {
  return std::unique_ptr<Kernel>(std::make_unique<GemmKernel>(
      node.attr_int("transB", 0) != 0, kNarrowTile ? narrow_tile() : nullptr));
}

const KernelRegistrar kMatMul("", "MatMul", "ref", create_matmul<false>);
const KernelRegistrar kGemm("", "Gemm", "ref", create_gemm<false>);
// kiln's narrow-tile variant for the tuner (gemm_f32.h).
const KernelVariantRegistrar kMatMulNarrow("", "MatMul", kNarrowTileVariant, create_matmul<true>,
                                           takes_narrow_tile);
const KernelVariantRegistrar kGemmNarrow("", "Gemm", kNarrowTileVariant, create_gemm<true>, takes_narrow_tile);

// float32 products run the packed GEMM (a constant B packed once).
KILN_REGISTER_FAST_PATH("", "MatMul", float32_input);
KILN_REGISTER_FAST_PATH("", "Gemm", float32_input);

}  // namespace kiln
