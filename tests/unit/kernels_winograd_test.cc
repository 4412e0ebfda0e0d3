// Winograd F(4x4, 3x3) and F(2x2, 3x3) for BlockedConv against the scalar reference (blocked_conv_reference.cc)
// over many shapes: channels not multiples of 8, outputs not multiples of 4, pads 0/1/2 and
// uneven, batch 2, input channels spanning several K passes, many output panels, every epilogue;
// with each micro-kernel the CPU has, one and two threads, and forced task splits. Then the
// BlockedConv hook: when it takes a conv, and a whole -O3 model against the plain reference.
//
// Tolerance: the transforms scale values by up to 5 (B^T), 1/4..1/24 (G) and 8 (A^T), so float
// rounding grows with the magnitudes summed, not with the result: the error is bounded relative
// to scale = conv(|x|, |W|) + |bias| + |Z| (the sum of absolute terms; one float rounding of it
// is ~6e-8 * scale). Measured here (printed as "max err / scale"): F(4x4) 2.4e-6, F(2x2) 2.2e-7,
// the direct kernel ~1e-7. The bound is 1e-5 * scale (4x F(4x4)'s worst; the activations used
// are at most 1.2-Lipschitz); end to end, resnet50 at -O3 stays at 0.11 of ONNX Runtime's
// rtol 1e-3 / atol 1e-4 (0.06 without Winograd).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/kiln/nchwc/blocked_conv_winograd.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using nchwc::BlockedConvShape;
using nchwc::BlockedEpilogue;
using nchwc::WinogradTuning;
using K = kiln_ops::Activation::Kind;

constexpr double kTolOfScale = 1e-5;

struct Case {
  int64_t n, c, m, h, w, pt, pl, pb, pr;
  int64_t dh = 1, dw = 1;  // dilations
};

const Case kCases[] = {
    {1, 8, 8, 4, 4, 1, 1, 1, 1},        // one tile, one block each way
    {2, 12, 20, 11, 13, 1, 1, 1, 1},    // batch 2, odd channels, partial tiles at both edges
    {1, 17, 9, 7, 6, 0, 0, 0, 0},       // no padding: 5x4 output
    {1, 40, 72, 9, 10, 0, 1, 1, 0},     // uneven pads
    {2, 64, 64, 14, 14, 1, 1, 1, 1},    // resnet-like, 2 x 16 tiles
    {1, 256, 40, 5, 7, 1, 1, 1, 1},     // 32 input blocks: two K passes of the AVX-512 kernel
    {1, 300, 24, 6, 5, 1, 1, 1, 1},     // 38 input blocks: two K passes of the AVX2 kernel
    {1, 8, 130, 6, 6, 1, 1, 1, 1},      // 17 output blocks: many panels, a partial last one
    {1, 16, 16, 3, 2, 2, 2, 2, 2},      // pads wider than the 3x3 reach: all-zero edge patches
    {1, 24, 16, 1, 1, 1, 1, 1, 1},      // 1x1 image
    {1, 33, 31, 23, 17, 1, 1, 1, 1},    // 6 x 5 tiles, both tails
    {1, 16, 24, 13, 11, 2, 2, 2, 2, 2, 2},  // dilation 2: 4 phases of uneven sizes
    {1, 16, 16, 9, 14, 4, 4, 4, 4, 4, 4},   // dilation 4: phases of 2-4 pixels, empty tiles
    {2, 12, 20, 17, 10, 1, 3, 2, 0, 3, 2},  // dilations 3 x 2, uneven pads
};

struct Errors {
  double max_abs = 0, max_rel = 0, max_of_scale = 0;
  void add(const Errors& o) {
    max_abs = std::max(max_abs, o.max_abs);
    max_rel = std::max(max_rel, o.max_rel);
    max_of_scale = std::max(max_of_scale, o.max_of_scale);
  }
};

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

struct Operands {
  BlockedConvShape s;
  std::vector<float> x, w, bias, z;
};

