// The blocked float GEMM (kernels/cpu/gemm) against a naive triple loop in double: every
// micro-kernel this CPU can run (so the AVX2 one is covered on AVX-512 machines too), odd and
// model-sized shapes, transposes, alpha/beta/bias, every epilogue activation (against the
// ai.kiln ops' double reference) with and without a residual, B packed per call or prepacked,
// and 1-3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/ref/gemm_f32.h"

namespace kiln {
namespace {

using Act = gemm::Epilogue::Activation;

struct Case {
  int64_t m, n, k;
  bool ta = false, tb = false;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  Act act = Act::kNone;
  bool residual = false, residual_first = false;
  bool clamp = false;  // the activation's result clamped to [-0.3, 0.4]
};

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The parameters the tests give each activation, and its double reference: the ai.kiln ops'
// own (kernels/kiln/epilogue_activation.h).
gemm::Epilogue epilogue_of(const Case& t) {
  gemm::Epilogue e;
  e.activation = t.act;
  if (t.act == Act::kClip) e.p0 = -0.25f, e.p1 = 0.5f;
  if (t.act == Act::kLeakyRelu) e.p0 = 0.1f;
  if (t.act == Act::kHardSigmoid) e.p0 = 0.2f, e.p1 = 0.5f;
  if (t.clamp) e.lo = -0.3f, e.hi = 0.4f;
  e.residual_first = t.residual_first;
  return e;
}

double reference_activation(const gemm::Epilogue& e, double x) {
  using K = kiln_ops::Activation::Kind;
  static const K kinds[] = {K::kNone,        K::kRelu,      K::kClip, K::kLeakyRelu,
                            K::kSigmoid,     K::kHardSigmoid, K::kHardSwish, K::kSilu,
                            K::kGelu,        K::kGeluTanh,  K::kTanh};
  kiln_ops::Activation a;
  a.kind = kinds[static_cast<int>(e.activation)];
  a.p0 = e.p0, a.p1 = e.p1;
  a.lo = e.lo, a.hi = e.hi;
  return a(x);
}

struct Operands {
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  const float* bias;
  const gemm::Epilogue* epilogue;  // null when the case has none
};

// Runs one case through `run` (which fills c) and compares with the double-precision loop.
// C has a leading dimension wider than n (and A/B than their rows, Z than C) to catch stride
// mistakes.
template <typename Run>
void check(const Case& t, Run run, const std::string& what) {
  const int64_t a_rows = t.ta ? t.k : t.m, a_cols = t.ta ? t.m : t.k;
  const int64_t b_rows = t.tb ? t.n : t.k, b_cols = t.tb ? t.k : t.n;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = t.n + 7, ldz = t.n + 2;
  const auto a = random_vec(a_rows * lda, 1), b = random_vec(b_rows * ldb, 2);
  const auto bias = random_vec(t.n, 3);
  const auto z = random_vec(t.m * ldz, 5);
  auto c = random_vec(t.m * ldc, 4);
  const auto c0 = c;
  gemm::Epilogue e = epilogue_of(t);
  if (t.residual) e.residual = z.data(), e.ld_residual = ldz;
  const bool has_epilogue = t.act != Act::kNone || t.residual || t.clamp;
  run(Operands{a.data(), lda, b.data(), ldb, c.data(), ldc, t.bias ? bias.data() : nullptr,
               has_epilogue ? &e : nullptr});
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
      const double zv = t.residual ? z[i * ldz + j] : 0.0;
      if (t.residual && t.residual_first) want += zv;
      want = reference_activation(e, want);
      if (t.residual && !t.residual_first) want += zv;
      // Every activation's slope is below 1.2, and each adds a few ulp of its own.
      const double scale = 1.2 * (std::fabs(t.alpha) * mag + std::fabs(t.beta) +
                                  (t.bias ? 1.0 : 0.0) + (t.residual ? 1.0 : 0.0)) + 1e-30;
      max_err = std::max(max_err, std::fabs(c[i * ldc + j] - want) / scale);
    }
  EXPECT_LE(max_err, 1e-5 * std::max<int64_t>(t.k, 1) / 8 + 1e-6)
      << what << " m=" << t.m << " n=" << t.n << " k=" << t.k << " ta=" << t.ta << " tb=" << t.tb
      << " act=" << static_cast<int>(t.act) << " residual=" << t.residual
      << " clamp=" << t.clamp;
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
      {3, 70, 1100},      {16, 32, 1500},
      {15, 70, 300},  // a partial row tile of 7 (mr 8) and 3 (mr 6): fn_short's widest
  };
  // Transposes, scaling, accumulation into C and the bias epilogue on odd shapes.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      v.push_back({19, 37, 71, ta, tb});
      v.push_back({70, 45, 260, ta, tb, 0.5f, 2.0f, true});
      v.push_back({4, 45, 70, ta, tb, 1.5f, 0.5f, true});
    }
  v.push_back({9, 50, 33, false, false, -1.5f, 0.0f, true});
  v.push_back({16, 64, 512, false, false, 1.0f, 1.0f});
  // Each activation, with a residual before or after it, on shapes with edge tiles.
  for (int act = 1; act <= static_cast<int>(Act::kTanh); ++act) {
    v.push_back({21, 35, 40, false, false, 2.0f, 0.0f, true, static_cast<Act>(act)});
    v.push_back({9, 70, 24, false, true, 1.0f, 0.5f, false, static_cast<Act>(act), true, act % 2 == 0});
  }
  // A clamp after the activation (tf2onnx's Max(LeakyRelu(x), -0.4)), with and without a residual.
  for (Act act : {Act::kLeakyRelu, Act::kGelu, Act::kRelu}) {
    v.push_back({21, 35, 40, false, false, 1.0f, 0.0f, true, act, false, false, true});
    v.push_back({9, 70, 24, false, true, 1.0f, 0.0f, false, act, true, act == Act::kGelu, true});
  }
  v.push_back({17, 40, 30, false, false, 1.0f, 0.0f, false, Act::kNone, true});
  v.push_back({2, 40, 30, true, false, 1.0f, 0.0f, true, Act::kGelu, true, true});
  v.push_back({6, 0, 5, false, false, 1.0f, 0.0f, true, Act::kRelu});
  v.push_back({6, 9, 0, false, false, 1.0f, 1.0f, true, Act::kGelu, true});
  return v;
}

