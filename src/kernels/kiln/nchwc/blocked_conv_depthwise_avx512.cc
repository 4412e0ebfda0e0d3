// ai.kiln.BlockedConv with group = C (depthwise) in AVX-512, for the stride-1 3- and 5-wide
// kernels of mobilenet/efficientnet (others run the AVX2 kernel). Compiled with KILN_AVX512_FLAGS
// (CMakeLists.txt); blocked_conv.cc calls it only when cpu_features() reports AVX-512. One zmm
// holds two neighbouring output pixels of one channel block (16 floats, contiguous in Y and, for
// each tap, in X), so a tap is one FMA per two pixels. Windows crossing the left or right edge
// use masked loads (zero for the pixels whose column lies outside), so edge tiles keep the
// tile's width; an odd last pixel is a half-masked zmm. Rows above and below the input are
// skipped. Tasks are rows of (image, block).
//
// GCC 12's intrinsics trip its uninitialized-use warnings once inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>

#include "kernels/kiln/nchwc/activation_avx512.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

constexpr int kMaxR = 8;      // zmm accumulators per tile: up to 16 pixels
constexpr int kMaxTaps = 25;  // the most taps kept duplicated (5 rows of a 5-wide kernel)

struct Job {
  const BlockedConvShape& s;
  const float* x;
  const float* w;
  float* y;
  const BlockedEpilogue& e;
  __mmask16 tail_keep;  // the real channels of the last block, in both halves
};

// Where a tile reads: the plane of its block, its first valid input row ih0 (kernel row kh0),
// `taps_h` kernel rows, and c0, the input column of tap kw = 0 of the tile's first pixel.
struct TileInput {
  const float* plane;
  int64_t ih0, c0, kh0, taps_h;
};

// R zmm (2R pixels, the last possibly a lone one when `odd`) of block cb at y, epilogue
// included, for a KW-wide kernel (3 or 5). kEdge: some window crosses the left or right edge,
// or the last zmm is half empty. A kernel row takes R + KW / 2 loads instead of KW * R: per tap
// an unaligned 64-byte load crosses a cache line every other time, and those loads, not the
// FMAs, bounded the kernel. Edge tiles run the same loop on masked loads (on 7x7 to 28x28
// planes every tile is an edge tile).
template <int R, int KW, bool kEdge>
void tile(const Job& j, const TileInput& in, const __m512* wz, int64_t cb, bool odd, float* y) {
  const BlockedConvShape& s = j.s;
  const int64_t row_step = s.dh * s.w * kBlock;
  const __m512* wr0 = wz + in.kh0 * KW;
  __m512 acc[R];
  const __m512 bias =
      j.e.bias ? _mm512_broadcast_f32x8(_mm256_loadu_ps(j.e.bias + cb * kBlock)) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = bias;
  // A kernel row loads the pairs at even offsets from the first tap's column once and makes the
  // odd-offset ones by valignd. Edge tiles load the pixels outside the input as zero (the
  // padding's value) by masks, the same for every kernel row.
  constexpr int kLoads = R + KW / 2;
  __mmask16 keep[kLoads];
  if constexpr (kEdge) {
#pragma GCC unroll 12
    for (int i = 0; i < kLoads; ++i) {
      const int64_t c = in.c0 + 2 * i;
      keep[i] = static_cast<__mmask16>((c >= 0 && c < s.w ? 0x00FF : 0) |
                                       (c + 1 >= 0 && c + 1 < s.w ? 0xFF00 : 0));
    }
  }
  const float* x0 = in.plane + in.ih0 * s.w * kBlock + in.c0 * kBlock;
  for (int64_t kh = 0; kh < in.taps_h; ++kh) {
    const float* xr = x0 + kh * row_step;
    const __m512* wr = wr0 + kh * KW;
    __m512 pairs[kLoads];  // columns 2i and 2i + 1 from the first tap's
#pragma GCC unroll 12
    for (int i = 0; i < kLoads; ++i)  // masked lanes are never read, even before the row
      pairs[i] = kEdge ? _mm512_maskz_loadu_ps(keep[i], xr + 2 * i * kBlock)
                       : _mm512_loadu_ps(xr + 2 * i * kBlock);
#pragma GCC unroll 5
    for (int kw = 0; kw < KW; ++kw) {
      const __m512 wv = wr[kw];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int i = kw / 2 + r;
        const __m512 v = kw % 2 == 0 ? pairs[i]
                                     : _mm512_castsi512_ps(_mm512_alignr_epi32(
                                           _mm512_castps_si512(pairs[i + 1]),
                                           _mm512_castps_si512(pairs[i]), 8));
        acc[r] = _mm512_fmadd_ps(v, wv, acc[r]);
      }
    }
  }
  const float* z = j.e.z ? j.e.z + (y - j.y) : nullptr;
  const __mmask16 last = odd ? 0x00FF : 0xFFFF;
  if (z && j.e.residual_first) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_add_ps(acc[r], _mm512_maskz_loadu_ps(r == R - 1 ? last : 0xFFFF, z + 2 * r * kBlock));
  }
  activate_tile(j.e.act, acc);
  if (z && !j.e.residual_first) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_add_ps(acc[r], _mm512_maskz_loadu_ps(r == R - 1 ? last : 0xFFFF, z + 2 * r * kBlock));
  }
  if (j.tail_keep != 0xFFFF && cb + 1 == s.mb) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm512_maskz_mov_ps(j.tail_keep, acc[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R - 1; ++r) _mm512_storeu_ps(y + 2 * r * kBlock, acc[r]);
  _mm512_mask_storeu_ps(y + 2 * (R - 1) * kBlock, last, acc[R - 1]);
}

