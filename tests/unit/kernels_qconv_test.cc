// The 8-bit conv (kernels/cpu/qconv) and QLinearConv against a plain loop, bit-exactly: int64
// sums of (x - zx) w over the window (padding reads zx, so contributes nothing), plus the bias,
// requantized as QLinearConv's kernels define it (float(sum) * (x_scale * w_scale / y_scale),
// clamped to the range less the zero point, rounded half to even). Shapes cover partial pixel
// tiles (across rows and images), partial filter blocks and block groups, channels not in whole
// quads (1, 2 and 3 of them), strides, dilations, uneven pads, 1x1 and 7x7 windows, 1-D convs;
// u8 and s8 inputs and outputs, per-tensor and per-filter scales, float outputs; NCHW and
// channels-last.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/float_convert.h"
#include "core/thread_pool.h"
#include "kernels/cpu/qconv/qconv.h"
#include "kiln/session.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

struct Case {
  int64_t n, c, h, w, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  bool depthwise = false;  // m == c, one filter a channel (W [c, 1, kh, kw])
};

struct Data {
  std::vector<uint8_t> x;  // NCHW, u8 (or s8 bytes)
  std::vector<int8_t> w;   // OIHW
  std::vector<int32_t> bias;
  std::vector<float> w_scale;
  int32_t zx, zy;
  float x_scale, y_scale;
};

int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  return (in + pb + pe - d * (k - 1) - 1) / s + 1;
}

// Weights over all of s8, or 7-bit ones (|w| <= 64, what the kAvx2Bytes tiles take).
Data make_data(const Case& k, bool x_signed, bool per_filter, uint32_t seed, bool seven_bit = false,
               float y_scale = 0.35f) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), weight(seven_bit ? -64 : -128, seven_bit ? 64 : 127),
      bias(-20000, 20000);
  Data d;
  d.x.resize(static_cast<size_t>(k.n * k.c * k.h * k.w));
  for (auto& v : d.x) v = static_cast<uint8_t>(byte(rng));
  d.w.resize(static_cast<size_t>(k.m * (k.depthwise ? 1 : k.c) * k.kh * k.kw));
  for (auto& v : d.w) v = static_cast<int8_t>(weight(rng));
  d.bias.resize(static_cast<size_t>(k.m));
  for (auto& v : d.bias) v = bias(rng);
  d.w_scale.resize(per_filter ? static_cast<size_t>(k.m) : 1);
  for (auto& v : d.w_scale) v = 0.001f + 0.0001f * static_cast<float>(byte(rng));
  d.zx = x_signed ? byte(rng) - 128 : byte(rng);
  d.zy = byte(rng) / 2;
  d.x_scale = 0.02f, d.y_scale = y_scale;
  return d;
}

// The plain loop: y as NCHW, float or the integer values.
std::vector<double> expected(const Case& k, const Data& d, bool x_signed, qconv::Output out) {
  const int64_t oh = out_dim(k.h, k.kh, k.sh, k.dh, k.pt, k.pb), ow = out_dim(k.w, k.kw, k.sw, k.dw, k.pl, k.pr);
  const float lo = out == qconv::Output::kS8 ? -128.0f : 0.0f, hi = out == qconv::Output::kS8 ? 127.0f : 255.0f;
  const int32_t zy = out == qconv::Output::kS8 ? d.zy - 128 : d.zy;
  std::vector<double> y;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t sum = d.bias[static_cast<size_t>(m)];
          const int64_t c0 = k.depthwise ? m : 0, c1 = k.depthwise ? m + 1 : k.c, cw = k.depthwise ? 1 : k.c;
          for (int64_t c = c0; c < c1; ++c)
            for (int64_t a = 0; a < k.kh; ++a)
              for (int64_t b = 0; b < k.kw; ++b) {
                const int64_t ih = i * k.sh - k.pt + a * k.dh, iw = j * k.sw - k.pl + b * k.dw;
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                const uint8_t raw = d.x[static_cast<size_t>(((n * k.c + c) * k.h + ih) * k.w + iw)];
                const int64_t xv = x_signed ? static_cast<int8_t>(raw) : raw;
                sum += (xv - d.zx) * d.w[static_cast<size_t>(((m * cw + c - c0) * k.kh + a) * k.kw + b)];
              }
          const float ws = d.w_scale[d.w_scale.size() == 1 ? 0 : static_cast<size_t>(m)];
          if (out == qconv::Output::kFloat) {
            y.push_back(static_cast<float>(static_cast<int32_t>(sum)) * (d.x_scale * ws));
            continue;
          }
          const float f = static_cast<float>(static_cast<int32_t>(sum)) * (d.x_scale * ws / d.y_scale);
          const float z = static_cast<float>(zy);
          y.push_back(std::nearbyint(std::min(hi - z, std::max(lo - z, f))) + z);
        }
  return y;
}

// QLinearAdd's c of codes a and b, the plain way: a float division (qlinear_binary.h).
double added(const QLinearBinaryParams& p, double a, double b) {
  const float fa = (static_cast<float>(a) - p.az) * p.as, fb = (static_cast<float>(b) - p.bz) * p.bs;
  return std::min(p.hi, std::max(p.lo, std::nearbyint((fa + fb) / p.cs) + p.cz));
}

