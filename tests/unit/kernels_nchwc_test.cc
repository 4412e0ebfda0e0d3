// The AVX2 BlockedConv paths (dense, pointwise, depthwise) and the AVX-512 depthwise one against
// the scalar reference over many shapes: odd sizes, strides, dilations, uneven pads, borders
// wider than the input, every epilogue; plus the reorder ops and bad operands reported as errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using nchwc::BlockedConvShape;
using nchwc::BlockedEpilogue;
using K = kiln_ops::Activation::Kind;

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

struct Case {
  int64_t n, c, m, h, w, k, s, d, pt, pl, pb, pr;
  bool depthwise;
  bool plain = false;  // X plain NCHW (c <= 8), as BlockedConv reads the RGB stem
};

// Runs one case through the fast path (with and without a pool) and the reference.
// avx512: run the AVX-512 depthwise kernel instead of the AVX2 one.
void check_case(const Case& c, K act, bool residual, bool residual_first, ThreadPool* pool,
                bool avx512 = false, bool clamp = false) {
  SCOPED_TRACE(::testing::Message() << "n" << c.n << " c" << c.c << " m" << c.m << " " << c.h << "x"
                                    << c.w << " k" << c.k << " s" << c.s << " d" << c.d << " pads "
                                    << c.pt << c.pl << c.pb << c.pr << " dw" << c.depthwise
                                    << " act" << static_cast<int>(act) << " z" << residual
                                    << " avx512 " << avx512 << " clamp " << clamp);
  std::mt19937 rng(static_cast<uint32_t>(c.c * 131 + c.m * 7 + c.h));
  BlockedConvShape s;
  s.n = c.n;
  s.cb = (c.c + 7) / 8;
  s.h = c.h;
  s.w = c.w;
  s.mb = c.depthwise ? s.cb : (c.m + 7) / 8;
  s.kh = s.kw = c.k;
  s.sh = s.sw = c.s;
  s.dh = s.dw = c.d;
  s.pt = c.pt;
  s.pl = c.pl;
  const int64_t ek = (c.k - 1) * c.d + 1;
  s.oh = (c.h + c.pt + c.pb - ek) / c.s + 1;
  s.ow = (c.w + c.pl + c.pr - ek) / c.s + 1;
  s.channels = c.depthwise ? c.c : c.m;
  s.depthwise = c.depthwise;
  s.plain_channels = c.plain ? c.c : 0;
  // Inputs with zero padding lanes, as ReorderToBlocked makes them.
  std::vector<float> x = random_floats(s.n * s.cb * s.h * s.w * 8, rng);
  for (size_t i = 0; i < x.size(); ++i)
    if (!c.plain && (i / (s.h * s.w * 8)) % s.cb * 8 + i % 8 >= static_cast<size_t>(c.c)) x[i] = 0;
  const size_t wsize = c.depthwise ? s.cb * c.k * c.k * 8 : s.mb * s.cb * c.k * c.k * 64;
  const std::vector<float> w = random_floats(wsize, rng), bias = random_floats(s.mb * 8, rng);
  const size_t ysize = s.n * s.mb * s.oh * s.ow * 8;
  const std::vector<float> z = random_floats(ysize, rng);
  BlockedEpilogue e;
  e.bias = bias.data();
  e.z = residual ? z.data() : nullptr;
  e.residual_first = residual_first;
  e.act.kind = act;
  e.act.p0 = act == K::kClip ? 0.0 : 0.2;
  e.act.p1 = act == K::kClip ? 0.5 : 0.5;
  if (clamp) e.act.lo = -0.05, e.act.hi = 0.3;
  std::vector<float> want(ysize, 7.0f), got(ysize, 7.0f);
  nchwc::blocked_conv_reference(s, x.data(), w.data(), e, want.data());
  if (c.depthwise)
    (avx512 ? nchwc::blocked_conv_depthwise_avx512 : nchwc::blocked_conv_depthwise_avx2)(
        s, x.data(), w.data(), e, got.data(), pool);
  else
    nchwc::blocked_conv_dense_avx2(s, x.data(), w.data(), e, got.data(), pool);
  for (size_t i = 0; i < ysize; ++i) {
    const int64_t channel = (i / (s.oh * s.ow * 8)) % s.mb * 8 + i % 8;
    if (channel >= s.channels) {
      ASSERT_EQ(got[i], 0.0f) << "padding lane " << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i]))) << "element " << i;
  }
}

