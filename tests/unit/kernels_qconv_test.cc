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
#include "qconv_test_util.h"

namespace kiln {
namespace {

using namespace qconv_test;

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
      {1, 96, 9, 9, 96, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true},  // mobilenet's: a block and a half on zmm
      // kDepthwiseVnniPixels' (16 or 32 channels, stride 1 across): 4 pixels a zmm, a row's last
      // vector of 3; stride 2 down alone, 5x5, uneven pads; a window wider than X, fewer pixels
      // than a vector
      {2, 16, 7, 11, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, true},
      {1, 32, 9, 13, 32, 5, 5, 2, 1, 1, 1, 2, 2, 1, 2, true},
      {1, 16, 5, 3, 16, 3, 5, 1, 1, 1, 1, 1, 2, 1, 2, true},
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

// kAvx2Bytes' paired steps (qconv_step_pairs.cc) on weights whose quads pair: wholly (small
// ones), in part (in the first block's filters every fifth quad of channels all +64, a lane's
// whole bound, so that it pairs with none and takes a step with a zero quad: that block runs more
// steps than the others, which skip the zero steps its taps' layout pads them with), and at the
// pairs' bound (every lane's four weights summing to +-128 against inputs of 255: 32640 in 16 bits).
// Each case first checks that the packing paired it as meant, then runs it bit for bit against
// the plain loop: u8 and s8 in and out, float out, threads, the residual add and an activation in
// the store.
int64_t paired_channels = 0;  // the case's channels, for the edits below (function pointers)

void small_weights(Data& d) {
  for (size_t i = 0; i < d.w.size(); ++i) d.w[i] = static_cast<int8_t>(static_cast<int>(i * 37 % 41) - 20);
}
void every_fifth_quad_large(Data& d) {
  small_weights(d);
  const size_t per_filter = d.w.size() / d.bias.size(), taps = per_filter / static_cast<size_t>(paired_channels);
  for (size_t i = 0; i < 16 * per_filter; ++i)  // the first block's filters
    if ((i / taps % static_cast<size_t>(paired_channels)) / 4 % 5 == 0) d.w[i] = 64;
}
void at_the_bound(Data& d) {
  std::fill(d.x.begin(), d.x.end(), 255);
  d.zx = 0;
  const size_t per_filter = d.w.size() / d.bias.size();
  for (size_t i = 0; i < d.w.size(); ++i) d.w[i] = static_cast<int8_t>(i / per_filter % 2 ? 32 : -32);
}

TEST(QConv, PairedStepsMatchAPlainLoop) {
  const qconv::Tile tile = qconv::Tile::kAvx2Bytes;
  const std::vector<qconv::Tile> tiles = qconv::available_tiles(false);
  if (std::find(tiles.begin(), tiles.end(), tile) == tiles.end()) GTEST_SKIP() << "no AVX2";
  const std::vector<Case> shapes = {
      // n  c   h   w   m   kh kw sh sw dh dw pt pl pb pr
      {1, 64, 6, 7, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},   // 16 quads a tap, 3 blocks (one in part)
      {1, 44, 7, 7, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},   // 11 quads a tap (one alone), 9 taps, stride 2
      {2, 128, 5, 3, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},  // batches
  };
  QLinearBinaryParams p{0.0371f, 0.0213f, 0.0497f, 121, 117, 119, 0, 255, false};
  const qconv::Requantize::ResidualAdd add{p, qlinear_binary_method(p, false)};
  kiln_ops::Activation silu;
  silu.kind = kiln_ops::Activation::Kind::kSilu;
  for (const Case& k : shapes)
    for (const auto edit : {small_weights, every_fifth_quad_large, at_the_bound}) {
      paired_channels = k.c;
      Data d = make_data(k, false, true, 1, true);
      edit(d);
      qconv::Geometry g;
      g.batch = k.n, g.channels = k.c, g.filters = k.m, g.kernel_h = k.kh, g.kernel_w = k.kw;
      const qconv::PackedWeights packed = qconv::PackedWeights::pack(d.w.data(), g, tile);
      const int64_t quads = (k.c + 3) / 4, whole = (quads + 1) / 2, last = packed.blocks() - 1;
      ASSERT_GT(packed.paired_steps(), 0);
      EXPECT_EQ(packed.block_paired_steps(last), whole);
      if (edit == every_fifth_quad_large) {
        EXPECT_GT(packed.block_paired_steps(0), whole);
        EXPECT_EQ(packed.paired_steps(), packed.block_paired_steps(0));
      } else {
        EXPECT_EQ(packed.paired_steps(), whole);
      }
      for (const bool x_signed : {false, true})
        for (const auto out : {qconv::Output::kU8, qconv::Output::kS8, qconv::Output::kFloat})
          check_direct(k, tile, x_signed && edit != at_the_bound, true, out, true, x_signed ? 2 : 1, 0.35f, edit);
      check_direct(k, tile, false, true, qconv::Output::kU8, true, 2, 0.35f, edit, &add);
      check_direct(k, tile, false, true, qconv::Output::kU8, true, 2, 0.35f, edit, nullptr, &silu);
    }
}

// |w| Laplace-like (exponential, mean 16, clamped to 64), either sign: heavier-tailed than a normal
// law, as trained layers' weights are; drawn from mt19937's specified output alone.
void laplace_weights(Data& d) {
  std::mt19937 rng(11);
  for (auto& v : d.w) {
    const double u = (static_cast<double>(rng()) + 0.5) / 4294967296.0;
    const int m = std::min(64, static_cast<int>(std::lround(-16.0 * std::log(u))));
    v = static_cast<int8_t>(rng() % 2 ? -m : m);
  }
}

// The matching on weights as trained layers' quantize to: where its greedy pass leaves quads
// alone, two of them take the places of a pair whose quads each fit one, so that nearly every
// block runs half its quads' steps (as a maximum matching does on kiln's resnet50 and
// mobilenet_v2); then bit for bit against the plain loop.
TEST(QConv, PairedStepsMatchNearlyAllQuads) {
  const qconv::Tile tile = qconv::Tile::kAvx2Bytes;
  const std::vector<qconv::Tile> tiles = qconv::available_tiles(false);
  if (std::find(tiles.begin(), tiles.end(), tile) == tiles.end()) GTEST_SKIP() << "no AVX2";
  // n  c   h   w   m    kh kw sh sw dh dw pt pl pb pr
  const Case k{1, 64, 6, 5, 256, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  Data d = make_data(k, false, true, 7, true);
  laplace_weights(d);
  qconv::Geometry g;
  g.batch = k.n, g.channels = k.c, g.filters = k.m, g.kernel_h = k.kh, g.kernel_w = k.kw;
  const qconv::PackedWeights packed = qconv::PackedWeights::pack(d.w.data(), g, tile);
  ASSERT_GT(packed.paired_steps(), 0);
  int64_t steps = 0;
  for (int64_t b = 0; b < packed.blocks(); ++b) steps += packed.block_paired_steps(b);
  EXPECT_LE(steps, packed.blocks() * 8 + 1);  // 16 quads a block: 8 steps (the greedy pass alone: 131)
  check_direct(k, tile, false, true, qconv::Output::kU8, true, 2, 0.35f, laplace_weights);
}

// Winograd's 3x3 stride-1 tile (CPUs without VNNI) on more shapes than cases() has: odd outputs
// (part 2x2 tiles), several chunks of tiles and one (whose V the threads transform once, in
// shares, then read in all the blocks' GEMMs), channels not in 16s, batches, threads that split
// the filters of a chunk (8 on 11 chunks); and at its
// channel bound with every product at its largest (X 255, W -128, zero point 0), where the sum
// times 4 nears int32's limit, and with signs mixed, where the point sums wrap.
TEST(QConv, WinogradMatchesAPlainLoop) {
  const qconv::Tile tile = qconv::Tile::kWinogradAvx2;
  const std::vector<Case> shapes = {
      // n  c   h   w   m   kh kw sh sw dh dw pt pl pb pr
      {2, 20, 9, 11, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 16, 30, 30, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // 225 tiles, one chunk
      {1, 16, 92, 92, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // 2116 tiles: 36 chunks
      {1, 17, 8, 7, 33, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},    // no padding, 17 channels
      {1, 40, 4, 4, 24, 3, 3, 1, 1, 1, 1, 2, 1, 0, 2},    // uneven pads
  };
  for (const Case& k : shapes)
    for (const bool x_signed : {false, true})
      for (const auto out : {qconv::Output::kU8, qconv::Output::kS8, qconv::Output::kFloat})
        check_direct(k, tile, x_signed, true, out, true, 2);
  check_direct({1, 64, 50, 50, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, tile, false, true, qconv::Output::kU8, true, 8);
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

// A model of one QLinearConv node (group `group`) on d's X, W (w_type, d.w's bytes), scales and
// bias, W's zero points wz (none where null), its output u8; x its input.
ir::Model qlinear_conv_model(const Case& k, const Data& d, bool x_signed, DType w_type, const Tensor* wz,
                             int64_t group, Tensor* x) {
  const DType xt = x_signed ? DType::kInt8 : DType::kUInt8;
  test::Builder b(13);
  *x = Tensor::make(xt, {k.n, k.c, k.h, k.w}).value();
  std::copy(d.x.begin(), d.x.end(), x->data<uint8_t>());
  Tensor w = Tensor::make(w_type, {k.m, k.c / group, k.kh, k.kw}).value();
  std::memcpy(w.raw_data(), d.w.data(), static_cast<size_t>(w.numel()));
  auto scalar = [](DType t, double v) {
    Tensor s = Tensor::make(t, {}).value();
    store_from_double(t, s.raw_data(), 0, v);
    return s;
  };
  Tensor ws = Tensor::make(DType::kFloat32, {k.m}).value();
  std::copy(d.w_scale.begin(), d.w_scale.end(), ws.data<float>());
  Tensor bias = Tensor::make(DType::kInt32, {k.m}).value();
  std::copy(d.bias.begin(), d.bias.end(), bias.data<int32_t>());
  b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(xt, x->shape()), ""});
  auto& init = b.m.graph.initializers;
  init["xs"] = scalar(DType::kFloat32, d.x_scale), init["xz"] = scalar(xt, d.zx);
  init["w"] = w, init["ws"] = ws, init["ys"] = scalar(DType::kFloat32, d.y_scale);
  init["yz"] = scalar(DType::kUInt8, d.zy), init["b"] = bias;
  if (wz) init["wz"] = *wz;
  b.add("QLinearConv", {"x", "xs", "xz", "w", "ws", wz ? "wz" : "", "ys", "yz", "b"}, {"y"},
        {test::attr_i("group", group), test::attr_ints("strides", {k.sh, k.sw}),
         test::attr_ints("pads", {k.pt, k.pl, k.pb, k.pr})});
  b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
  return b.m;
}

// W with zero points, as ONNX Runtime's QUInt8 weights and TFLite's models have them: u8 W with a
// zero point of 120 (W less it reaches 135: the 16-bit tiles), one a filter around 128 (some
// filters past s8), exactly 128 (all of W less it within s8: the 8-bit tiles), and s8 W with a
// zero point of -9; dense 3x3 and 1x1 and depthwise convs, u8 and s8 X, against the plain loop.
TEST(QConv, QLinearConvNodeTakesWeightZeroPoints) {
  struct Weights {
    DType type;
    std::vector<int32_t> zero;  // one, or one a filter (filled below)
  };
  const int64_t filters = 24;
  std::vector<int32_t> around_128(filters);
  for (int64_t m = 0; m < filters; ++m) around_128[static_cast<size_t>(m)] = 116 + static_cast<int32_t>(m);
  const std::vector<Weights> weights = {
      {DType::kUInt8, {120}}, {DType::kUInt8, around_128}, {DType::kUInt8, {128}}, {DType::kInt8, {-9}}};
  // (On AVX-512 VNNI the dense ones add W's part past s8 times X's window sums: an RGB stem's 3
  // channels, 16 pixels a vector; 70 channels, two vpsadbw steps a pixel.)
  const std::vector<Case> shapes = {{1, 12, 9, 8, filters, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
                                    {2, 16, 5, 7, filters, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
                                    {1, 3, 11, 10, filters, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
                                    {1, 70, 5, 6, filters, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
                                    {1, filters, 9, 8, filters, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true}};
  for (const Weights& wt : weights)
    for (const Case& k : shapes)
      for (const bool x_signed : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(wt.type) << " zero points " << wt.zero.size() << " first "
                                          << wt.zero[0] << (k.depthwise ? " depthwise" : " dense") << " k " << k.kh
                                          << (x_signed ? " s8 X" : " u8 X"));
        Data d = make_data(k, x_signed, true, 11);
        std::mt19937 rng(3);
        for (auto& v : d.w) v = static_cast<int8_t>(rng() % 256);  // all 256 byte values
        d.w_unsigned = wt.type == DType::kUInt8;
        d.w_zero = wt.zero;
        Tensor wz = Tensor::make(wt.type, wt.zero.size() == 1 ? Shape{} : Shape{filters}).value();
        for (size_t i = 0; i < wt.zero.size(); ++i) store_from_double(wt.type, wz.raw_data(), static_cast<int64_t>(i), wt.zero[i]);
        Tensor x;
        const ir::Model m = qlinear_conv_model(k, d, x_signed, wt.type, &wz, k.depthwise ? k.c : 1, &x);
        const std::vector<Value> out = test::run_model(m, {x});
        ASSERT_EQ(out.size(), 1u);
        const std::vector<double> want = expected(k, d, x_signed, qconv::Output::kU8);
        const Tensor& y = out[0].tensor;
        ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
        for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<uint8_t>()[i], want[static_cast<size_t>(i)]) << i;
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
      const int64_t cg = k.c / group;
      Tensor x;
      const ir::Model m = qlinear_conv_model(k, d, x_signed, DType::kInt8, nullptr, group, &x);
      const std::vector<Value> out = test::run_model(m, {x});
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

// One session fed X of one size, another, then the first again: the node reads its geometry again
// when X's shape changes (it keeps the last), each run against the plain loop.
TEST(QConv, QLinearConvNodeFollowsXShapeFromRunToRun) {
  const Case first{1, 12, 10, 9, 34, 3, 3, 2, 1, 1, 1, 1, 1, 0, 1};
  Case second = first;
  second.n = 2, second.h = 7, second.w = 13;
  const Data d = make_data(first, false, true, 5);
  Tensor x;
  ir::Model m = qlinear_conv_model(first, d, false, DType::kInt8, nullptr, 1, &x);
  m.graph.inputs[0].type = ir::TypeInfo::tensor(DType::kUInt8);  // any shape
  SessionOptions plain;
  plain.optimize_level = 0;
  auto session = Session::create(std::make_shared<const ir::Model>(m), plain);
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  for (const Case& k : {first, second, first}) {
    SCOPED_TRACE(::testing::Message() << "X " << k.n << "x" << k.c << "x" << k.h << "x" << k.w);
    Data dk = d;  // the same weights; X of k's size
    std::mt19937 rng(static_cast<uint32_t>(k.h));
    dk.x.resize(static_cast<size_t>(k.n * k.c * k.h * k.w));
    for (auto& v : dk.x) v = static_cast<uint8_t>(rng() % 256);
    Tensor xk = Tensor::make(DType::kUInt8, {k.n, k.c, k.h, k.w}).value();
    std::copy(dk.x.begin(), dk.x.end(), xk.data<uint8_t>());
    auto out = (*session)->run({Value::of(xk)});
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    const Tensor& y = (*out)[0].tensor;
    const std::vector<double> want = expected(k, dk, false, qconv::Output::kU8);
    const Shape y_shape = {k.n, k.m, out_dim(k.h, k.kh, k.sh, 1, k.pt, k.pb), out_dim(k.w, k.kw, k.sw, 1, k.pl, k.pr)};
    ASSERT_EQ(y.shape(), y_shape);
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<uint8_t>()[i], want[static_cast<size_t>(i)]) << i;
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
  {  // ai.kiln.QLinearConv's float X (NCHW, quantized by the node) of 5 channels for weights of 4,
     // and of 4 channels but float64
    test::Builder b(13);
    b.m.opsets["ai.kiln"] = 1;
    b.m.graph.inputs.push_back(ir::ValueInfo{"x", ir::TypeInfo::tensor(DType::kFloat32), ""});
    auto& init = b.m.graph.initializers;
    init["xs"] = scalar(DType::kFloat32, 0.1), init["xz"] = scalar(DType::kUInt8, 3);
    init["w"] = Tensor::make(DType::kInt8, {8, 4, 3, 3}).value(), init["ws"] = scalar(DType::kFloat32, 0.01);
    init["ys"] = scalar(DType::kFloat32, 0.2), init["yz"] = scalar(DType::kUInt8, 0);
    b.add("QLinearConv", {"x", "xs", "xz", "w", "ws", "", "ys", "yz"}, {"y"},
          {test::attr_i("channels_last", 1), test::attr_ints("pads", {1, 1, 1, 1})})
        .domain = "ai.kiln";
    b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kUInt8), ""});
    std::string e = run_error(b, {bytes_of(DType::kFloat32, {1, 5, 6, 6})});
    EXPECT_NE(e.find("or float32 NCHW) with 4 channels; got X [1,5,6,6] float32"), std::string::npos) << e;
    b.m.graph.inputs[0].type = ir::TypeInfo::tensor(DType::kFloat64);
    e = run_error(b, {bytes_of(DType::kFloat64, {1, 4, 6, 6})});
    EXPECT_NE(e.find("float64"), std::string::npos) << e;
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
