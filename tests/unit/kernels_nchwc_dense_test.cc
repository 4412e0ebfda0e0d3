// BlockedConv's dense direct kernels, AVX2 and AVX-512 (every register-tile height, forced small
// cache chunks and units), against the scalar reference over many shapes: channels that are not
// multiples of 8, odd output-block counts (a half pair), 1x1 to 7x7, strides 1 to 3, uneven and
// over-wide pads, dilation, batch 2, a plain input, every epilogue; 1 and 2 threads. Then the op
// itself, with its weights paired at compile time (a constant W) and per run (W fed).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <sstream>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_conv_dense_prep.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using nchwc::BlockedConvShape;
using nchwc::BlockedEpilogue;
using K = kiln_ops::Activation::Kind;

constexpr float kSentinel = 7.0f;
constexpr size_t kGuard = 64;  // floats past Y that no kernel may write

struct Case {
  int64_t n, c, m, h, w, kh, kw, s, d, pt, pl, pb, pr;
  bool plain = false;  // X plain NCHW (c <= 8), as BlockedConv reads the RGB stem
};

// One path: AVX2 on W, or AVX-512 on the paired W, with a forced split (`pairs`: output blocks per
// tile for AVX2).
struct Path {
  bool avx512;
  nchwc::DenseTuning tuning;
  int threads;  // 1: no pool
};

std::string describe(const Case& c) {
  std::ostringstream o;
  o << "n" << c.n << " c" << c.c << " m" << c.m << " " << c.h << "x" << c.w << " k" << c.kh << "x"
    << c.kw << " s" << c.s << " d" << c.d << " pads " << c.pt << "," << c.pl << "," << c.pb << ","
    << c.pr << (c.plain ? " plain" : "");
  return o.str();
}

BlockedConvShape shape_of(const Case& c) {
  BlockedConvShape s;
  s.n = c.n;
  s.cb = (c.c + 7) / 8;
  s.h = c.h;
  s.w = c.w;
  s.mb = (c.m + 7) / 8;
  s.kh = c.kh;
  s.kw = c.kw;
  s.sh = s.sw = c.s;
  s.dh = s.dw = c.d;
  s.pt = c.pt;
  s.pl = c.pl;
  s.oh = (c.h + c.pt + c.pb - ((c.kh - 1) * c.d + 1)) / c.s + 1;
  s.ow = (c.w + c.pl + c.pr - ((c.kw - 1) * c.d + 1)) / c.s + 1;
  s.channels = c.m;
  s.plain_channels = c.plain ? c.c : 0;
  return s;
}

struct Operands {
  BlockedConvShape s;
  std::vector<float> x, w, bias, z;
};

Operands operands_of(const Case& c) {
  Operands o;
  o.s = shape_of(c);
  const BlockedConvShape& s = o.s;
  std::mt19937 rng(static_cast<uint32_t>(c.c * 131 + c.m * 7 + c.h * 3 + c.kh));
  std::uniform_real_distribution<float> d(-1, 1);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = d(rng);
    return v;
  };
  // Zero padding lanes in X and W, as ReorderToBlocked and the nchwc-layout pass make them.
  o.x = random(c.plain ? s.n * c.c * s.h * s.w : s.n * s.cb * s.h * s.w * 8);
  if (!c.plain)
    for (size_t i = 0; i < o.x.size(); ++i)
      if ((i / (s.h * s.w * 8)) % s.cb * 8 + i % 8 >= static_cast<size_t>(c.c)) o.x[i] = 0;
  const int64_t taps = c.kh * c.kw;
  o.w = random(s.mb * s.cb * taps * 64);
  for (size_t i = 0; i < o.w.size(); ++i) {
    const int64_t out = (i / (s.cb * taps * 64)) * 8 + i % 8;
    const int64_t in = (i / (taps * 64)) % s.cb * 8 + (i / 8) % 8;
    if (out >= c.m || in >= c.c) o.w[i] = 0;
  }
  o.bias = random(s.mb * 8);
  for (int64_t i = c.m; i < s.mb * 8; ++i) o.bias[i] = 0;
  o.z = random(s.n * s.mb * s.oh * s.ow * 8);
  return o;
}

