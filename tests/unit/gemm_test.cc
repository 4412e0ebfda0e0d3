// The blocked float GEMM (kernels/cpu/gemm) against a naive triple loop in double: every
// micro-kernel this CPU can run (so the AVX2 one is covered on AVX-512 machines too), odd and
// model-sized shapes, transposes, alpha/beta/bias, and 1-3 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

struct Case {
  int64_t m, n, k;
  bool ta = false, tb = false;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
};

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Runs one case through `run` (which fills c) and compares with the double-precision loop.
// C has a leading dimension wider than n (and A/B than their rows) to catch stride mistakes.
template <typename Run>
void check(const Case& t, Run run, const std::string& what) {
  const int64_t a_rows = t.ta ? t.k : t.m, a_cols = t.ta ? t.m : t.k;
  const int64_t b_rows = t.tb ? t.n : t.k, b_cols = t.tb ? t.k : t.n;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = t.n + 7;
  const auto a = random_vec(a_rows * lda, 1), b = random_vec(b_rows * ldb, 2);
  const auto bias = random_vec(t.n, 3);
  auto c = random_vec(t.m * ldc, 4);
  const auto c0 = c;
  run(a.data(), lda, b.data(), ldb, c.data(), ldc, t.bias ? bias.data() : nullptr);
  double max_err = 0;
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t j = 0; j < t.n; ++j) {
      double acc = 0, mag = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        const double av = t.ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = t.tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv, mag += std::fabs(av * bv);
      }
      double want = t.alpha * acc + (t.beta == 0.0f ? 0.0 : t.beta * double(c0[i * ldc + j]));
      if (t.bias) want += bias[j];
      const double scale = std::fabs(t.alpha) * mag + std::fabs(t.beta) + (t.bias ? 1.0 : 0.0) + 1e-30;
      max_err = std::max(max_err, std::fabs(c[i * ldc + j] - want) / scale);
    }
  EXPECT_LE(max_err, 1e-5 * std::max<int64_t>(t.k, 1) / 8 + 1e-6)
      << what << " m=" << t.m << " n=" << t.n << " k=" << t.k << " ta=" << t.ta << " tb=" << t.tb;
  // Padding columns of C beyond n must be untouched.
  for (int64_t i = 0; i < t.m; ++i)
    for (int64_t j = t.n; j < ldc; ++j)
      ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]) << what << " wrote past column n";
}

std::vector<Case> cases() {
  std::vector<Case> v = {
      {1, 1, 1},          {7, 13, 5},        {1, 768, 768},     {5, 33, 17},
      {33, 65, 300},      {128, 768, 96},    {197, 96, 3072},   {2, 3, 0},
      {50, 1, 20},        {13, 47, 600},     {300, 40, 9},      {64, 3136 / 8, 576 / 4},
  };
  // Transposes, scaling, accumulation into C and the bias epilogue on odd shapes.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      v.push_back({19, 37, 71, ta, tb});
      v.push_back({70, 45, 260, ta, tb, 0.5f, 2.0f, true});
    }
  v.push_back({9, 50, 33, false, false, -1.5f, 0.0f, true});
  v.push_back({16, 64, 512, false, false, 1.0f, 1.0f});
  return v;
}

TEST(GemmF32Blocked, EveryKernelShapeAndThreadCount) {
  ASSERT_FALSE(gemm::available_f32_kernels().empty());
  for (const gemm::MicroKernel& kernel : gemm::available_f32_kernels())
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (const Case& t : cases())
        check(t,
              [&](const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                  const float* bias) {
                gemm::GemmF32Args g;
                g.trans_a = t.ta, g.trans_b = t.tb, g.m = t.m, g.n = t.n, g.k = t.k;
                g.alpha = t.alpha, g.beta = t.beta, g.a = a, g.lda = lda, g.b = b, g.ldb = ldb;
                g.c = c, g.ldc = ldc, g.bias = bias;
                gemm::gemm_f32_blocked(g, &pool, &kernel);
              },
              std::string(kernel.name) + " threads=" + std::to_string(threads));
    }
}

// Small cache blocks force several kc slices (beta applied once), several mc / nc blocks and
// partial ones, which the model-sized shapes above barely reach.
TEST(GemmF32Blocked, SmallBlocksExerciseEveryLoop) {
  for (gemm::MicroKernel kernel : gemm::available_f32_kernels()) {
    kernel.mc = kernel.mr * 2, kernel.kc = 24, kernel.nc = kernel.nr * 2;
    ThreadPool pool(2);
    for (Case t : {Case{61, 150, 100, false, false, 1.0f, 0.5f, true},
                   Case{61, 150, 100, true, true, 2.0f, 0.0f, false}})
      check(t,
            [&](const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                const float* bias) {
              gemm::GemmF32Args g;
              g.trans_a = t.ta, g.trans_b = t.tb, g.m = t.m, g.n = t.n, g.k = t.k;
              g.alpha = t.alpha, g.beta = t.beta, g.a = a, g.lda = lda, g.b = b, g.ldb = ldb;
              g.c = c, g.ldc = ldc, g.bias = bias;
              gemm::gemm_f32_blocked(g, &pool, &kernel);
            },
            std::string(kernel.name) + " small blocks");
  }
}

// The shapes the models run, through the public entry point the kernels call.
TEST(GemmF32Blocked, ModelShapesThroughGemmF32) {
  ThreadPool pool(2);
  for (Case t : {Case{128, 768, 768}, Case{197, 768, 3072}, Case{4, 100, 64, false, true},
                 Case{30, 1, 50}})
    check(t,
          [&](const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
              const float*) {
            gemm_f32(t.ta, t.tb, t.m, t.n, t.k, t.alpha, a, lda, b, ldb, t.beta, c, ldc, &pool);
          },
          "gemm_f32");
}

TEST(GemmF32Blocked, BetaZeroIgnoresNaN) {
  std::vector<float> a(6 * 5, 1.0f), b(5 * 20, 2.0f), c(6 * 20, std::nanf(""));
  gemm::GemmF32Args g;
  g.m = 6, g.n = 20, g.k = 5, g.a = a.data(), g.lda = 5, g.b = b.data(), g.ldb = 20;
  g.c = c.data(), g.ldc = 20;
  for (const gemm::MicroKernel& kernel : gemm::available_f32_kernels()) {
    std::fill(c.begin(), c.end(), std::nanf(""));
    gemm::gemm_f32_blocked(g, nullptr, &kernel);
    for (float x : c) ASSERT_EQ(x, 10.0f) << kernel.name;
  }
}

TEST(CpuFeatures, ConsistentWithDispatch) {
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(f.avx2 && f.fma) << "kiln's baseline needs AVX2 + FMA: " << f.to_string();
  EXPECT_EQ(gemm::find_f32_kernel("f32_gemm_6x16_avx2") != nullptr, f.avx2 && f.fma);
  const bool any_avx512 = gemm::available_f32_kernels().size() > 1;
  EXPECT_EQ(any_avx512, f.has_avx512());
  if (f.has_avx512()) {
    EXPECT_EQ(gemm::best_f32_kernel()->nr, 32);
  }
}

}  // namespace
}  // namespace kiln
