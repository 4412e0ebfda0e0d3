// The fused-GEMM epilogue on 8 lanes (baseline AVX2 + FMA, so it runs after either ISA's
// micro-kernel). One loop per activation, chosen once per tile, the row tail masked.
#include "kernels/cpu/gemm/epilogue.h"

#include <immintrin.h>

#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::gemm {
namespace {

using Act = Epilogue::Activation;


// c = f(c (+ z)) (+ z) over the block, 8 columns at a time.
template <typename F>
void for_each_lane_block(const Epilogue& e, float* c, int64_t ldc, const float* z, int64_t rows,
                         int64_t cols, F f) {
  const int64_t full = cols & ~int64_t{7};
  const __m256i tail = vec::tail_mask_avx2(static_cast<int>(cols - full));
  auto one = [&](__m256 y, const float* zp, auto load_z) {
    if (!zp) return f(y);
    if (e.residual_first) return f(_mm256_add_ps(y, load_z(zp)));
    return _mm256_add_ps(f(y), load_z(zp));
  };
  for (int64_t i = 0; i < rows; ++i) {
    float* row = c + i * ldc;
    const float* zrow = z ? z + i * e.ld_residual : nullptr;
    auto load = [](const float* p) { return _mm256_loadu_ps(p); };
    auto load_tail = [&](const float* p) { return _mm256_maskload_ps(p, tail); };
    for (int64_t j = 0; j < full; j += 8)
      _mm256_storeu_ps(row + j, one(_mm256_loadu_ps(row + j), zrow ? zrow + j : nullptr, load));
    if (full < cols)
      _mm256_maskstore_ps(
          row + full, tail,
          one(_mm256_maskload_ps(row + full, tail), zrow ? zrow + full : nullptr, load_tail));
  }
}

}  // namespace

void apply_epilogue(const Epilogue& e, float* c, int64_t ldc, int64_t i0, int64_t j0,
                    int64_t rows, int64_t cols) {
  const float* z = e.residual ? e.residual + i0 * e.ld_residual + j0 : nullptr;
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  const __m256 p0 = _mm256_set1_ps(e.p0), p1 = _mm256_set1_ps(e.p1);
  auto run = [&](auto f) {
    if (!e.clamped()) return for_each_lane_block(e, c, ldc, z, rows, cols, f);
    const __m256 lo = _mm256_set1_ps(e.lo), hi = _mm256_set1_ps(e.hi);
    for_each_lane_block(e, c, ldc, z, rows, cols,
                        [&](__m256 x) { return _mm256_min_ps(_mm256_max_ps(f(x), lo), hi); });
  };
  switch (e.activation) {
    case Act::kNone:
      return run([](__m256 x) { return x; });
    case Act::kRelu:
      return run([&](__m256 x) { return _mm256_max_ps(x, zero); });
    case Act::kClip:
      return run([&](__m256 x) { return _mm256_min_ps(_mm256_max_ps(x, p0), p1); });
    case Act::kLeakyRelu:
      return run([&](__m256 x) {
        return _mm256_blendv_ps(_mm256_mul_ps(x, p0), x, _mm256_cmp_ps(x, zero, _CMP_GE_OQ));
      });
    case Act::kSigmoid:
      return run([](__m256 x) { return vec::sigmoid_avx2(x); });
    case Act::kHardSigmoid:
      return run([&](__m256 x) {
        return _mm256_max_ps(zero, _mm256_min_ps(one, _mm256_fmadd_ps(p0, x, p1)));
      });
    case Act::kHardSwish: {
      const __m256 sixth = _mm256_set1_ps(1.0f / 6.0f);
      return run([&](__m256 x) {
        return _mm256_mul_ps(x, _mm256_max_ps(zero, _mm256_min_ps(one, _mm256_fmadd_ps(x, sixth, half))));
      });
    }
    case Act::kSilu:
      return run([](__m256 x) { return _mm256_mul_ps(x, vec::sigmoid_avx2(x)); });
    case Act::kGelu: {
      const __m256 rsqrt2 = _mm256_set1_ps(0.70710678118654752f);
      return run([&](__m256 x) {
        const __m256 hx = _mm256_mul_ps(half, x);
        return _mm256_fmadd_ps(hx, vec::erf_avx2(_mm256_mul_ps(x, rsqrt2)), hx);
      });
    }
    case Act::kGeluTanh: {
      // 0.5 x (1 + tanh(u)) = x * sigmoid(2u): no cancellation for negative x.
      const __m256 k2 = _mm256_set1_ps(2.0f * 0.79788456080286536f);
      const __m256 c3 = _mm256_set1_ps(0.044715f);
      return run([&](__m256 x) {
        const __m256 x2 = _mm256_mul_ps(x, x);
        const __m256 u2 = _mm256_mul_ps(_mm256_mul_ps(k2, x), _mm256_fmadd_ps(c3, x2, one));
        return _mm256_mul_ps(x, vec::sigmoid_avx2(u2));
      });
    }
    case Act::kTanh:
      return run([](__m256 x) { return vec::tanh_avx2(x); });
  }
}

}  // namespace kiln::gemm
