// The 8-bit depthwise conv's ymm tile over quads of taps (qconv.h, kDepthwiseAvxVnni and
// kDepthwiseAvx2Bytes) for qconv_depthwise_driver.h's loops, which qconv_avxvnni.cc and
// qconv_avx2.cc instantiate, each compiled for its ISA, with a step of ymm_dot_steps.h
// multiplying four taps of a channel (one int32 lane of u8 inputs) by their four s8 weights into
// the channel's int32 sum.
// kDepthwiseVnni's layout (qconv_depthwise_avx512vnni.cc) on 32 channels a block. A block past
// a pixel's channels reads the next pixel's bytes into lanes it never stores, and copies a tap
// only where 32 bytes would pass X's end.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/qconv/qconv_activation.h"
#include "kernels/cpu/qconv/qconv_depthwise_driver.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::qconv {

template <class Step>
struct YmmQuads {
  using Vec = __m256i;
  static constexpr bool kPixelLanes = false;  // (kDepthwiseVnniPixels is the zmm tile's alone)
  static constexpr bool kChecksNearEnd = true;  // a block's 32 bytes from a tap: load_tap
  static constexpr int64_t kBlockChannels = 32;

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

  struct Block {
    __m256i bias[4];
    __m256 scale[4];
    int64_t c0, count;  // first channel, channels
    // The store's, as the zmm tile's (qconv_depthwise_avx512vnni.cc).
    __m256 hi;
    __m256i zero_point;
    bool clamp_high;
    Output output;
  };

  static Block block_params(const QuadsPlan& plan, int64_t b) {
    const Requantize& rq = plan.rq;
    Block p;
    p.hi = _mm256_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
    p.zero_point = _mm256_set1_epi16(static_cast<int16_t>(rq.zero_point));
    p.clamp_high = plan.clamp_high, p.output = rq.output;
    p.c0 = b * 32, p.count = std::min<int64_t>(32, plan.g.filters - p.c0);
    __m256 bias[4];
    for (int v = 0; v < 4; ++v) {
      const __m256i m = vec::tail_mask_avx2(static_cast<int>(p.count - 8 * v));
      bias[v] = _mm256_castsi256_ps(_mm256_maskload_epi32(rq.bias.data() + p.c0 + 8 * v, m));
      p.scale[v] = _mm256_maskload_ps(rq.scale.data() + p.c0 + 8 * v, m);
    }
    to_tile_order(bias);
    to_tile_order(p.scale);
    for (int v = 0; v < 4; ++v) p.bias[v] = _mm256_castps_si256(bias[v]);
    return p;
  }


  // Sums of 32 channels in the tile's lane order, quantized (or as floats) to Y at `out`.
  // Inline, as the zmm tile's, so that the pairs' sums stay in registers (against out of line, on
  // AVX-VNNI: mobilenet_v2's 32 channels at 112x112 36 against 43 us, 144 at 56x56 46 against 54;
  // its stride-2 96 channels, single pixels, 36 against 32).
  template <bool kActivated>
  __attribute__((always_inline)) static void store(const QuadsPlan& plan, const Block& bp, __m256i (&acc)[4],
                                                   char* out) {
    __m256 f[4];
    for (int k = 0; k < 4; ++k) f[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[k]), bp.scale[k]);
    if (bp.output == Output::kFloat) {
      from_tile_order(f);
      for (int v = 0; v < 4; ++v)
        _mm256_maskstore_ps(reinterpret_cast<float*>(out) + 8 * v,
                            vec::tail_mask_avx2(static_cast<int>(bp.count - 8 * v)), f[v]);
      return;
    }
    // As kDepthwiseVnni's store: the saturating packs clamp below (a sum too negative for cvtps'
    // int32 gives INT_MIN, which saturates to the lowest code too) and narrow, per 128-bit half
    // giving channels 0-15 | 16-31 in order; the zero point is added to the 16-bit values,
    // saturating. The upper clamp stays in float, where a huge positive sum would otherwise wrap:
    // needed only where a scale reaches 0.5 (Requantize::needs_float_clamp).
    // The activation, if any, first (lane order does not matter to it).
    if constexpr (kActivated) activate<4>(plan.rq, f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(bp.clamp_high ? _mm256_min_ps(f[k], bp.hi) : f[k]);
    const __m256i w01 = _mm256_adds_epi16(_mm256_packs_epi32(q[0], q[1]), bp.zero_point);
    const __m256i w23 = _mm256_adds_epi16(_mm256_packs_epi32(q[2], q[3]), bp.zero_point);
    const __m256i bytes = bp.output == Output::kS8 ? _mm256_packs_epi16(w01, w23) : _mm256_packus_epi16(w01, w23);
    if (bp.count == 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
      return;
    }
    alignas(32) char tmp[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), bytes);
    std::memcpy(out, tmp, static_cast<size_t>(bp.count));
  }

  // 32 bytes of X (or the pad) at p, as u8; with kNearEnd, copied first where they would pass
  // X's end.
  template <bool kFlip, bool kNearEnd>
  static __m256i load_tap(const QuadsPlan& plan, const uint8_t* p) {
    __m256i v;
    if (!kNearEnd || plan.in_pad(p) || plan.x_end - p >= 32) {
      v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    } else {
      alignas(32) uint8_t copy[32] = {};
      std::memcpy(copy, p, static_cast<size_t>(plan.x_end - p));
      v = _mm256_load_si256(reinterpret_cast<const __m256i*>(copy));
    }
    return kFlip ? _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))) : v;
  }

  // The window's sums of kPixels pixels (1, or 2 horizontally adjacent ones of a stride-1 row,
  // from the same quads: PackedWeights::pair_block): kernel row by row, four columns a quad,
  // column (ky, 4 q + t) read at at(ky, q, t). kKH, kKW: the kernel when known at compile time
  // (3x3, 5x5), else 0.
  template <int kKH, int kKW, bool kFlip, int kPixels, bool kNearEnd, typename At>
  __attribute__((always_inline)) static void window_sums(
      const QuadsPlan& plan, const Block&, const int8_t* wq, At at, __m256i (&acc)[kPixels][4]) {
    const int64_t kh = kKH ? kKH : plan.g.kernel_h, columns = (kKW ? kKW : plan.g.kernel_w) + kPixels - 1;
    const int64_t quads = (columns + 3) / 4;
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t q = 0; q < quads; ++q) {
        __m256i tap[4];
        for (int t = 0; t < 4; ++t)
          tap[t] = 4 * q + t < columns ? load_tap<kFlip, kNearEnd>(plan, at(ky, q, t))
                                       : _mm256_setzero_si256();  // zero weights
        const __m256i ab_lo = _mm256_unpacklo_epi8(tap[0], tap[1]), ab_hi = _mm256_unpackhi_epi8(tap[0], tap[1]);
        const __m256i cd_lo = _mm256_unpacklo_epi8(tap[2], tap[3]), cd_hi = _mm256_unpackhi_epi8(tap[2], tap[3]);
        const __m256i e[4] = {_mm256_unpacklo_epi16(ab_lo, cd_lo), _mm256_unpackhi_epi16(ab_lo, cd_lo),
                              _mm256_unpacklo_epi16(ab_hi, cd_hi), _mm256_unpackhi_epi16(ab_hi, cd_hi)};
        for (int p = 0; p < kPixels; ++p, wq += 128)
          for (int k = 0; k < 4; ++k)
            acc[p][k] = Step::add(acc[p][k], e[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 32 * k)));
      }
  }
};

}  // namespace kiln::qconv
