// ai.kiln.BlockedConv, group 1, as a direct convolution in AVX2/FMA (the scheme of MLAS's NCHWc
// kernels and oneDNN's jit_avx2_conv): per output row, a register tile of R output pixels x B
// output-channel blocks is accumulated over input blocks, taps and the 8 input lanes, one
// broadcast input scalar feeding B FMAs. Pointwise convs run the same tile over the flattened
// pixels, which makes them a GEMM on the blocked layout. Tasks are (image, unit of output rows or
// pixels, range of output-block groups); input blocks are visited in chunks whose weights stay in
// L1 across the unit's tiles.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/kiln/nchwc/activation_avx2.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_conv_dense_prep.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

// Output blocks per tile: 2 (16 channels x 6 pixels) beat 4 x 3 and 3 x 4 on resnet's 3x3 and
// 1x1 layers (87 vs 74 GFLOP/s on 64->64 3x3 56x56, one thread). The last group of an odd
// block count uses B = 1.
constexpr int kMaxB = 2;
// Pixels per tile for B output blocks: B * R accumulators plus B weights and one broadcast fit
// the 16 ymm registers.
constexpr int kMaxR[kMaxB + 1] = {0, 8, 6};
// Weights of one input-block chunk for one tile (bytes): well inside L1, reused by every tile of
// the unit's rows before the next chunk.
constexpr int64_t kChunkWeightBytes = 12 * 1024;
// Input of one unit of output pixels (bytes): well inside L2, so that every output-block group
// of a task reads it from there, not from memory.
constexpr int64_t kUnitInputBytes = 128 * 1024;

struct Job {
  BlockedConvShape s;  // flattened to one row when pointwise
  const float* x;
  const float* w;
  float* y;
  BlockedEpilogue e;
  int64_t w_block;   // floats between consecutive output blocks of W
  int64_t in_plane;  // floats per input channel block of one image (plain input: per image)
  int64_t lanes;     // input channels per block: 8, or C of a plain input
  int64_t lane_step;  // floats between an input pixel's channels: 1, or H*W of a plain input
  int64_t out_plane;
  __m256 tail_keep;  // lanes of the last output block that are real channels
  bool has_tail;
};

struct Tile {
  int64_t n, mb0, oh, ow0, cb0, cb1, kh0, kh1, kw0, kw1;
  bool first, last;
};

// Residual, activation, padding lanes, store, on v[b * R + r]: a copy of the accumulators, so
// that taking its address here does not keep the accumulators out of registers.
template <int B, int R>
inline void finish(const Job& j, const Tile& t, __m256* v, float* y) {
  const float* z = j.e.z ? j.e.z + (y - j.y) : nullptr;
  if (z && j.e.residual_first)
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < R; ++r)
        v[b * R + r] = _mm256_add_ps(v[b * R + r], _mm256_loadu_ps(z + b * j.out_plane + r * kBlock));
  apply_activation(j.e.act, v, B * R);
  if (z && !j.e.residual_first)
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < R; ++r)
        v[b * R + r] = _mm256_add_ps(v[b * R + r], _mm256_loadu_ps(z + b * j.out_plane + r * kBlock));
  if (j.has_tail && t.mb0 + B == j.s.mb)
    for (int r = 0; r < R; ++r) v[(B - 1) * R + r] = _mm256_and_ps(v[(B - 1) * R + r], j.tail_keep);
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + b * j.out_plane + r * kBlock, v[b * R + r]);
}

// How a tile reads X: blocked with stride 1 (the pixels' offsets are constants), blocked with any
// stride, or plain NCHW with C <= 8 channels (the RGB stem: one block of C lanes, nothing padded).
enum class Input { kBlockedUnit, kBlocked, kPlain };

