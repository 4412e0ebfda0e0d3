// gemm_s16 against a plain int64 loop, exactly, on every tile the CPU has, with B packed per call
// and packed beforehand: odd shapes (partial tiles, odd depth, the 512-deep K slices and
// 1024-wide column blocks crossed), leading dimensions wider than the matrices, the extreme
// 8-bit differences (+-255), 1 and 2 threads.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm_s16.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

void check(int64_t m, int64_t n, int64_t k, int threads, bool extremes, const gemm::S16Kernel& kernel,
           bool prepacked) {
  SCOPED_TRACE(::testing::Message() << kernel.name << (prepacked ? " prepacked " : " ") << m << "x" << n << "x"
                                    << k << " threads " << threads << (extremes ? " extremes" : ""));
  std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 7 + k));
  std::uniform_int_distribution<int> d(-255, 255);
  const int64_t lda = k + 3, ldb = n + 5, ldc = n + 2;
  std::vector<int16_t> a(static_cast<size_t>(m * lda)), b(static_cast<size_t>(k * ldb));
  for (auto& v : a) v = static_cast<int16_t>(extremes ? (d(rng) < 0 ? -255 : 255) : d(rng));
  for (auto& v : b) v = static_cast<int16_t>(extremes ? 255 : d(rng));
  std::vector<int32_t> c(static_cast<size_t>(m * ldc), 12345);
  ThreadPool pool(threads);
  ThreadPool* p = threads > 1 ? &pool : nullptr;
  if (prepacked) {
    const gemm::PackedS16 packed = gemm::PackedS16::pack(b.data(), ldb, k, n, &kernel);
    gemm::gemm_s16(m, a.data(), lda, packed, c.data(), ldc, p);
  } else {
    gemm::gemm_s16(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, p, &kernel);
  }
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
                               {5, 40, 513}, {64, 9, 27}, {24, 1100, 40}, {100, 70, 1030},
                               {1, 100, 3000}};  // one row over several K blocks (the 1-row tile)
  for (const gemm::S16Kernel& kernel : gemm::s16_kernels())
    for (const bool prepacked : {false, true})
      for (const auto& s : shapes)
        for (int threads : {1, 2}) check(s[0], s[1], s[2], threads, false, kernel, prepacked);
}

TEST(GemmS16, ExtremeValuesStayExact) {
  // 2000 products of 255 x 255 (1.3e8): far inside int32, and every vpmaddwd pair at its largest.
  for (const gemm::S16Kernel& kernel : gemm::s16_kernels()) check(8, 40, 2000, 2, true, kernel, false);
}

TEST(GemmS16, EmptyDepthGivesZeros) {
  std::vector<int32_t> c(6, 7);
  gemm::gemm_s16(2, 3, 0, nullptr, 0, nullptr, 3, c.data(), 3, nullptr);
  for (int32_t v : c) EXPECT_EQ(v, 0);
}

// ConvInteger (which runs gemm_s16 on its im2col) against a plain loop: uint8 x and w with zero
// points, 2 groups, stride 2, asymmetric padding.
TEST(GemmS16, ConvIntegerMatchesAPlainLoop) {
  const int64_t n = 2, c = 6, h = 9, w = 11, m = 8, group = 2, kh = 3, kw = 2, sh = 2, sw = 1;
  const int64_t pt = 1, pl = 0, pb = 0, pr = 1;
  const int64_t oh = (h + pt + pb - kh) / sh + 1, ow = (w + pl + pr - kw) / sw + 1, cg = c / group, mg = m / group;
  test::Builder b(13);
  Tensor x = Tensor::make(DType::kUInt8, {n, c, h, w}).value(), wt = Tensor::make(DType::kUInt8, {m, cg, kh, kw}).value();
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>((i * 97 + 13) % 256);
  for (int64_t i = 0; i < wt.numel(); ++i) wt.data<uint8_t>()[i] = static_cast<uint8_t>((i * 31 + 7) % 256);
  Tensor xz = Tensor::make(DType::kUInt8, {}).value(), wz = Tensor::make(DType::kUInt8, {}).value();
  xz.data<uint8_t>()[0] = 131;
  wz.data<uint8_t>()[0] = 9;
  b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kUInt8, x.shape()), ""});
  b.m.graph.initializers["w"] = wt;
  b.m.graph.initializers["xz"] = xz;
  b.m.graph.initializers["wz"] = wz;
  b.add("ConvInteger", {"x", "w", "xz", "wz"}, {"y"},
        {test::attr_i("group", group), test::attr_ints("strides", {sh, sw}),
         test::attr_ints("pads", {pt, pl, pb, pr})});
  b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kInt32), ""});
  const std::vector<Value> out = test::run_model(b.m, {x});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].tensor.shape(), (Shape{n, m, oh, ow}));
  const int32_t* y = out[0].tensor.data<int32_t>();
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t mi = 0; mi < m; ++mi)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t want = 0;
          const int64_t g = mi / mg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t bb = 0; bb < kw; ++bb) {
                const int64_t ih = i * sh - pt + a, iw = j * sw - pl + bb;
                if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;  // padding is x's zero point
                const int64_t xv = x.data<uint8_t>()[((ni * c + g * cg + ci) * h + ih) * w + iw] - 131;
                const int64_t wv = wt.data<uint8_t>()[((mi * cg + ci) * kh + a) * kw + bb] - 9;
                want += xv * wv;
              }
          ASSERT_EQ(y[((ni * m + mi) * oh + i) * ow + j], want) << ni << " " << mi << " " << i << " " << j;
        }
}

}  // namespace
}  // namespace kiln
