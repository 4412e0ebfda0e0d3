// The float GEMM entry point shared by MatMul, Gemm and Conv: a dot-product path for the
// matrix-vector shapes packing would only slow down, else the blocked, ISA-dispatched GEMM of
// kernels/cpu/gemm.
#include "kernels/ref/gemm_f32.h"

#include <immintrin.h>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

// sum(a[i] * b[i * ldb]) with eight lanes when b is contiguous.
inline float dot(const float* a, const float* b, int64_t ldb, int64_t k) {
  int64_t p = 0;
  float acc = 0.0f;
  if (ldb == 1) {
    __m256 v0 = _mm256_setzero_ps(), v1 = _mm256_setzero_ps();
    for (; p + 16 <= k; p += 16) {
      v0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(b + p), v0);
      v1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p + 8), _mm256_loadu_ps(b + p + 8), v1);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(v0, v1));
    for (float l : lanes) acc += l;
  }
  for (; p < k; ++p) acc += a[p] * b[p * ldb];
  return acc;
}

}  // namespace

void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  if (trans_b && !trans_a && m <= 8) {
    // Few rows against B stored N x K (fully connected layers at batch 1): B's rows are the
    // contiguous dot-product operands, so skip the transpose copy.
    auto cols = [&](int64_t j0, int64_t j1) {
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = j0; j < j1; ++j) {
          const float acc = dot(a + i * lda, b + j * ldb, 1, k);
          c[i * ldc + j] = alpha * acc + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
        }
    };
    if (pool == nullptr || m * n * k < (int64_t{1} << 15))
      cols(0, n);
    else
      pool->parallel_for(n, 16, cols);
    return;
  }
  if (n == 1 && !trans_a && !trans_b) {  // matrix-vector: one dot product per row of A
    for (int64_t i = 0; i < m; ++i) {
      const float acc = dot(a + i * lda, b, ldb, k);
      c[i * ldc] = alpha * acc + (beta == 0.0f ? 0.0f : beta * c[i * ldc]);
    }
    return;
  }
  gemm::GemmF32Args args;
  args.trans_a = trans_a, args.trans_b = trans_b;
  args.m = m, args.n = n, args.k = k;
  args.alpha = alpha, args.beta = beta;
  args.a = a, args.lda = lda, args.b = b, args.ldb = ldb, args.c = c, args.ldc = ldc;
  gemm::gemm_f32_blocked(args, pool);
}

void gemm_f32_prepacked(bool trans_a, int64_t m, float alpha, const float* a, int64_t lda,
                        const gemm::PackedMatrix& b, float beta, float* c, int64_t ldc,
                        const float* bias, const gemm::Epilogue* epilogue, ThreadPool* pool) {
  gemm::GemmF32Args args;
  args.trans_a = trans_a;
  args.m = m, args.n = b.n(), args.k = b.k();
  args.alpha = alpha, args.beta = beta;
  args.a = a, args.lda = lda, args.c = c, args.ldc = ldc;
  args.bias = bias, args.packed_b = &b, args.epilogue = epilogue;
  gemm::gemm_f32_blocked(args, pool);
}

Result<gemm::PackedMatrix> pack_weight(const Tensor& w, bool trans,
                                       const gemm::MicroKernel* kernel) {
  if (w.rank() != 2) return Status::error("a weight to prepack must be 2-D, got " + shape_str(w.shape()));
  if (w.dtype() != DType::kFloat32 && w.dtype() != DType::kFloat16 && w.dtype() != DType::kBFloat16)
    return Status::error(std::string("cannot prepack a ") + dtype_name(w.dtype()) + " weight");
  if (w.raw_data() == nullptr && w.numel() > 0) return Status::error("the weight has no data");
  KILN_ASSIGN_OR_RETURN(Tensor wf, to_float32(w));
  const int64_t k = trans ? w.dim(1) : w.dim(0), n = trans ? w.dim(0) : w.dim(1);
  gemm::PackedMatrix packed =
      gemm::PackedMatrix::pack_b(wf.data<float>(), w.dim(1), trans, k, n, kernel);
  if (packed.empty()) return Status::error("out of memory packing a weight of " + shape_str(w.shape()));
  return packed;
}

const gemm::MicroKernel* narrow_tile() {
  const gemm::MicroKernel* k = gemm::find_f32_kernel("f32_gemm_6x16_avx2");
  return k != gemm::best_f32_kernel() ? k : nullptr;
}

bool takes_narrow_tile(const ir::Node&, const std::vector<const ir::TypeInfo*>& types) {
  const ir::TypeInfo* b = types.size() > 1 ? types[1] : nullptr;
  return narrow_tile() != nullptr && b && b->kind == ir::TypeInfo::Kind::kTensor &&
         b->dtype == DType::kFloat32 && b->has_shape && b->shape.size() == 2;
}

Result<GemmPlan> plan_gemm(const ir::Node& node, const Shape& a, const Shape& b, const Shape* c) {
  if (a.size() != 2 || b.size() != 2)
    return Status::error("Gemm needs 2-D A and B, got " + shape_str(a) + " and " + shape_str(b));
  GemmPlan p;
  p.trans_a = node.attr_int("transA", 0) != 0;
  p.trans_b = node.attr_int("transB", 0) != 0;
  p.alpha = node.attr_float("alpha", 1.0f);
  p.beta = node.attr_float("beta", 1.0f);
  p.m = p.trans_a ? a[1] : a[0];
  p.k = p.trans_a ? a[0] : a[1];
  p.n = p.trans_b ? b[0] : b[1];
  const int64_t kb = p.trans_b ? b[1] : b[0];
  if (p.k != kb)
    return Status::error("Gemm inner dimensions differ: A " + shape_str(a) + " B " + shape_str(b));
  if (c) {
    const Shape out{p.m, p.n};
    auto bs = broadcast_shapes(*c, out);
    if (!bs || *bs != out)
      return Status::error("Gemm C of shape " + shape_str(*c) + " does not broadcast to " +
                           shape_str(out));
  }
  return p;
}

Result<MatMulPlan> plan_matmul(const Shape& a_in, const Shape& b_in) {
  if (a_in.empty() || b_in.empty())
    return Status::error("MatMul operands must have rank >= 1, got " + shape_str(a_in) + " and " +
                         shape_str(b_in));
  Shape a = a_in, b = b_in;
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  MatMulPlan plan;
  plan.m = a[a.size() - 2];
  plan.k = a[a.size() - 1];
  plan.n = b[b.size() - 1];
  if (b[b.size() - 2] != plan.k)
    return Status::error("MatMul inner dimensions differ: " + shape_str(a_in) + " x " +
                         shape_str(b_in));
  const Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  KILN_ASSIGN_OR_RETURN(Shape batch, broadcast_shapes(a_batch, b_batch));
  KILN_ASSIGN_OR_RETURN(int64_t nb, shape_numel(batch));
  (void)nb;
  plan.a_offsets = broadcast_offsets_small(a_batch, batch);
  plan.b_offsets = broadcast_offsets_small(b_batch, batch);
  for (int64_t& o : plan.a_offsets) o *= plan.m * plan.k;
  for (int64_t& o : plan.b_offsets) o *= plan.k * plan.n;
  plan.out_shape = batch;
  if (!a_vec) plan.out_shape.push_back(plan.m);
  if (!b_vec) plan.out_shape.push_back(plan.n);
  return plan;
}

}  // namespace kiln