Operands make_operands(const Case& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.c * 131 + c.m * 7 + c.h * 3 + c.n));
  Operands o;
  BlockedConvShape& s = o.s;
  s.n = c.n;
  s.cb = (c.c + 7) / 8;
  s.h = c.h;
  s.w = c.w;
  s.mb = (c.m + 7) / 8;
  s.kh = s.kw = 3;
  s.pt = c.pt;
  s.pl = c.pl;
  s.dh = c.dh;
  s.dw = c.dw;
  s.oh = c.h + c.pt + c.pb - 2 * c.dh;
  s.ow = c.w + c.pl + c.pr - 2 * c.dw;
  s.channels = c.m;
  // Padding lanes zero, as ReorderToBlocked and the nchwc-layout pass make them.
  o.x = random_floats(s.n * s.cb * s.h * s.w * 8, rng);
  for (size_t i = 0; i < o.x.size(); ++i)
    if ((i / (s.h * s.w * 8)) % s.cb * 8 + i % 8 >= static_cast<size_t>(c.c)) o.x[i] = 0;
  o.w = random_floats(s.mb * s.cb * 9 * 64, rng);
  for (size_t i = 0; i < o.w.size(); ++i) {
    const size_t lane_in = i / 8 % 8, lane_out = i % 8;
    const size_t cb = i / (9 * 64) % s.cb, mb = i / (s.cb * 9 * 64);
    if (cb * 8 + lane_in >= static_cast<size_t>(c.c) || mb * 8 + lane_out >= static_cast<size_t>(c.m))
      o.w[i] = 0;
  }
  o.bias = random_floats(s.mb * 8, rng);
  o.z = random_floats(s.n * s.mb * s.oh * s.ow * 8, rng);
  return o;
}

// Winograd with `kernel` (and the given pool and split) against the reference, for one epilogue.
Errors check(const Case& c, int64_t tile, const nchwc::WinogradGemmKernel& kernel, K act,
             bool residual, bool residual_first, ThreadPool* pool, const WinogradTuning& tuning) {
  SCOPED_TRACE(::testing::Message()
               << "F(" << tile << "x" << tile << ") " << kernel.name << " n" << c.n << " c" << c.c << " m" << c.m << " " << c.h << "x"
               << c.w << " pads " << c.pt << c.pl << c.pb << c.pr << " dilations " << c.dh << c.dw << " act"
               << static_cast<int>(act) << " z" << residual << residual_first << " threads "
               << (pool ? pool->threads() : 1) << " chunk " << tuning.chunk_tiles << " splits "
               << tuning.m_splits << " point-major group " << tuning.point_major_group);
  const Operands o = make_operands(c);
  const BlockedConvShape& s = o.s;
  BlockedEpilogue e;
  e.bias = o.bias.data();
  e.z = residual ? o.z.data() : nullptr;
  e.residual_first = residual_first;
  e.act.kind = act;
  e.act.p0 = act == K::kClip ? -0.5 : 0.2;
  e.act.p1 = 0.5;
  const size_t ysize = o.z.size();
  std::vector<float> want(ysize), got(ysize, 7.0f), scale(ysize);
  nchwc::blocked_conv_reference(s, o.x.data(), o.w.data(), e, want.data());
  {  // scale: the same sums over absolute values
    std::vector<float> ax(o.x), aw(o.w);
    for (float& v : ax) v = std::fabs(v);
    for (float& v : aw) v = std::fabs(v);
    BlockedEpilogue plain;
    nchwc::blocked_conv_reference(s, ax.data(), aw.data(), plain, scale.data());
  }
  const nchwc::WinogradWeights w(o.w.data(), s.mb, s.cb, tile, kernel);
  nchwc::blocked_conv_winograd(s, o.x.data(), w, e, got.data(), pool, tuning);
  Errors err;
  for (size_t i = 0; i < ysize; ++i) {
    const int64_t channel = (i / (s.oh * s.ow * 8)) % s.mb * 8 + i % 8;
    if (channel >= s.channels) {
      EXPECT_EQ(got[i], 0.0f) << "padding lane " << i;
      continue;
    }
    const double sc = scale[i] + std::fabs(o.bias[channel]) + (residual ? std::fabs(o.z[i]) : 0);
    const double d = std::fabs(double{got[i]} - want[i]);
    err.max_abs = std::max(err.max_abs, d);
    err.max_of_scale = std::max(err.max_of_scale, d / sc);
    if (std::fabs(want[i]) > 1e-2) err.max_rel = std::max(err.max_rel, d / std::fabs(want[i]));
    if (d > kTolOfScale * sc) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i]
                    << ", scale " << sc;
      break;
    }
  }
  return err;
}