// With `add` (8-bit Y, channels-last), the conv's codes go through a residual add (qconv.h,
// Requantize::add) of random codes R; with `table` (8-bit Y), through a table of 256 codes.
void check_direct(const Case& k, qconv::Tile tile, bool x_signed, bool per_filter, qconv::Output out, bool nhwc,
                  int threads, float y_scale = 0.35f, void (*edit)(Data&) = nullptr,
                  const qconv::Requantize::ResidualAdd* add = nullptr, const std::vector<int32_t>* table = nullptr) {
  SCOPED_TRACE(::testing::Message() << k.n << "x" << k.c << "x" << k.h << "x" << k.w << " m " << k.m << " k " << k.kh
                                    << "x" << k.kw << " s " << k.sh << "," << k.sw << " d " << k.dh << "," << k.dw
                                    << " pads " << k.pt << k.pl << k.pb << k.pr << (x_signed ? " s8" : " u8")
                                    << " out " << static_cast<int>(out) << (nhwc ? " nhwc" : " nchw")
                                    << " threads " << threads
                                    << " tile " << qconv::tile_name(tile) << " y_scale " << y_scale);
  Data d = make_data(k, x_signed, per_filter, static_cast<uint32_t>(k.c * 31 + k.m * 7 + k.h),
                           qconv::needs_seven_bit_weights(tile), y_scale);
  if (edit) edit(d);
  qconv::Geometry g;
  g.batch = k.n, g.channels = k.c, g.in_h = k.h, g.in_w = k.w, g.filters = k.m;
  g.out_h = out_dim(k.h, k.kh, k.sh, k.dh, k.pt, k.pb), g.out_w = out_dim(k.w, k.kw, k.sw, k.dw, k.pl, k.pr);
  g.kernel_h = k.kh, g.kernel_w = k.kw, g.stride_h = k.sh, g.stride_w = k.sw, g.dilation_h = k.dh;
  g.dilation_w = k.dw, g.pad_top = k.pt, g.pad_left = k.pl;
  if (!qconv::tile_fits(tile, g)) return;  // e.g. Winograd's 3x3 stride 1 on another window
  const qconv::PackedWeights packed = qconv::PackedWeights::pack(d.w.data(), g, tile);
  qconv::Requantize rq;
  rq.output = out;
  rq.zero_point = out == qconv::Output::kS8 ? d.zy - 128 : d.zy;
  rq.lo = out == qconv::Output::kS8 ? -128 : 0, rq.hi = out == qconv::Output::kS8 ? 127 : 255;
  const int32_t zx_u8 = d.zx + (x_signed ? 128 : 0);
  for (int64_t m = 0; m < k.m; ++m) {
    const float ws = d.w_scale[d.w_scale.size() == 1 ? 0 : static_cast<size_t>(m)];
    rq.bias.push_back(d.bias[static_cast<size_t>(m)] - zx_u8 * packed.filter_sums()[static_cast<size_t>(m)]);
    rq.scale.push_back(out == qconv::Output::kFloat ? d.x_scale * ws : d.x_scale * ws / d.y_scale);
  }
  // Channels-last copies of X in and of Y out when asked.
  std::vector<uint8_t> x = d.x;
  if (nhwc)
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t c = 0; c < k.c; ++c)
        for (int64_t p = 0; p < k.h * k.w; ++p)
          x[static_cast<size_t>((n * k.h * k.w + p) * k.c + c)] = d.x[static_cast<size_t>((n * k.c + c) * k.h * k.w + p)];
  const int64_t hw = g.out_h * g.out_w, count = k.n * k.m * hw;
  std::vector<float> yf(static_cast<size_t>(count), -1.0f);
  std::vector<uint8_t> yq(static_cast<size_t>(count), 0xAB);
  ThreadPool pool(threads);
  void* y = out == qconv::Output::kFloat ? static_cast<void*>(yf.data()) : static_cast<void*>(yq.data());
  std::vector<uint8_t> residual(static_cast<size_t>(count));
  std::mt19937 rng(static_cast<uint32_t>(count));
  for (auto& v : residual) v = static_cast<uint8_t>(rng() % 256);
  if (add) rq.add = *add;
  if (table) rq.table = *table;
  qconv::conv(g, x.data(), x_signed, nhwc, d.zx, packed, rq, y, nhwc, threads > 1 ? &pool : nullptr,
              add ? residual.data() : nullptr);
  const std::vector<double> want = expected(k, d, x_signed, out);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t p = 0; p < hw; ++p) {
        const size_t nchw = static_cast<size_t>((n * k.m + m) * hw + p);
        const size_t at = nhwc ? static_cast<size_t>((n * hw + p) * k.m + m) : nchw;
        const double got = out == qconv::Output::kFloat ? yf[at]
                           : out == qconv::Output::kS8  ? static_cast<int8_t>(yq[at])
                                                        : yq[at];
        if (out == qconv::Output::kFloat)
          ASSERT_EQ(static_cast<float>(got), static_cast<float>(want[nchw])) << "n " << n << " m " << m << " p " << p;
        else if (table)
          ASSERT_EQ(got, (*table)[static_cast<size_t>(want[nchw] - rq.lo)]) << "n " << n << " m " << m << " p " << p;
        else if (add)
          ASSERT_EQ(got, added(add->p, want[nchw],
                               out == qconv::Output::kS8 ? static_cast<int8_t>(residual[at]) : residual[at]))
              << "n " << n << " m " << m << " p " << p << " conv's code " << want[nchw];
        else
          ASSERT_EQ(got, want[nchw]) << "n " << n << " m " << m << " p " << p;
      }
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // n  c   h   w   m   kh kw sh sw dh dw pt pl pb pr
      {1, 64, 14, 14, 64, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},  // pointwise, one block group
      {2, 32, 7, 7, 80, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    // 3x3, 5 blocks (a group of 4 and one), tiles cross images
      {1, 3, 23, 21, 21, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3},   // stem-like: 3 channels (one part quad), 21 filters
      {1, 13, 9, 11, 40, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1},   // uneven pads, stride (2, 1)
      {1, 16, 12, 12, 48, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},  // dilation 2
      {1, 24, 8, 8, 17, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0},    // pointwise stride 2
      {3, 8, 1, 29, 36, 1, 5, 1, 2, 1, 1, 0, 2, 0, 1},    // one row (a 1-D conv)
      {1, 1, 6, 23, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     // one channel (grayscale), staged 4 pixels a step
      {2, 2, 5, 19, 12, 3, 3, 2, 1, 1, 1, 1, 1, 0, 1},    // two channels
  };
  return all;
}

