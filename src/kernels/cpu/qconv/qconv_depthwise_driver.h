// The loops of the 8-bit depthwise tiles over quads of taps (qconv.h: kDepthwiseVnni,
// kDepthwiseAvxVnni, kDepthwiseAvx2Bytes), each file that instantiates them compiled for its ISA.
// A depthwise conv multiplies each channel by its own weights, so a u8 x s8 dot product of four
// (vpdpbusd, or vpmaddubsw + vpmaddwd) must take four taps of one channel a lane: per kernel row,
// four horizontal taps' channels are interleaved byte by byte into four vectors (vpunpck{l,h}bw,
// then {l,h}wd: vector k's lane 4 l + j holds channel 16 l + 4 k + j's four taps, l the 128-bit
// lane), and each meets its packed weights in one step. The loops here read channels-last X
// where it is, one output pixel x one block of channels at a time; a tap outside X reads X's
// zero point (its product is in the bias's zx term). A Tile gives
//   Vec                              its vector type (a block has one channel a byte of it),
//   Block block_params(plan, b)      block b's first channel, count, bias (Vec bias[4], the
//                                    sums' start), scales in the lane order and the store's
//                                    constants (held in registers: a row's stores through byte
//                                    pointers would make the compiler reload them from plan),
//   window_sums<kKH, kKW, kFlip, kPixels, kNearEnd>(plan, block, weights, at, acc)   the
//                                    windows of kPixels (1 or 2) horizontally adjacent pixels
//                                    into acc[p], column (ky, 4 q + t) read at at(ky, q, t);
//                                    kNearEnd where a tap may lie near X's end (kChecksNearEnd),
//   kChecksNearEnd                   whether its loads of a block of fewer channels than its
//                                    vector can pass X's end, checked in the rows that may
//                                    (near_x_end: blocks of kBlockChannels),
//   store<kActivated>(plan, block, acc, out)   the sums, requantized (or as floats), to Y at
//                                    `out` (the pixel's block), through rq.activation when kActivated.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/qconv/qconv.h"
#include "kernels/cpu/qconv/qconv_driver.h"

namespace kiln::qconv {

struct QuadsPlan {
  const Geometry& g;
  const uint8_t* x;
  const uint8_t* x_end;  // one past X's last byte
  int64_t stride;        // bytes a pixel of X
  // X's zero point, as X holds it, over a row of X and 64 bytes more: a tap outside X reads it,
  // and so does a whole kernel row above or below X, at the offsets it would have in X.
  const uint8_t* pad;
  const uint8_t* pad_end;
  bool in_pad(const uint8_t* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return a >= reinterpret_cast<uintptr_t>(pad) && a < reinterpret_cast<uintptr_t>(pad_end);
  }
  const PackedWeights& w;
  const Requantize& rq;
  void* y;
  bool clamp_high;       // rq.needs_float_clamp()
  int64_t y_element;     // bytes of a value of Y (4 floats, 1 codes)