using TileFn = void (*)(const Job&, const TileInput&, const __m512*, int64_t, bool, float*);
template <int KW, bool kEdge>
constexpr TileFn kTilesOf[kMaxR] = {&tile<1, KW, kEdge>, &tile<2, KW, kEdge>, &tile<3, KW, kEdge>,
                                    &tile<4, KW, kEdge>, &tile<5, KW, kEdge>, &tile<6, KW, kEdge>,
                                    &tile<7, KW, kEdge>, &tile<8, KW, kEdge>};

// The tiles for one kernel width: inside the input, and crossing an edge.
struct TileSet {
  const TileFn* inside;
  const TileFn* edge;
};

// Output row oh of block cb of image n, in tiles of as equal a width as kMaxR zmm allow.
void row(const Job& j, const TileSet& tiles, const __m512* wz, int64_t n, int64_t cb, int64_t oh) {
  const BlockedConvShape& s = j.s;
  const auto [kh0, kh1] = valid_taps(oh * s.sh - s.pt, s.dh, s.kh, s.h);
  const TileInput base{j.x + (n * s.cb + cb) * s.h * s.w * kBlock, oh * s.sh - s.pt + kh0 * s.dh, 0,
                       kh0, kh1 - kh0};
  const int64_t pairs = (s.ow + 1) / 2;
  const int64_t count = (pairs + kMaxR - 1) / kMaxR, width = (pairs + count - 1) / count;
  float* out_row = j.y + ((n * s.mb + cb) * s.oh + oh) * s.ow * kBlock;
  for (int64_t p0 = 0; p0 < pairs; p0 += width) {
    const int64_t r = std::min(width, pairs - p0), ow0 = 2 * p0;
    const bool odd = ow0 + 2 * r > s.ow;
    TileInput in = base;
    in.c0 = ow0 - s.pl;
    const bool edge = odd || in.c0 < 0 || in.c0 + 2 * r - 1 + s.kw - 1 >= s.w;
    (edge ? tiles.edge : tiles.inside)[r - 1](j, in, wz, cb, odd, out_row + ow0 * kBlock);
  }
}

}  // namespace

void blocked_conv_depthwise_avx512(const BlockedConvShape& s, const float* x, const float* w,
                                   const BlockedEpilogue& e, float* y, ThreadPool* pool) {
  // Strided and dilated rows have no neighbouring pixel pairs to load whole: two halves and an
  // insert measured no faster than AVX2 (5x5 stride 2 slower), and whole loads split by
  // vshuff32x4 1.8x slower on 3x3 stride 2. Other widths have too few layers to pay.
  if (s.sw != 1 || s.dw != 1 || (s.kw != 3 && s.kw != 5) || s.kh * s.kw > kMaxTaps) {
    blocked_conv_depthwise_avx2(s, x, w, e, y, pool);
    return;
  }
  const int64_t taps = s.kh * s.kw;
  const int64_t rem = s.channels % kBlock;
  const __mmask16 keep8 = static_cast<__mmask16>(rem == 0 ? 0xFF : (1u << rem) - 1);
  const Job j{s, x, w, y, e, static_cast<__mmask16>(keep8 | (keep8 << 8))};
  const int64_t rows = s.n * s.mb * s.oh;
  const TileSet tiles = s.kw == 3 ? TileSet{kTilesOf<3, false>, kTilesOf<3, true>}
                                  : TileSet{kTilesOf<5, false>, kTilesOf<5, true>};
  parallel_range(pool, rows, rows * s.ow * taps * kBlock * 2, [&](int64_t r0, int64_t r1) {
    // The block's taps duplicated into both halves, rebuilt when the block changes.
    __m512 wz[kMaxTaps];
    int64_t wz_block = -1;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t cb = (r / s.oh) % s.mb;
      if (cb != wz_block) {
        for (int64_t t = 0; t < taps; ++t)
          wz[t] = _mm512_broadcast_f32x8(_mm256_loadu_ps(w + (cb * taps + t) * kBlock));
        wz_block = cb;
      }
      row(j, tiles, wz, r / (s.mb * s.oh), cb, r % s.oh);
    }
  });
}

}  // namespace kiln::nchwc
