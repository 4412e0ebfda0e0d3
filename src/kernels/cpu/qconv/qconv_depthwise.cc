// The 8-bit depthwise conv (qconv.h), AVX2, on every CPU: one output pixel x 16 channels at a
// time, the window's taps in pairs, reading channels-last X where it is (no staged copy: a
// depthwise conv does 9 products a value, so a copy would cost as much as the arithmetic); a tap
// outside X reads 16 bytes of its zero point. Each tap's 16 channels are widened to 16 bits (one
// ymm); vpunpck{l,h}wd interleaves two taps' (channels 0-3 and 8-11, 4-7 and 12-15, per 128-bit
// lane) and vpmaddwd multiplies them with the two taps' weights, packed in that order, and adds
// the pair into each channel's int32 lane, exactly. The store's packs (per 128-bit lane) put the
// channels back in order. Threads take (output row, block) items, a row's blocks in a row (each
// thread then reads its own band of X's rows).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <vector>
#include <cstring>

#include "kernels/cpu/qconv/qconv_activation.h"
#include "kernels/cpu/qconv/qconv_driver.h"

namespace kiln::qconv {
namespace {

// 16 int32 or float values from channel m as the two unpacked halves: lo holds channels 0-3 and
// 8-11, hi 4-7 and 12-15 (past `count` zero).
void load_unpacked(const int32_t* p, int64_t count, __m256i* lo, __m256i* hi) {
  const __m256i a = _mm256_maskload_epi32(p, first_lanes(count)), b = _mm256_maskload_epi32(p + 8, first_lanes(count - 8));
  *lo = _mm256_permute2x128_si256(a, b, 0x20), *hi = _mm256_permute2x128_si256(a, b, 0x31);
}
void load_unpacked(const float* p, int64_t count, __m256* lo, __m256* hi) {
  const __m256 a = _mm256_maskload_ps(p, first_lanes(count)), b = _mm256_maskload_ps(p + 8, first_lanes(count - 8));
  *lo = _mm256_permute2f128_ps(a, b, 0x20), *hi = _mm256_permute2f128_ps(a, b, 0x31);
}

struct DepthwiseTiles {

  // A block's bias and scale in the accumulators' lane order.
  struct BlockParams {
    __m256i bias_lo, bias_hi;
    __m256 scale_lo, scale_hi;
    int64_t m, count;
  };

  // rq.activation on a pixel's 16 float values, out of line: inline, it would weigh on the store
  // where there is none (this tile runs 8-bit weights on AVX2, not kiln's 7-bit ones).
  [[gnu::noinline]] static void activate_pair(const Requantize& rq, __m256* lo, __m256* hi) {
    __m256 f[2] = {*lo, *hi};
    activate<2>(rq, f);
    *lo = f[0], *hi = f[1];
  }

  static void store(const TilePlan& plan, const BlockParams& bp, __m256i lo, __m256i hi, int64_t pixel) {
    const Requantize& rq = plan.rq;
    const int64_t channels = plan.g.filters, m = bp.m, count = bp.count;
    __m256 f_lo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(lo, bp.bias_lo)), bp.scale_lo);
    __m256 f_hi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(hi, bp.bias_hi)), bp.scale_hi);
    if (rq.activated()) activate_pair(rq, &f_lo, &f_hi);
    const int64_t at = pixel * channels + m;
    if (rq.output == Output::kFloat) {
      float* out = static_cast<float*>(plan.y) + at;
      _mm256_maskstore_ps(out, first_lanes(count), _mm256_permute2f128_ps(f_lo, f_hi, 0x20));
      _mm256_maskstore_ps(out + 8, first_lanes(count - 8), _mm256_permute2f128_ps(f_lo, f_hi, 0x31));
      return;
    }
    const __m256 lo_bound = _mm256_set1_ps(static_cast<float>(rq.lo - rq.zero_point));
    const __m256 hi_bound = _mm256_set1_ps(static_cast<float>(rq.hi - rq.zero_point));
    const __m256i zp = _mm256_set1_epi32(rq.zero_point);
    auto code = [&](__m256 f) {
      return _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(f, lo_bound), hi_bound)), zp);
    };
    // In range already: the packs only narrow; per lane they give channels 0-7 | 8-15.
    const __m256i words = _mm256_packs_epi32(code(f_lo), code(f_hi));
    const __m256i bytes = rq.output == Output::kS8 ? _mm256_packs_epi16(words, words) : _mm256_packus_epi16(words, words);
    const __m128i ordered = _mm256_castsi256_si128(_mm256_permute4x64_epi64(bytes, _MM_SHUFFLE(3, 1, 2, 0)));
    store_first_bytes(static_cast<char*>(plan.y) + at, ordered, count, 16);
  }

};

// The window's sums of one pixel's 16 channels into lo/hi (the unpacked lane order), tap t read
// at ptr(t); kTaps the window's taps when known at compile time (9: 3x3), else 0.
template <int kTaps, typename Ptr>
inline void window_sums(Ptr ptr, int64_t taps, __m128i flip, const int8_t* wb, __m256i& lo, __m256i& hi) {
  const int64_t n = kTaps > 0 ? kTaps : taps, pairs = (n + 1) / 2;
  auto widen = [&](int64_t t) {
    return _mm256_cvtepu8_epi16(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ptr(t))), flip));
  };
  lo = hi = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int64_t j = 0; j < pairs; ++j) {
    const __m256i a = widen(2 * j);
    const __m256i b = 2 * j + 1 < n ? widen(2 * j + 1) : _mm256_setzero_si256();
    const __m256i wl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + j * 64));
    const __m256i wh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + j * 64 + 32));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wl));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wh));
  }
}