  // Y at image n's row oy, column ox, channel c.
  char* y_at(int64_t n, int64_t oy, int64_t ox, int64_t c) const {
    return static_cast<char*>(y) + (((n * g.out_h + oy) * g.out_w + ox) * g.filters + c) * y_element;
  }
};

template <class Tile>
struct DepthwiseQuads {
  // One output row (image n, row oy) of block b. Pixels whose window lies inside X's columns
  // (most) read each kernel row at fixed offsets from its start, the pad's where that row lies
  // above or below X; the others check each tap. (Checking rows too cost mobilenet_v2's 7x7 and
  // 14x14 layers a third.)
  template <int kKH, int kKW, bool kFlip, bool kActivated, bool kNearEnd>
  static void row(const QuadsPlan& plan, int64_t n, int64_t oy, int64_t b) {
    const Geometry& g = plan.g;
    const typename Tile::Block bp = Tile::block_params(plan, b);
    const int8_t* wb = plan.w.block(b);
    // What the loop reads of plan, in locals: its stores could alias plan's fields.
    const int64_t out_w = g.out_w, stride = plan.stride, y_pixel = g.filters * plan.y_element;
    char* const y_row = plan.y_at(n, oy, 0, bp.c0);
    const int64_t iy0 = oy * g.stride_h - g.pad_top, span_w = (g.kernel_w - 1) * g.dilation_w;
    const int64_t ox_lo = std::min(g.out_w, (g.pad_left + g.stride_w - 1) / g.stride_w);
    const int64_t ox_hi = g.in_w - 1 + g.pad_left - span_w < 0
                              ? 0
                              : std::min(g.out_w, (g.in_w - 1 + g.pad_left - span_w) / g.stride_w + 1);
    // Kernel row ky's row of X (block b's first channel), or the pad's; once a row where the
    // kernel is known at compile time.
    auto row_of = [&](int64_t ky) {
      return row_or_pad(g, plan.x, plan.stride, plan.pad, n, iy0 + ky * g.dilation_h) + bp.c0;
    };
    const uint8_t* rows[kKH ? kKH : 1];
    if constexpr (kKH > 0)
      for (int ky = 0; ky < kKH; ++ky) rows[ky] = row_of(ky);
    auto row_start = [&](int64_t ky) {
      if constexpr (kKH > 0) return rows[ky];
      return row_of(ky);
    };
    const int64_t right = g.dilation_w * stride;
    // Two pixels at once where both windows lie inside X's columns, on a stride-1 row: the four
    // columns a quad interleaved once serve both (the second's weights one column on), half the
    // loads and shuffles of a 3x3 window.
    const int8_t* pairs = g.stride_w == 1 && g.dilation_w == 1 ? plan.w.pair_block(b) : nullptr;
    for (int64_t ox = 0; ox < out_w;) {
      const int64_t ix0 = ox * g.stride_w - g.pad_left;
      auto inside = [&](int64_t ky, int64_t q, int t) { return row_start(ky) + (ix0 * stride + (4 * q + t) * right); };
      if (pairs && ox >= ox_lo && ox + 1 < ox_hi) {
        typename Tile::Vec acc[2][4] = {{bp.bias[0], bp.bias[1], bp.bias[2], bp.bias[3]},
                                        {bp.bias[0], bp.bias[1], bp.bias[2], bp.bias[3]}};
        Tile::template window_sums<kKH, kKW, kFlip, 2, kNearEnd>(plan, bp, pairs, inside, acc);
#pragma GCC unroll 2  // (a loop kept acc in memory: mobilenet_v2's 192-channel layer 116 GOP/s, unrolled 150)
        for (int p = 0; p < 2; ++p) Tile::template store<kActivated>(plan, bp, acc[p], y_row + (ox + p) * y_pixel);
        ox += 2;
        continue;
      }
      typename Tile::Vec acc[1][4] = {{bp.bias[0], bp.bias[1], bp.bias[2], bp.bias[3]}};
      if (ox >= ox_lo && ox < ox_hi) {
        Tile::template window_sums<kKH, kKW, kFlip, 1, kNearEnd>(plan, bp, wb, inside, acc);
      } else {
        Tile::template window_sums<kKH, kKW, kFlip, 1, kNearEnd>(plan, bp, wb, [&](int64_t ky, int64_t q, int t) {
          const int64_t ix = ix0 + (4 * q + t) * g.dilation_w;
          return ix >= 0 && ix < g.in_w ? row_start(ky) + ix * stride : plan.pad;
        }, acc);
      }
      Tile::template store<kActivated>(plan, bp, acc[0], y_row + ox * y_pixel);
      ++ox;
    }
  }

  // One output row of kDepthwiseVnniPixels (qconv.h): P = 64 / C pixels of the stride-1 row a
  // vector, side by side, so that a tap of all P is one load at the first one's tap. Where a
  // lane's tap lies left or right of X (the row's ends), the tile's load_pixels fills it with
  // X's zero point; the row's last vector stores the pixels it has. (X's pixels are C bytes
  // apart, as the lanes: channels-last X as it is, or staged in steps of 16 channels.)
  template <int kKH, int kKW, bool kFlip, bool kActivated>
  static void row_of_pixels(const QuadsPlan& plan, int64_t n, int64_t oy) {
    const Geometry& g = plan.g;
    const int64_t c = g.channels, per_vector = 64 / c, kw = kKW ? kKW : g.kernel_w;
    const typename Tile::Block block = Tile::pixels_block_params(plan);
    const int8_t* wb = plan.w.block(0);
    const int64_t iy0 = oy * g.stride_h - g.pad_top;
    auto row_start = [&](int64_t ky) {
      return row_or_pad(g, plan.x, plan.stride, plan.pad, n, iy0 + ky * g.dilation_h);
    };
    for (int64_t ox = 0; ox < g.out_w; ox += per_vector) {
      const int64_t ix0 = ox - g.pad_left, pixels = std::min(per_vector, g.out_w - ox);
      typename Tile::Block bp = block;
      typename Tile::Vec acc[1][4] = {{bp.bias[0], bp.bias[1], bp.bias[2], bp.bias[3]}};
      if (pixels == per_vector && ix0 >= 0 && ix0 + kw - 1 + per_vector <= g.in_w) {
        Tile::template window_sums<kKH, kKW, kFlip, 1, false>(
            plan, bp, wb, [&](int64_t ky, int64_t q, int t) { return row_start(ky) + (ix0 + 4 * q + t) * c; }, acc);
      } else {
        Tile::keep_lanes(bp, pixels * c);
        auto load = [&](int64_t ky, int64_t q, int t) {
          return Tile::load_pixels(plan, row_start(ky), ix0 + 4 * q + t, c);
        };
        Tile::template window_sums<kKH, kKW, kFlip, 1, false>(plan, bp, wb, load, acc);
      }
      Tile::template store<kActivated>(plan, bp, acc[0], plan.y_at(n, oy, ox, 0));
    }
  }

