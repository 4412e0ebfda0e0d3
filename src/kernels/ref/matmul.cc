// Reference MatMul (numpy batch broadcasting, 1-D operands), Gemm (transA/transB/alpha/beta,
// unidirectional C broadcast) and MatMulInteger (int8/uint8 with zero points, int32 out). A
// constant 2-D float B (a weight) is packed once in prepare for the fast GEMM and then only the
// packed copy is read, so the runtime can free the original.
#include <algorithm>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/gemm/gemm_s16.h"
#include "kernels/cpu/gemm/gemm_u8s8.h"
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

// Zero point of an 8-bit quantized operand as int32 values: scalar, or one per row/column.
Result<std::vector<int32_t>> read_zero_points(const Tensor& zp, DType want) {
  if (zp.dtype() != want)
    return Status::error(std::string("zero point type ") + dtype_name(zp.dtype()) +
                         " differs from input " + dtype_name(want));
  std::vector<int32_t> v(zp.numel());
  for (int64_t i = 0; i < zp.numel(); ++i)
    v[i] = static_cast<int32_t>(load_as_double(zp.dtype(), zp.raw_data(), i));
  return v;
}

bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// 8-bit t minus its zero point (zero_point(i) for element i) as int16.
template <typename ZeroPoint>
void widen_s16(const Tensor& t, ZeroPoint zero_point, int16_t* out) {
  auto run = [&](const auto* in) {
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<int16_t>(static_cast<int32_t>(in[i]) - zero_point(i));
  };
  if (t.dtype() == DType::kInt8) run(t.data<int8_t>());
  else run(t.data<uint8_t>());
}

Status matmul_integer(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("MatMulInteger needs inputs A and B");
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (!is_8bit(a.dtype()) || !is_8bit(b.dtype()))
    return ctx.error("MatMulInteger needs int8/uint8 inputs");
  auto plan_r = plan_matmul(a.shape(), b.shape());
  if (!plan_r) return ctx.error(plan_r.status().message());
  const MatMulPlan& p = *plan_r;
  std::vector<int32_t> azp{0}, bzp{0};
  if (ctx.has_input(2) && ctx.input(2).defined()) {
    KILN_ASSIGN_OR_RETURN(azp, read_zero_points(ctx.input(2), a.dtype()));
    if (azp.size() != 1 && static_cast<int64_t>(azp.size()) != p.m)
      return ctx.error("a_zero_point must be a scalar or have M elements");
  }
  if (ctx.has_input(3) && ctx.input(3).defined()) {
    KILN_ASSIGN_OR_RETURN(bzp, read_zero_points(ctx.input(3), b.dtype()));
    if (bzp.size() != 1 && static_cast<int64_t>(bzp.size()) != p.n)
      return ctx.error("b_zero_point must be a scalar or have N elements");
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kInt32, p.out_shape));
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

