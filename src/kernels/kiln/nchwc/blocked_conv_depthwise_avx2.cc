// ai.kiln.BlockedConv with group = C (depthwise) in AVX2/FMA: the 8 lanes of a block are 8
// channels, so a register tile is R output pixels of one block, each tap one FMA per pixel.
// A tile whose windows cross the left or right edge of the input skips the taps outside, with a
// test per pixel and tap; with a 3-wide kernel, its pixels inside run as a tile without tests and
// each edge pixel alone (see row()). Rows above and below the input are skipped, which keeps R.
// Small planes are copied with their zero border first, so that every tile is inside. Tasks are
// rows of (image, channel block), consecutive rows on one thread so that the input rows they
// share stay in cache; or, for the small planes, whole planes.
#include <immintrin.h>

#include <algorithm>

#include "core/aligned_buffer.h"
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
};

// R output pixels of block cb at y, epilogue included. KW: the kernel width when it is 3 or 5
// (taps unrolled), else 0 and read from the shape. SW: the stride when it is 1 or 2 at dilation
// 1, else 0 and read from the shape; a known stride makes each pixel's input an immediate offset
// (with the stride in a register GCC ran out of address registers and spilled them inside the
// FMA loop: 0.8x as fast). KH: the kernel height when every kernel row of the tile is inside the
// input (rows unrolled), else 0. kEdge: the tile's windows cross the left or right edge of the
// input, and the taps outside are skipped. Stride 1 and KW set: an inside tile slides along each
// input row (below). `count` inside tiles side by side run in one call (an edge tile runs
// alone): the call's set-up was a third of a 3x3 tile's time on 14x14 planes.
template <int R, int KW, int SW, bool kEdge, int KH = 0>
void tile(const Job& j, const TileInput& in, int64_t cb, float* y, int64_t count) {
  constexpr bool kSlide = SW == 1 && KW != 0 && !kEdge;
  const BlockedConvShape& s = j.s;
  const int64_t kw_n = KW ? KW : s.kw;
  const int64_t taps_h = KH ? KH : in.taps_h;
  const int64_t sw = SW ? SW : s.sw, dw = SW ? 1 : s.dw;
  const float* wc = j.w + (cb * s.kh + in.kh0) * kw_n * kBlock;
  const int64_t xstep = sw * kBlock;
  const int64_t row_step = s.dh * s.w * kBlock;
  // Pixel 0's tap (kh0, 0); kEdge: its column is c0, maybe outside.
  const float* x0 = in.plane + in.ih0 * s.w * kBlock + (kEdge ? 0 : in.c0 * kBlock);
  const float* bias_at = j.e.bias ? j.e.bias + cb * kBlock : nullptr;
  const float* z_at = j.e.z ? j.e.z + (y - j.y) : nullptr;
  const bool tail = j.has_tail && cb + 1 == s.mb;
  for (int64_t t = 0; t < count; ++t, x0 += R * xstep, y += R * kBlock) {
    // The r loops are unrolled by pragma: left to itself GCC keeps acc on the stack, filled and
    // emptied by memcpy-like moves around the FMA loop (measured: 20-40% slower).
    __m256 acc[R];
    // Loaded each tile: held across the run it would take a register the tile needs.
    const __m256 bias = bias_at ? _mm256_loadu_ps(bias_at) : _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r] = bias;
    if constexpr (kEdge && R == 1) {
      // A lone edge pixel: a test per tap, no division. Even and odd kernel rows sum apart, two
      // chains of dependent FMAs instead of one.
      auto taps_of_row = [&](int64_t kh, __m256& sum) {
        const float* xr = x0 + kh * row_step;
        const float* wr = wc + kh * kw_n * kBlock;
        for (int64_t kw = 0; kw < kw_n; ++kw) {
          const int64_t c = in.c0 + kw * dw;
          if (c >= 0 && c < s.w)
            sum = _mm256_fmadd_ps(_mm256_loadu_ps(xr + c * kBlock), _mm256_loadu_ps(wr + kw * kBlock), sum);
        }
      };
      __m256 odd = _mm256_setzero_ps();
      for (int64_t kh = 0; kh < taps_h; kh += 2) {
        taps_of_row(kh, acc[0]);
        if (kh + 1 < taps_h) taps_of_row(kh + 1, odd);
      }
      acc[0] = _mm256_add_ps(acc[0], odd);
    } else if constexpr (kSlide) {
      // Each input vector of a kernel row loaded once and given to every pixel whose window
      // holds it (KW weights in registers): R + KW - 1 loads a row where a load per pixel and
      // tap took R * KW. Each pixel still sums its taps in kernel order. mobilenet's 3x3s at
      // 112x112 and 56x56 0.80x the time, 14x14 and 7x7 (with the bordered planes below) 0.70x
      // and 0.58x (Zen 3, one thread); at stride 2 it measured no faster.
      for (int64_t kh = 0; kh < taps_h; ++kh) {
        const float* xr = x0 + kh * row_step;
        const float* wr = wc + kh * KW * kBlock;
        __m256 wv[KW];
#pragma GCC unroll 8
        for (int kw = 0; kw < KW; ++kw) wv[kw] = _mm256_loadu_ps(wr + kw * kBlock);
#pragma GCC unroll 32
        for (int c = 0; c < R + KW - 1; ++c) {
          const __m256 xv = _mm256_loadu_ps(xr + c * kBlock);
#pragma GCC unroll 8
          for (int kw = KW - 1; kw >= 0; --kw)  // pixel c - kw, in pixel order
            if (c - kw >= 0 && c - kw < R) acc[c - kw] = _mm256_fmadd_ps(xv, wv[kw], acc[c - kw]);
        }
      }
    } else {
      // kEdge: the pixels r in [r0, r1) whose column under tap kw lies inside the input, the
      // same for every kernel row, so worked out once (two divisions per tap cost more than its
      // FMAs).
      int64_t first[KW ? KW : 1], end[KW ? KW : 1];
      auto inside = [&](int64_t kw, int64_t& r0, int64_t& r1) {
        const int64_t c = in.c0 + kw * dw;
        r0 = c >= 0 ? 0 : (-c + sw - 1) / sw;
        r1 = c >= s.w ? 0 : (s.w - 1 - c) / sw + 1;
      };
      if constexpr (kEdge && KW != 0)
        for (int64_t kw = 0; kw < KW; ++kw) inside(kw, first[kw], end[kw]);
      for (int64_t kh = 0; kh < taps_h; ++kh) {
        const float* xr = x0 + kh * row_step;
        const float* wr = wc + kh * kw_n * kBlock;
        for (int64_t kw = 0; kw < kw_n; ++kw) {
          const __m256 wv = _mm256_loadu_ps(wr + kw * kBlock);
          if constexpr (kEdge) {
            // Pixels r with 0 <= c + r * sw < w, c the column of pixel 0 under this tap.
            const int64_t c = in.c0 + kw * dw;
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
                acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + (c + r * sw) * kBlock), wv, acc[r]);
          } else {
            const float* xp = xr + kw * dw * kBlock;
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + r * xstep), wv, acc[r]);
          }
        }
      }
    }
    const float* z = z_at ? z_at + t * R * kBlock : nullptr;
    if (z && j.e.residual_first) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_loadu_ps(z + r * kBlock));
    }
    activate_tile(j.e.act, acc);
    if (z && !j.e.residual_first) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = _mm256_add_ps(acc[r], _mm256_loadu_ps(z + r * kBlock));
    }
    if (tail) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] = _mm256_and_ps(acc[r], j.tail_keep);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * kBlock, acc[r]);
  }
}

