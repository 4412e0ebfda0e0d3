// The direct grouped conv (kernels/cpu/conv/grouped_conv.h) that Conv runs for float32 grouped
// nodes with few channels a group, against a plain loop in double: depthwise and 2-32 channels a
// group, kernel sizes 1-7 (kh != kw too), strides (1,1), (2,1), (1,2), (3,3), dilations,
// asymmetric pads, channel multiplier 2, batch 2, 1-D convs, rows shorter and longer than 64
// outputs, with and without bias, at 1 and 2 threads. Also group-1 convs with fewer output
// positions than channels, which Conv runs as col^T times W^T packed once.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/cpu/conv/grouped_conv.h"
#include "kiln/session.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

struct Dw {
  int64_t n, c, mult, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int64_t cg = 1;  // input channels a group; the groups are c
  bool bias, one_d;
};

void check(const Dw& d, int threads) {
  test::Builder b(17);
  const int64_t m = d.c * d.mult, channels = d.c * d.cg;
  const Shape xs = d.one_d ? Shape{d.n, channels, d.w} : Shape{d.n, channels, d.h, d.w};
  const Shape ws = d.one_d ? Shape{m, d.cg, d.kw} : Shape{m, d.cg, d.kh, d.kw};
  b.input("x", xs);
  b.weight("w", ws);
  if (d.bias) b.weight("b", {m});
  std::vector<ir::Attribute> attrs = {test::attr_i("group", d.c)};
  if (d.one_d) {
    attrs.push_back(test::attr_ints("strides", {d.sw}));
    attrs.push_back(test::attr_ints("dilations", {d.dw}));
    attrs.push_back(test::attr_ints("pads", {d.pl, d.pr}));
  } else {
    attrs.push_back(test::attr_ints("strides", {d.sh, d.sw}));
    attrs.push_back(test::attr_ints("dilations", {d.dh, d.dw}));
    attrs.push_back(test::attr_ints("pads", {d.pt, d.pl, d.pb, d.pr}));
  }
  b.add("Conv", d.bias ? std::vector<std::string>{"x", "w", "b"} : std::vector<std::string>{"x", "w"}, {"y"}, attrs);
  b.output("y");
  const Tensor x = b.random(xs);
  SessionOptions opts;
  opts.threads = threads;
  opts.optimize_level = 0;
  auto s = Session::create(std::make_shared<const ir::Model>(b.m), opts);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto out = (*s)->run({Value::of(x)});
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const Tensor& y = (*out)[0].tensor;
  const int64_t h = d.one_d ? 1 : d.h, kh = d.one_d ? 1 : d.kh;
  const int64_t oh = d.one_d ? 1 : (h + d.pt + d.pb - d.dh * (kh - 1) - 1) / d.sh + 1;
  const int64_t ow = (d.w + d.pl + d.pr - d.dw * (d.kw - 1) - 1) / d.sw + 1;
  ASSERT_EQ(y.numel(), d.n * m * oh * ow);
  const float* xv = x.data<float>();
  const float* wv = b.m.graph.initializers["w"].data<float>();
  const float* bv = d.bias ? b.m.graph.initializers["b"].data<float>() : nullptr;
  for (int64_t ni = 0; ni < d.n; ++ni)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < ow; ++q) {
          double acc = bv ? bv[oc] : 0.0, mag = std::fabs(acc);  // mag: the sum of |terms|
          for (int64_t ci = 0; ci < d.cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < d.kw; ++j) {
                const int64_t row = d.one_d ? 0 : r * d.sh - d.pt + i * d.dh, col = q * d.sw - d.pl + j * d.dw;
                if (row < 0 || row >= h || col < 0 || col >= d.w) continue;
                const int64_t in_c = (oc / d.mult) * d.cg + ci;
                const double term = static_cast<double>(wv[((oc * d.cg + ci) * kh + i) * d.kw + j]) *
                                    xv[((ni * channels + in_c) * h + row) * d.w + col];
                acc += term;
                mag += std::fabs(term);
              }
          const float got = y.data<float>()[((ni * m + oc) * oh + r) * ow + q];
          // Float rounding grows with the terms summed (48 channels x 25 taps in the group-1 trials).
          ASSERT_NEAR(got, acc, 1e-5 * std::max(1.0, std::fabs(acc)) + 1e-7 * mag)
              << "n" << ni << " oc" << oc << " r" << r << " q" << q << " k" << d.kh << "x" << d.kw << " s" << d.sh << d.sw
              << " d" << d.dh << d.dw << " threads " << threads;
        }
}

