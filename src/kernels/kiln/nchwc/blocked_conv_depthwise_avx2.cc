// ai.kiln.BlockedConv with group = C (depthwise) in AVX2/FMA: the 8 lanes of a block are 8
// channels, so a register tile is R output pixels of one block, each tap one FMA per pixel.
// Every tile keeps R independent accumulators: a 3-wide tile whose window crosses the left or
// right edge reads a small zero-padded copy of its input columns, so edge pixels cost what
// interior ones do (on 7x7 and 14x14 planes most pixels are edge pixels); wider kernels' edge
// tiles skip the taps outside. Rows above and below the input are skipped, which keeps R.
// Tasks are rows of (image, channel block), consecutive rows on one thread so that the input
// rows they share stay in cache.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/kiln/nchwc/activation_avx2.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

constexpr int kMaxR = 8;

struct Job {
  const BlockedConvShape& s;
  const float* x;
  const float* w;
  float* y;
  const BlockedEpilogue& e;
  __m256 tail_keep;
  bool has_tail;
};

// Where a tile reads its input: input row `ih0` (that of kernel row kh0, the first inside the
// image) of the tile's channel plane `plane`, from column c0 (that of tap kw = 0 of the tile's
// first pixel; negative at the left edge); `taps_h` kernel rows.
struct TileInput {
  const float* plane;
  int64_t ih0, c0, kh0, taps_h;
  float* window;  // an edge tile's zero-padded copy of its window (the thread's scratch)
};

// R output pixels of block cb at y, epilogue included. KW is the kernel width when it is 3 or 5
// (taps unrolled), else 0 and read from the shape. kEdge: the tile's windows cross the left or
// right edge of the input. A 3-wide edge tile then reads a zero-padded copy of its window's
// columns (the thread's scratch, in L1) and runs an inside tile's FMAs: 2-7 % faster on
// mobilenet's 3x3 layers than a test per pixel and tap (Zen 2). Wider kernels keep the tests:
// their copy measured 4-13 % slower on efficientnet's 5x5 layers.
template <int R, int KW, bool kEdge>
void tile(const Job& j, const TileInput& in, int64_t cb, float* y) {
  constexpr bool kCopy = kEdge && KW == 3, kTest = kEdge && !kCopy;
  const BlockedConvShape& s = j.s;
  const int64_t kw_n = KW ? KW : s.kw;
  const float* wc = j.w + (cb * s.kh + in.kh0) * kw_n * kBlock;
  const int64_t xstep = s.sw * kBlock;
  const float* row0 = in.plane + in.ih0 * s.w * kBlock;  // kernel row kh0's input row
  int64_t row_step = s.dh * s.w * kBlock;
  const float* x0 = row0;  // pixel 0's tap (kh0, 0); kTest: its column is c0, maybe outside
  if constexpr (!kEdge) x0 += in.c0 * kBlock;
  if constexpr (kCopy) {
    // Columns [c0, c0 + span) of the taps_h rows read, the ones outside the input zero.
    const int64_t span = (R - 1) * s.sw + (kw_n - 1) * s.dw + 1;
    const int64_t lo = std::clamp<int64_t>(-in.c0, 0, span);
    const int64_t hi = std::clamp<int64_t>(s.w - in.c0, lo, span);
    for (int64_t kh = 0; kh < in.taps_h; ++kh) {
      float* dst = in.window + kh * span * kBlock;
      const float* src = row0 + kh * row_step;
      for (int64_t c = 0; c < span; ++c)
        _mm256_storeu_ps(dst + c * kBlock, c >= lo && c < hi
                                               ? _mm256_loadu_ps(src + (in.c0 + c) * kBlock)
                                               : _mm256_setzero_ps());
    }
    x0 = in.window;
    row_step = span * kBlock;
  }
  // The r loops are unrolled by pragma: left to itself GCC keeps acc on the stack, filled and
  // emptied by memcpy-like moves around the FMA loop (measured: 20-40% slower).
  __m256 acc[R];
  const __m256 bias = j.e.bias ? _mm256_loadu_ps(j.e.bias + cb * kBlock) : _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = bias;
  // kTest: the pixels r in [r0, r1) whose column under tap kw lies inside the input, the same for
  // every kernel row, so worked out once (two divisions per tap cost more than its FMAs).
  int64_t first[KW ? KW : 1], end[KW ? KW : 1];
  auto inside = [&](int64_t kw, int64_t& r0, int64_t& r1) {
    const int64_t c = in.c0 + kw * s.dw;
    r0 = c >= 0 ? 0 : (-c + s.sw - 1) / s.sw;
    r1 = c >= s.w ? 0 : (s.w - 1 - c) / s.sw + 1;
  };
  if constexpr (kTest && KW != 0)
    for (int64_t kw = 0; kw < KW; ++kw) inside(kw, first[kw], end[kw]);
  for (int64_t kh = 0; kh < in.taps_h; ++kh) {
    const float* xr = x0 + kh * row_step;
    const float* wr = wc + kh * kw_n * kBlock;
    for (int64_t kw = 0; kw < kw_n; ++kw) {
      const __m256 wv = _mm256_loadu_ps(wr + kw * kBlock);
      if constexpr (kTest) {
        // Pixels r with 0 <= c + r * sw < w, c the column of pixel 0 under this tap.
        const int64_t c = in.c0 + kw * s.dw;
        int64_t r0, r1;
        if constexpr (KW != 0) {
          r0 = first[kw];
          r1 = end[kw];
        } else {
          inside(kw, r0, r1);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          if (r >= r0 && r < r1)
            acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + (c + r * s.sw) * kBlock), wv, acc[r]);
      } else {
        const float* xp = xr + kw * s.dw * kBlock;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + r * xstep), wv, acc[r]);
      }
    }
  }
  const float* z = j.e.z ? j.e.z + (y - j.y) : nullptr;
  if (z && j.e.residual_first) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_loadu_ps(z + r * kBlock));
  }
  activate_tile(j.e.act, acc);
  if (z && !j.e.residual_first) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_loadu_ps(z + r * kBlock));
  }
  if (j.has_tail && cb + 1 == s.mb) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = _mm256_and_ps(acc[r], j.tail_keep);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * kBlock, acc[r]);
}