void print(const char* what, const Errors& e) {
  std::printf("[winograd] %s: max abs err %.3g, max rel err %.3g (|y| > 0.01), max err / scale %.3g\n",
              what, e.max_abs, e.max_rel, e.max_of_scale);
}

TEST(WinogradConv, MatchesReferenceOnEveryKernel) {
  ThreadPool pool(2);
  ASSERT_FALSE(nchwc::winograd_gemm_kernels().empty());
  for (int64_t tile : {4, 2})
    for (const nchwc::WinogradGemmKernel& k : nchwc::winograd_gemm_kernels()) {
      Errors all;
      for (const Case& c : kCases) {
        all.add(check(c, tile, k, K::kRelu, false, false, nullptr, {}));
        all.add(check(c, tile, k, K::kNone, true, false, &pool, {}));
        all.add(check(c, tile, k, K::kSigmoid, true, true, &pool, {}));
      }
      print((std::string("F(") + std::to_string(tile) + "x" + std::to_string(tile) + ") " +
             k.name).c_str(),
            all);
    }
}

TEST(WinogradConv, ForcedSplitsMatchReference) {
  // Chunks of 1 and 3 tiles (partial register tiles), output panels split 2 and 5 ways (ragged
  // last split), on one and two threads.
  ThreadPool pool(2);
  for (int64_t tile : {4, 2})
    for (const nchwc::WinogradGemmKernel& k : nchwc::winograd_gemm_kernels())
      for (const Case& c : {kCases[1], kCases[7], kCases[10]})
        for (WinogradTuning t : {WinogradTuning{3, 2, 0}, WinogradTuning{1, 5, 0},
                                 WinogradTuning{0, 1, 16 * 1024}}) {
          check(c, tile, k, K::kLeakyRelu, true, false, nullptr, t);
          check(c, tile, k, K::kRelu, true, true, &pool, t);
        }
}

TEST(WinogradConv, PointMajorOrderMatchesReference) {
  ThreadPool pool(2);
  for (const auto& kernel : nchwc::winograd_gemm_kernels())
    for (int64_t tile : {4, 2}) {
      Errors e;
      for (const Case& c : {kCases[1], kCases[7], kCases[10], kCases[12], kCases[13]})
        // Groups of 2 chunks of 3 tiles (a short last chunk and group), and one group of all.
        for (WinogradTuning t : {WinogradTuning{3, 0, 0, 2}, WinogradTuning{0, 0, 0, 1000}})
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
            e.add(check(c, tile, kernel, K::kRelu, true, false, p, t));
      print("point-major", e);
    }
}

TEST(WinogradConv, EveryActivation) {
  const Case c{1, 10, 11, 6, 7, 1, 1, 1, 1};
  ThreadPool pool(2);
  for (K act : {K::kNone, K::kRelu, K::kClip, K::kLeakyRelu, K::kSigmoid, K::kHardSigmoid,
                K::kHardSwish, K::kSilu, K::kGelu, K::kGeluTanh, K::kTanh})
    for (int64_t tile : {4, 2})
      check(c, tile, nchwc::winograd_gemm_kernels().front(), act, true, false, &pool, {});
}