  // Whether a tap of output row (n, oy)'s block b may lie within a block's bytes of X's end, where
  // the ymm tile's loads (Tile::kBlockChannels bytes from a tap) check it: only in a block of
  // fewer channels (the last of 144: its loads from the last pixels pass X's end) and a row whose
  // windows read X's last row. (Checking every tap of every row: mobilenet_v2's 3x3 depthwise
  // convs alone 1.15-1.23x this way's time, its depthwise layers in the model 1.45x; Zen 3.)
  static bool near_x_end(const QuadsPlan& plan, int64_t n, int64_t oy, int64_t b) {
    const Geometry& g = plan.g;
    const int64_t width = Tile::kBlockChannels;
    if ((b + 1) * width <= g.channels) return false;
    const int64_t last_row = oy * g.stride_h - g.pad_top + (g.kernel_h - 1) * g.dilation_h;
    const int64_t iy = std::clamp<int64_t>(last_row, 0, g.in_h - 1);
    const int64_t last_tap = ((n * g.in_h + iy) * g.in_w + g.in_w - 1) * plan.stride + b * width;  // at most
    return (plan.x_end - plan.x) - last_tap < width;
  }

  template <int kKH, int kKW, bool kNearEnd>
  static void row_as(const QuadsPlan& plan, bool flip, bool act, int64_t n, int64_t oy, int64_t b) {
    if (act)
      flip ? row<kKH, kKW, true, true, kNearEnd>(plan, n, oy, b) : row<kKH, kKW, false, true, kNearEnd>(plan, n, oy, b);
    else if (flip)
      row<kKH, kKW, true, false, kNearEnd>(plan, n, oy, b);
    else
      row<kKH, kKW, false, false, kNearEnd>(plan, n, oy, b);
  }

  // (The activation a template parameter: a store that might activate cost mobilenet_v2's
  // depthwise convs 1-3 %, and an out-of-line call efficientnet_b0's 10 %.)
  template <int kKH, int kKW>
  static void rows(const QuadsPlan& plan, bool flip, int64_t i0, int64_t i1) {
    const int64_t blocks = plan.w.blocks();
    const bool act = plan.rq.activated();
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i / blocks, n = r / plan.g.out_h, oy = r % plan.g.out_h, b = i % blocks;
      if constexpr (Tile::kPixelLanes)
        if (plan.w.tile() == kiln::qconv::Tile::kDepthwiseVnniPixels) {
          if (act)
            flip ? row_of_pixels<kKH, kKW, true, true>(plan, n, oy) : row_of_pixels<kKH, kKW, false, true>(plan, n, oy);
          else if (flip)
            row_of_pixels<kKH, kKW, true, false>(plan, n, oy);
          else
            row_of_pixels<kKH, kKW, false, false>(plan, n, oy);
          continue;
        }
      if constexpr (Tile::kChecksNearEnd)
        if (near_x_end(plan, n, oy, b)) {
          row_as<kKH, kKW, true>(plan, flip, act, n, oy, b);
          continue;
        }
      row_as<kKH, kKW, false>(plan, flip, act, n, oy, b);
    }
  }

  // conv_depthwise's contract (qconv.h). Threads take (output row, block) items, a row's blocks
  // in a row: each thread reads its own band of X's rows (by blocks, each thread read all of X:
  // mobilenet_v2's 96-channel stride-2 layer at 112x112, 1.2 MB of X, ran no faster on two
  // threads than on one).
  static void conv(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride, const PackedWeights& w,
                   const Requantize& rq, void* y, ThreadPool* pool) {
    const std::vector<uint8_t>& pad = zero_point_row(g, stride, zx, 64);
    const uint8_t* xb = static_cast<const uint8_t*>(x);
    const QuadsPlan plan{g,          xb, xb + ((g.batch * g.in_h * g.in_w - 1) * stride + g.channels), stride,
                         pad.data(), pad.data() + pad.size(), w, rq, y, rq.needs_float_clamp(),
                         rq.output == Output::kFloat ? 4 : 1};
    const int64_t items = g.batch * g.out_h * w.blocks();
    // 3x3 and 5x5 (mobilenets', efficientnets') unrolled at compile time; other windows general.
    const int64_t square = g.kernel_h == g.kernel_w ? g.kernel_h : 0;
    auto work = [&](int64_t i0, int64_t i1) {
      if (square == 3)
        rows<3, 3>(plan, x_signed, i0, i1);
      else if (square == 5)
        rows<5, 5>(plan, x_signed, i0, i1);
      else
        rows<0, 0>(plan, x_signed, i0, i1);
    };
    if (pool && items > 1)
      pool->parallel_for(items, 1, work);
    else
      work(0, items);
  }
};

}  // namespace kiln::qconv