const Case kDense[] = {
    {1, 8, 8, 5, 5, 3, 1, 1, 1, 1, 1, 1, false},       // one block each way
    {1, 12, 20, 11, 13, 3, 1, 1, 1, 1, 1, 1, false},   // odd channels, B = 3 tiles
    {2, 16, 40, 9, 17, 3, 2, 1, 1, 1, 0, 1, false},    // stride 2, 5 output blocks (4 + 1)
    {1, 7, 9, 10, 10, 3, 1, 2, 2, 1, 1, 2, false},     // dilation 2, uneven pads
    {1, 64, 64, 14, 14, 1, 1, 1, 0, 0, 0, 0, false},   // pointwise: flattened GEMM
    {1, 24, 33, 7, 7, 1, 2, 1, 0, 0, 0, 0, false},     // strided 1x1 (resnet downsample)
    {1, 13, 17, 16, 19, 7, 2, 1, 3, 3, 3, 3, false},   // 7x7 stem-like, borders of 2 pixels
    {1, 9, 8, 3, 2, 5, 1, 1, 2, 2, 2, 2, false},       // kernel wider than the input
    {1, 300, 16, 5, 6, 3, 1, 1, 1, 1, 1, 1, false},    // 38 input blocks: several chunks
    {1, 8, 32, 4, 4, 3, 1, 1, 0, 0, 0, 0, false},      // no padding, 2x2 output
    {1, 3, 20, 22, 21, 7, 2, 1, 3, 3, 3, 3, false, true},  // plain RGB stem
    {2, 3, 32, 17, 15, 3, 2, 1, 1, 0, 1, 1, false, true},  // plain, mobilenet-like stem
    {1, 5, 8, 9, 7, 1, 1, 1, 0, 0, 0, 0, false, true},     // plain pointwise
    {1, 8, 9, 6, 5, 3, 1, 2, 2, 2, 2, 2, false, true},     // plain, a full block, dilated
    // Rows narrower than a tile: tiles run on across rows.
    {1, 96, 96, 10, 2, 3, 1, 1, 0, 1, 0, 1, false},    // 2-pixel rows, 96 channels
    {2, 20, 24, 9, 7, 3, 2, 1, 1, 1, 1, 1, false},     // stride 2, 4-pixel rows: row by row
    {1, 16, 40, 7, 5, 3, 1, 2, 2, 1, 2, 1, false},     // dilation 2, 3-pixel rows, odd blocks
    {2, 20, 24, 9, 5, 3, 2, 1, 1, 1, 1, 1, false},     // stride 2, 3-pixel rows, batch 2
};

const Case kDepthwise[] = {
    {1, 8, 8, 6, 6, 3, 1, 1, 1, 1, 1, 1, true},
    {2, 36, 36, 13, 11, 3, 2, 1, 1, 1, 1, 1, true},
    {1, 13, 13, 9, 20, 5, 1, 1, 2, 2, 2, 2, true},
    {1, 20, 20, 10, 9, 5, 2, 1, 1, 2, 2, 1, true},
    {1, 11, 11, 12, 12, 3, 1, 3, 3, 3, 3, 3, true},
    {1, 32, 32, 112, 112, 3, 1, 1, 1, 1, 1, 1, true},  // efficientnet/mobilenet stage 1
    {2, 96, 96, 28, 28, 3, 2, 1, 1, 1, 1, 1, true},    // stride 2 on an even plane, batch 2
    {1, 20, 20, 7, 7, 5, 1, 1, 2, 2, 2, 2, true},      // 7x7 plane: every tile is at an edge
    {1, 13, 13, 14, 14, 5, 2, 1, 2, 2, 2, 2, true},    // 5x5 stride 2, C % 8 != 0
    {1, 8, 8, 3, 3, 7, 1, 1, 3, 3, 3, 3, true},        // kernel wider than the input
    {2, 24, 24, 15, 9, 3, 2, 2, 0, 2, 1, 0, true},     // stride 2, dilation 2, uneven pads
    {1, 17, 17, 5, 30, 1, 1, 1, 0, 0, 0, 0, true},     // 1x1
    {1, 9, 9, 28, 28, 3, 1, 1, 1, 1, 1, 1, true},      // 28 pixels: tiles of 7
    {1, 16, 16, 9, 13, 3, 1, 1, 1, 1, 1, 1, true},     // odd width: a lone last pixel
    {1, 8, 8, 6, 33, 3, 2, 1, 1, 1, 1, 1, true},       // stride 2, 17 pixels: a lone last one
    {1, 40, 40, 11, 11, 3, 3, 1, 1, 1, 1, 1, true},    // stride 3
    {1, 24, 24, 12, 1, 3, 1, 1, 1, 1, 1, 1, true},     // one column
    {1, 8, 8, 5, 40, 3, 1, 1, 1, 1, 1, 1, true},       // 40 pixels: several tiles a row
    {1, 16, 16, 10, 10, 9, 1, 1, 4, 4, 4, 4, true},    // 81 taps: more than kept in registers
    {1, 16, 16, 4, 3, 5, 1, 1, 2, 2, 2, 2, true},      // 5x5 on 3 columns: both edges in a tile
    {1, 8, 8, 6, 30, 5, 1, 1, 0, 0, 0, 0, true},       // 5x5, no padding: inside tiles only
    {1, 24, 24, 14, 14, 3, 1, 1, 1, 1, 1, 1, true},    // mobilenet's 14x14: a bordered copy
    {2, 20, 20, 7, 7, 3, 1, 1, 1, 1, 1, 1, true},      // 7x7 planes, batch 2, C % 8 != 0
    {1, 16, 16, 8, 10, 3, 1, 1, 0, 2, 2, 0, true},     // bordered below and left only
};

