// The 8-bit depthwise conv's tile on AVX-512 VNNI (qconv.h, kDepthwiseVnni): one output pixel x
// 64 channels at a time, reading channels-last X where it is. A depthwise conv multiplies each
// channel by its own weights, so vpdpbusd's four products a lane must be four taps of one
// channel: per kernel row, four horizontal taps' 64 channels (one load each; taps past the
// kernel a zero vector) are interleaved byte by byte into four vectors (vpunpck{l,h}bw, then
// vpunpck{l,h}wd: vector k's lane 4 l + j is channel 16 l + 4 k + j's four taps), and each
// meets its packed weights in one vpdpbusd. A 3x3 window is then 12 vpdpbusd and 24 shuffles
// for 64 channels, where the AVX2 tile (qconv_depthwise.cc) widens every tap to 16 bits. The
// sums start from the bias; the store's saturating packs of the four vectors give the channels
// back in order. A tap outside X reads X's zero point (its product is in the bias's zx term).
// Threads take (output row, block) items, a row's blocks in a row: each thread reads its own
// band of X's rows (by blocks, each thread read all of X: mobilenet_v2's 96-channel stride-2
// layer at 112x112, 1.2 MB of X, ran no faster on two threads than on one).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/qconv/qconv.h"

// GCC 12 warns of _mm512_shuffle_f32x4's undefined pass-through operand (it has no mask).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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

struct Block {
  __m512i bias[4];
  __m512 scale[4];
  int64_t c0, count;  // first channel, channels
  __mmask64 mask;     // the block's bytes of a pixel
};

Block block_params(const Requantize& rq, int64_t channels, int64_t b) {
  Block p;
  p.c0 = b * 64, p.count = std::min<int64_t>(64, channels - p.c0);
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

struct Plan {
  const Geometry& g;
  const uint8_t* x;
  int64_t stride;       // bytes a pixel of X
  __m512i flip;         // 0x80 bytes for s8 X (moved to u8), else 0
  const uint8_t* pad;   // 64 bytes of X's zero point, as X holds it
  const PackedWeights& w;
  const Requantize& rq;
  void* y;
  bool clamp_high;      // rq.needs_float_clamp()
};

// Sums of 64 channels in the tile's lane order, quantized (or as floats) to pixel `pixel` of Y.
inline __attribute__((always_inline)) void store(const Plan& plan, const Block& bp, __m512i (&acc)[4], int64_t pixel) {
  const Requantize& rq = plan.rq;
  const int64_t at = pixel * plan.g.filters + bp.c0;
  __m512 f[4];
  for (int k = 0; k < 4; ++k) f[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[k]), bp.scale[k]);
  if (rq.output == Output::kFloat) {
    transpose_lanes(f);
    for (int v = 0; v < 4; ++v) {
      const int64_t lanes = std::clamp<int64_t>(bp.count - 16 * v, 0, 16);
      _mm512_mask_storeu_ps(static_cast<float*>(plan.y) + at + 16 * v, static_cast<__mmask16>((1u << lanes) - 1), f[v]);
    }
    return;
  }
  // As the dense tile's store (qconv_avx512vnni.cc): packs clamp below, float above if needed.
  const __m512 hi = _mm512_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
  const __m512i zp = _mm512_set1_epi16(static_cast<int16_t>(rq.zero_point));
  __m512i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm512_cvtps_epi32(plan.clamp_high ? _mm512_min_ps(f[k], hi) : f[k]);
  const __m512i w01 = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[1]), zp);
  const __m512i w23 = _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[3]), zp);
  const __m512i bytes = rq.output == Output::kS8 ? _mm512_packs_epi16(w01, w23) : _mm512_packus_epi16(w01, w23);
  _mm512_mask_storeu_epi8(static_cast<int8_t*>(plan.y) + at, bp.mask, bytes);
}