template <int B, int R, Input kIn>
void tile(const Job& j, const Tile& t) {
  constexpr bool kPlain = kIn == Input::kPlain;
  constexpr int64_t kPixel = kPlain ? 1 : kBlock;  // floats between pixels
  const BlockedConvShape& s = j.s;
  float* y = j.y + (t.n * s.mb + t.mb0) * j.out_plane + (t.oh * s.ow + t.ow0) * kBlock;
  __m256 acc[B][R];
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r)
      acc[b][r] = !t.first  ? _mm256_loadu_ps(y + b * j.out_plane + r * kBlock)
                  : j.e.bias ? _mm256_loadu_ps(j.e.bias + (t.mb0 + b) * kBlock)
                             : _mm256_setzero_ps();
  const int64_t iw0 = t.ow0 * s.sw - s.pl;
  const int64_t xstep = kIn == Input::kBlockedUnit ? kBlock : s.sw * kPixel;
  const int64_t lanes = kPlain ? j.lanes : kBlock, lane_step = kPlain ? j.lane_step : 1;
  const int64_t taps = s.kh * s.kw;
  for (int64_t cb = t.cb0; cb < t.cb1; ++cb) {
    const float* xc = j.x + (t.n * s.cb + cb) * j.in_plane;
    const float* wc = j.w + (t.mb0 * s.cb + cb) * taps * kBlock * kBlock;
    for (int64_t kh = t.kh0; kh < t.kh1; ++kh) {
      const int64_t ih = t.oh * s.sh - s.pt + kh * s.dh;
      for (int64_t kw = t.kw0; kw < t.kw1; ++kw) {
        const float* xp = xc + (ih * s.w + iw0 + kw * s.dw) * kPixel;
        const float* wp = wc + (kh * s.kw + kw) * kBlock * kBlock;
#pragma GCC unroll 8
        for (int ci = 0; ci < lanes; ++ci) {
          __m256 wv[B];
          for (int b = 0; b < B; ++b) wv[b] = _mm256_loadu_ps(wp + b * j.w_block + ci * kBlock);
          for (int r = 0; r < R; ++r) {
            const __m256 xv = _mm256_broadcast_ss(xp + r * xstep + ci * lane_step);
            for (int b = 0; b < B; ++b) acc[b][r] = _mm256_fmadd_ps(xv, wv[b], acc[b][r]);
          }
        }
      }
    }
  }
  if (t.last) {
    __m256 v[B * R];
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < R; ++r) v[b * R + r] = acc[b][r];
    return finish<B, R>(j, t, v, y);
  }
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + b * j.out_plane + r * kBlock, acc[b][r]);
}

using TileFn = void (*)(const Job&, const Tile&);

template <int B, Input kIn, int... Rs>
constexpr std::array<TileFn, 8> tiles_of(std::integer_sequence<int, Rs...>) {
  return {&tile<B, Rs + 1, kIn>...};
}
using TileTable = std::array<std::array<TileFn, 8>, kMaxB + 1>;
// kTiles<input>[B][R - 1]; null past kMaxR[B].
template <Input kIn>
constexpr TileTable kTiles = {
    std::array<TileFn, 8>{}, tiles_of<1, kIn>(std::make_integer_sequence<int, kMaxR[1]>{}),
    tiles_of<2, kIn>(std::make_integer_sequence<int, kMaxR[2]>{})};

// Output pixels [ow_begin, ow_end) of row oh, output blocks [mb0, mb0 + B), input blocks
// [cb0, cb1).
void row(const Job& j, int b, Tile t, int64_t ow_begin, int64_t ow_end) {
  const BlockedConvShape& s = j.s;
  const TileTable& tiles = s.plain_channels > 0 ? kTiles<Input::kPlain>
                           : s.sw == 1           ? kTiles<Input::kBlockedUnit>
                                                 : kTiles<Input::kBlocked>;
  std::tie(t.kh0, t.kh1) = valid_taps(t.oh * s.sh - s.pt, s.dh, s.kh, s.h);
  // Pixels whose every tap is inside the row: [lo, hi).
  const int64_t lo = (s.pl + s.sw - 1) / s.sw;
  const int64_t span = s.w - 1 + s.pl - (s.kw - 1) * s.dw;
  const int64_t hi = span < 0 ? 0 : span / s.sw + 1;
  for (int64_t ow = ow_begin; ow < ow_end;) {
    t.ow0 = ow;
    if (ow < lo || ow >= hi) {
      std::tie(t.kw0, t.kw1) = valid_taps(ow * s.sw - s.pl, s.dw, s.kw, s.w);
      tiles[b][0](j, t);
      ++ow;
      continue;
    }
    const int64_t r = std::min<int64_t>(kMaxR[b], std::min(ow_end, hi) - ow);
    t.kw0 = 0;
    t.kw1 = s.kw;
    tiles[b][r - 1](j, t);
    ow += r;
  }
}

}  // namespace