gemm::GemmF32Args args_of(const Case& t, const Operands& o) {
  gemm::GemmF32Args g;
  g.trans_a = t.ta, g.trans_b = t.tb, g.m = t.m, g.n = t.n, g.k = t.k;
  g.alpha = t.alpha, g.beta = t.beta, g.a = o.a, g.lda = o.lda, g.b = o.b, g.ldb = o.ldb;
  g.c = o.c, g.ldc = o.ldc, g.bias = o.bias, g.epilogue = o.epilogue;
  return g;
}

TEST(GemmF32Blocked, EveryKernelShapeAndThreadCount) {
  ASSERT_FALSE(gemm::available_f32_kernels().empty());
  for (const gemm::MicroKernel& kernel : gemm::available_f32_kernels())
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (const Case& t : cases())
        check(t,
              [&](const Operands& o) { gemm::gemm_f32_blocked(args_of(t, o), &pool, &kernel); },
              std::string(kernel.name) + " threads=" + std::to_string(threads));
    }
}

// The same cases with B packed once beforehand (what the MatMul-like kernels do with constant
// weights): the GEMM must give what it gives packing B itself, small-M path included.
TEST(GemmF32Blocked, PrepackedBEveryKernelShapeAndThreadCount) {
  for (const gemm::MicroKernel& kernel : gemm::available_f32_kernels())
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (const Case& t : cases())
        check(t,
              [&](const Operands& o) {
                const gemm::PackedMatrix packed =
                    gemm::PackedMatrix::pack_b(o.b, o.ldb, t.tb, t.k, t.n, &kernel);
                ASSERT_FALSE(packed.empty());
                EXPECT_EQ(packed.kernel().nr, kernel.nr);
                gemm::GemmF32Args g = args_of(t, o);
                g.b = nullptr, g.ldb = 0, g.packed_b = &packed;
                gemm::gemm_f32_blocked(g, &pool);
              },
              std::string(kernel.name) + " prepacked threads=" + std::to_string(threads));
    }
}

// Small cache blocks force several kc slices (beta applied once), several mc / nc blocks and
// partial ones, which the model-sized shapes above barely reach; prepacked B gets shallow
// slices too (K above kc_packed), including for the small-M path.
TEST(GemmF32Blocked, SmallBlocksExerciseEveryLoop) {
  for (gemm::MicroKernel kernel : gemm::available_f32_kernels()) {
    kernel.mc = kernel.mr * 2, kernel.kc = 24, kernel.nc = kernel.nr * 2, kernel.kc_packed = 40;
    ThreadPool pool(2);
    for (Case t : {Case{61, 150, 100, false, false, 1.0f, 0.5f, true, Act::kGelu, true},
                   Case{61, 150, 100, true, true, 2.0f, 0.0f, false},
                   Case{3, 150, 100, false, true, 1.0f, 1.0f, true, Act::kRelu, true, true}}) {
      check(t, [&](const Operands& o) { gemm::gemm_f32_blocked(args_of(t, o), &pool, &kernel); },
            std::string(kernel.name) + " small blocks");
      check(t,
            [&](const Operands& o) {
              const gemm::PackedMatrix packed =
                  gemm::PackedMatrix::pack_b(o.b, o.ldb, t.tb, t.k, t.n, &kernel);
              EXPECT_EQ(packed.kc(), 34);  // K 100 > kc_packed 40: three slices, evened out
              gemm::GemmF32Args g = args_of(t, o);
              g.packed_b = &packed;
              gemm::gemm_f32_blocked(g, &pool);
            },
            std::string(kernel.name) + " small blocks prepacked");
    }
  }
}

