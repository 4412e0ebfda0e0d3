// gemm_u8s8 against a plain int64 loop of (a - za)(b - zb), exactly: A and B each int8 or uint8
// (the four sign pairs), scalar and per-row / per-column zero points, the extreme values, odd
// shapes (partial row tiles and 32-column panels, depths that are no multiple of 4, the deepest
// 8192), leading dimensions wider than the matrices, 1 and 2 threads; and the same sums dequantized
// to floats in the tiles, and with a GELU applied there. B of any 8-bit values on VNNI CPUs
// (AVX-512 VNNI or AVX-VNNI, at the ISA level KILN_ISA leaves), B of 7-bit values or u8 A below
// 128 (what AVX2's vpmaddubsw tile takes: DynamicQuantMatMul's 7-bit rows) everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm_u8s8.h"
#include "kernels/ref/quantize.h"

namespace kiln {
namespace {

struct Shape3 {
  int64_t m, n, k;
};

// seven_bit_a: A's u8 values (and zero points) below 128, with B of any 8-bit values.
void check(const Shape3& s, bool a_signed, bool b_signed, bool per_row, bool extremes, int threads,
           bool seven_bit_b = false, bool seven_bit_a = false) {
  SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k << " A " << (a_signed ? "s8" : "u8")
                                    << (seven_bit_a ? " 7-bit" : "") << " B " << (b_signed ? "s8" : "u8")
                                    << (seven_bit_b ? " 7-bit" : "")
                                    << (per_row ? " per-row zp" : "") << (extremes ? " extremes" : "")
                                    << " threads " << threads);
  std::mt19937 rng(static_cast<uint32_t>(s.m * 131 + s.n * 7 + s.k + a_signed * 3 + b_signed * 5));
  std::uniform_int_distribution<int> byte(0, 255);
  auto value = [&](bool is_signed) {
    const int v = extremes ? (byte(rng) < 128 ? 0 : 255) : byte(rng);
    return is_signed ? v - 128 : v;
  };
  const int64_t lda = s.k + 3, ldb = s.n + 5, ldc = s.n + 2;
  std::vector<int> a(static_cast<size_t>(s.m * lda)), b(static_cast<size_t>(s.k * ldb));
  for (int& v : a) v = seven_bit_a ? value(false) / 2 : value(a_signed);  // 0 and 127 at the extremes
  for (int& v : b) {
    v = value(b_signed);
    if (seven_bit_b) v = (b_signed ? 0 : 128) + (v - (b_signed ? 0 : 128)) / 2;  // bs within [-64, 64]
  }
  std::vector<int32_t> za(per_row ? s.m : 1), zb(per_row ? s.n : 1);
  for (int32_t& z : za) z = seven_bit_a ? value(false) / 2 : value(a_signed);
  for (int32_t& z : zb) z = value(b_signed);
  std::vector<int8_t> a8(a.begin(), a.end()), b8(b.begin(), b.end());  // the bytes, either sign
  std::vector<int32_t> c(static_cast<size_t>(s.m * ldc), 12345);
  ThreadPool pool(threads);
  const gemm::PackedU8S8 packed = gemm::PackedU8S8::pack(b8.data(), b_signed, ldb, s.k, s.n, zb);
  if (seven_bit_b) {
    ASSERT_TRUE(packed.seven_bit());
  }
  gemm::gemm_u8s8(s.m, a8.data(), a_signed, lda, za, packed, c.data(), ldc, threads > 1 ? &pool : nullptr);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      int64_t want = 0;
      const int64_t zi = za[per_row ? i : 0], zj = zb[per_row ? j : 0];
      for (int64_t q = 0; q < s.k; ++q) want += (a[i * lda + q] - zi) * (b[q * ldb + j] - zj);
      ASSERT_EQ(c[i * ldc + j], want) << "element " << i << ", " << j;
    }
  // C's padding columns untouched.
  for (int64_t i = 0; i < s.m; ++i) ASSERT_EQ(c[i * ldc + s.n], 12345);
  // Dequantized in the tiles: fma(float(c), a_scale[i] * b_scale[j], bias[j]) of those exact sums,
  // per-row and per-column scales with a bias, or one scale each without.
  std::uniform_real_distribution<float> unit(0.001f, 0.1f);
  std::vector<float> as(static_cast<size_t>(s.m)), bs(static_cast<size_t>(s.n)), bias(static_cast<size_t>(s.n));
  for (float& v : as) v = unit(rng);
  for (float& v : bs) v = unit(rng);
  for (float& v : bias) v = unit(rng) - 0.05f;
  gemm::Dequantize dq;
  dq.a_scale = as.data(), dq.a_per_row = per_row, dq.b_scale = bs.data(), dq.b_per_column = per_row;
  dq.bias = per_row ? bias.data() : nullptr;
  std::vector<float> y(static_cast<size_t>(s.m * ldc), -7.0f);
  gemm::gemm_u8s8(s.m, a8.data(), a_signed, lda, za, packed, dq, y.data(), ldc, threads > 1 ? &pool : nullptr);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      const float want = std::fma(static_cast<float>(c[i * ldc + j]), as[per_row ? i : 0] * bs[per_row ? j : 0],
                                  per_row ? bias[j] : 0.0f);
      ASSERT_EQ(y[i * ldc + j], want) << "dequantized element " << i << ", " << j;
    }
    ASSERT_EQ(y[i * ldc + s.n], -7.0f);
  }
  // With a GELU epilogue (computed in the tile's registers on 16 lanes): the same floats as the
  // epilogue's 8-lane code applied to the dequantized product.
  gemm::Epilogue gelu;
  gelu.activation = gemm::Epilogue::Activation::kGelu;
  dq.epilogue = &gelu;
  std::vector<float> yg(y.size(), -7.0f);
  gemm::gemm_u8s8(s.m, a8.data(), a_signed, lda, za, packed, dq, yg.data(), ldc, threads > 1 ? &pool : nullptr);
  gemm::apply_epilogue(gelu, y.data(), ldc, 0, 0, s.m, s.n);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j <= s.n; ++j) ASSERT_EQ(yg[i * ldc + j], y[i * ldc + j]) << "GELU element " << i << ", " << j;
}