// One output row (image n, row oy) of one block of 16 channels, reading X in place: u8 (flip:
// s8 moved to u8) channels-last of `stride` bytes a pixel; taps outside X read `pad` (zx over a
// row of X and 16 bytes more). Pixels whose window lies inside X's columns (most) read each tap
// at a fixed offset from the pixel's column, in the tap's row of X or, for a kernel row above or
// below X, the pad's (checking every tap there cost 7x7 and 14x14 layers half their speed); the
// others, and a block that runs past a pixel's bytes (channels not a multiple of 16), look up
// each tap.
void depthwise_row(const Geometry& g, const uint8_t* x, int64_t stride, uint8_t flip, const uint8_t* pad,
                   const PackedWeights& w, const TilePlan& plan, int64_t n, int64_t oy, int64_t b0) {
  const int64_t taps = w.taps(), c0 = b0 * 16;
  const int8_t* wb = w.block(b0);
  DepthwiseTiles::BlockParams bp;
  bp.m = c0, bp.count = std::min<int64_t>(16, g.filters - c0);
  load_unpacked(plan.rq.bias.data() + bp.m, bp.count, &bp.bias_lo, &bp.bias_hi);
  load_unpacked(plan.rq.scale.data() + bp.m, bp.count, &bp.scale_lo, &bp.scale_hi);
  const bool tail = c0 + 16 > stride;  // the block runs past a pixel's bytes: copy them first
  const __m128i flip16 = _mm_set1_epi8(static_cast<char>(flip));
  thread_local std::vector<const uint8_t*> at, in_row;
  thread_local std::vector<std::array<uint8_t, 16>> copies;
  at.resize(static_cast<size_t>(taps));
  in_row.resize(static_cast<size_t>(taps));
  copies.resize(static_cast<size_t>(taps));
  // The interior: columns [ox_lo, ox_hi), where tap t of pixel ox is in_row[t] + ix0 * stride.
  const int64_t iy0 = oy * g.stride_h - g.pad_top, span_w = (g.kernel_w - 1) * g.dilation_w;
  const int64_t ox_lo = std::min(g.out_w, (g.pad_left + g.stride_w - 1) / g.stride_w);
  const int64_t ox_hi = g.in_w - 1 + g.pad_left - span_w < 0 ? 0
                        : std::min(g.out_w, (g.in_w - 1 + g.pad_left - span_w) / g.stride_w + 1);
  for (int64_t ky = 0, t = 0; ky < g.kernel_h; ++ky) {
    const uint8_t* start = row_or_pad(g, x, stride, pad, n, iy0 + ky * g.dilation_h) + c0;
    for (int64_t kx = 0; kx < g.kernel_w; ++kx, ++t)
      in_row[static_cast<size_t>(t)] = start + kx * g.dilation_w * stride;
  }
  const uint8_t* const* columns = in_row.data();
  for (int64_t ox = 0; ox < g.out_w; ++ox) {
    __m256i lo, hi;
    const int64_t ix0 = ox * g.stride_w - g.pad_left;
    if (!tail && ox >= ox_lo && ox < ox_hi) {
      const int64_t column = ix0 * stride;
      auto ptr = [&](int64_t t) { return columns[t] + column; };
      if (taps == 9)
        window_sums<9>(ptr, taps, flip16, wb, lo, hi);
      else
        window_sums<0>(ptr, taps, flip16, wb, lo, hi);
    } else {
      for (int64_t ky = 0, t = 0; ky < g.kernel_h; ++ky)
        for (int64_t kx = 0; kx < g.kernel_w; ++kx, ++t) {
          const int64_t iy = iy0 + ky * g.dilation_h, ix = ix0 + kx * g.dilation_w;
          const bool inside = iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w;
          const uint8_t* p = inside ? x + ((n * g.in_h + iy) * g.in_w + ix) * stride + c0 : pad;
          if (inside && tail) {
            std::array<uint8_t, 16>& copy = copies[static_cast<size_t>(t)];
            std::memcpy(copy.data(), pad, 16);
            std::memcpy(copy.data(), p, static_cast<size_t>(stride - c0));
            p = copy.data();
          }
          at[static_cast<size_t>(t)] = p;
        }
      window_sums<0>([&](int64_t t) { return at[static_cast<size_t>(t)]; }, taps, flip16, wb, lo, hi);
    }
    DepthwiseTiles::store(plan, bp, lo, hi, (n * g.out_h + oy) * g.out_w + ox);
  }
}

}  // namespace

void conv_depthwise(const Geometry& g, const void* x, bool x_signed, int32_t zx, int64_t stride, const PackedWeights& w,
                    const Requantize& rq, void* y, ThreadPool* pool) {
  const Staged staged{x, g.in_h, g.in_w, g.channels};
  static const std::vector<int64_t> kNoTaps;  // (the depthwise tiles find their taps themselves)
  const TilePlan plan{g, staged, w, rq, y, nullptr, 1, kNoTaps};  // no residual: the depthwise tiles have none
  const uint8_t flip = x_signed ? 0x80 : 0;
  // (X's zero point as X holds it: the load's flip treats it as X's values.)
  const uint8_t* pad = zero_point_row(g, stride, zx, 16).data();
  const int64_t rows = g.batch * g.out_h, blocks = w.blocks();
  auto work = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b0 = i % blocks, r = i / blocks;
      depthwise_row(g, static_cast<const uint8_t*>(x), stride, flip, pad, w, plan, r / g.out_h, r % g.out_h, b0);
    }
  };
  if (pool && rows * blocks > 1)
    pool->parallel_for(rows * blocks, 1, work);
  else
    work(0, rows * blocks);
}

}  // namespace kiln::qconv
