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

// R output pixels of block cb at y, epilogue included. KW is the kernel width when it is 3 or 5
// (taps unrolled), else 0 and read from the shape. kEdge: the tile's windows cross the left or
// right edge of the input, and the taps outside are skipped. kSlide: stride and dilation 1, KW
// set (an inside tile then slides along each input row, below).
template <int R, int KW, bool kEdge, bool kSlide = false>
void tile(const Job& j, const TileInput& in, int64_t cb, float* y) {
  const BlockedConvShape& s = j.s;
  const int64_t kw_n = KW ? KW : s.kw;
  const float* wc = j.w + (cb * s.kh + in.kh0) * kw_n * kBlock;
  const int64_t xstep = s.sw * kBlock;
  const float* row0 = in.plane + in.ih0 * s.w * kBlock;  // kernel row kh0's input row
  const int64_t row_step = s.dh * s.w * kBlock;
  const float* x0 = row0;  // pixel 0's tap (kh0, 0); kEdge: its column is c0, maybe outside
  if constexpr (!kEdge) x0 += in.c0 * kBlock;
  // The r loops are unrolled by pragma: left to itself GCC keeps acc on the stack, filled and
  // emptied by memcpy-like moves around the FMA loop (measured: 20-40% slower).
  __m256 acc[R];
  const __m256 bias = j.e.bias ? _mm256_loadu_ps(j.e.bias + cb * kBlock) : _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = bias;
  if constexpr (kEdge && R == 1) {
    // A lone edge pixel: a test per tap, no division. Even and odd kernel rows sum apart, two
    // chains of dependent FMAs instead of one.
    auto taps_of_row = [&](int64_t kh, __m256& sum) {
      const float* xr = x0 + kh * row_step;
      const float* wr = wc + kh * kw_n * kBlock;
      for (int64_t kw = 0; kw < kw_n; ++kw) {
        const int64_t c = in.c0 + kw * s.dw;
        if (c >= 0 && c < s.w)
          sum = _mm256_fmadd_ps(_mm256_loadu_ps(xr + c * kBlock), _mm256_loadu_ps(wr + kw * kBlock),
                                sum);
      }
    };
    __m256 odd = _mm256_setzero_ps();
    for (int64_t kh = 0; kh < in.taps_h; kh += 2) {
      taps_of_row(kh, acc[0]);
      if (kh + 1 < in.taps_h) taps_of_row(kh + 1, odd);
    }
    acc[0] = _mm256_add_ps(acc[0], odd);
  } else if constexpr (kSlide) {
    // Each input vector of a kernel row loaded once and given to every pixel whose window holds
    // it (KW weights in registers): R + KW - 1 loads a row where a load per pixel and tap took
    // R * KW. Each pixel still sums its taps in kernel order. mobilenet's 3x3s at 112x112 and
    // 56x56 0.80x the time, 14x14 and 7x7 (with the bordered planes below) 0.70x and 0.58x (Zen
    // 3, one thread); at stride 2 it measured no faster.
    for (int64_t kh = 0; kh < in.taps_h; ++kh) {
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
    // kEdge: the pixels r in [r0, r1) whose column under tap kw lies inside the input, the same
    // for every kernel row, so worked out once (two divisions per tap cost more than its FMAs).
    int64_t first[KW ? KW : 1], end[KW ? KW : 1];
    auto inside = [&](int64_t kw, int64_t& r0, int64_t& r1) {
      const int64_t c = in.c0 + kw * s.dw;
      r0 = c >= 0 ? 0 : (-c + s.sw - 1) / s.sw;
      r1 = c >= s.w ? 0 : (s.w - 1 - c) / s.sw + 1;
    };
    if constexpr (kEdge && KW != 0)
      for (int64_t kw = 0; kw < KW; ++kw) inside(kw, first[kw], end[kw]);
    for (int64_t kh = 0; kh < in.taps_h; ++kh) {
      const float* xr = x0 + kh * row_step;
      const float* wr = wc + kh * kw_n * kBlock;
      for (int64_t kw = 0; kw < kw_n; ++kw) {
        const __m256 wv = _mm256_loadu_ps(wr + kw * kBlock);
        if constexpr (kEdge) {
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
template <int KW, bool kEdge, bool kSlide = false>
constexpr TileFn kTilesOf[kMaxR] = {&tile<1, KW, kEdge, kSlide>, &tile<2, KW, kEdge, kSlide>,
                                    &tile<3, KW, kEdge, kSlide>, &tile<4, KW, kEdge, kSlide>,
                                    &tile<5, KW, kEdge, kSlide>, &tile<6, KW, kEdge, kSlide>,
                                    &tile<7, KW, kEdge, kSlide>, &tile<8, KW, kEdge, kSlide>};

// The tiles for one kernel width: [0] inside the input, [1] crossing an edge.
struct TileSet {
  const TileFn* inside;
  const TileFn* edge;
};

// How output rows are cut: in tiles of `width` pixels (at most 8, the row cut evenly: 28 pixels
// are 4 tiles of 7, not 8 + 8 + 8 + 4); pixels [0, inside_begin) and [inside_end, ow) have
// windows that cross the left or right edge.
struct RowCut {
  int64_t width, inside_begin, inside_end;
  bool lone_edge_pixels;
};

RowCut cut_rows(const BlockedConvShape& s) {
  const int64_t count = (s.ow + kMaxR - 1) / kMaxR;
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
  return {(s.ow + count - 1) / count, begin, end, s.kw == 3};
}

// Output row oh of block cb of image n, whose input plane is `plane`.
void row(const Job& j, const TileSet& tiles, const RowCut& cut, const float* plane, int64_t n,
         int64_t cb, int64_t oh) {
  const BlockedConvShape& s = j.s;
  const auto [kh0, kh1] = valid_taps(oh * s.sh - s.pt, s.dh, s.kh, s.h);
  TileInput in{plane, oh * s.sh - s.pt + kh0 * s.dh, 0, kh0, kh1 - kh0};
  float* out_row = j.y + ((n * s.mb + cb) * s.oh + oh) * s.ow * kBlock;
  // Pixels [o0, o1) as one tile.
  auto run = [&](const TileFn* fns, int64_t o0, int64_t o1) {
    in.c0 = o0 * s.sw - s.pl;
    fns[o1 - o0 - 1](j, in, cb, out_row + o0 * kBlock);
  };
  for (int64_t o0 = 0; o0 < s.ow; o0 += cut.width) {
    const int64_t o1 = std::min(o0 + cut.width, s.ow);
    const int64_t i0 = std::clamp(cut.inside_begin, o0, o1),
                  i1 = std::clamp(cut.inside_end, i0, o1);
    if (i0 == o0 && i1 == o1) {
      run(tiles.inside, o0, o1);
    } else if (!cut.lone_edge_pixels) {
      run(tiles.edge, o0, o1);
    } else {
      for (int64_t o = o0; o < i0; ++o) run(tiles.edge, o, o + 1);
      if (i1 > i0) run(tiles.inside, i0, i1);
      for (int64_t o = i1; o < o1; ++o) run(tiles.edge, o, o + 1);
    }
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
  const bool slide = s.sw == 1 && s.dw == 1;
  const TileSet tiles =
      s.kw == 3 ? TileSet{slide ? kTilesOf<3, false, true> : kTilesOf<3, false>, kTilesOf<3, true>}
      : s.kw == 5
          ? TileSet{slide ? kTilesOf<5, false, true> : kTilesOf<5, false>, kTilesOf<5, true>}
          : TileSet{kTilesOf<0, false>, kTilesOf<0, true>};
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