using TileFn = void (*)(const Job&, const TileInput&, int64_t, float*, int64_t);
template <int KW, int SW, bool kEdge, int KH = 0>
constexpr TileFn kTilesOf[kMaxR] = {&tile<1, KW, SW, kEdge, KH>, &tile<2, KW, SW, kEdge, KH>,
                                    &tile<3, KW, SW, kEdge, KH>, &tile<4, KW, SW, kEdge, KH>,
                                    &tile<5, KW, SW, kEdge, KH>, &tile<6, KW, SW, kEdge, KH>,
                                    &tile<7, KW, SW, kEdge, KH>, &tile<8, KW, SW, kEdge, KH>};

// The tiles for one convolution: inside the input (`full`: for the rows whose every kernel row
// is inside, when the kernel is square and the stride known; else null), and crossing an edge.
struct TileSet {
  const TileFn* inside;
  const TileFn* full;
  const TileFn* edge;
};

template <int KW, int SW>
TileSet tiles_for(const BlockedConvShape& s) {
  const TileFn* full = nullptr;
  if constexpr (SW == 1)  // 1.01-1.04x there; mixed at stride 2
    if (s.kh == KW) full = kTilesOf<KW, SW, false, KW>;
  return {kTilesOf<KW, SW, false>, full, kTilesOf<KW, SW, true>};
}

