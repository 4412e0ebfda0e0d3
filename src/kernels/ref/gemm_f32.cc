// The float GEMM shared by MatMul, Gemm and Conv: cache-blocked, a 4x16 AVX2/FMA register tile,
// tasks over (row block, column block) on the thread pool.
#include "kernels/ref/gemm_f32.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

constexpr int64_t kMr = 4, kNr = 16;               // register tile
constexpr int64_t kMc = 64, kNc = 256, kKc = 256;  // cache blocks: one task is kMc x kNc

// c[0..4)[0..16) += alpha * a[0..4)[p0..p1) * b[p0..p1)[0..16), a rows lda apart.
inline void tile_4x16(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc,
                      float alpha, float* c, int64_t ldc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_loadu_ps(b + p * ldb + 8);
    __m256 av = _mm256_broadcast_ss(a + p);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + lda + p);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + 2 * lda + p);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + 3 * lda + p);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
  }
  const __m256 al = _mm256_set1_ps(alpha);
  auto acc = [&](float* dst, __m256 v) {
    _mm256_storeu_ps(dst, _mm256_fmadd_ps(al, v, _mm256_loadu_ps(dst)));
  };
  acc(c, c00), acc(c + 8, c01);
  acc(c + ldc, c10), acc(c + ldc + 8, c11);
  acc(c + 2 * ldc, c20), acc(c + 2 * ldc + 8, c21);
  acc(c + 3 * ldc, c30), acc(c + 3 * ldc + 8, c31);
}

// Edge tiles (fewer than 4 rows or 16 columns): one row at a time, vectorised when 16 wide.
inline void tile_edge(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t mr,
                      int64_t nr, int64_t kc, float alpha, float* c, int64_t ldc) {
  for (int64_t i = 0; i < mr; ++i) {
    float* crow = c + i * ldc;
    const float* arow = a + i * lda;
    if (nr == kNr) {
      __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
      for (int64_t p = 0; p < kc; ++p) {
        const __m256 av = _mm256_broadcast_ss(arow + p);
        c0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + p * ldb), c0);
        c1 = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + p * ldb + 8), c1);
      }
      const __m256 al = _mm256_set1_ps(alpha);
      _mm256_storeu_ps(crow, _mm256_fmadd_ps(al, c0, _mm256_loadu_ps(crow)));
      _mm256_storeu_ps(crow + 8, _mm256_fmadd_ps(al, c1, _mm256_loadu_ps(crow + 8)));
      continue;
    }
    for (int64_t p = 0; p < kc; ++p) {
      const float av = alpha * arow[p];
      const float* brow = b + p * ldb;
      for (int64_t j = 0; j < nr; ++j) crow[j] += av * brow[j];
    }
  }
}

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
  // The tile kernels want A row-major (MxK) and B row-major (KxN): transpose copies otherwise.
  std::vector<float> a_copy, b_copy;
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
  if (trans_a) {
    a_copy.resize(static_cast<size_t>(m * k));
    for (int64_t p = 0; p < k; ++p)
      for (int64_t i = 0; i < m; ++i) a_copy[i * k + p] = a[p * lda + i];
    a = a_copy.data();
    lda = k;
  }
  if (trans_b) {
    b_copy.resize(static_cast<size_t>(k * n));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) b_copy[p * n + j] = b[j * ldb + p];
    b = b_copy.data();
    ldb = n;
  }
  if (n == 1) {  // matrix-vector: one contiguous dot product per row
    for (int64_t i = 0; i < m; ++i) {
      const float acc = dot(a + i * lda, b, ldb, k);
      c[i * ldc] = alpha * acc + (beta == 0.0f ? 0.0f : beta * c[i * ldc]);
    }
    return;
  }
  const int64_t row_blocks = (m + kMc - 1) / kMc, col_blocks = (n + kNc - 1) / kNc;
  auto task = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t / col_blocks) * kMc, j0 = (t % col_blocks) * kNc;
      const int64_t i1 = std::min(m, i0 + kMc), j1 = std::min(n, j0 + kNc);
      for (int64_t i = i0; i < i1; ++i) {
        float* crow = c + i * ldc;
        if (beta == 0.0f) {
          std::fill(crow + j0, crow + j1, 0.0f);
        } else if (beta != 1.0f) {
          for (int64_t j = j0; j < j1; ++j) crow[j] *= beta;
        }
      }
      // B's kc x 16 panels are copied contiguous once per task and reused by every row group.
      thread_local std::vector<float> packed;
      packed.resize(static_cast<size_t>(kKc * kNc));
      const int64_t full_cols = ((j1 - j0) / kNr) * kNr;
      for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        const int64_t kc = std::min(kKc, k - p0);
        for (int64_t jp = 0; jp < full_cols; jp += kNr) {
          float* dst = packed.data() + jp * kc;
          for (int64_t p = 0; p < kc; ++p)
            std::copy(b + (p0 + p) * ldb + j0 + jp, b + (p0 + p) * ldb + j0 + jp + kNr,
                      dst + p * kNr);
        }
        for (int64_t i = i0; i < i1; i += kMr) {
          const int64_t mr = std::min(kMr, i1 - i);
          for (int64_t j = j0; j < j1; j += kNr) {
            const int64_t nr = std::min(kNr, j1 - j);
            const float* at = a + i * lda + p0;
            float* ct = c + i * ldc + j;
            if (mr == kMr && nr == kNr)
              tile_4x16(at, lda, packed.data() + (j - j0) * kc, kNr, kc, alpha, ct, ldc);
            else
              tile_edge(at, lda, b + p0 * ldb + j, ldb, mr, nr, kc, alpha, ct, ldc);
          }
        }
      }
    }
  };
  const int64_t tasks = row_blocks * col_blocks;
  // Small products are not worth waking the pool for.
  if (pool == nullptr || tasks == 1 || m * n * k < (int64_t{1} << 15))
    task(0, tasks);
  else
    pool->parallel_for(tasks, 1, task);
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
  plan.a_offsets = broadcast_offsets(a_batch, batch);
  plan.b_offsets = broadcast_offsets(b_batch, batch);
  for (int64_t& o : plan.a_offsets) o *= plan.m * plan.k;
  for (int64_t& o : plan.b_offsets) o *= plan.k * plan.n;
  plan.out_shape = batch;
  if (!a_vec) plan.out_shape.push_back(plan.m);
  if (!b_vec) plan.out_shape.push_back(plan.n);
  return plan;
}

}  // namespace kiln