// A BlockedConv node with `attrs` and 3x3 weights of c input and m output channels.
struct Prepared {
  bool ready;
  bool absorbed;
  int64_t tile;
  bool keeps_dense;
};
Prepared prepare(int64_t c, int64_t m, std::vector<ir::Attribute> attrs, bool constant_w = true) {
  ir::Node node;
  node.op_type = "BlockedConv";
  node.domain = "ai.kiln";
  node.attrs = std::move(attrs);
  Tensor w = Tensor::make(DType::kFloat32, {(m + 7) / 8, (c + 7) / 8, 3, 3, 8, 8}).value();
  std::fill_n(w.data<float>(), w.numel(), 0.5f);
  nchwc::BlockedConvWinograd wino(node);
  std::vector<const Tensor*> constants{nullptr, constant_w ? &w : nullptr, nullptr};
  std::vector<bool> absorbed(3, false);
  EXPECT_TRUE(wino.prepare(constants, absorbed).is_ok());
  EXPECT_FALSE(absorbed[0] || absorbed[2]);
  return {wino.ready(), absorbed[1], wino.tile(), wino.keeps_dense()};
}

TEST(WinogradConv, TakesTheConvsItPaysFor) {
  using test::attr_i;
  using test::attr_ints;
  const Prepared yes = prepare(64, 64, {attr_ints("pads", {1, 1, 1, 1})});
  EXPECT_TRUE(yes.ready);
  EXPECT_TRUE(yes.absorbed);  // no other path reads W any more
  EXPECT_EQ(yes.tile, 4);
  // U of F(4x4) past 4 MiB (36 x 256 x 256 floats = 9 MiB): F(2x2).
  EXPECT_EQ(prepare(256, 256, {attr_ints("pads", {1, 1, 1, 1})}).tile, 2);
  EXPECT_EQ(prepare(128, 128, {}).tile, 4);
  EXPECT_FALSE(prepare(16, 64, {}).ready);  // too few input channels
  EXPECT_FALSE(prepare(64, 8, {}).ready);   // too few output channels
  // 16 to 31 output channels: with the AVX2 kernels, the dense weights kept for small images.
  const Prepared narrow = prepare(64, 24, {attr_ints("pads", {1, 1, 1, 1})});
  EXPECT_EQ(narrow.ready, !cpu_features().has_avx512());
  EXPECT_EQ(narrow.keeps_dense, narrow.ready);
  EXPECT_FALSE(prepare(64, 64, {attr_ints("strides", {2, 2})}).ready);
  // Dilated: Winograd on the interleaved grids, the dense weights kept for small images.
  const Prepared dilated = prepare(64, 64, {attr_ints("dilations", {2, 2})});
  EXPECT_TRUE(dilated.ready);
  EXPECT_TRUE(dilated.keeps_dense);
  EXPECT_FALSE(prepare(64, 64, {attr_i("group", 64)}).ready);
  const Prepared not_constant = prepare(64, 64, {}, false);
  EXPECT_FALSE(not_constant.ready);
  EXPECT_FALSE(not_constant.absorbed);
  setenv("KILN_DISABLE_WINOGRAD", "1", 1);
  const Prepared off = prepare(64, 64, {});
  unsetenv("KILN_DISABLE_WINOGRAD");
  EXPECT_FALSE(off.ready);
  EXPECT_FALSE(off.absorbed);
}

// A same-padded 3x3 of c -> m channels over n images of hw x hw, as BlockedConv sees it.
BlockedConvShape square_shape(int64_t n, int64_t c, int64_t m, int64_t hw) {
  BlockedConvShape s;
  s.n = n, s.cb = c / 8, s.mb = m / 8, s.h = s.w = s.oh = s.ow = hw;
  s.kh = s.kw = 3, s.pt = s.pl = 1, s.channels = m;
  return s;
}