TileSet tiles_of(const BlockedConvShape& s) {
  const int64_t sw = s.dw == 1 && (s.sw == 1 || s.sw == 2) ? s.sw : 0;
  if (s.kw == 3) return sw == 1 ? tiles_for<3, 1>(s) : sw == 2 ? tiles_for<3, 2>(s) : tiles_for<3, 0>(s);
  if (s.kw == 5) return sw == 1 ? tiles_for<5, 1>(s) : sw == 2 ? tiles_for<5, 2>(s) : tiles_for<5, 0>(s);
  return tiles_for<0, 0>(s);
}

// How output rows are cut. With lone edge pixels (a 3-wide kernel), pixels [0, inside_begin)
// and [inside_end, ow) run alone and those between as `wide` tiles of width + 1 pixels, then
// `narrow` of width (as equal as 8-pixel tiles allow); else in tiles of `width` pixels (at most
// 8, the row cut evenly: 28 pixels are 4 tiles of 7, not 8 + 8 + 8 + 4), an edge tile where a
// window crosses the left or right edge.
struct RowCut {
  int64_t width, inside_begin, inside_end;
  bool lone_edge_pixels;
  int64_t wide = 0, narrow = 0;
};

RowCut cut_rows(const BlockedConvShape& s) {
  // Pixel o is inside when o * sw - pl >= 0 and o * sw - pl + (kw - 1) * dw <= w - 1.
  const int64_t begin = std::min(s.ow, (s.pl + s.sw - 1) / s.sw);
  const int64_t last = s.w - 1 + s.pl - (s.kw - 1) * s.dw;  // the most o * sw may be
  const int64_t end = std::clamp<int64_t>(last < 0 ? 0 : last / s.sw + 1, begin, s.ow);
  // A 3-wide kernel's edge tile runs its pixels inside as an inside tile and each edge pixel
  // alone (one a side at pad 1). Against the zero-padded copy of an edge tile's window that this
  // replaces, on mobilenet's 3x3 layers (Zen 3, both in one process, alternated): 576 channels at
  // 14x14 0.76-0.79x the time, 56x56 and 112x112 0.89-0.97x, 7x7 0.98-1.03x. Wider kernels keep
  // the tests: their lone edge pixels, two a side, leave too few independent accumulators on 7-
  // and 14-pixel rows (efficientnet's 5x5 layers 1.2-1.8x slower).
  if (s.kw == 3) {
    const int64_t n = end - begin, count = (n + kMaxR - 1) / kMaxR;
    if (count == 0) return {1, begin, end, true};
    return {n / count, begin, end, true, n % count, count - n % count};
  }
  const int64_t count = (s.ow + kMaxR - 1) / kMaxR;
  return {(s.ow + count - 1) / count, begin, end, false};
}

// Output row oh of block cb of image n, whose input plane is `plane`.
void row(const Job& j, const TileSet& tiles, const RowCut& cut, const float* plane, int64_t n,
         int64_t cb, int64_t oh) {
  const BlockedConvShape& s = j.s;
  const auto [kh0, kh1] = valid_taps(oh * s.sh - s.pt, s.dh, s.kh, s.h);
  TileInput in{plane, oh * s.sh - s.pt + kh0 * s.dh, 0, kh0, kh1 - kh0};
  float* out_row = j.y + ((n * s.mb + cb) * s.oh + oh) * s.ow * kBlock;
  const TileFn* inside = tiles.full && in.taps_h == s.kh ? tiles.full : tiles.inside;
  // `count` tiles of `width` pixels from pixel o0.
  auto run = [&](const TileFn* fns, int64_t o0, int64_t width, int64_t count) {
    in.c0 = o0 * s.sw - s.pl;
    fns[width - 1](j, in, cb, out_row + o0 * kBlock, count);
  };
  if (cut.lone_edge_pixels) {
    for (int64_t o = 0; o < cut.inside_begin; ++o) run(tiles.edge, o, 1, 1);
    if (cut.wide > 0) run(inside, cut.inside_begin, cut.width + 1, cut.wide);
    if (cut.narrow > 0) run(inside, cut.inside_begin + cut.wide * (cut.width + 1), cut.width, cut.narrow);
    for (int64_t o = cut.inside_end; o < s.ow; ++o) run(tiles.edge, o, 1, 1);
    return;
  }
  for (int64_t o0 = 0; o0 < s.ow; o0 += cut.width) {
    const int64_t o1 = std::min(o0 + cut.width, s.ow);
    const bool is_inside = cut.inside_begin <= o0 && o1 <= cut.inside_end;
    run(is_inside ? inside : tiles.edge, o0, o1 - o0, 1);
  }
}