TEST(BlockedConvKernel, DenseMatchesReference) {
  ThreadPool pool(3);
  for (const Case& c : kDense) {
    check_case(c, K::kRelu, false, false, nullptr);
    check_case(c, K::kNone, true, false, &pool);
    check_case(c, K::kSigmoid, true, true, &pool);
  }
}

TEST(BlockedConvKernel, DepthwiseMatchesReference) {
  ThreadPool pool(3), pool2(2);
  for (bool avx512 : {false, true}) {
    if (avx512 && !cpu_features().has_avx512()) continue;
    for (const Case& c : kDepthwise) {
      check_case(c, K::kClip, false, false, nullptr, avx512);
      check_case(c, K::kSilu, true, false, &pool, avx512);
      check_case(c, K::kHardSigmoid, true, true, &pool2, avx512);
      check_case(c, K::kSigmoid, false, false, &pool2, avx512);
    }
  }
}

TEST(BlockedConvKernel, EveryActivation) {
  const Case c{1, 10, 11, 6, 7, 3, 1, 1, 1, 1, 1, 1, false};
  for (K act : {K::kNone, K::kRelu, K::kClip, K::kLeakyRelu, K::kSigmoid, K::kHardSigmoid,
                K::kHardSwish, K::kSilu, K::kGelu, K::kGeluTanh, K::kTanh})
    check_case(c, act, false, false, nullptr);
}

// A clamp after the activation (a Clip the fusion absorbed), in the dense, pointwise and
// depthwise tiles, before a residual and after one.
TEST(BlockedConvKernel, ClampAfterActivation) {
  ThreadPool pool(2);
  const Case dense{1, 10, 11, 6, 7, 3, 1, 1, 1, 1, 1, 1, false};
  const Case pointwise{1, 16, 24, 5, 9, 1, 1, 1, 0, 0, 0, 0, false};
  const Case depthwise{1, 20, 20, 10, 9, 5, 2, 1, 1, 2, 2, 1, true};
  for (K act : {K::kLeakyRelu, K::kRelu, K::kSilu, K::kTanh})
    for (const Case* c : {&dense, &pointwise, &depthwise}) {
      check_case(*c, act, false, false, &pool, false, true);
      check_case(*c, act, true, act == K::kRelu, nullptr, false, true);
      if (c->depthwise && cpu_features().has_avx512())
        check_case(*c, act, true, false, &pool, true, true);
    }
}

// A one-node model of an ai.kiln op.
test::Builder kiln_node(const std::string& op, std::vector<std::string> in, std::vector<ir::Attribute> attrs) {
  test::Builder b;
  b.m.opsets["ai.kiln"] = 1;
  ir::Node& n = b.add(op, std::move(in), {"y"}, std::move(attrs));
  n.domain = "ai.kiln";
  b.output("y");
  return b;
}

Result<std::vector<Value>> run(const ir::Model& m, std::vector<Tensor> feeds) {
  KILN_ASSIGN_OR_RETURN(auto s, Session::create(std::make_shared<const ir::Model>(m)));
  std::vector<Value> in;
  for (auto& t : feeds) in.push_back(Value::of(std::move(t)));
  return s->run(in);
}