// The window's sums of one pixel: kernel row by row, four taps a quad, tap (ky, 4 q + t) read at
// at(ky, q, t) (null: past the kernel, a zero vector). kKH, kKW: the kernel when known at
// compile time (3x3), else 0.
template <int kKH, int kKW, bool kFlip, typename At>
void window_sums(const Plan& plan, const Block& bp, const int8_t* wq, At at, __m512i (&acc)[4]) {
  const int64_t kh = kKH ? kKH : plan.g.kernel_h, kw = kKW ? kKW : plan.g.kernel_w, quads = (kw + 3) / 4;
  for (int64_t ky = 0; ky < kh; ++ky)
    for (int64_t q = 0; q < quads; ++q, wq += 256) {
      __m512i tap[4];
      for (int t = 0; t < 4; ++t) {
        if (4 * q + t >= kw) {
          tap[t] = _mm512_setzero_si512();  // its weights are zero
          continue;
        }
        tap[t] = _mm512_maskz_loadu_epi8(bp.mask, at(ky, q, t));
        if (kFlip) tap[t] = _mm512_xor_si512(tap[t], plan.flip);
      }
      const __m512i ab_lo = _mm512_unpacklo_epi8(tap[0], tap[1]), ab_hi = _mm512_unpackhi_epi8(tap[0], tap[1]);
      const __m512i cd_lo = _mm512_unpacklo_epi8(tap[2], tap[3]), cd_hi = _mm512_unpackhi_epi8(tap[2], tap[3]);
      const __m512i e[4] = {_mm512_unpacklo_epi16(ab_lo, cd_lo), _mm512_unpackhi_epi16(ab_lo, cd_lo),
                            _mm512_unpacklo_epi16(ab_hi, cd_hi), _mm512_unpackhi_epi16(ab_hi, cd_hi)};
      for (int k = 0; k < 4; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], e[k], _mm512_loadu_si512(wq + 64 * k));
    }
}

// One output row (image n, row oy) of block b. Pixels whose window lies inside X (most) read it
// at fixed offsets from the window's corner; the others check each tap.
template <int kKH, int kKW, bool kFlip>
void depthwise_row(const Plan& plan, int64_t n, int64_t oy, int64_t b) {
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
    __m512i acc[4] = {bp.bias[0], bp.bias[1], bp.bias[2], bp.bias[3]};
    const int64_t ix0 = ox * g.stride_w - g.pad_left;
    if (rows_inside && ox >= ox_lo && ox < ox_hi) {
      const uint8_t* corner = plan.x + ((n * g.in_h + iy0) * g.in_w + ix0) * plan.stride + bp.c0;
      window_sums<kKH, kKW, kFlip>(plan, bp, wb, [&](int64_t ky, int64_t q, int t) {
        return corner + ky * g.dilation_h * row_bytes + (4 * q + t) * g.dilation_w * plan.stride;
      }, acc);
    } else {
      window_sums<kKH, kKW, kFlip>(plan, bp, wb, [&](int64_t ky, int64_t q, int t) {
        const int64_t iy = iy0 + ky * g.dilation_h, ix = ix0 + (4 * q + t) * g.dilation_w;
        const bool inside = iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w;
        return inside ? plan.x + ((n * g.in_h + iy) * g.in_w + ix) * plan.stride + bp.c0 : plan.pad;
      }, acc);
    }
    store(plan, bp, acc, (n * g.out_h + oy) * g.out_w + ox);
  }
}

template <int kKH, int kKW>
void depthwise_rows(const Plan& plan, bool flip, int64_t i0, int64_t i1) {
  const int64_t blocks = plan.w.blocks();
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t r = i / blocks, n = r / plan.g.out_h, oy = r % plan.g.out_h, b = i % blocks;
    if (flip)
      depthwise_row<kKH, kKW, true>(plan, n, oy, b);
    else
      depthwise_row<kKH, kKW, false>(plan, n, oy, b);
  }
}

}  // namespace

void conv_depthwise_avx512vnni(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride,
                               const PackedWeights& w, const Requantize& rq, void* y, ThreadPool* pool) {
  alignas(64) uint8_t pad[64];
  std::memset(pad, static_cast<uint8_t>(zx), sizeof(pad));
  const Plan plan{g, static_cast<const uint8_t*>(x), stride, _mm512_set1_epi8(x_signed ? static_cast<char>(0x80) : 0),
                  pad, w, rq, y, rq.needs_float_clamp()};
  const int64_t rows = g.batch * g.out_h, blocks = w.blocks();
  // 3x3 and 5x5 (mobilenets', efficientnets') unrolled at compile time; other windows general.
  const int64_t square = g.kernel_h == g.kernel_w ? g.kernel_h : 0;
  auto work = [&](int64_t i0, int64_t i1) {
    if (square == 3)
      depthwise_rows<3, 3>(plan, x_signed, i0, i1);
    else if (square == 5)
      depthwise_rows<5, 5>(plan, x_signed, i0, i1);
    else
      depthwise_rows<0, 0>(plan, x_signed, i0, i1);
  };
  if (pool && rows * blocks > 1)
    pool->parallel_for(rows * blocks, 1, work);
  else
    work(0, rows * blocks);
}

}  // namespace kiln::qconv