// Depthwise convs on their tiles (the AVX2 ones always, the VNNI ones where the CPU has them):
// channels in one part block and several, 3x3, 5x5 and 1x7 (odd tap counts: the last pair half
// empty; kernel rows in part quads), stride 2, dilation, uneven pads, a window wider than X.
TEST(QConv, DepthwiseMatchesAPlainLoop) {
  const std::vector<Case> depthwise = {
      // n  c   h   w   m   kh kw sh sw dh dw pt pl pb pr
      {1, 32, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},
      {2, 21, 9, 11, 21, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, true},
      {1, 40, 10, 10, 40, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, true},
      {1, 72, 11, 9, 72, 5, 5, 2, 2, 1, 1, 2, 2, 1, 2, true},  // efficientnet's 5x5 stride 2, a block and a part
      {1, 16, 13, 8, 16, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, true},
      {1, 8, 1, 20, 8, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1, true},
      {1, 136, 6, 7, 136, 1, 7, 1, 1, 1, 1, 0, 3, 0, 3, true},
      {1, 70, 3, 4, 70, 3, 5, 1, 2, 1, 1, 1, 3, 1, 3, true},
  };
  for (const qconv::Tile tile : qconv::available_tiles(true))
    for (const Case& k : depthwise)
      for (const bool x_signed : {false, true})
        for (const auto out : {qconv::Output::kU8, qconv::Output::kS8, qconv::Output::kFloat})
          for (const bool nhwc : {false, true})
            check_direct(k, tile, x_signed, x_signed == nhwc, out, nhwc, nhwc ? 2 : 1);
}

