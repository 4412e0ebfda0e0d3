// The 8-bit depthwise conv's ymm tile over quads of taps (qconv.h, kDepthwiseAvxVnni and
// kDepthwiseAvx2Bytes), which qconv_depthwise_avxvnni.cc and qconv_depthwise_avx2_bytes.cc
// instantiate, each compiled for its ISA, with the step that multiplies four taps of a channel
// (one int32 lane of u8 inputs) by their four s8 weights and adds the products into the
// channel's int32 sum:
//   Step::add(acc, inputs, weights) -> acc + the four products of every lane.
// The layout is kDepthwiseVnni's (qconv_depthwise_avx512vnni.cc) on 32 channels: one output
// pixel x 32 channels at a time, reading channels-last X where it is; per kernel row, four
// horizontal taps' 32 channels are interleaved byte by byte (vpunpck{l,h}bw, then {l,h}wd:
// vector k's lane 4 l + j is channel 16 l + 4 k + j's four taps, l the 128-bit half), and each
// vector meets its packed weights in one step. The sums start from the bias; the store's
// saturating packs give the channels back in order. A tap outside X reads X's zero point (its
// product is in the bias's zx term); a block past a pixel's channels reads the next pixel's
// bytes into lanes it never stores, and copies a tap only where 32 bytes would pass X's end.
// Everything here is a template of Step, so each file's instantiation is its own code.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/cpu/qconv/qconv.h"

namespace kiln::qconv {

template <class Step>
struct DepthwiseQuads {
  // 32 channels in order (v[0] channels 0-7, ..., v[3] 24-31) to the tile's lane order (vector k
  // holds channels 4k..4k+3 in its low half, 16+4k..16+4k+3 in its high half), and back.
  static void to_tile_order(__m256 (&v)[4]) {
    const __m256 a = _mm256_permute2f128_ps(v[0], v[2], 0x20), b = _mm256_permute2f128_ps(v[0], v[2], 0x31);
    const __m256 c = _mm256_permute2f128_ps(v[1], v[3], 0x20), d = _mm256_permute2f128_ps(v[1], v[3], 0x31);
    v[0] = a, v[1] = b, v[2] = c, v[3] = d;
  }
  static void from_tile_order(__m256 (&v)[4]) {
    const __m256 a = _mm256_permute2f128_ps(v[0], v[1], 0x20), b = _mm256_permute2f128_ps(v[2], v[3], 0x20);
    const __m256 c = _mm256_permute2f128_ps(v[0], v[1], 0x31), d = _mm256_permute2f128_ps(v[2], v[3], 0x31);
    v[0] = a, v[1] = b, v[2] = c, v[3] = d;
  }