// The geometry of s on a copy of each input plane with its zero border: no padding, so that
// every tile runs every tap.
BlockedConvShape bordered(const BlockedConvShape& s) {
  BlockedConvShape b = s;
  b.h = std::max(s.h + s.pt, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1);
  b.w = std::max(s.w + s.pl, (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1);
  b.pt = b.pl = 0;
  return b;
}

// Largest bordered plane copied (bytes): inside L1 beside the output row and weights.
constexpr int64_t kBorderedPlaneBytes = 16 * 1024;

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
  const TileSet tiles = tiles_of(s);
  const BlockedConvShape b = bordered(s);
  const int64_t plane_floats = b.h * b.w * kBlock;
  if ((s.pt > 0 || s.pl > 0 || b.h > s.h || b.w > s.w) &&
      plane_floats * int64_t{sizeof(float)} <= kBorderedPlaneBytes) {
    // Small planes (mobilenet's 14x14 and 7x7, where most pixels touch an edge): each is copied
    // with its zero border, and its rows run as inside tiles only: 576 channels at 14x14 0.82x,
    // 960 at 7x7 0.65x the time, efficientnet's 5x5 at 14x14 0.73x (Zen 3, one thread). A 28x28
    // plane measured 0.95x at stride 1 and 1.25x at stride 2, so the copy stays in L1.
    const Job jb{b, x, w, y, e, j.tail_keep, j.has_tail};
    const RowCut cut = cut_rows(b);
    const int64_t planes = s.n * s.mb;
    const int64_t work = planes * s.oh * s.ow * s.kh * s.kw * kBlock * 2;
    parallel_range(pool, planes, work, [&](int64_t p0, int64_t p1) {
      thread_local AlignedBuffer scratch;  // its border stays zero from plane to plane
      float* buf = scratch.get(plane_floats);
      std::fill(buf, buf + plane_floats, 0.0f);
      for (int64_t p = p0; p < p1; ++p) {
        const float* src = x + p * s.h * s.w * kBlock;
        for (int64_t ih = 0; ih < s.h; ++ih)
          std::copy(src + ih * s.w * kBlock, src + (ih + 1) * s.w * kBlock,
                    buf + ((s.pt + ih) * b.w + s.pl) * kBlock);
        for (int64_t oh = 0; oh < s.oh; ++oh) row(jb, tiles, cut, buf, p / s.mb, p % s.mb, oh);
      }
    });
    return;
  }
  // Rows are independent; a task is one row of one block.
  const int64_t rows = s.n * s.mb * s.oh;
  const RowCut cut = cut_rows(s);
  parallel_range(pool, rows, rows * s.ow * s.kh * s.kw * kBlock * 2, [&](int64_t r0, int64_t r1) {
    // Row r is (image, block, output row) = (r / (mb oh), r / oh % mb, r % oh), stepped rather
    // than divided: on a 7x7 plane the divisions cost as much as the row's FMAs.
    int64_t oh = r0 % s.oh, cb = (r0 / s.oh) % s.mb, n = r0 / (s.mb * s.oh);
    for (int64_t r = r0; r < r1; ++r) {
      row(j, tiles, cut, x + (n * s.cb + cb) * s.h * s.w * kBlock, n, cb, oh);
      if (++oh < s.oh) continue;
      oh = 0;
      if (++cb == s.mb) cb = 0, ++n;
    }
  });
}

}  // namespace kiln::nchwc