// Scales of 0.5 and more (a tiny y_scale): most sums land far past the 8-bit range, some past
// int32 once scaled, and every tile's store must clamp them to the top code, not wrap.
TEST(QConv, LargeScalesClampToTheRange) {
  std::vector<qconv::Tile> tiles = qconv::available_tiles(false), depthwise = qconv::available_tiles(true);
  tiles.insert(tiles.end(), depthwise.begin(), depthwise.end());
  for (const qconv::Tile tile : tiles) {
    const bool dw = std::find(depthwise.begin(), depthwise.end(), tile) != depthwise.end();
    const Case k = dw ? Case{1, 24, 6, 6, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true}
                      : Case{1, 64, 5, 5, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    for (const auto out : {qconv::Output::kU8, qconv::Output::kS8})
      for (const float y_scale : {1e-4f, 1e-12f})
        check_direct(k, tile, false, true, out, true, 1, y_scale);
  }
}

// Every tile this CPU (and KILN_ISA) has: the AVX2 ones always (kAvx2Bytes on 7-bit weights),
// the VNNI ones where the CPU has them.
TEST(QConv, MatchesAPlainLoop) {
  for (const qconv::Tile tile : qconv::available_tiles(false))
    for (const Case& k : cases())
      for (const bool x_signed : {false, true})
        for (const auto out : {qconv::Output::kU8, qconv::Output::kS8, qconv::Output::kFloat})
          for (const bool nhwc : {false, true})
            check_direct(k, tile, x_signed, x_signed == nhwc, out, nhwc, nhwc ? 2 : 1);
}

// Winograd's 3x3 stride-1 tile (CPUs without VNNI) on more shapes than cases() has: odd outputs
// (part 2x2 tiles), several chunks of tiles and one, channels not in 16s, batches, threads that
// split the filters of a chunk; and at its
// channel bound with every product at its largest (X 255, W -128, zero point 0), where the sum
// times 4 nears int32's limit, and with signs mixed, where the point sums wrap.
TEST(QConv, WinogradMatchesAPlainLoop) {
  const qconv::Tile tile = qconv::Tile::kWinogradAvx2;
  const std::vector<Case> shapes = {
      // n  c   h   w   m   kh kw sh sw dh dw pt pl pb pr
      {2, 20, 9, 11, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 16, 30, 30, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // 225 tiles: several chunks
      {1, 17, 8, 7, 33, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},    // no padding, 17 channels
      {1, 40, 4, 4, 24, 3, 3, 1, 1, 1, 1, 2, 1, 0, 2},    // uneven pads
  };
  for (const Case& k : shapes)
    for (const bool x_signed : {false, true})
      for (const auto out : {qconv::Output::kU8, qconv::Output::kS8, qconv::Output::kFloat})
        check_direct(k, tile, x_signed, true, out, true, 2);
  const Case wide{1, qconv::kWinogradMaxChannels, 3, 3, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  check_direct(wide, tile, false, true, qconv::Output::kFloat, true, 1, 0.35f, [](Data& d) {
    std::fill(d.x.begin(), d.x.end(), 255);
    std::fill(d.w.begin(), d.w.end(), -128);
    d.zx = 0;
  });
  check_direct(wide, tile, false, true, qconv::Output::kFloat, true, 1, 0.35f, [](Data& d) {
    for (size_t i = 0; i < d.x.size(); ++i) d.x[i] = i % 3 == 0 ? 0 : 255;
    for (size_t i = 0; i < d.w.size(); ++i) d.w[i] = i % 2 ? 127 : -128;
    d.zx = 0;
  });
}

// A residual add in the store (Requantize::add), on every group-1 tile, u8 and s8, the two
// operands' scales far apart and close (the add's sums past C's range either way), zero points
// off the middle, C scales whose reciprocal gives the division's codes and one whose does not
// (0.3: the store divides the lanes near a half); tiles of pixels, blocks and groups of blocks
// in part.
TEST(QConv, ResidualAddInTheStoreMatchesConvThenQLinearAdd) {
  std::vector<qconv::Tile> tiles = qconv::available_tiles(false);
  if (std::find(tiles.begin(), tiles.end(), qconv::Tile::kWinogradAvx2) == tiles.end())
    tiles.push_back(qconv::Tile::kWinogradAvx2);  // AVX2 alone: every x86-64 CPU kiln runs on
  const std::vector<QLinearBinaryParams> adds = {
      {0.35f, 0.02f, 0.3f, 100, 7, 90, 0, 0, false},
      {0.35f, 0.6f, 0.5f, 3, 200, 0, 0, 0, false},
      {0.35f, 0.35f, 0.125f, 128, 128, 128, 0, 0, false},
  };
  for (const qconv::Tile tile : tiles)
    for (const Case& k : {cases()[1], cases()[2], Case{1, 32, 9, 7, 100, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}})
      for (const QLinearBinaryParams& add : adds)
        for (const auto out : {qconv::Output::kU8, qconv::Output::kS8}) {
          const bool s8 = out == qconv::Output::kS8;
          QLinearBinaryParams p = add;
          p.lo = s8 ? -128.0f : 0.0f, p.hi = s8 ? 127.0f : 255.0f;
          if (s8) p.az -= 128, p.bz -= 128, p.cz -= 128;
          const qconv::Requantize::ResidualAdd residual{p, qlinear_binary_reciprocal_is_exact(p, s8)};
          EXPECT_EQ(residual.reciprocal_exact, p.cs != 0.3f);
          check_direct(k, tile, false, true, out, true, 2, 0.35f, nullptr, &residual);
        }
}

// Where Winograd's U outgrows the caches (256 channels and filters: 2 MiB), a run of few 2x2
// tiles takes the direct tile and one of many Winograd (qconv.h, winograd_pays); one node, one
// session, both runs bit for bit the plain loop. (On VNNI CPUs both runs take the VNNI tile; the
// KILN_ISA=avx2 stage of scripts/run_tests.sh runs both routes.)
TEST(QConv, QLinearConvNodeRunsWinogradWhereItPays) {
  qconv::Geometry few, many;
  few.channels = many.channels = few.filters = many.filters = 256, few.batch = many.batch = 1;
  few.out_h = few.out_w = 5, many.out_h = many.out_w = 16;
  EXPECT_GT(qconv::winograd_u_bytes(few), qconv::kWinogradCachedBytes);
  EXPECT_FALSE(qconv::winograd_pays(few));
  EXPECT_TRUE(qconv::winograd_pays(many));
  test::Builder b(13);
  b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kUInt8), ""});
  const Case shape{1, 256, 0, 0, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  Data d = make_data(Case{1, 256, 1, 1, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, false, true, 17);
  Tensor w = Tensor::make(DType::kInt8, {256, 256, 3, 3}).value(), ws = Tensor::make(DType::kFloat32, {256}).value();
  Tensor bias = Tensor::make(DType::kInt32, {256}).value();
  std::copy(d.w.begin(), d.w.end(), w.data<int8_t>());
  std::copy(d.w_scale.begin(), d.w_scale.end(), ws.data<float>());
  std::copy(d.bias.begin(), d.bias.end(), bias.data<int32_t>());
  auto& init = b.m.graph.initializers;
  init["xs"] = test::scalar_of(DType::kFloat32, d.x_scale), init["xz"] = test::scalar_of(DType::kUInt8, d.zx);
  init["w"] = w, init["ws"] = ws, init["ys"] = test::scalar_of(DType::kFloat32, d.y_scale);
  init["yz"] = test::scalar_of(DType::kUInt8, d.zy), init["b"] = bias;
  b.add("QLinearConv", {"x", "xs", "xz", "w", "ws", "", "ys", "yz", "b"}, {"y"}, {test::attr_ints("pads", {1, 1, 1, 1})});
  b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
  auto session = Session::create(std::make_shared<const ir::Model>(b.m), SessionOptions{});
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  for (const int64_t side : {5, 16}) {
    Case k = shape;
    k.h = k.w = side;
    std::mt19937 rng(static_cast<uint32_t>(side));
    d.x.resize(static_cast<size_t>(256 * side * side));
    for (auto& v : d.x) v = static_cast<uint8_t>(rng() % 256);
    Tensor x = Tensor::make(DType::kUInt8, {1, 256, side, side}).value();
    std::copy(d.x.begin(), d.x.end(), x.data<uint8_t>());
    auto out = (*session)->run({Value::of(x)});
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    const Tensor& y = (*out)[0].tensor;
    const std::vector<double> want = expected(k, d, false, qconv::Output::kU8);
    ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<uint8_t>()[i], want[static_cast<size_t>(i)]) << side << ": " << i;
  }
}

// A table in the store (Requantize::table, where the CPU lacks VBMI's byte lookup), on every
// tile, depthwise ones too, u8 and s8, codes across the whole range (large scales too).
TEST(QConv, TableInTheStoreMatchesConvThenTable) {
  std::vector<qconv::Tile> tiles = qconv::available_tiles(false), depthwise = qconv::available_tiles(true);
  if (std::find(tiles.begin(), tiles.end(), qconv::Tile::kWinogradAvx2) == tiles.end())
    tiles.push_back(qconv::Tile::kWinogradAvx2);
  tiles.insert(tiles.end(), depthwise.begin(), depthwise.end());
  std::mt19937 rng(5);
  for (const qconv::Tile tile : tiles) {
    const bool dw = std::find(depthwise.begin(), depthwise.end(), tile) != depthwise.end();
    const std::vector<Case> shapes =
        dw ? std::vector<Case>{{1, 40, 10, 10, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},
                               {1, 72, 11, 9, 72, 5, 5, 2, 2, 1, 1, 2, 2, 1, 2, true}}
           : std::vector<Case>{cases()[1], cases()[2], Case{1, 32, 9, 7, 100, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}};
    for (const auto out : {qconv::Output::kU8, qconv::Output::kS8}) {
      std::vector<int32_t> table(256);
      for (auto& v : table) v = static_cast<int32_t>(rng() % 256) - (out == qconv::Output::kS8 ? 128 : 0);
      for (const Case& k : shapes)
        for (const float y_scale : {0.35f, 1e-3f})
          check_direct(k, tile, false, true, out, true, 2, y_scale, nullptr, nullptr, &table);
    }
  }
}

// The QLinearConv node reaches the same values (the tile where it applies, the reference where
// it does not: group 2 here), u8 and s8 X, with its optional inputs given or omitted.
TEST(QConv, QLinearConvNodeMatchesAPlainLoop) {
  for (const bool x_signed : {false, true})
    for (const int64_t group : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << (x_signed ? "s8" : "u8") << " group " << group);
      const Case k{2, 12, 10, 9, 34, 3, 3, 2, 1, 1, 1, 1, 1, 0, 1};
      Data d = make_data(k, x_signed, true, 5);
      const DType xt = x_signed ? DType::kInt8 : DType::kUInt8;
      test::Builder b(13);
      Tensor x = Tensor::make(xt, {k.n, k.c, k.h, k.w}).value();
      std::copy(d.x.begin(), d.x.end(), x.data<uint8_t>());
      const int64_t cg = k.c / group;
      Tensor w = Tensor::make(DType::kInt8, {k.m, cg, k.kh, k.kw}).value();
      std::copy(d.w.begin(), d.w.begin() + w.numel(), w.data<int8_t>());
      auto scalar = [](DType t, double v) {
        Tensor s = Tensor::make(t, {}).value();
        store_from_double(t, s.raw_data(), 0, v);
        return s;
      };
      Tensor ws = Tensor::make(DType::kFloat32, {k.m}).value();
      std::copy(d.w_scale.begin(), d.w_scale.end(), ws.data<float>());
      Tensor bias = Tensor::make(DType::kInt32, {k.m}).value();
      std::copy(d.bias.begin(), d.bias.end(), bias.data<int32_t>());
      b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(xt, x.shape()), ""});
      auto& init = b.m.graph.initializers;
      init["xs"] = scalar(DType::kFloat32, d.x_scale), init["xz"] = scalar(xt, d.zx);
      init["w"] = w, init["ws"] = ws, init["ys"] = scalar(DType::kFloat32, d.y_scale);
      init["yz"] = scalar(DType::kUInt8, d.zy), init["b"] = bias;
      b.add("QLinearConv", {"x", "xs", "xz", "w", "ws", "", "ys", "yz", "b"}, {"y"},
            {test::attr_i("group", group), test::attr_ints("strides", {k.sh, k.sw}),
             test::attr_ints("pads", {k.pt, k.pl, k.pb, k.pr})});
      b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
      const std::vector<Value> out = test::run_model(b.m, {x});
      ASSERT_EQ(out.size(), 1u);
      // The plain loop per group: each group's filters read its channels.
      const int64_t mg = k.m / group, oh = out_dim(k.h, k.kh, k.sh, 1, k.pt, k.pb), ow = out_dim(k.w, k.kw, k.sw, 1, k.pl, k.pr);
      std::vector<std::vector<double>> parts;
      for (int64_t gi = 0; gi < group; ++gi) {
        Case kg = k;
        kg.c = cg, kg.m = mg;
        Data dg = d;
        dg.x.clear();
        for (int64_t n = 0; n < k.n; ++n)
          for (int64_t c = gi * cg; c < (gi + 1) * cg; ++c)
            for (int64_t p = 0; p < k.h * k.w; ++p) dg.x.push_back(d.x[static_cast<size_t>((n * k.c + c) * k.h * k.w + p)]);
        dg.w.assign(d.w.begin() + gi * mg * cg * k.kh * k.kw, d.w.begin() + (gi + 1) * mg * cg * k.kh * k.kw);
        dg.bias.assign(d.bias.begin() + gi * mg, d.bias.begin() + (gi + 1) * mg);
        dg.w_scale.assign(d.w_scale.begin() + gi * mg, d.w_scale.begin() + (gi + 1) * mg);
        parts.push_back(expected(kg, dg, x_signed, qconv::Output::kU8));
      }
      const Tensor& y = out[0].tensor;
      ASSERT_EQ(y.shape(), (Shape{k.n, k.m, oh, ow}));
      for (int64_t n = 0; n < k.n; ++n)
        for (int64_t m = 0; m < k.m; ++m)
          for (int64_t p = 0; p < oh * ow; ++p) {
            const auto& part = parts[static_cast<size_t>(m / mg)];
            const double v = part[static_cast<size_t>((n * mg + m % mg) * oh * ow + p)];
            ASSERT_EQ(y.data<uint8_t>()[(n * k.m + m) * oh * ow + p], v) << n << " " << m << " " << p;
          }
    }
}

