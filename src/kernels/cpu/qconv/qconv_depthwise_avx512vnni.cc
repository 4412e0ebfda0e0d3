// The 8-bit depthwise conv's tile on AVX-512 VNNI (qconv.h, kDepthwiseVnni): one output pixel x
// 64 channels at a time, reading channels-last X where it is. A depthwise conv multiplies each
// channel by its own weights, so vpdpbusd's four products a lane must be four taps of one
// channel: per kernel row, four horizontal taps' 64 channels (one load each; taps past the
// kernel a zero vector) are interleaved byte by byte into four vectors (vpunpck{l,h}bw, then
// vpunpck{l,h}wd: vector k's lane 4 l + j is channel 16 l + 4 k + j's four taps), and each
// meets its packed weights in one vpdpbusd. A 3x3 window is then 12 vpdpbusd and 24 shuffles
// for 64 channels, where the AVX2 tile (qconv_depthwise.cc) widens every tap to 16 bits; on a
// stride-1 row two pixels share each quad of columns, 12 shuffles a pixel (the driver). The
// sums start from the bias; the store's saturating packs of the four vectors give the channels
// back in order. The loops over pixels and blocks are qconv_depthwise_driver.h's.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

// GCC 12 warns of _mm512_shuffle_f32x4's undefined pass-through operand (it has no mask), and
// of the masked intrinsics' in the activations (activation_avx512.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/cpu/qconv/qconv_activation.h"
#include "kernels/cpu/qconv/qconv_depthwise_driver.h"

namespace kiln::qconv {
namespace {

// The four vectors' 128-bit lanes transposed: lane l of vector k <-> lane k of vector l. Takes
// 64 channels in order to the tile's lane order (vector k, lane 4 l + j = channel 16 l + 4 k + j)
// and back.
void transpose_lanes(__m512 (&v)[4]) {
  const __m512 t0 = _mm512_shuffle_f32x4(v[0], v[1], 0x44), t1 = _mm512_shuffle_f32x4(v[2], v[3], 0x44);
  const __m512 t2 = _mm512_shuffle_f32x4(v[0], v[1], 0xEE), t3 = _mm512_shuffle_f32x4(v[2], v[3], 0xEE);
  v[0] = _mm512_shuffle_f32x4(t0, t1, 0x88), v[1] = _mm512_shuffle_f32x4(t0, t1, 0xDD);
  v[2] = _mm512_shuffle_f32x4(t2, t3, 0x88), v[3] = _mm512_shuffle_f32x4(t2, t3, 0xDD);
}

struct ZmmQuads {
  using Vec = __m512i;
  static constexpr bool kPixelLanes = true;  // kDepthwiseVnniPixels (qconv_depthwise_driver.h)
  static constexpr bool kChecksNearEnd = false;  // masked loads read a block's channels alone

  struct Block {
    __m512i bias[4];
    __m512 scale[4];
    int64_t c0, count;  // first channel, channels
    __mmask64 mask;     // the block's bytes of a pixel
    // The store's: the codes' upper bound less the zero point (float), the zero point (16-bit
    // lanes), whether the upper clamp is needed (Requantize::needs_float_clamp), Y's type.
    __m512 hi;
    __m512i zero_point;
    bool clamp_high;
    Output output;
  };

  static void store_constants(const QuadsPlan& plan, Block& p) {
    p.hi = _mm512_set1_ps(static_cast<float>(plan.rq.hi - plan.rq.zero_point));
    p.zero_point = _mm512_set1_epi16(static_cast<int16_t>(plan.rq.zero_point));
    p.clamp_high = plan.clamp_high, p.output = plan.rq.output;
  }

  static Block block_params(const QuadsPlan& plan, int64_t b) {
    const Requantize& rq = plan.rq;
    Block p;
    store_constants(plan, p);
    p.c0 = b * 64, p.count = std::min<int64_t>(64, plan.g.filters - p.c0);
    p.mask = p.count == 64 ? ~__mmask64{0} : (__mmask64{1} << p.count) - 1;
    __m512 bias[4];
    for (int v = 0; v < 4; ++v) {
      const __mmask16 m = static_cast<__mmask16>((1u << std::clamp<int64_t>(p.count - 16 * v, 0, 16)) - 1);
      bias[v] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(m, rq.bias.data() + p.c0 + 16 * v));
      p.scale[v] = _mm512_maskz_loadu_ps(m, rq.scale.data() + p.c0 + 16 * v);
    }
    transpose_lanes(bias);
    transpose_lanes(p.scale);
    for (int v = 0; v < 4; ++v) p.bias[v] = _mm512_castps_si512(bias[v]);
    return p;
  }


  // kDepthwiseVnniPixels' block: lane v of the 64 is channel v % channels of the vector's pixel
  // v / channels.
  static Block pixels_block_params(const QuadsPlan& plan) {
    const Requantize& rq = plan.rq;
    const int64_t channels = plan.g.channels;
    alignas(64) int32_t bias[64];
    alignas(64) float scale[64];
    for (int64_t v = 0; v < 64; ++v) {
      const size_t c = static_cast<size_t>(v % channels);
      bias[v] = rq.bias[c], scale[v] = rq.scale[c];
    }
    Block p;
    store_constants(plan, p);
    p.c0 = 0, p.count = 64, p.mask = ~__mmask64{0};
    __m512 b[4];
    for (int v = 0; v < 4; ++v)
      b[v] = _mm512_castsi512_ps(_mm512_load_si512(bias + 16 * v)), p.scale[v] = _mm512_load_ps(scale + 16 * v);
    transpose_lanes(b);
    transpose_lanes(p.scale);
    for (int v = 0; v < 4; ++v) p.bias[v] = _mm512_castps_si512(b[v]);
    return p;
  }