TEST(WinogradConv, AnUncachedUStepsAsideWhereItWouldStreamOften) {
  using test::attr_ints;
  const auto& kernels = nchwc::winograd_gemm_kernels();
  ASSERT_FALSE(kernels.empty());
  // resnet50's 512 -> 512: U of F(2x2) is 16 MiB, past what stays cached, so W is kept too, and
  // U streams either way: F(4x4), for the large images.
  const Prepared deep = prepare(512, 512, {attr_ints("pads", {1, 1, 1, 1})});
  EXPECT_TRUE(deep.ready);
  EXPECT_TRUE(deep.keeps_dense);
  EXPECT_FALSE(deep.absorbed);
  EXPECT_EQ(deep.tile, 4);
  EXPECT_FALSE(prepare(64, 64, {}).keeps_dense);
  std::vector<float> w(512 / 8 * 512 / 8 * 9 * 64, 0.5f);
  const nchwc::WinogradWeights big(w.data(), 64, 64, 2, kernels.front());
  EXPECT_TRUE(nchwc::winograd_weights_stream(big));
  // 7x7 (16 tiles): one chunk streams U once, little more than the direct kernel's W.
  EXPECT_TRUE(nchwc::winograd_pays(square_shape(1, 512, 512, 7), big, 2));
  // F(4x4)'s 36 MiB U over its 4 tiles of 7x7 streams for little saved; at 64x64 (256 tiles, in
  // the point-major order) once per group of chunks, for 4x fewer flops.
  const nchwc::WinogradWeights big4(w.data(), 64, 64, 4, kernels.front());
  EXPECT_FALSE(nchwc::winograd_pays(square_shape(1, 512, 512, 7), big4, 2));
  EXPECT_TRUE(nchwc::winograd_pays(square_shape(1, 512, 512, 64), big4, 2));
  EXPECT_TRUE(nchwc::winograd_pays(square_shape(1, 512, 512, 64), big, 2));
  // A U that stays cached always pays.
  std::vector<float> w64(64 / 8 * 64 / 8 * 9 * 64, 0.5f);
  const nchwc::WinogradWeights small(w64.data(), 8, 8, 4, kernels.front());
  EXPECT_FALSE(nchwc::winograd_weights_stream(small));
  EXPECT_TRUE(nchwc::winograd_pays(square_shape(1, 64, 64, 112), small, 2));
}

// The plain model's output, the -O3 model's, and the -O3 model's with Winograd turned off.
struct ThreeRuns {
  Tensor want, got, direct;
};
void run_three(const ir::Model& plain, const ir::Model& optimized, const std::vector<Tensor>& feeds, ThreeRuns* r) {
  const std::vector<Value> want = test::run_model(plain, feeds);
  const std::vector<Value> got = test::run_model(optimized, feeds);
  setenv("KILN_DISABLE_WINOGRAD", "1", 1);
  const std::vector<Value> direct = test::run_model(optimized, feeds);
  unsetenv("KILN_DISABLE_WINOGRAD");
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(direct.size(), 1u);
  ASSERT_EQ(got[0].tensor.shape(), want[0].tensor.shape());
  ASSERT_EQ(direct[0].tensor.shape(), want[0].tensor.shape());
  *r = {want[0].tensor, got[0].tensor, direct[0].tensor};
}

ir::Model optimized_o3(const ir::Model& m) {
  ir::Model optimized = m;
  OptimizeOptions o;
  o.level = 3;
  const auto report = optimize(optimized, o);
  EXPECT_TRUE(report.is_ok()) << report.status().message();
  return optimized;
}

TEST(WinogradConv, OptimizedModelMatchesPlainConvs) {
  // Two same-padded 3x3 convs of 40 -> 48 -> 36 channels with a Relu between, on a 2 x 40 x 13 x 11
  // input: at -O3 both become BlockedConvs that Winograd F(4x4) takes.
  test::Builder b;
  b.input("x", {2, 40, 13, 11});
  b.conv("x", "a", 40, 48);
  b.add("Relu", {"a"}, {"r"});
  b.conv("r", "y", 48, 36);
  b.output("y");
  const ir::Model optimized = optimized_o3(b.m);
  EXPECT_EQ(test::histogram(optimized)["BlockedConv"], 2);
  ThreeRuns r;
  ASSERT_NO_FATAL_FAILURE(run_three(b.m, optimized, {b.random({2, 40, 13, 11})}, &r));
  const Tensor& w = r.want;
  // The second conv sums 432 products of values up to ~10 and weights up to 1: scale up to ~500,
  // so Winograd's ~2.4e-6 of the scale (MatchesReferenceOnEveryKernel) allows ~1e-3; the direct
  // kernel stays within 1e-4 (relative, absolute below 1).
  bool differ = false;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float p = w.data<float>()[i], q = r.got.data<float>()[i];
    const float d = r.direct.data<float>()[i];
    ASSERT_LE(std::fabs(p - q), 1e-3f * std::max(1.0f, std::fabs(p))) << "element " << i;
    ASSERT_LE(std::fabs(p - d), 1e-4f * std::max(1.0f, std::fabs(p))) << "element " << i;
    differ = differ || q != d;
  }
  EXPECT_TRUE(differ) << "the Winograd run gave the direct kernel's bits: was it used?";
}