// DynamicQuantMatMul's product: float rows quantized into the tiles' layout (padded rows, their
// sums and zero points in the compensation) give the same floats as quantizing first and
// multiplying those codes: rows of zeros, of positives only, with a NaN, odd depths, partial tiles;
// rows of 8 bits and of 7 (codes up to 127, whatever B holds).
TEST(GemmU8S8, DynamicRowsMatchQuantizingFirst) {
  for (const Shape3& s : {Shape3{1, 3, 1}, Shape3{7, 70, 37}, Shape3{13, 64, 768}, Shape3{128, 40, 768}})
    for (const bool seven_bit_b : {false, true})
    for (const int top : {255, 127})
    for (int threads : {1, 2}) {
      if (!gemm::u8s8_available(seven_bit_b, top == 127)) continue;  // 8-bit B and rows without VNNI
      SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k << " threads " << threads
                                        << (seven_bit_b ? " 7-bit B" : "") << " rows up to " << top);
      std::mt19937 rng(static_cast<uint32_t>(s.m + s.n + s.k));
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> a(static_cast<size_t>(s.m * s.k));
      for (float& v : a) v = normal(rng);
      for (int64_t q = 0; q < s.k; ++q) {
        if (s.m > 2) a[static_cast<size_t>(q)] = 0.0f;                                   // row 0: zeros
        if (s.m > 2) a[static_cast<size_t>(s.k + q)] = std::fabs(a[static_cast<size_t>(s.k + q)]);  // row 1: positive
      }
      if (s.m > 2) a[static_cast<size_t>(2 * s.k)] = NAN;
      std::vector<int8_t> b(static_cast<size_t>(s.k * s.n));
      for (int8_t& v : b) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
      if (seven_bit_b)
        for (int8_t& v : b) v = static_cast<int8_t>(v / 2);
      std::vector<float> bs(static_cast<size_t>(s.n)), bias(static_cast<size_t>(s.n));
      for (int64_t j = 0; j < s.n; ++j) bs[static_cast<size_t>(j)] = 0.001f * static_cast<float>(j + 1), bias[static_cast<size_t>(j)] = 0.5f;
      const gemm::PackedU8S8 packed = gemm::PackedU8S8::pack(b.data(), true, s.n, s.k, s.n, {0});
      ThreadPool pool(threads);
      gemm::Dequantize dq;
      dq.b_scale = bs.data(), dq.b_per_column = true, dq.bias = bias.data();
      std::vector<float> got(static_cast<size_t>(s.m * s.n)), want(got.size());
      gemm::gemm_u8s8_dynamic(s.m, a.data(), s.k, packed, dq, got.data(), s.n, threads > 1 ? &pool : nullptr, top);
      std::vector<uint8_t> codes(a.size());
      std::vector<float> scales(static_cast<size_t>(s.m));
      std::vector<int32_t> zps(static_cast<size_t>(s.m));
      for (int64_t i = 0; i < s.m; ++i)
        dynamic_quantize_row_u8(a.data() + i * s.k, s.k, codes.data() + i * s.k, &scales[static_cast<size_t>(i)],
                                &zps[static_cast<size_t>(i)], top);
      if (s.m > 2) {  // row 1, all positive, reaches the top code
        ASSERT_EQ(*std::max_element(codes.begin() + s.k, codes.begin() + 2 * s.k), top);
      }
      ASSERT_LE(*std::max_element(codes.begin(), codes.end()), top);
      dq.a_scale = scales.data(), dq.a_per_row = true;
      gemm::gemm_u8s8(s.m, codes.data(), false, s.k, zps, packed, dq, want.data(), s.n, nullptr);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
    }
}