  // The block's first `bytes` lanes (the pixels a row's last vector stores).
  static void keep_lanes(Block& bp, int64_t bytes) {
    bp.count = bytes, bp.mask = bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
  }

  // Tap column ix of the vector's pixels (pixel j reads X's column ix + j, `channels` bytes each)
  // from row `row` of X, or the pad row: lanes whose column lies outside X hold X's zero point,
  // unread (a masked load reads nothing, nor faults, in the lanes it leaves).
  static __m512i load_pixels(const QuadsPlan& plan, const uint8_t* row, int64_t ix, int64_t channels) {
    const __m512i zx = _mm512_set1_epi8(static_cast<char>(plan.pad[0]));
    if (plan.in_pad(row)) return zx;
    const int64_t pixels = 64 / channels;
    const int64_t first = std::clamp<int64_t>(-ix, 0, pixels), last = std::clamp<int64_t>(plan.g.in_w - ix, 0, pixels);
    if (first >= last) return zx;
    const __mmask64 m = (last * channels >= 64 ? ~__mmask64{0} : (__mmask64{1} << (last * channels)) - 1) &
                        ~((__mmask64{1} << (first * channels)) - 1);
    // (the address of lane 0, maybe before X: formed as an integer, only lanes in m read)
    const auto at =
        reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(ix * channels));
    return _mm512_mask_loadu_epi8(zx, m, at);
  }

  // Sums of 64 channels in the tile's lane order, quantized (or as floats) to Y at `out`.
  template <bool kActivated>
  __attribute__((always_inline)) static void store(const QuadsPlan& plan, const Block& bp, __m512i (&acc)[4],
                                                   char* out) {
    __m512 f[4];
    for (int k = 0; k < 4; ++k) f[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[k]), bp.scale[k]);
    if (bp.output == Output::kFloat) {
      transpose_lanes(f);
      for (int v = 0; v < 4; ++v) {
        const int64_t lanes = std::clamp<int64_t>(bp.count - 16 * v, 0, 16);
        _mm512_mask_storeu_ps(reinterpret_cast<float*>(out) + 16 * v, static_cast<__mmask16>((1u << lanes) - 1), f[v]);
      }
      return;
    }
    // As the dense tile's store (qconv_avx512vnni.cc): the activation, if any (lane order does not
    // matter to it), then packs clamp below, float above if needed.
    if constexpr (kActivated) activate<4>(plan.rq, f);
    __m512i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm512_cvtps_epi32(bp.clamp_high ? _mm512_min_ps(f[k], bp.hi) : f[k]);
    const __m512i w01 = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[1]), bp.zero_point);
    const __m512i w23 = _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[3]), bp.zero_point);
    const __m512i bytes = bp.output == Output::kS8 ? _mm512_packs_epi16(w01, w23) : _mm512_packus_epi16(w01, w23);
    _mm512_mask_storeu_epi8(out, bp.mask, bytes);
  }

  // The window's sums of kPixels pixels (1, or 2 horizontally adjacent ones of a stride-1 row,
  // from the same quads: PackedWeights::pair_block): kernel row by row, four columns a quad,
  // column (ky, 4 q + t) read at at(ky, q, t), or at(ky, q, t) itself where it is the vector.
  // kKH, kKW: the kernel when known at compile time (3x3, 5x5), else 0.
  template <int kKH, int kKW, bool kFlip, int kPixels, bool kNearEnd, typename At>
  __attribute__((always_inline)) static void window_sums(
      const QuadsPlan& plan, const Block& bp, const int8_t* wq, At at, __m512i (&acc)[kPixels][4]) {
    const int64_t kh = kKH ? kKH : plan.g.kernel_h, columns = (kKW ? kKW : plan.g.kernel_w) + kPixels - 1;
    const int64_t quads = (columns + 3) / 4;
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t q = 0; q < quads; ++q) {
        __m512i tap[4];
        for (int t = 0; t < 4; ++t) {
          if (4 * q + t >= columns) {
            tap[t] = _mm512_setzero_si512();  // its weights are zero
            continue;
          }
          if constexpr (std::is_pointer_v<decltype(at(ky, q, t))>)
            tap[t] = _mm512_maskz_loadu_epi8(bp.mask, at(ky, q, t));
          else
            tap[t] = at(ky, q, t);
          if (kFlip) tap[t] = _mm512_xor_si512(tap[t], _mm512_set1_epi8(static_cast<char>(0x80)));
        }
        const __m512i ab_lo = _mm512_unpacklo_epi8(tap[0], tap[1]), ab_hi = _mm512_unpackhi_epi8(tap[0], tap[1]);
        const __m512i cd_lo = _mm512_unpacklo_epi8(tap[2], tap[3]), cd_hi = _mm512_unpackhi_epi8(tap[2], tap[3]);
        const __m512i e[4] = {_mm512_unpacklo_epi16(ab_lo, cd_lo), _mm512_unpackhi_epi16(ab_lo, cd_lo),
                              _mm512_unpacklo_epi16(ab_hi, cd_hi), _mm512_unpackhi_epi16(ab_hi, cd_hi)};
        for (int p = 0; p < kPixels; ++p, wq += 256)
          for (int k = 0; k < 4; ++k) acc[p][k] = _mm512_dpbusd_epi32(acc[p][k], e[k], _mm512_loadu_si512(wq + 64 * k));
      }
  }
};

}  // namespace

void conv_depthwise_avx512vnni(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride,
                               const PackedWeights& w, const Requantize& rq, void* y, ThreadPool* pool) {
  DepthwiseQuads<ZmmQuads>::conv(g, x, x_signed, zx, stride, w, rq, y, pool);
}

}  // namespace kiln::qconv