// Trial `trial`'s kernel (up to max_k), strides, dilations, pads (up to max_pad), width, bias and
// 1-D, drawn from rng; then kept to at least one output (the padded input holds the dilated
// kernel). d's n, c, mult, cg and h are the caller's.
void draw_geometry(std::mt19937& rng, int trial, int64_t max_k, int64_t max_pad, Dw& d) {
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  const int64_t strides[][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 3}};
  d.w = trial % 6 == 0 ? pick(65, 140) : pick(1, 40);
  d.kh = pick(1, max_k);
  d.kw = trial % 3 == 0 ? d.kh : pick(1, max_k);
  d.sh = strides[trial % 5][0];
  d.sw = strides[trial % 5][1];
  d.dh = trial % 4 == 1 ? 2 : 1;
  d.dw = trial % 4 == 2 ? 2 : 1;
  d.pt = pick(0, max_pad), d.pl = pick(0, max_pad), d.pb = pick(0, max_pad), d.pr = pick(0, max_pad);
  d.bias = trial % 2 == 0;
  d.one_d = trial % 8 == 3;
  if ((d.one_d ? 1 : d.h + d.pt + d.pb) < d.dh * (d.kh - 1) + 1 && !d.one_d) d.h = d.dh * (d.kh - 1) + 1;
  if (d.w + d.pl + d.pr < d.dw * (d.kw - 1) + 1) d.w = d.dw * (d.kw - 1) + 1;
}

TEST(GroupedConv, AgreesWithPlainLoop) {
  std::mt19937 rng(5);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  for (int trial = 0; trial < 40; ++trial) {
    Dw d;
    d.n = trial % 7 == 0 ? 2 : 1;
    d.c = pick(2, 9);
    d.mult = trial % 5 == 0 ? 2 : 1;
    d.h = pick(1, 23);
    d.cg = trial % 4 == 3 ? pick(2, 32) : 1;
    draw_geometry(rng, trial, 7, 3, d);
    for (int threads : {1, 2}) check(d, threads);
  }
}

// Group-1 convs with 1-3 output channels (a segmentation or depth head) run the direct kernel in
// bands of output rows: 1-48 input channels, tall and short images, batch 2, 1 and 2 threads.
TEST(GroupedConv, OneGroupFewOutputsAgreesWithPlainLoop) {
  std::mt19937 rng(11);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  for (int trial = 0; trial < 24; ++trial) {
    Dw d;
    d.n = trial % 5 == 0 ? 2 : 1;
    d.c = 1;
    d.mult = pick(1, kDirectConvMinGemmOutputs - 1);
    d.cg = trial % 3 == 0 ? pick(33, 48) : pick(1, 20);
    d.h = trial % 4 == 0 ? pick(40, 70) : pick(1, 23);
    draw_geometry(rng, trial, 5, 2, d);
    for (int threads : {1, 2}) check(d, threads);
  }
  // Batch 0: an empty output and no work (the fuzzer's division by zero when bands were sized).
  const Dw empty{0, 1, 1, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, false, false};
  for (int threads : {1, 2}) check(empty, threads);
  // Strides past the kernel's extent go to im2col: the direct kernel's row buffer holds `stride`
  // phases, and the fuzzer's stride of 188743679 asked it for gigabytes.
  const Dw strided{1, 1, 1, 7, 60, 3, 7, 6, 20, 1, 1, 1, 2, 1, 1, 1, true, false};
  const Dw hostile{1, 1, 1, 7, 33, 3, 7, 6, int64_t{1} << 27, 1, 1, 1, 2, 1, 17, 1, false, false};
  for (int threads : {1, 2}) check(strided, threads), check(hostile, threads);
}

TEST(Conv, FewPositionsManyChannelsAgreeWithPlainLoop) {
  // Group 1 (c = 1 group of cg channels, mult output channels): an STFT-like 1-D conv (stride 9,
  // 21 frames, 40 filters), a dilated one, a 3x3 on 6x6 (16 positions, 64 channels), a 1x1
  // (9 positions, 32 channels), batch 2. Then single-channel ones whose im2col rows are X read
  // at a stride (no im2col): 1-D with an unread tail, 2-D with one row whose last window ends at
  // X's end, batch 2; and one padded at the end, which must take im2col.
  Dw cases[7] = {};
  cases[0] = {2, 1, 40, 1, 200, 1, 16, 1, 9, 1, 1, 0, 2, 0, 2, 3, true, true};
  cases[1] = {1, 1, 48, 1, 90, 1, 5, 1, 7, 1, 3, 0, 1, 0, 0, 5, false, true};
  cases[2] = {1, 1, 64, 6, 6, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 4, true, false};
  cases[3] = {2, 1, 32, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 8, true, false};
  cases[4] = {2, 1, 70, 1, 600, 1, 64, 1, 20, 1, 1, 0, 0, 0, 0, 1, true, true};
  cases[5] = {1, 1, 48, 1, 319, 1, 31, 1, 16, 1, 1, 0, 0, 0, 0, 1, false, false};
  cases[6] = {1, 1, 40, 1, 100, 1, 16, 1, 8, 1, 1, 0, 0, 0, 5, 1, true, true};
  for (const Dw& d : cases)
    for (int threads : {1, 2}) check(d, threads);
}

}  // namespace
}  // namespace kiln