// ai.kiln.QLinearConv with QLinearAdd's inputs (qlinear-conv-residual) gives the codes of the
// conv and the add apart, u8 and s8: with the add in the tile's store (a channels-last conv of
// group 1, a C scale whose reciprocal gives the division's codes), and with the add's rows after
// the conv (a C scale whose reciprocal does not, an NCHW conv, a depthwise one). The conv's
// output is the add's A or its B.
TEST(QConv, ConvWithResidualNodeMatchesConvThenQLinearAdd) {
  float inexact = 0;  // a C scale whose reciprocal misses the division's code for some pair
  for (int i = 0; i < 1000 && inexact == 0; ++i) {
    const QLinearBinaryParams p{0.35f, 0.2f, 0.3f + 0.00123f * static_cast<float>(i), 100, 7, 90, 0, 255, false};
    if (!qlinear_binary_reciprocal_is_exact(p, false)) inexact = p.cs;
  }
  ASSERT_NE(inexact, 0.0f);
  for (const bool x_signed : {false, true})
    for (const float cs : {0.25f, inexact})
      for (const bool last : {true, false})
        for (const int64_t group : {1, 24})
          for (const bool conv_is_a : {true, false}) {
            SCOPED_TRACE(::testing::Message() << (x_signed ? "s8" : "u8") << " cs " << cs << (last ? " nhwc" : " nchw")
                                              << " group " << group << (conv_is_a ? " conv A" : " conv B"));
            const Case k{2, 24, 7, 9, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
            const DType t = x_signed ? DType::kInt8 : DType::kUInt8;
            const double shift = x_signed ? -128 : 0;
            test::Builder b(13);
            const Shape xs = last ? Shape{k.n, k.h, k.w, k.c} : Shape{k.n, k.c, k.h, k.w};
            const Shape ys = last ? Shape{k.n, k.h, k.w, k.m} : Shape{k.n, k.m, k.h, k.w};
            b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(t, xs), ""});
            b.m.graph.inputs.push_back(ir::ValueInfo{"r", ir::TypeInfo::tensor(t, ys), ""});
            Tensor w = Tensor::make(DType::kInt8, {k.m, k.c / group, k.kh, k.kw}).value();
            std::mt19937 rng(11);
            for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(rng() % 256);
            auto& init = b.m.graph.initializers;
            init["w"] = w, init["ws"] = test::scalar_of(DType::kFloat32, 0.004);
            init["xs"] = test::scalar_of(DType::kFloat32, 0.02), init["xz"] = test::scalar_of(t, 120 + shift);
            init["ys"] = test::scalar_of(DType::kFloat32, 0.35), init["yz"] = test::scalar_of(t, 100 + shift);
            init["rs"] = test::scalar_of(DType::kFloat32, 0.2), init["rz"] = test::scalar_of(t, 7 + shift);
            init["cs"] = test::scalar_of(DType::kFloat32, cs), init["cz"] = test::scalar_of(t, 90 + shift);
            const std::vector<ir::Attribute> attrs = {test::attr_i("group", group), test::attr_i("channels_last", last),
                                                      test::attr_ints("pads", {1, 1, 1, 1})};
            const std::vector<std::string> conv_in = {"x", "xs", "xz", "w", "ws", "", "ys", "yz", ""};
            test::Builder apart = b, fused = b;
            apart.add("QLinearConv", conv_in, {"y"}, attrs).domain = "com.microsoft";
            std::vector<std::string> add_in = {"y", "ys", "yz", "r", "rs", "rz", "cs", "cz"};
            if (!conv_is_a) std::rotate(add_in.begin(), add_in.begin() + 3, add_in.begin() + 6);  // r, y
            apart.add("QLinearAdd", add_in, {"c"}).domain = "com.microsoft";
            std::vector<std::string> fused_in = conv_in;
            for (const char* v : {"", "ys", "yz", "r", "rs", "rz", "cs", "cz"}) fused_in.push_back(v);
            fused.add("QLinearConv", fused_in, {"c"}, attrs).domain = "ai.kiln";
            for (ir::Model* m : {&apart.m, &fused.m}) {
              m->opsets["com.microsoft"] = 1, m->opsets["ai.kiln"] = 1;
              m->graph.outputs.push_back(ir::ValueInfo{"c", ir::TypeInfo::tensor(t), ""});
            }
            Tensor x = Tensor::make(t, xs).value(), r = Tensor::make(t, ys).value();
            for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
            for (int64_t i = 0; i < r.numel(); ++i) r.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
            SessionOptions plain;
            plain.optimize_level = 0;
            const std::vector<Value> want = test::run_model(apart.m, {x, r}, plain);
            const std::vector<Value> got = test::run_model(fused.m, {x, r}, plain);
            ASSERT_EQ(want.size(), 1u);
            ASSERT_EQ(got.size(), 1u);
            ASSERT_EQ(got[0].tensor.shape(), want[0].tensor.shape());
            for (int64_t i = 0; i < want[0].tensor.numel(); ++i)
              ASSERT_EQ(got[0].tensor.data<uint8_t>()[i], want[0].tensor.data<uint8_t>()[i]) << "at " << i;
          }
}