TEST(GemmU8S8, MatchesPlainLoopExactly) {
  for (const bool seven_bit_b : {false, true}) {
    if (!gemm::u8s8_available(seven_bit_b)) continue;  // 8-bit B without VNNI
    for (const Shape3& s : {Shape3{1, 1, 1}, Shape3{6, 32, 4}, Shape3{7, 33, 5}, Shape3{20, 70, 1023},
                            Shape3{13, 100, 130}, Shape3{2, 5, 8192}, Shape3{128, 40, 768},
                            // Tiles of 1 to 3 rows (wider passes) over several panels, the last in part.
                            Shape3{1, 200, 300}, Shape3{2, 150, 64}, Shape3{3, 130, 37}})
      for (bool a_signed : {false, true})
        for (bool b_signed : {false, true})
          for (bool per_row : {false, true})
            for (int threads : {1, 2}) check(s, a_signed, b_signed, per_row, false, threads, seven_bit_b);
    // Extreme differences at the deepest K: the sums near their limits.
    for (bool a_signed : {false, true})
      for (bool b_signed : {false, true}) check({3, 40, 8192}, a_signed, b_signed, true, true, 2, seven_bit_b);
  }
  // u8 A below 128 against B of any 8-bit values (every CPU): pair sums up to 2 x 127 x 128.
  for (const Shape3& s : {Shape3{7, 33, 5}, Shape3{13, 100, 130}, Shape3{128, 40, 768}, Shape3{2, 150, 64}})
    for (bool b_signed : {false, true})
      for (int threads : {1, 2}) check(s, false, b_signed, true, false, threads, false, true);
  for (bool b_signed : {false, true}) check({3, 40, 8192}, false, b_signed, true, true, 2, false, true);
}

}  // namespace
}  // namespace kiln
