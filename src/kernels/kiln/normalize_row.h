// What the ai.kiln norm kernels share: a scale or bias broadcast to one row; one row of layer
// normalization in double (the path for half and double types: y = (x - mean) / sqrt(var + eps)
// * gamma (+ beta), rounded to float once); and the float32 fast path: row statistics by AVX2 in
// two passes over a row that stays in L1 (mean, then the centred sum of squares, so no
// cancellation), the affine write, and rows split over the thread pool.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/kernel_util.h"

namespace kiln {

// `t` broadcast to one row of the normalised shape, as float32: t's own data when it already is
// that row in float32 (gamma and beta almost always are), so that runs copy and allocate nothing;
// else `storage` filled with it. `what` names it in the error ("LayerNorm Scale").
inline Result<const float*> broadcast_row(const KernelContext& ctx, const Tensor& t,
                                          const Shape& norm_shape, const char* what,
                                          std::vector<float>& storage) {
  auto bs = broadcast_shapes(t.shape(), norm_shape);
  if (!bs || *bs != norm_shape)
    return ctx.error(std::string(what) + " of shape " + shape_str(t.shape()) +
                     " does not broadcast to " + shape_str(norm_shape));
  int64_t len = 1;
  for (int64_t d : norm_shape) len *= d;
  if (t.dtype() == DType::kFloat32 && t.numel() == len) return t.data<float>();
  KILN_ASSIGN_OR_RETURN(Tensor tf, to_float32(t));
  storage.clear();
  for (int64_t o : broadcast_offsets(t.shape(), norm_shape))
    storage.push_back(tf.data<float>()[o]);
  return static_cast<const float*>(storage.data());
}

inline void normalize_row(const float* x, int64_t len, double eps, const float* gamma,
                          const float* beta, float* y) {
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < len; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(len);
  for (int64_t i = 0; i < len; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(len) + eps);
  for (int64_t i = 0; i < len; ++i) {
    double v = (x[i] - mean) * inv * gamma[i];
    if (beta) v += beta[i];
    y[i] = static_cast<float>(v);
  }
}

// ---- float32 fast path ----

// sum over x[0, n) of (x[i] - center)^2 when `square`, else of x[i] - center; four vector
// accumulators (32 partial sums) keep float rounding near 1e-7 relative, finished in double.
inline double row_sum_f32(const float* x, int64_t n, float center, bool square) {
  const __m256 c = _mm256_set1_ps(center);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * k), c);
      acc[k] = square ? _mm256_fmadd_ps(v, v, acc[k]) : _mm256_add_ps(acc[k], v);
    }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + i), c);
    acc[0] = square ? _mm256_fmadd_ps(v, v, acc[0]) : _mm256_add_ps(acc[0], v);
  }
  double s = static_cast<double>(
      vec::hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))));
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]) - center;
    s += square ? v * v : v;
  }
  return s;
}

struct RowStats {
  float mean, inv_std;  // y = (x - mean) * inv_std
};

// Layer-norm statistics of x[0, n), n > 0.
inline RowStats layer_norm_stats(const float* x, int64_t n, double eps) {
  const double mean = row_sum_f32(x, n, 0.0f, false) / static_cast<double>(n);
  const double var = row_sum_f32(x, n, static_cast<float>(mean), true) / static_cast<double>(n);
  return {static_cast<float>(mean), static_cast<float>(1.0 / std::sqrt(var + eps))};
}

// y = (x - mean) * inv_std * gamma (+ beta); gamma null means 1. y may be x.
inline void normalize_row_f32(const float* x, int64_t n, RowStats st, const float* gamma,
                              const float* beta, float* y) {
  const __m256 mean = _mm256_set1_ps(st.mean), inv = _mm256_set1_ps(st.inv_std);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mean), inv);
    if (gamma) v = _mm256_mul_ps(v, _mm256_loadu_ps(gamma + i));
    if (beta) v = _mm256_add_ps(v, _mm256_loadu_ps(beta + i));
    _mm256_storeu_ps(y + i, v);
  }
  for (; i < n; ++i) {
    float v = (x[i] - st.mean) * st.inv_std;
    if (gamma) v *= gamma[i];
    if (beta) v += beta[i];
    y[i] = v;
  }
}

// fn(r0, r1) over rows [0, rows) of `len` floats each, split over the pool in chunks of at
// least ~64 KiB (below that, waking a thread costs more than the rows).
inline void for_rows(ThreadPool* pool, int64_t rows, int64_t len,
                     FunctionRef<void(int64_t, int64_t)> fn) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1));
  if (pool && rows > grain)
    pool->parallel_for(rows, grain, fn);
  else if (rows > 0)
    fn(0, rows);
}

// ONNX LayerNormalization's Y (axis, epsilon; inputs X, Scale, optional B): the kernel of
// ai.kiln.LayerNorm (kiln/layer_norm.cc), which the standard op's kernel also calls when only Y
// is wanted, so that opset-17 models, whose LayerNorms stay standard, get the fast rows too.
Status layer_norm_y(KernelContext& ctx);

}  // namespace kiln