// The 8-bit ops name what is wrong with bad inputs instead of crashing: types, shapes, per-axis
// parameters where one value is required, a channels-last conv given the wrong channel count.
std::string run_error(test::Builder& b, const std::vector<Tensor>& feeds) {
  SessionOptions plain;
  plain.optimize_level = 0;
  auto s = Session::create(std::make_shared<const ir::Model>(b.m), plain);
  if (!s.is_ok()) return s.status().message();
  std::vector<Value> in;
  for (const Tensor& t : feeds) in.push_back(Value::of(t));
  auto out = (*s)->run(in);
  return out.is_ok() ? "" : out.status().message();
}

Tensor bytes_of(DType t, const Shape& shape) { return Tensor::make(t, shape).value(); }

TEST(QConv, EightBitOpsRejectBadInputs) {
  auto scalar = [](DType t, double v) {
    Tensor s = Tensor::make(t, {}).value();
    store_from_double(t, s.raw_data(), 0, v);
    return s;
  };
  auto ms = [](ir::Node& n) -> ir::Node& {
    n.domain = "com.microsoft";
    return n;
  };
  {  // QLinearAdd: u8 and s8, shapes that do not broadcast, a per-axis scale
    for (int c = 0; c < 3; ++c) {
      test::Builder b(13);
      b.m.opsets["com.microsoft"] = 1;
      const DType bt = c == 0 ? DType::kInt8 : DType::kUInt8;
      const Shape bs = c == 1 ? Shape{1, 5} : Shape{1, 4};
      b.m.graph.inputs.push_back(ir::ValueInfo{"a", ir::TypeInfo::tensor(DType::kUInt8, {1, 4}), ""});
      b.m.graph.inputs.push_back(ir::ValueInfo{"b", ir::TypeInfo::tensor(bt, bs), ""});
      auto& init = b.m.graph.initializers;
      init["s"] = scalar(DType::kFloat32, 0.1);
      init["s2"] = Tensor::make(DType::kFloat32, {2}).value();
      init["z"] = scalar(DType::kUInt8, 1);
      init["zb"] = scalar(bt, 1);
      ms(b.add("QLinearAdd", {"a", c == 2 ? "s2" : "s", "z", "b", "s", "zb", "s", "z"}, {"y"}));
      b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
      const std::string e = run_error(b, {bytes_of(DType::kUInt8, {1, 4}), bytes_of(bt, bs)});
      const char* want[] = {"must both be uint8 or both int8", "[1,5]", "one value"};
      EXPECT_NE(e.find(want[c]), std::string::npos) << c << ": " << e;
    }
  }
  {  // NhwcMaxPool on a rank-3 X
    test::Builder b(13);
    b.m.opsets["com.microsoft"] = 1;
    b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kUInt8, {1, 4, 4}), ""});
    ms(b.add("NhwcMaxPool", {"x"}, {"y"}, {test::attr_ints("kernel_shape", {2, 2})}));
    b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
    const std::string e = run_error(b, {bytes_of(DType::kUInt8, {1, 4, 4})});
    EXPECT_NE(e.find("[N, H, W, C]"), std::string::npos) << e;
  }
  {  // a float X for QLinearConv: the kernel's declared types (KernelDef::dtypes) refuse it when the
     // session is made, naming the input and what the kernel takes
    test::Builder b(13);
    b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kFloat32, {1, 4, 6, 6}), ""});
    auto& init = b.m.graph.initializers;
    init["xs"] = scalar(DType::kFloat32, 0.1), init["xz"] = scalar(DType::kUInt8, 3);
    init["w"] = Tensor::make(DType::kInt8, {8, 4, 3, 3}).value(), init["ws"] = scalar(DType::kFloat32, 0.01);
    init["ys"] = scalar(DType::kFloat32, 0.2), init["yz"] = scalar(DType::kUInt8, 0);
    b.add("QLinearConv", {"x", "xs", "xz", "w", "ws", "", "ys", "yz"}, {"y"});
    b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
    SessionOptions plain;
    plain.optimize_level = 0;
    auto session = Session::create(std::make_shared<const ir::Model>(b.m), plain);
    ASSERT_FALSE(session.is_ok());
    EXPECT_NE(session.status().message().find("input 0 ('x') is float32; the kernel takes uint8 or int8"), std::string::npos)
        << session.status().message();
  }
  {  // channels-last QLinearConv fed 5 channels for weights of 4
    test::Builder b(13);
    b.m.opsets["com.microsoft"] = 1;
    b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kUInt8), ""});
    auto& init = b.m.graph.initializers;
    init["xs"] = scalar(DType::kFloat32, 0.1), init["xz"] = scalar(DType::kUInt8, 3);
    init["w"] = Tensor::make(DType::kInt8, {8, 4, 3, 3}).value(), init["ws"] = scalar(DType::kFloat32, 0.01);
    init["ys"] = scalar(DType::kFloat32, 0.2), init["yz"] = scalar(DType::kUInt8, 0);
    ms(b.add("QLinearConv", {"x", "xs", "xz", "w", "ws", "", "ys", "yz"}, {"y"},
             {test::attr_i("channels_last", 1), test::attr_ints("pads", {1, 1, 1, 1})}));
    b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
    const std::string e = run_error(b, {bytes_of(DType::kUInt8, {1, 6, 6, 5})});
    EXPECT_NE(e.find("channels-last QLinearConv"), std::string::npos) << e;
  }
  {  // ai.kiln.QLinearConv with a residual of another shape, and of another type
    test::Builder b(13);
    b.m.opsets["ai.kiln"] = 1;
    b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kUInt8), ""});
    b.m.graph.inputs.push_back(ir::ValueInfo{"r", ir::TypeInfo::tensor(DType::kUInt8), ""});
    auto& init = b.m.graph.initializers;
    init["xs"] = scalar(DType::kFloat32, 0.1), init["xz"] = scalar(DType::kUInt8, 3);
    init["w"] = Tensor::make(DType::kInt8, {8, 4, 3, 3}).value(), init["ws"] = scalar(DType::kFloat32, 0.01);
    init["ys"] = scalar(DType::kFloat32, 0.2), init["yz"] = scalar(DType::kUInt8, 0);
    b.add("QLinearConv", {"x", "xs", "xz", "w", "ws", "", "ys", "yz", "", "", "ys", "yz", "r", "ys", "yz", "ys", "yz"},
          {"y"}, {test::attr_i("channels_last", 1), test::attr_ints("pads", {1, 1, 1, 1})})
        .domain = "ai.kiln";
    b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
    std::string e = run_error(b, {bytes_of(DType::kUInt8, {1, 6, 6, 4}), bytes_of(DType::kUInt8, {1, 6, 6, 4})});
    EXPECT_NE(e.find("the residual B (input 12) must be uint8 [1,6,6,8]"), std::string::npos) << e;
    b.m.graph.inputs[1].type = ir::TypeInfo::tensor(DType::kInt8);
    e = run_error(b, {bytes_of(DType::kUInt8, {1, 6, 6, 4}), bytes_of(DType::kInt8, {1, 6, 6, 8})});
    EXPECT_NE(e.find("input 12"), std::string::npos) << e;
  }
  {  // MatMulIntegerToFloat with a b_scale of the wrong length
    test::Builder b(13);
    b.m.opsets["com.microsoft"] = 1;
    b.m.graph.inputs.push_back(ir::ValueInfo{"a", ir::TypeInfo::tensor(DType::kUInt8, {2, 4}), ""});
    auto& init = b.m.graph.initializers;
    init["b"] = Tensor::make(DType::kInt8, {4, 3}).value(), init["as"] = scalar(DType::kFloat32, 0.1);
    init["bs"] = Tensor::make(DType::kFloat32, {5}).value(), init["az"] = scalar(DType::kUInt8, 0);
    ms(b.add("MatMulIntegerToFloat", {"a", "b", "as", "bs", "az"}, {"y"}));
    b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kFloat32), ""});
    const std::string e = run_error(b, {bytes_of(DType::kUInt8, {2, 4})});
    EXPECT_NE(e.find("b_scale"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace kiln
