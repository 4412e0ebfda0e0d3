// The 8-bit conv's plain-loop oracle, shared by its tests (kernels_qconv_test.cc: the tiles and
// QLinearConv; kernels_qconv_epilogue_test.cc: the residual add and the activation in the store): the
// cases, their data, the plain loop's codes (int64 sums of (x - zx) w over the window, plus the
// bias, requantized as QLinearConv's kernels define it) and check_direct, which runs one case on
// one tile and compares bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/qconv/qconv.h"
#include "kernels/kiln/epilogue_activation.h"

namespace kiln::qconv_test {

struct Case {
  int64_t n, c, h, w, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  bool depthwise = false;  // m == c, one filter a channel (W [c, 1, kh, kw])
};

struct Data {
  std::vector<uint8_t> x;  // NCHW, u8 (or s8 bytes)
  std::vector<int8_t> w;   // OIHW
  bool w_unsigned = false;       // w's bytes are u8 values
  std::vector<int32_t> w_zero;   // W's zero point, one or one a filter (none: 0)
  std::vector<int32_t> bias;
  std::vector<float> w_scale;
  int32_t zx, zy;
  float x_scale, y_scale;
};

inline int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  return (in + pb + pe - d * (k - 1) - 1) / s + 1;
}

// Weights over all of s8, or 7-bit ones (|w| <= 64, what the kAvx2Bytes tiles take).
inline Data make_data(const Case& k, bool x_signed, bool per_filter, uint32_t seed, bool seven_bit = false,
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
inline std::vector<double> expected(const Case& k, const Data& d, bool x_signed, qconv::Output out) {
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
                const int8_t raw_w = d.w[static_cast<size_t>(((m * cw + c - c0) * k.kh + a) * k.kw + b)];
                const int64_t wv = d.w_unsigned ? static_cast<uint8_t>(raw_w) : raw_w;
                const int64_t wz = d.w_zero.empty() ? 0 : d.w_zero[d.w_zero.size() == 1 ? 0 : static_cast<size_t>(m)];
                sum += (xv - d.zx) * (wv - wz);
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
inline double added(const QLinearBinaryParams& p, double a, double b) {
  const float fa = (static_cast<float>(a) - p.az) * p.as, fb = (static_cast<float>(b) - p.bz) * p.bs;
  return std::min(p.hi, std::max(p.lo, std::nearbyint((fa + fb) / p.cs) + p.cz));
}

// With `add` (8-bit Y, channels-last), the conv's codes go through a residual add (qconv.h,
// Requantize::add) of random codes R; with `activation` (8-bit Y), the sums' float values go
// through it (in double here) before Y's quantization, which here divides by y_scale: the store's
// float activation and product by 1 / y_scale may land a code apart, on at most 1 % of the outputs.
inline void check_direct(const Case& k, qconv::Tile tile, bool x_signed, bool per_filter, qconv::Output out, bool nhwc,
                  int threads, float y_scale = 0.35f, void (*edit)(Data&) = nullptr,
                  const qconv::Requantize::ResidualAdd* add = nullptr, const kiln_ops::Activation* activation = nullptr) {
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
    rq.scale.push_back(out == qconv::Output::kFloat || activation ? d.x_scale * ws : d.x_scale * ws / d.y_scale);
  }
  if (activation) rq.activation = activation, rq.inverse_y_scale = 1.0f / d.y_scale;
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
  qconv::conv(g, x.data(), x_signed, nhwc, d.zx, packed, rq, y, nhwc, threads > 1 ? &pool : nullptr,
              add ? residual.data() : nullptr);
  std::vector<double> want = expected(k, d, x_signed, activation ? qconv::Output::kFloat : out);
  if (activation)
    for (double& v : want) {
      const double z = rq.zero_point;
      v = std::min<double>(rq.hi, std::max<double>(rq.lo, std::nearbyint(static_cast<float>((*activation)(v)) / d.y_scale) + z));
    }
  int64_t apart = 0;
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
        else if (activation) {
          ASSERT_LE(std::fabs(got - want[nchw]), 1.0) << "n " << n << " m " << m << " p " << p;
          apart += got != want[nchw];
        } else if (add)
          ASSERT_EQ(got, added(add->p, want[nchw],
                               out == qconv::Output::kS8 ? static_cast<int8_t>(residual[at]) : residual[at]))
              << "n " << n << " m " << m << " p " << p << " conv's code " << want[nchw];
        else
          ASSERT_EQ(got, want[nchw]) << "n " << n << " m " << m << " p " << p;
      }
  EXPECT_LE(apart, count / 100);
}

inline const std::vector<Case>& cases() {
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
      // Window rows where the quads' tiles take them (qconv_window_rows.cc), wide enough for the
      // staging's steps of 32 pixels: a staged pixel of 9 bytes, 21 (two blocks), 10 with a row
      // dilation, and 3 (a store's bytes past its pixel reach four more).
      {1, 3, 9, 70, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {2, 3, 15, 75, 20, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3},
      {1, 2, 12, 40, 8, 5, 3, 1, 1, 2, 1, 2, 1, 2, 1},
      {1, 1, 7, 66, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
  };
  return all;
}

}  // namespace kiln::qconv_test