// One slice when K fits kc_packed: the whole of K in one pass, C written once.
TEST(GemmF32Blocked, PackedMatrixLayout) {
  for (const gemm::MicroKernel& kernel : gemm::available_f32_kernels()) {
    const int64_t k = 37, n = kernel.nr + 3;
    const auto b = random_vec(k * n, 9);
    const gemm::PackedMatrix p = gemm::PackedMatrix::pack_b(b.data(), n, false, k, n, &kernel);
    EXPECT_EQ(p.k(), k);
    EXPECT_EQ(p.n(), n);
    EXPECT_EQ(p.kc(), k);
    EXPECT_EQ(p.bytes(), static_cast<int64_t>(sizeof(float)) * k * 2 * kernel.nr);
    // Panel 1 holds columns nr.. (3 real, the rest zero), row-major per k step.
    const float* panel = p.panel(0, kernel.nr);
    for (int64_t q = 0; q < k; ++q)
      for (int64_t j = 0; j < kernel.nr; ++j)
        ASSERT_EQ(panel[q * kernel.nr + j], j < 3 ? b[q * n + kernel.nr + j] : 0.0f) << q << "," << j;
    // Transposed storage packs to the same panels.
    std::vector<float> bt(n * k);
    for (int64_t q = 0; q < k; ++q)
      for (int64_t j = 0; j < n; ++j) bt[j * k + q] = b[q * n + j];
    const gemm::PackedMatrix pt = gemm::PackedMatrix::pack_b(bt.data(), k, true, k, n, &kernel);
    EXPECT_EQ(std::memcmp(p.panel(0, 0), pt.panel(0, 0), p.bytes()), 0);
  }
}

// The shapes the models run, through the public entry points the kernels call.
TEST(GemmF32Blocked, ModelShapesThroughGemmF32) {
  ThreadPool pool(2);
  for (Case t : {Case{128, 768, 768}, Case{197, 768, 3072}, Case{4, 100, 64, false, true},
                 Case{30, 1, 50}})
    check(t,
          [&](const Operands& o) {
            gemm_f32(t.ta, t.tb, t.m, t.n, t.k, t.alpha, o.a, o.lda, o.b, o.ldb, t.beta, o.c, o.ldc,
                     &pool);
          },
          "gemm_f32");
  for (Case t : {Case{128, 768, 768, false, false, 1.0f, 0.0f, true, Act::kGelu},
                 Case{1, 1000, 2048, false, true, 1.0f, 0.0f, true},
                 Case{128, 768, 3072, false, false, 1.0f, 0.0f, false, Act::kNone, true}})
    check(t,
          [&](const Operands& o) {
            Tensor w = Tensor::make(DType::kFloat32, {t.tb ? t.n : t.k, t.tb ? t.k : t.n}).value();
            for (int64_t r = 0; r < w.dim(0); ++r)
              std::copy_n(o.b + r * o.ldb, w.dim(1), w.data<float>() + r * w.dim(1));
            auto packed = pack_weight(w, t.tb);
            ASSERT_TRUE(packed.is_ok()) << packed.status().message();
            gemm_f32_prepacked(t.ta, t.m, t.alpha, o.a, o.lda, *packed, t.beta, o.c, o.ldc, o.bias,
                               o.epilogue, &pool);
          },
          "gemm_f32_prepacked");
}

TEST(GemmF32Blocked, PackWeightRejectsWhatItCannotPack) {
  EXPECT_FALSE(pack_weight(Tensor::make(DType::kFloat32, {2, 3, 4}).value(), false).is_ok());
  EXPECT_FALSE(pack_weight(Tensor::make(DType::kInt32, {2, 3}).value(), false).is_ok());
  EXPECT_FALSE(pack_weight(Tensor::wrap(DType::kFloat32, {2, 3}, nullptr, nullptr), false).is_ok());
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
