// gemm_s16 against a plain int64 loop, exactly: odd shapes (partial 6 x 16 tiles, odd depth, the
// 512-deep K slices and 1024-wide column blocks crossed), leading dimensions wider than the
// matrices, the extreme 8-bit differences (+-255), 1 and 2 threads.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm_s16.h"

namespace kiln {
namespace {

void check(int64_t m, int64_t n, int64_t k, int threads, bool extremes) {
  SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << " threads " << threads
                                    << (extremes ? " extremes" : ""));
  std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 7 + k));
  std::uniform_int_distribution<int> d(-255, 255);
  const int64_t lda = k + 3, ldb = n + 5, ldc = n + 2;
  std::vector<int16_t> a(static_cast<size_t>(m * lda)), b(static_cast<size_t>(k * ldb));
  for (auto& v : a) v = static_cast<int16_t>(extremes ? (d(rng) < 0 ? -255 : 255) : d(rng));
  for (auto& v : b) v = static_cast<int16_t>(extremes ? 255 : d(rng));
  std::vector<int32_t> c(static_cast<size_t>(m * ldc), 12345);
  ThreadPool pool(threads);
  gemm::gemm_s16(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, threads > 1 ? &pool : nullptr);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t want = 0;
      for (int64_t q = 0; q < k; ++q) want += int64_t{a[i * lda + q]} * b[q * ldb + j];
      ASSERT_EQ(c[i * ldc + j], want) << "element " << i << ", " << j;
    }
    for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], 12345) << "past row " << i;
  }
}

TEST(GemmS16, MatchesPlainLoopsExactly) {
  const int64_t shapes[][3] = {{1, 1, 1},   {6, 16, 2},  {7, 17, 3},   {13, 33, 511},
                               {5, 40, 513}, {64, 9, 27}, {24, 1100, 40}, {100, 70, 1030}};
  for (const auto& s : shapes)
    for (int threads : {1, 2}) check(s[0], s[1], s[2], threads, false);
}

TEST(GemmS16, ExtremeValuesStayExact) {
  // 2000 products of 255 x 255 (1.3e8): far inside int32, and every vpmaddwd pair at its largest.
  check(8, 20, 2000, 2, true);
}

TEST(GemmS16, EmptyDepthGivesZeros) {
  std::vector<int32_t> c(6, 7);
  gemm::gemm_s16(2, 3, 0, nullptr, 0, nullptr, 3, c.data(), 3, nullptr);
  for (int32_t v : c) EXPECT_EQ(v, 0);
}

}  // namespace
}  // namespace kiln
