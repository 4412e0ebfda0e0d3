// The recurrent kernels' product on 8-bit weight codes (kernels/cpu/rnn/coded_rows.h) against a
// double loop over the same float weights: every output within the bound of rounding a's rows to
// 16 bits (each |a| at most max|a| / 65534 off, times |b|, summed over k) plus float rounding; k
// past a chunk of 512 products, odd k, n in part tiles, rows in part blocks, strides, bias. CI
// runs it at each ISA level (the AVX2 and the AVX-512 VNNI tiles).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/rnn/coded_rows.h"

namespace kiln::rnn {
namespace {

struct Case {
  int64_t rows, n, k;
  bool bias;
};

// B [n, k]: codes in [-127, 127] times a scale a row (one in five rows of codes within +-9, so
// the row's scale is not the matrix's).
std::vector<float> coded_matrix(int64_t n, int64_t k, std::mt19937& rng) {
  std::uniform_int_distribution<int> code(-127, 127), small(-9, 9);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  std::vector<float> b(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    const float s = scale(rng);
    for (int64_t i = 0; i < k; ++i) b[j * k + i] = static_cast<float>(j % 5 == 2 ? small(rng) : code(rng)) * s;
  }
  return b;
}

void check(const Case& c, ThreadPool* pool) {
  std::mt19937 rng(static_cast<unsigned>(c.rows * 1000003 + c.n * 101 + c.k));
  const std::vector<float> b = coded_matrix(c.n, c.k, rng);
  const CodedRows coded = code_rows(b.data(), c.n, c.k);
  ASSERT_FALSE(coded.empty());
  const int64_t lda = c.k + 3, ldo = c.n + 5;
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(c.rows * lda)), bias(static_cast<size_t>(c.n));
  for (int64_t i = 0; i < c.rows; ++i)  // rows of different sizes; row 1 all zeros
    for (int64_t p = 0; p < c.k; ++p) a[i * lda + p] = i == 1 ? 0.0f : value(rng) * std::pow(10.0f, static_cast<float>(i % 4 - 2));
  for (float& v : bias) v = value(rng);
  const float fill = -7.0f;  // outside the outputs' columns nothing may change
  std::vector<float> out(static_cast<size_t>(c.rows * ldo), fill);
  coded_product(coded, a.data(), c.rows, lda, c.bias ? bias.data() : nullptr, out.data(), ldo, pool);

  for (int64_t i = 0; i < c.rows; ++i) {
    double top = 0;
    for (int64_t p = 0; p < c.k; ++p) top = std::max(top, std::fabs(static_cast<double>(a[i * lda + p])));
    for (int64_t j = 0; j < c.n; ++j) {
      double want = c.bias ? bias[j] : 0.0, b_abs = 0, terms = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        want += static_cast<double>(a[i * lda + p]) * b[j * c.k + p];
        b_abs += std::fabs(b[j * c.k + p]);
        terms += std::fabs(static_cast<double>(a[i * lda + p]) * b[j * c.k + p]);
      }
      const double bound = b_abs * top / 65534.0 * 1.001 + 1e-6 * (terms + std::fabs(want)) + 1e-30;
      ASSERT_NEAR(out[i * ldo + j], want, bound) << "rows " << c.rows << " n " << c.n << " k " << c.k << " row " << i
                                                 << " output " << j;
      if (i == 1) {
        ASSERT_EQ(out[i * ldo + j], c.bias ? bias[j] : 0.0f) << "a zero row gives the bias exactly";
      }
    }
    for (int64_t j = c.n; j < ldo; ++j) ASSERT_EQ(out[i * ldo + j], fill) << "row " << i << " column " << j;
  }
}

TEST(CodedRows, ProductWithinSixteenBitRoundingOfTheFloatOne) {
  ThreadPool pool(2);
  const Case cases[] = {
      {1, 2048, 512, false},  // a bidirectional LSTM's step: hidden 512, 4 gates
      {16, 2048, 512, true},  // its input projection, 16 steps
      {13, 100, 7, true},     // odd k, a part tile, rows past the blocks
      {5, 64, 1, false},      // k of one
      {6, 130, 1100, true},   // three chunks of k (512, 512, 76)
      {2, 1, 513, true},      // one output, a chunk and one more product
  };
  for (const Case& c : cases) {
    check(c, nullptr);
    check(c, &pool);
  }
}

TEST(CodedRows, FloatWeightsHaveNoCodes) {
  std::mt19937 rng(5);
  std::vector<float> b = coded_matrix(70, 30, rng);
  EXPECT_FALSE(code_rows(b.data(), 70, 30).empty());
  b[69 * 30 + 4] += 1e-4f;  // one weight of the last row off its row's grid
  EXPECT_TRUE(code_rows(b.data(), 70, 30).empty());
  b[69 * 30 + 4] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(code_rows(b.data(), 70, 30).empty());
}

TEST(CodedRows, NanInARowMakesThatRowNan) {
  std::mt19937 rng(9);
  const int64_t n = 70, k = 40;
  const std::vector<float> b = coded_matrix(n, k, rng);
  const CodedRows coded = code_rows(b.data(), n, k);
  std::vector<float> a(static_cast<size_t>(3 * k), 0.25f), out(static_cast<size_t>(3 * n));
  a[k + 17] = std::numeric_limits<float>::quiet_NaN();
  a[2 * k + 3] = std::numeric_limits<float>::infinity();
  coded_product(coded, a.data(), 3, k, nullptr, out.data(), n);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(std::isfinite(out[j])) << j;
    EXPECT_TRUE(std::isnan(out[n + j])) << j;
    EXPECT_TRUE(std::isnan(out[2 * n + j])) << j;
  }
}

}  // namespace
}  // namespace kiln::rnn