// MatMulInteger with a constant 2-D B and a constant (or absent) b_zero_point: B is packed once,
// in 8 bits for gemm_u8s8 on VNNI CPUs (K <= 8192), else minus its zero points widened for
// gemm_s16, and a run makes one GEMM of all of A's rows (A [..., M, K] against B [K, N] is A's
// rows, in order, times B). crnn's [1024, 8210] classifier over 20 rows: 1.9 ms on gemm_s16, 0.91
// on gemm_u8s8 (Zen 4, 2 threads).
class MatMulIntegerKernel : public Kernel {
 public:
  explicit MatMulIntegerKernel(const ir::Node& node) : b_zero_point_input_(node.has_input(3)) {}

  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>& absorbed) override {
    const Tensor* b = constants.size() > 1 ? constants[1] : nullptr;
    const Tensor* zp = constants.size() > 3 ? constants[3] : nullptr;
    if (!b || !is_8bit(b->dtype()) || b->rank() != 2 || b->dim(0) > gemm::kMaxS16Depth ||
        (b_zero_point_input_ && !zp))
      return Status::ok();
    std::vector<int32_t> bzp{0};
    if (zp) {
      auto z = read_zero_points(*zp, b->dtype());
      if (!z || (z->size() != 1 && static_cast<int64_t>(z->size()) != b->dim(1))) return Status::ok();  // run() reports it
      bzp = std::move(z).value();
    }
    const int64_t n = b->dim(1);
    absorbed[1] = true;
    if (zp) absorbed[3] = true;
    if (gemm::u8s8_available() && b->dim(0) <= gemm::kMaxU8S8Depth) {
      packed_u8s8_ = gemm::PackedU8S8::pack(b->raw_data(), b->dtype() == DType::kInt8, n, b->dim(0), n, bzp);
      return Status::ok();
    }
    std::vector<int16_t> wide(static_cast<size_t>(b->numel()));
    widen_s16(*b, [&](int64_t i) { return bzp.size() == 1 ? bzp[0] : bzp[i % n]; }, wide.data());
    packed_ = gemm::PackedS16::pack(wide.data(), n, b->dim(0), n);
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    const bool u8s8 = !packed_u8s8_.empty();
    if (packed_.empty() && !u8s8) return matmul_integer(ctx);
    if (ctx.num_inputs() < 2 || !ctx.has_input(0)) return ctx.error("MatMulInteger needs inputs A and B");
    const Tensor& a = ctx.input(0);
    const int64_t k = u8s8 ? packed_u8s8_.k() : packed_.k(), n = u8s8 ? packed_u8s8_.n() : packed_.n();
    if (!is_8bit(a.dtype())) return ctx.error("MatMulInteger needs int8/uint8 inputs");
    if (a.rank() < 1 || a.dim(a.rank() - 1) != k)
      return ctx.error("A " + shape_str(a.shape()) + " does not match B [" + std::to_string(k) + ", " +
                       std::to_string(n) + "]");
    const int64_t rows = k == 0 ? 0 : a.numel() / k, m = a.rank() >= 2 ? a.dim(a.rank() - 2) : 1;
    std::vector<int32_t> azp{0};
    if (ctx.has_input(2) && ctx.input(2).defined()) {
      KILN_ASSIGN_OR_RETURN(azp, read_zero_points(ctx.input(2), a.dtype()));
      if (azp.size() != 1 && static_cast<int64_t>(azp.size()) != m)
        return ctx.error("a_zero_point must be a scalar or have M elements");
    }
    Shape out = a.shape();
    if (a.rank() >= 2) out.back() = n;
    else out = {n};
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kInt32, out));
    if (u8s8) {
      // One zero point per row of the GEMM: A's per-row points repeat over its leading dims.
      if (azp.size() != 1) {
        row_zero_points_.resize(static_cast<size_t>(rows));
        for (int64_t i = 0; i < rows; ++i) row_zero_points_[static_cast<size_t>(i)] = azp[static_cast<size_t>(i % m)];
      }
      gemm::gemm_u8s8(rows, a.raw_data(), a.dtype() == DType::kInt8, k, azp.size() == 1 ? azp : row_zero_points_,
                      packed_u8s8_, y->data<int32_t>(), n, ctx.pool);
      return Status::ok();
    }
    wide_a_.resize(static_cast<size_t>(a.numel()));  // grows once: later runs allocate nothing
    widen_s16(a, [&](int64_t i) { return azp.size() == 1 ? azp[0] : azp[(i / std::max<int64_t>(k, 1)) % m]; },
              wide_a_.data());
    gemm::gemm_s16(rows, wide_a_.data(), k, packed_, y->data<int32_t>(), n, ctx.pool);
    return Status::ok();
  }

 private:
  bool b_zero_point_input_;
  gemm::PackedS16 packed_;
  gemm::PackedU8S8 packed_u8s8_;
  std::vector<int16_t> wide_a_;
  std::vector<int32_t> row_zero_points_;
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
const KernelRegistrar kMatMulInteger("", "MatMulInteger", "s16", [](const ir::Node& node, int64_t) {
  return Result<std::unique_ptr<Kernel>>(std::unique_ptr<Kernel>(std::make_unique<MatMulIntegerKernel>(node)));
});

// float32 products run the packed GEMM (a constant B packed once); MatMulInteger gemm_s16 (its
// column-blocked int32 loop past 32768-deep sums).
KILN_REGISTER_FAST_PATH("", "MatMulInteger", always_fast);
KILN_REGISTER_FAST_PATH("", "MatMul", float32_input);
KILN_REGISTER_FAST_PATH("", "Gemm", float32_input);

}  // namespace kiln