// b's model (one conv of c input channels, dynamic H and W) and its -O3 form on a random hw x hw
// image: the -O3 output within rtol of the plain one (relative, absolute below 1), and whether it
// is, bit for bit, what the direct kernel gives with Winograd off.
void run_at(test::Builder& b, const ir::Model& optimized, int64_t c, int64_t hw, float rtol, bool* same_as_direct) {
  SCOPED_TRACE(hw);
  ThreeRuns r;
  ASSERT_NO_FATAL_FAILURE(run_three(b.m, optimized, {b.random({1, c, hw, hw})}, &r));
  const Tensor& w = r.want;
  *same_as_direct = true;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float p = w.data<float>()[i], q = r.got.data<float>()[i];
    ASSERT_LE(std::fabs(p - q), rtol * std::max(1.0f, std::fabs(p))) << "element " << i;
    *same_as_direct = *same_as_direct && q == r.direct.data<float>()[i];
  }
}

TEST(WinogradConv, KeptDenseWeightsRunWhereWinogradDoesNotPay) {
  // 640 -> 256: U of F(2x2) is 10 MiB, so F(4x4) and W stays. At 4x4 (one tile) the direct
  // kernel runs, bit for bit what it gives with Winograd off; at 16x16 (16 tiles, point-major)
  // Winograd does.
  test::Builder b;
  b.input_dims("x", {test::num(1), test::num(640), test::sym("h"), test::sym("w")});
  b.conv("x", "y", 640, 256);
  b.output("y");
  const ir::Model optimized = optimized_o3(b.m);
  ASSERT_EQ(test::histogram(optimized)["BlockedConv"], 1);
  for (const int64_t hw : {4, 16}) {
    bool same_as_direct = false;
    // 5760 products of values in [-1, 1]: Winograd's error is ~2.4e-6 of their sum (~1e3).
    ASSERT_NO_FATAL_FAILURE(run_at(b, optimized, 640, hw, 1e-2f, &same_as_direct));
    EXPECT_EQ(same_as_direct, hw == 4) << hw;
  }
}

TEST(WinogradConv, NarrowConvsTakeItOnLargerImagesOnly) {
  // 40 -> 24 (3 output blocks) with the AVX2 kernels: direct at 14 x 14, bit for bit; Winograd at
  // 28 x 28 (under AVX-512 they always run direct).
  test::Builder b;
  b.input_dims("x", {test::num(1), test::num(40), test::sym("h"), test::sym("w")});
  b.conv("x", "y", 40, 24);
  b.output("y");
  const ir::Model optimized = optimized_o3(b.m);
  ASSERT_EQ(test::histogram(optimized)["BlockedConv"], 1);
  for (const int64_t hw : {14, 28}) {
    bool same_as_direct = false;
    // 360 products of values in [-1, 1]: Winograd's error is ~2.4e-6 of their sum.
    ASSERT_NO_FATAL_FAILURE(run_at(b, optimized, 40, hw, 1e-3f, &same_as_direct));
    EXPECT_EQ(same_as_direct, hw == 14 || cpu_features().has_avx512()) << hw;
  }
}

}  // namespace
}  // namespace kiln
