// The float GEMM entry point shared by the reference MatMul, Gemm and Conv kernels, plus a plain
// templated GEMM for the other element types and the batch-broadcast plan MatMul-like ops use.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm/epilogue.h"
#include "kernels/cpu/gemm/packed_matrix.h"
#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

class ThreadPool;

// C[MxN] = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions lda/ldb/ldc;
// op(A) is MxK (A is KxM when trans_a), op(B) is KxN (B is NxK when trans_b). beta == 0 ignores
// C's old contents (NaN included). `pool` may be null.
void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc, ThreadPool* pool);

// The same with B a weight packed once (pack_weight) and the fused tail: C = epilogue(alpha *
// op(A) * B + beta * C (+ bias[j] on every row)); bias and epilogue may be null.
void gemm_f32_prepacked(bool trans_a, int64_t m, float alpha, const float* a, int64_t lda,
                        const gemm::PackedMatrix& b, float beta, float* c, int64_t ldc,
                        const float* bias, const gemm::Epilogue* epilogue, ThreadPool* pool);

// A constant 2-D weight (float32, float16 or bfloat16) packed for gemm_f32_prepacked: op(W) is
// W, or W transposed when `trans` (Gemm's transB). What MatMul-like kernels build in
// Kernel::prepare. The products that read it run `kernel`'s register tile (null: the best).
Result<gemm::PackedMatrix> pack_weight(const Tensor& w, bool trans,
                                       const gemm::MicroKernel* kernel = nullptr);

// A variant of kiln's own kernels for the tuner (KernelDef::variant, runtime/tuner.cc): the
// products against a packed 2-D weight (MatMul, Gemm, FusedMatMul, FusedGemm) on the AVX2 6x16
// register tile, timed against the best tile on the node's real shapes. It packs A in blocks of 6
// rows instead of 8 and wastes less of a tile on a last block of columns. Only on a CPU whose
// best tile is another (AVX-512's, 4x wider); narrow_tile() is null elsewhere.
inline constexpr const char* kNarrowTileVariant = "tile6x16";  // tuning choice "kiln.tile6x16"
const gemm::MicroKernel* narrow_tile();
// The nodes the variant takes: a 2-D float32 B (input 1), where narrow_tile() exists.
bool takes_narrow_tile(const ir::Node& node, const std::vector<const ir::TypeInfo*>& types);

// Same contract for any arithmetic type (double, integers); single-threaded i-k-j loop.
template <typename T>
void gemm_generic(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                  int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    T* crow = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) crow[j] = beta == T(0) ? T(0) : T(beta * crow[j]);
    for (int64_t p = 0; p < k; ++p) {
      const T av = T(alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]));
      if (!trans_b) {
        const T* brow = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
      } else {
        for (int64_t j = 0; j < n; ++j) crow[j] += av * b[j * ldb + p];
      }
    }
  }
}

// How the matrices of a (batched, broadcast) MatMul line up: numpy matmul semantics, 1-D
// operands promoted and their dims dropped from the output.
struct MatMulPlan {
  Shape out_shape;
  int64_t m = 0, n = 0, k = 0;
  Shape a_offsets, b_offsets;  // element offset of each batch's A / B matrix
};
Result<MatMulPlan> plan_matmul(const Shape& a, const Shape& b);

// How an ONNX Gemm node's operands line up: op(A) [m, k] x op(B) [k, n] with the node's transA,
// transB, alpha and beta; C (null when absent) must broadcast to [m, n].
struct GemmPlan {
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 1.0f;
  int64_t m = 0, n = 0, k = 0;
};
Result<GemmPlan> plan_gemm(const ir::Node& node, const Shape& a, const Shape& b, const Shape* c);

}  // namespace kiln