void blocked_conv_dense_avx2(const BlockedConvShape& shape, const float* x, const float* w,
                             const BlockedEpilogue& e, float* y, ThreadPool* pool) {
  if (shape.n == 0 || shape.mb == 0 || shape.oh == 0 || shape.ow == 0) return;
  // A strided 1x1 reads a gathered copy of its pixels as a pointwise conv (dense_input): 1.3x on
  // resnet's downsample convs. Padded copies for the other convs measured no faster here (the
  // border tiles below handle the pads), so they read X itself.
  thread_local AlignedBuffer scratch;
  const bool strided_1x1 = shape.kh == 1 && shape.kw == 1 && (shape.sh > 1 || shape.sw > 1);
  const DenseInput in = strided_1x1 ? dense_input(shape, x, scratch, pool) : DenseInput{shape, x};
  Job j{in.s, in.x, w, y, e, 0, 0, 0, 0, 0, _mm256_setzero_ps(), false};
  BlockedConvShape& s = j.s;
  j.w_block = s.cb * s.kh * s.kw * kBlock * kBlock;
  const bool plain = s.plain_channels > 0;
  j.in_plane = s.h * s.w * (plain ? s.plain_channels : kBlock);
  j.lanes = plain ? s.plain_channels : kBlock;
  j.lane_step = plain ? s.h * s.w : 1;
  j.out_plane = s.oh * s.ow * kBlock;
  const int64_t rem = s.channels % kBlock;
  j.has_tail = rem != 0;
  j.tail_keep = _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)),
                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  const bool pointwise = s.pointwise();
  if (pointwise) {  // one long row: tiles run across the image's rows
    s.w = s.ow = s.h * s.w;
    s.h = s.oh = 1;
  }

  // A task is (image, unit of output pixels, range of output-block groups). A unit's input is
  // sized to stay in L2 while every group of the task sweeps it, so the input is read from memory
  // once; each group's weights are visited in L1-sized chunks of input blocks.
  const int64_t groups = (s.mb + kMaxB - 1) / kMaxB;
  const int64_t threads = pool ? pool->threads() : 1;
  const int64_t px_bytes = s.cb * j.lanes * int64_t{sizeof(float)};  // one input pixel, all blocks
  int64_t unit_rows = 1, unit_px = s.ow, units = 1;
  if (pointwise) {
    unit_px = std::clamp<int64_t>(kUnitInputBytes / px_bytes, 24, 480) / 24 * 24;  // whole tiles
    units = (s.ow + unit_px - 1) / unit_px;
  } else {
    const int64_t row_bytes = s.sh * s.w * px_bytes;
    unit_rows = std::clamp<int64_t>(kUnitInputBytes / row_bytes, 1, s.oh);
    units = (s.oh + unit_rows - 1) / unit_rows;
  }
  const int64_t want_tasks = threads == 1 ? 1 : 4 * threads;
  const int64_t splits = std::clamp<int64_t>((want_tasks + s.n * units - 1) / (s.n * units), 1, groups);
  const int64_t groups_per_task = (groups + splits - 1) / splits;
  const int64_t chunk = std::max<int64_t>(
      1, kChunkWeightBytes / (s.kh * s.kw * kBlock * kBlock * kMaxB * int64_t{sizeof(float)}));
  auto task = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t split = t % splits, unit = (t / splits) % units, n = t / (splits * units);
      const int64_t oh0 = pointwise ? 0 : unit * unit_rows;
      const int64_t oh1 = pointwise ? 1 : std::min(s.oh, oh0 + unit_rows);
      const int64_t ow0 = pointwise ? unit * unit_px : 0;
      const int64_t ow1 = pointwise ? std::min(s.ow, ow0 + unit_px) : s.ow;
      const int64_t g1 = std::min(groups, (split + 1) * groups_per_task);
      for (int64_t g = split * groups_per_task; g < g1; ++g) {
        const int64_t mb0 = g * kMaxB;
        const int b = static_cast<int>(std::min<int64_t>(kMaxB, s.mb - mb0));
        for (int64_t cb0 = 0; cb0 < s.cb || cb0 == 0; cb0 += chunk) {
          Tile tl{};
          tl.n = n;
          tl.mb0 = mb0;
          tl.cb0 = cb0;
          tl.cb1 = std::min(s.cb, cb0 + chunk);
          tl.first = cb0 == 0;
          tl.last = tl.cb1 == s.cb;
          for (int64_t oh = oh0; oh < oh1; ++oh) {
            tl.oh = oh;
            row(j, b, tl, ow0, ow1);
          }
          if (s.cb == 0) break;
        }
      }
    }
  };
  const int64_t flops = 2 * s.n * s.mb * s.oh * s.ow * s.cb * s.kh * s.kw * kBlock * kBlock;
  parallel_range(pool, s.n * units * splits, flops / 64, task);
}

}  // namespace kiln::nchwc