using TileFn = void (*)(const Job&, const TileInput&, int64_t, float*);
template <int KW, bool kEdge>
constexpr TileFn kTilesOf[kMaxR] = {&tile<1, KW, kEdge>, &tile<2, KW, kEdge>, &tile<3, KW, kEdge>,
                                    &tile<4, KW, kEdge>, &tile<5, KW, kEdge>, &tile<6, KW, kEdge>,
                                    &tile<7, KW, kEdge>, &tile<8, KW, kEdge>};

// The tiles for one kernel width: [0] inside the input, [1] crossing an edge.
struct TileSet {
  const TileFn* inside;
  const TileFn* edge;
};

// Output row oh of block cb of image n, in tiles of `width` pixels (at most 8, the row cut
// evenly: 28 pixels are 4 tiles of 7, not 8 + 8 + 8 + 4).
void row(const Job& j, const TileSet& tiles, int64_t width, float* window, int64_t n, int64_t cb,
         int64_t oh) {
  const BlockedConvShape& s = j.s;
  const auto [kh0, kh1] = valid_taps(oh * s.sh - s.pt, s.dh, s.kh, s.h);
  const TileInput base{j.x + (n * s.cb + cb) * s.h * s.w * kBlock, oh * s.sh - s.pt + kh0 * s.dh, 0,
                       kh0, kh1 - kh0, window};
  float* out_row = j.y + ((n * s.mb + cb) * s.oh + oh) * s.ow * kBlock;
  for (int64_t ow0 = 0; ow0 < s.ow; ow0 += width) {
    const int64_t r = std::min(width, s.ow - ow0);
    TileInput in = base;
    in.c0 = ow0 * s.sw - s.pl;
    const bool edge = in.c0 < 0 || (ow0 + r - 1) * s.sw - s.pl + (s.kw - 1) * s.dw >= s.w;
    (edge ? tiles.edge : tiles.inside)[r - 1](j, in, cb, out_row + ow0 * kBlock);
  }
}

}  // namespace

void blocked_conv_depthwise_avx2(const BlockedConvShape& s, const float* x, const float* w,
                                 const BlockedEpilogue& e, float* y, ThreadPool* pool) {
  const int64_t rem = s.channels % kBlock;
  const Job j{s,
              x,
              w,
              y,
              e,
              _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)),
                                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))),
              rem != 0};
  // Rows are independent; a task is one row of one block.
  const int64_t rows = s.n * s.mb * s.oh;
  const TileSet tiles = s.kw == 3   ? TileSet{kTilesOf<3, false>, kTilesOf<3, true>}
                        : s.kw == 5 ? TileSet{kTilesOf<5, false>, kTilesOf<5, true>}
                                    : TileSet{kTilesOf<0, false>, kTilesOf<0, true>};
  const int64_t count = (s.ow + kMaxR - 1) / kMaxR, width = (s.ow + count - 1) / count;
  const int64_t span = (kMaxR - 1) * s.sw + (s.kw - 1) * s.dw + 1;  // an edge tile's window
  parallel_range(pool, rows, rows * s.ow * s.kh * s.kw * kBlock * 2, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> window;
    window.resize(static_cast<size_t>(s.kh * span * kBlock));
    // Row r is (image, block, output row) = (r / (mb oh), r / oh % mb, r % oh), stepped rather
    // than divided: on a 7x7 plane the divisions cost as much as the row's FMAs.
    int64_t oh = r0 % s.oh, cb = (r0 / s.oh) % s.mb, n = r0 / (s.mb * s.oh);
    for (int64_t r = r0; r < r1; ++r) {
      row(j, tiles, width, window.data(), n, cb, oh);
      if (++oh < s.oh) continue;
      oh = 0;
      if (++cb == s.mb) cb = 0, ++n;
    }
  });
}

}  // namespace kiln::nchwc