TEST(BlockedReorder, RoundTripZeroPads) {
  test::Builder to = kiln_node("ReorderToBlocked", {"x"}, {});
  to.input("x", {2, 11, 3, 5});
  test::Builder from = kiln_node("ReorderFromBlocked", {"x"}, {test::attr_i("channels", 11)});
  from.input("x", {2, 2, 3, 5, 8});
  const Tensor x = to.random({2, 11, 3, 5});
  auto blocked = run(to.m, {x});
  ASSERT_TRUE(blocked.is_ok()) << blocked.status().message();
  const Tensor& b = (*blocked)[0].tensor;
  ASSERT_EQ(b.shape(), (Shape{2, 2, 3, 5, 8}));
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 16; ++c)
      for (int64_t p = 0; p < 15; ++p) {
        const float v = b.data<float>()[((n * 2 + c / 8) * 15 + p) * 8 + c % 8];
        EXPECT_EQ(v, c < 11 ? x.data<float>()[(n * 11 + c) * 15 + p] : 0.0f);
      }
  auto back = run(from.m, {b});
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  const Tensor& y = (*back)[0].tensor;
  ASSERT_EQ(y.shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]);
}

// channels_last: the plain side is NHWC. Odd channels (a part block), and row lengths that make
// the pool split rows unevenly.
TEST(BlockedReorder, ChannelsLastMatchesIndexing) {
  for (const Shape& nhwc :
       {Shape{2, 3, 5, 11}, Shape{1, 7, 9, 16}, Shape{1, 1, 1, 3}, Shape{1, 40, 40, 20}}) {
    SCOPED_TRACE(shape_str(nhwc));
    const int64_t n = nhwc[0], h = nhwc[1], w = nhwc[2], c = nhwc[3], cb = (c + 7) / 8;
    test::Builder to = kiln_node("ReorderToBlocked", {"x"}, {test::attr_i("channels_last", 1)});
    to.input("x", nhwc);
    test::Builder from = kiln_node("ReorderFromBlocked", {"x"},
                                   {test::attr_i("channels", c), test::attr_i("channels_last", 1)});
    from.input("x", {n, cb, h, w, 8});
    const Tensor x = to.random(nhwc);
    auto blocked = run(to.m, {x});
    ASSERT_TRUE(blocked.is_ok()) << blocked.status().message();
    const Tensor& b = (*blocked)[0].tensor;
    ASSERT_EQ(b.shape(), (Shape{n, cb, h, w, 8}));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < cb * 8; ++ch)
        for (int64_t p = 0; p < h * w; ++p) {
          const float v = b.data<float>()[((i * cb + ch / 8) * h * w + p) * 8 + ch % 8];
          EXPECT_EQ(v, ch < c ? x.data<float>()[(i * h * w + p) * c + ch] : 0.0f);
        }
    auto back = run(from.m, {b});
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    const Tensor& y = (*back)[0].tensor;
    ASSERT_EQ(y.shape(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]);
  }
}

TEST(BlockedConvKernel, BadOperandsAreErrors) {
  auto error_of = [](const std::string& op, int64_t channels, std::vector<Shape> shapes) {
    std::vector<std::string> names{"x", "w"};
    names.resize(shapes.size());
    test::Builder b = kiln_node(op, names, {test::attr_i("channels", channels)});
    std::vector<Tensor> feeds;
    for (size_t i = 0; i < shapes.size(); ++i) {
      b.input(names[i], shapes[i]);
      feeds.push_back(b.random(shapes[i]));
    }
    auto r = run(b.m, feeds);
    return r.is_ok() ? std::string("no error") : r.status().message();
  };
  // W's input blocks differ from X's.
  EXPECT_NE(error_of("BlockedConv", 8, {{1, 2, 4, 4, 8}, {1, 1, 3, 3, 8, 8}}).find("channel blocks"),
            std::string::npos);
  // X neither blocked nor plain NCHW.
  EXPECT_NE(error_of("BlockedConv", 8, {{16, 4, 4}, {1, 2, 3, 3, 8, 8}}).find("blocked tensor"),
            std::string::npos);
  // More channels than the output blocks hold.
  EXPECT_NE(error_of("BlockedConv", 9, {{1, 2, 4, 4, 8}, {1, 2, 3, 3, 8, 8}}).find("does not fit"),
            std::string::npos);
  // A plain X has at most one block of channels.
  EXPECT_NE(error_of("BlockedConv", 9, {{1, 9, 4, 4}, {2, 2, 3, 3, 8, 8}}).find("1 to 8 channels"),
            std::string::npos);
  EXPECT_NE(error_of("ReorderFromBlocked", 17, {{1, 2, 4, 4, 8}}).find("does not fit"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