  // The first n (clamped to 0..8) of 8 int32 lanes, as a maskload/maskstore mask.
  static __m256i lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(n, 0, 8))),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }

  struct Block {
    __m256i bias[4];
    __m256 scale[4];
    int64_t c0, count;  // first channel, channels
  };

  static Block block_params(const Requantize& rq, int64_t channels, int64_t b) {
    Block p;
    p.c0 = b * 32, p.count = std::min<int64_t>(32, channels - p.c0);
    __m256 bias[4];
    for (int v = 0; v < 4; ++v) {
      const __m256i m = lanes(p.count - 8 * v);
      bias[v] = _mm256_castsi256_ps(_mm256_maskload_epi32(rq.bias.data() + p.c0 + 8 * v, m));
      p.scale[v] = _mm256_maskload_ps(rq.scale.data() + p.c0 + 8 * v, m);
    }
    to_tile_order(bias);
    to_tile_order(p.scale);
    for (int v = 0; v < 4; ++v) p.bias[v] = _mm256_castps_si256(bias[v]);
    return p;
  }

  struct Plan {
    const Geometry& g;
    const uint8_t* x;
    const uint8_t* x_end;  // one past X's last byte
    int64_t stride;        // bytes a pixel of X
    __m256i flip;          // 0x80 bytes for s8 X (moved to u8), else 0
    const uint8_t* pad;    // 32 bytes of X's zero point, as X holds it
    const PackedWeights& w;
    const Requantize& rq;
    void* y;
    bool clamp_high;  // rq.needs_float_clamp()
  };

  // Sums of 32 channels in the tile's lane order, quantized (or as floats) to pixel `pixel` of Y.
  static void store(const Plan& plan, const Block& bp, __m256i (&acc)[4], int64_t pixel) {
    const Requantize& rq = plan.rq;
    const int64_t at = pixel * plan.g.filters + bp.c0;
    __m256 f[4];
    for (int k = 0; k < 4; ++k) f[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[k]), bp.scale[k]);
    if (rq.output == Output::kFloat) {
      from_tile_order(f);
      for (int v = 0; v < 4; ++v)
        _mm256_maskstore_ps(static_cast<float*>(plan.y) + at + 8 * v, lanes(bp.count - 8 * v), f[v]);
      return;
    }
    // As kDepthwiseVnni's store: the saturating packs clamp below (a sum too negative for cvtps'
    // int32 gives INT_MIN, which saturates to the lowest code too) and narrow, per 128-bit half
    // giving channels 0-15 | 16-31 in order; the zero point is added to the 16-bit values,
    // saturating. The upper clamp stays in float, where a huge positive sum would otherwise wrap:
    // needed only where a scale reaches 0.5 (Requantize::needs_float_clamp).
    const __m256 hi = _mm256_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
    const __m256i zp = _mm256_set1_epi16(static_cast<int16_t>(rq.zero_point));
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(plan.clamp_high ? _mm256_min_ps(f[k], hi) : f[k]);
    const __m256i w01 = _mm256_adds_epi16(_mm256_packs_epi32(q[0], q[1]), zp);
    const __m256i w23 = _mm256_adds_epi16(_mm256_packs_epi32(q[2], q[3]), zp);
    const __m256i bytes = rq.output == Output::kS8 ? _mm256_packs_epi16(w01, w23) : _mm256_packus_epi16(w01, w23);
    char* out = static_cast<char*>(plan.y) + at;
    if (bp.count == 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
      return;
    }
    alignas(32) char tmp[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), bytes);
    std::memcpy(out, tmp, static_cast<size_t>(bp.count));
  }

  // 32 bytes of X at p, as u8; copied first where they would pass X's end.
  template <bool kFlip>
  static __m256i load_tap(const Plan& plan, const uint8_t* p) {
    __m256i v;
    if (p == plan.pad || plan.x_end - p >= 32) {
      v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    } else {
      alignas(32) uint8_t copy[32] = {};
      std::memcpy(copy, p, static_cast<size_t>(plan.x_end - p));
      v = _mm256_load_si256(reinterpret_cast<const __m256i*>(copy));
    }
    return kFlip ? _mm256_xor_si256(v, plan.flip) : v;
  }

  // The window's sums of one pixel: kernel row by row, four taps a quad, tap (ky, 4 q + t) read
  // at at(ky, q, t). kKH, kKW: the kernel when known at compile time (3x3, 5x5), else 0.
  template <int kKH, int kKW, bool kFlip, typename At>
  static void window_sums(const Plan& plan, const int8_t* wq, At at, __m256i (&acc)[4]) {
    const int64_t kh = kKH ? kKH : plan.g.kernel_h, kw = kKW ? kKW : plan.g.kernel_w, quads = (kw + 3) / 4;
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t q = 0; q < quads; ++q, wq += 128) {
        __m256i tap[4];
        for (int t = 0; t < 4; ++t)
          tap[t] = 4 * q + t < kw ? load_tap<kFlip>(plan, at(ky, q, t)) : _mm256_setzero_si256();  // zero weights
        const __m256i ab_lo = _mm256_unpacklo_epi8(tap[0], tap[1]), ab_hi = _mm256_unpackhi_epi8(tap[0], tap[1]);
        const __m256i cd_lo = _mm256_unpacklo_epi8(tap[2], tap[3]), cd_hi = _mm256_unpackhi_epi8(tap[2], tap[3]);
        const __m256i e[4] = {_mm256_unpacklo_epi16(ab_lo, cd_lo), _mm256_unpackhi_epi16(ab_lo, cd_lo),
                              _mm256_unpacklo_epi16(ab_hi, cd_hi), _mm256_unpackhi_epi16(ab_hi, cd_hi)};
        for (int k = 0; k < 4; ++k)
          acc[k] = Step::add(acc[k], e[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 32 * k)));
      }
  }

  // One output row (image n, row oy) of block b. Pixels whose window lies inside X (most) read it
  // at fixed offsets from the window's corner; the others check each tap.
  template <int kKH, int kKW, bool kFlip>
  static void row(const Plan& plan, int64_t n, int64_t oy, int64_t b) {
    const Geometry& g = plan.g;
    const Block bp = block_params(plan.rq, g.filters, b);
    const int8_t* wb = plan.w.block(b);
    const int64_t iy0 = oy * g.stride_h - g.pad_top, span_w = (g.kernel_w - 1) * g.dilation_w;
    const bool rows_inside = iy0 >= 0 && iy0 + (g.kernel_h - 1) * g.dilation_h < g.in_h;
    const int64_t ox_lo = std::min(g.out_w, (g.pad_left + g.stride_w - 1) / g.stride_w);
    const int64_t ox_hi = g.in_w - 1 + g.pad_left - span_w < 0
                              ? 0
                              : std::min(g.out_w, (g.in_w - 1 + g.pad_left - span_w) / g.stride_w + 1);
    const int64_t row_bytes = g.in_w * plan.stride;
    for (int64_t ox = 0; ox < g.out_w; ++ox) {
      __m256i acc[4] = {bp.bias[0], bp.bias[1], bp.bias[2], bp.bias[3]};
      const int64_t ix0 = ox * g.stride_w - g.pad_left;
      if (rows_inside && ox >= ox_lo && ox < ox_hi) {
        const uint8_t* corner = plan.x + ((n * g.in_h + iy0) * g.in_w + ix0) * plan.stride + bp.c0;
        window_sums<kKH, kKW, kFlip>(plan, wb, [&](int64_t ky, int64_t q, int t) {
          return corner + ky * g.dilation_h * row_bytes + (4 * q + t) * g.dilation_w * plan.stride;
        }, acc);
      } else {
        window_sums<kKH, kKW, kFlip>(plan, wb, [&](int64_t ky, int64_t q, int t) {
          const int64_t iy = iy0 + ky * g.dilation_h, ix = ix0 + (4 * q + t) * g.dilation_w;
          const bool inside = iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w;
          return inside ? plan.x + ((n * g.in_h + iy) * g.in_w + ix) * plan.stride + bp.c0 : plan.pad;
        }, acc);
      }
      store(plan, bp, acc, (n * g.out_h + oy) * g.out_w + ox);
    }
  }

  template <int kKH, int kKW>
  static void rows(const Plan& plan, bool flip, int64_t i0, int64_t i1) {
    const int64_t blocks = plan.w.blocks();
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i / blocks, n = r / plan.g.out_h, oy = r % plan.g.out_h, b = i % blocks;
      if (flip)
        row<kKH, kKW, true>(plan, n, oy, b);
      else
        row<kKH, kKW, false>(plan, n, oy, b);
    }
  }

  // conv_depthwise's contract (qconv.h). Threads take (output row, block) items, a row's blocks
  // in a row: each thread reads its own band of X's rows.
  static void conv(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride, const PackedWeights& w,
                   const Requantize& rq, void* y, ThreadPool* pool) {
    alignas(32) uint8_t pad[32];
    std::memset(pad, static_cast<uint8_t>(zx), sizeof(pad));
    const uint8_t* xb = static_cast<const uint8_t*>(x);
    const Plan plan{g, xb, xb + ((g.batch * g.in_h * g.in_w - 1) * stride + g.channels),
                    stride, _mm256_set1_epi8(x_signed ? static_cast<char>(0x80) : 0), pad, w, rq, y,
                    rq.needs_float_clamp()};
    const int64_t items = g.batch * g.out_h * w.blocks();
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