// pool: the two-thread pool the test owns, used when path.threads is 2.
void check(const Case& c, const Path& path, ThreadPool* pool, K act, bool bias, bool residual,
           bool residual_first) {
  SCOPED_TRACE(describe(c) + (path.avx512 ? " avx512 pairs " : " avx2 blocks ") +
               std::to_string(path.tuning.pairs) +
               " chunk " + std::to_string(path.tuning.chunk_bytes) + " unit " +
               std::to_string(path.tuning.unit_bytes) + " threads " +
               std::to_string(path.threads) + " act " + std::to_string(static_cast<int>(act)) +
               (bias ? " bias" : "") + (residual ? (residual_first ? " z first" : " z") : ""));
  const Operands o = operands_of(c);
  const BlockedConvShape& s = o.s;
  BlockedEpilogue e;
  e.bias = bias ? o.bias.data() : nullptr;
  e.z = residual ? o.z.data() : nullptr;
  e.residual_first = residual_first;
  e.act.kind = act;
  e.act.p0 = act == K::kClip ? -0.3 : 0.2;
  e.act.p1 = 0.5;
  const size_t ysize = o.z.size();
  std::vector<float> want(ysize), got(ysize + kGuard, kSentinel);
  nchwc::blocked_conv_reference(s, o.x.data(), o.w.data(), e, want.data());
  if (path.threads == 1) pool = nullptr;
  if (path.avx512) {
    AlignedBuffer paired;
    const int64_t taps = s.kh * s.kw;
    nchwc::pair_dense_weights(o.w.data(), s.mb, s.cb, taps,
                              paired.get(nchwc::paired_weights_floats(s.mb, s.cb, taps)));
    nchwc::blocked_conv_dense_avx512(s, o.x.data(), paired.data(), e, got.data(), pool,
                                     path.tuning);
  } else {
    nchwc::blocked_conv_dense_avx2(s, o.x.data(), o.w.data(), e, got.data(), pool, path.tuning);
  }
  // Error bound: float accumulation over the taps and channels, relative to the magnitude.
  const float tol = 2e-6f * std::sqrt(static_cast<float>(s.cb * 8 * s.kh * s.kw)) + 1e-5f;
  for (size_t i = 0; i < ysize; ++i) {
    const int64_t channel = (i / (s.oh * s.ow * 8)) % s.mb * 8 + i % 8;
    if (channel >= s.channels) {
      ASSERT_EQ(got[i], 0.0f) << "padding lane " << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "element " << i;
  }
  for (size_t i = ysize; i < got.size(); ++i) ASSERT_EQ(got[i], kSentinel) << "wrote past Y at " << i;
}

const Case kCases[] = {
    // n, c, m, h, w, kh, kw, s, d, pt, pl, pb, pr
    {1, 8, 8, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1},          // one block each way: one half pair
    {1, 12, 20, 11, 13, 3, 3, 1, 1, 1, 1, 1, 1},      // odd channels, 3 blocks: a half pair
    {2, 16, 40, 9, 17, 3, 3, 2, 1, 1, 1, 0, 1},       // stride 2, batch 2, 5 output blocks
    {1, 7, 9, 10, 10, 3, 3, 1, 2, 2, 1, 1, 2},        // dilation 2, uneven pads
    {1, 64, 64, 14, 14, 1, 1, 1, 1, 0, 0, 0, 0},      // pointwise: flattened GEMM
    {1, 24, 33, 7, 7, 1, 1, 2, 1, 0, 0, 0, 0},        // strided 1x1 (resnet downsample)
    {2, 40, 72, 9, 11, 1, 1, 2, 1, 0, 0, 0, 0},       // strided 1x1, odd sizes, batch 2
    {1, 16, 24, 8, 8, 1, 1, 3, 1, 0, 0, 0, 0},        // strided 1x1, stride 3
    {1, 16, 16, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1},        // 1x1 with pads
    {1, 13, 17, 16, 19, 7, 7, 2, 1, 3, 3, 3, 3},      // 7x7 stem-like
    {1, 9, 8, 3, 2, 5, 5, 1, 1, 2, 2, 2, 2},          // kernel wider than the input
    {1, 300, 16, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1},       // 38 input blocks: several chunks
    {1, 8, 32, 4, 4, 3, 3, 1, 1, 0, 0, 0, 0},         // no padding, 2x2 output
    {1, 16, 120, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1},       // 15 blocks: groups of 4 + 3 + ... pairs
    {1, 24, 200, 13, 30, 3, 3, 1, 1, 1, 1, 1, 1},     // 25 blocks, rows of 30 pixels
    {1, 16, 48, 9, 9, 5, 5, 3, 1, 2, 2, 2, 2},        // 5x5 stride 3
    {1, 16, 16, 12, 12, 3, 3, 1, 3, 3, 3, 3, 3},      // dilation 3
    {1, 16, 24, 13, 14, 3, 3, 1, 6, 6, 6, 6, 6},      // ASPP-like: middle tiles read 1 tap
    {1, 16, 16, 10, 10, 3, 3, 2, 1, 0, 0, 1, 1},      // stride 2, pads only bottom/right
    {1, 16, 24, 6, 7, 3, 5, 1, 1, 1, 2, 1, 2},        // 3x5 kernel
    {1, 32, 16, 9, 9, 3, 3, 2, 1, 4, 4, 4, 4},        // pads wider than the kernel
    {1, 8, 264, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},        // 33 blocks, 9 pixels
    {1, 3, 20, 22, 21, 7, 7, 2, 1, 3, 3, 3, 3, true},  // plain RGB stem
    {2, 3, 32, 17, 15, 3, 3, 2, 1, 1, 0, 1, 1, true},  // plain, mobilenet-like stem
    {1, 5, 8, 9, 7, 1, 1, 1, 1, 0, 0, 0, 0, true},     // plain pointwise
    {1, 4, 16, 9, 8, 1, 1, 2, 1, 0, 0, 0, 0, true},    // plain strided 1x1
    {1, 8, 9, 6, 5, 3, 3, 1, 2, 2, 2, 2, 2, true},     // plain, a full block, dilated
};

std::vector<Path> paths() {
  std::vector<Path> p;
  for (int threads : {1, 2}) {
    p.push_back({false, {}, threads});
    for (int blocks = 1; blocks <= 3; ++blocks) p.push_back({false, {blocks, 0, 0}, threads});
    p.push_back({false, {3, 1, 1}, threads});
    if (!cpu_features().has_avx512()) continue;
    p.push_back({true, {}, threads});
    for (int pairs = 1; pairs <= 4; ++pairs) p.push_back({true, {pairs, 0, 0}, threads});
    // One input block per chunk and tiny units: every partial-sum and unit boundary.
    p.push_back({true, {3, 1, 1}, threads});
  }
  return p;
}

TEST(BlockedConvDense, MatchesReference) {
  ThreadPool pool(2);
  for (const Path& path : paths())
    for (const Case& c : kCases) {
      check(c, path, &pool, K::kRelu, true, false, false);
      check(c, path, &pool, K::kNone, false, true, false);
      check(c, path, &pool, K::kSigmoid, true, true, true);
    }
}

TEST(BlockedConvDense, EveryActivation) {
  const Case cases[] = {{1, 10, 11, 6, 7, 3, 3, 1, 1, 1, 1, 1, 1},
                        {1, 16, 40, 5, 9, 1, 1, 1, 1, 0, 0, 0, 0}};
  ThreadPool pool(2);
  for (const Path& path : paths())
    for (const Case& c : cases)
      for (K act : {K::kNone, K::kRelu, K::kClip, K::kLeakyRelu, K::kSigmoid, K::kHardSigmoid,
                    K::kHardSwish, K::kSilu, K::kGelu, K::kGeluTanh, K::kTanh}) {
        check(c, path, &pool, act, true, false, false);
        check(c, path, &pool, act, true, true, true);
      }
}

// The op end to end: W a constant (paired at compile time, the original absorbed) or fed.
TEST(BlockedConvDense, OpPairsConstantAndFedWeights) {
  const Case c{1, 20, 28, 9, 10, 3, 3, 2, 1, 1, 1, 1, 1};
  const Operands o = operands_of(c);
  const BlockedConvShape& s = o.s;
  auto tensor = [](const Shape& shape, const std::vector<float>& v) {
    Tensor t = Tensor::make(DType::kFloat32, shape).value();
    std::copy(v.begin(), v.end(), t.data<float>());
    return t;
  };
  const Tensor x = tensor({s.n, s.cb, s.h, s.w, 8}, o.x);
  const Tensor w = tensor({s.mb, s.cb, 3, 3, 8, 8}, o.w), b = tensor({s.mb * 8}, o.bias);
  BlockedEpilogue e;
  e.bias = o.bias.data();
  e.act.kind = K::kRelu;
  std::vector<float> want(s.n * s.mb * s.oh * s.ow * 8);
  nchwc::blocked_conv_reference(s, o.x.data(), o.w.data(), e, want.data());
  for (bool constant : {true, false}) {
    SCOPED_TRACE(constant ? "constant W" : "fed W");
    test::Builder bld;
    bld.m.opsets["ai.kiln"] = 1;
    bld.input("x", x.shape());
    std::vector<Tensor> feeds{x};
    if (constant) {
      bld.m.graph.initializers["w"] = w;
      bld.m.graph.initializers["b"] = b;
    } else {
      bld.input("w", w.shape());
      bld.input("b", b.shape());
      feeds.push_back(w);
      feeds.push_back(b);
    }
    ir::Node& n = bld.add("BlockedConv", {"x", "w", "b"}, {"y"},
                          {test::attr_i("channels", c.m), test::attr_ints("strides", {2, 2}),
                           test::attr_ints("pads", {1, 1, 1, 1}), test::attr_s("activation", "Relu")});
    n.domain = "ai.kiln";
    bld.output("y");
    auto session = Session::create(std::make_shared<const ir::Model>(bld.m));
    ASSERT_TRUE(session.is_ok()) << session.status().message();
    std::vector<Value> in;
    for (const Tensor& t : feeds) in.push_back(Value::of(t));
    for (int round = 0; round < 2; ++round) {  // the second run reuses what the first prepared
      auto out = (*session)->run(in);
      ASSERT_TRUE(out.is_ok()) << out.status().message();
      const Tensor& y = (*out)[0].tensor;
      ASSERT_EQ(y.shape(), (Shape{s.n, s.mb, s.oh, s.ow, 8}));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(y.data<float>()[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i])))
            << "element " << i;
    }
  }
}

}  // namespace
}  // namespace kiln
