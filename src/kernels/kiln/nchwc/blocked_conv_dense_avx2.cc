// ai.kiln.BlockedConv, group 1, as a direct convolution in AVX2/FMA (the scheme of MLAS's NCHWc
// kernels and oneDNN's jit_avx2_conv): per output row, a register tile of R output pixels x B
// output-channel blocks is accumulated over input blocks, taps and the 8 input lanes, one
// broadcast input scalar feeding B FMAs. Pointwise convs run the same tile over the flattened
// pixels, which makes them a GEMM on the blocked layout. Tasks are (image, unit of output rows or
// pixels, range of output-block groups); input blocks are visited in chunks whose weights stay in
// L1 across the unit's tiles. A padded conv reads a copy of X with a zero border (dense_input), so
// that no tile need test its taps: 1.2x on 3x3 convs at 14x14 and 7x7 on Zen 2, where most pixels
// touch an edge, and no tile narrower than it need be; each tile skips the kernel rows and columns
// that read only the border (blocked_conv_dense_taps.h).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "kernels/kiln/nchwc/activation_avx2.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_conv_dense_prep.h"
#include "kernels/kiln/nchwc/blocked_conv_dense_taps.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

// Output blocks per tile: 2 (16 channels x 6 pixels) beat 4 x 3 and 3 x 4 on resnet's 3x3 and
// 1x1 layers (87 vs 74 GFLOP/s on 64->64 3x3 56x56, one thread); 3 x 4 wins on rows too short
// for 6-pixel tiles (tile_blocks). The last group of a task may hold fewer blocks.
constexpr int kMaxB = 3;
// Pixels per tile for B output blocks: B * R accumulators plus B weights and one broadcast fit
// the 16 ymm registers.
constexpr int kMaxR[kMaxB + 1] = {0, 8, 6, 4};
// Weights of one input-block chunk for one tile (bytes): well inside L1, reused by every tile of
// the unit's rows before the next chunk.
constexpr int64_t kChunkWeightBytes = 12 * 1024;
// The same for a unit of few tiles (below), whose weights stream from L2.
constexpr int64_t kL2ChunkWeightBytes = 256 * 1024;
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
  int64_t out_plane;
  __m256 tail_keep;  // lanes of the last output block that are real channels
  bool has_tail;
};

struct Tile {
  int64_t n, mb0, cb0, cb1;
  bool first, last;
};

// Pointwise convs: the weights of the run after this one, fetched into L2 a slice before each
// tile of this run. From memory (a 1024 -> 512 1x1 has 2 MiB of them, resnext50 100 MiB in all),
// the first tile of every run had waited on them: a run's weights are B streams a w_block apart,
// a few KiB each, too short for the hardware prefetchers, which stop at 4 KiB pages. resnext50
// 0.97x, resnet50 0.98x (Zen 3, whole model, alternated). Not for convs with taps: their runs
// span rows that reuse the weights, and a 3x3 at 7x7, two tiles a row, ran 5 % slower with the
// prefetches crowded into its first row.
struct NextWeights {
  const char* w = nullptr;  // stream 0; stream b starts b * w_block floats on
  int64_t bytes = 0;        // per stream
  int streams = 0;
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

// finish() on the accumulators in registers, for an activation computed on them (kKind): residual,
// activation, its clamp, padding lanes, store, without taking acc's address. GCC then keeps acc
// in registers; finish() needs a copy of them in memory: 5-9 % of the time of 1x1s with 16-24
// input channels and of the RGB stems (Zen 3).
template <kiln_ops::Activation::Kind kKind, int B, int R>
[[gnu::always_inline]] inline void finish_in_registers(const Job& j, const Tile& t, __m256 (&acc)[B][R],
                                                       float* y) {
  const kiln_ops::Activation& act = j.e.act;
  const __m256 p0 = _mm256_set1_ps(static_cast<float>(act.p0));
  const __m256 p1 = _mm256_set1_ps(static_cast<float>(act.p1));
  const __m256 lo = _mm256_set1_ps(static_cast<float>(act.lo));
  const __m256 hi = _mm256_set1_ps(static_cast<float>(act.hi));
  const bool clamped = act.clamped();
  const float* z = j.e.z ? j.e.z + (y - j.y) : nullptr;
  const bool tail = j.has_tail && t.mb0 + B == j.s.mb;
#pragma GCC unroll 8
  for (int b = 0; b < B; ++b)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 v = acc[b][r];
      const __m256 zv = z ? _mm256_loadu_ps(z + b * j.out_plane + r * kBlock) : _mm256_setzero_ps();
      if (z && j.e.residual_first) v = _mm256_add_ps(v, zv);
      v = unclamped_vector<kKind>(v, p0, p1);
      if (clamped) v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
      if (z && !j.e.residual_first) v = _mm256_add_ps(v, zv);
      if (b == B - 1 && tail) v = _mm256_and_ps(v, j.tail_keep);
      _mm256_storeu_ps(y + b * j.out_plane + r * kBlock, v);
    }
}

// How a tile reads X: blocked with stride 1 or 2 (the pixels' offsets are constants), blocked
// with any stride, plain NCHW with C <= 8 channels (the RGB stem: one step per channel and tap),
// or blocked with the tile's pixels running on across output rows (rows too narrow for a full
// tile: a 2-pixel row is a 2 x 2 tile, 4 accumulators, latency-bound): each pixel's offset in X
// then has a register of its own, while in Y the pixels stay consecutive.
enum class Input { kBlockedUnit, kBlockedStride2, kBlocked, kPlain, kAcrossRows };

// Where the next run's weights are fetched into L2 from (NextWeights), and this call's share of
// it: the row's `total` tiles fetch a slice each, this call's tiles being `first` on.
struct Prefetch {
  const NextWeights& next;
  int64_t first, total;
};

// `count` tiles of R output pixels, one after the other, from column ow of output row oh
// (kAcrossRows: from output pixel ow of the image in row-major order, oh 0); x: input block cb0
// of the tile's image. One call a run of tiles: what the tiles share (addresses, the step list,
// the epilogue's constants) is worked out once; a call a tile had spent more on it than on the
// 16 lane steps of a 1x1 over 16 channels (mobilenet's 16 -> 96: 65 % of peak, Zen 4 at AVX2).
template <int B, int R, Input kIn>
void tile(const Job& j, const Tile& t, const Steps& st, int64_t oh, int64_t ow, int64_t count,
          const Prefetch& pf) {
  constexpr bool kPlain = kIn == Input::kPlain;
  constexpr bool kAcross = kIn == Input::kAcrossRows;
  constexpr int kLanes = kPlain ? 1 : kBlock;  // input lanes per step
  const BlockedConvShape& s = j.s;
  const int64_t out_plane = j.out_plane, w_block = j.w_block;
  const int64_t xstep = kIn == Input::kBlockedUnit      ? kBlock
                        : kIn == Input::kBlockedStride2 ? 2 * kBlock
                                                        : s.sw * kLanes;
  const float* const bias = j.e.bias ? j.e.bias + t.mb0 * kBlock : nullptr;
  const float* const w = j.w + (t.mb0 * s.cb + t.cb0) * s.kh * s.kw * kBlock * kBlock;
  const int64_t* const xo = st.x.data();
  const int64_t* const wo = st.w.data();
  const int64_t steps = (t.cb1 - t.cb0) * st.per_block;
  const NextWeights& next = pf.next;
  float* y = j.y + (t.n * s.mb + t.mb0) * out_plane + (oh * s.ow + ow) * kBlock;
  const float* x = j.x + (t.n * s.cb + t.cb0) * j.in_plane;
  if constexpr (!kAcross) x += (oh * s.sh * s.w + ow * s.sw) * kLanes;
  int64_t ph = kAcross ? ow / s.ow : 0, pw = kAcross ? ow % s.ow : 0;  // kAcross: next pixel
  for (int64_t i = 0; i < count; ++i, y += R * kBlock) {
    if (next.streams > 0) {  // pointwise runs only; no divisions a tile for the rest
      const int64_t tile_i = pf.first + i;
      const int64_t line0 = next.bytes * tile_i / pf.total / 64;
      const int64_t line1 = next.bytes * (tile_i + 1) / pf.total / 64;
      for (int k = 0; k < next.streams; ++k)
        for (int64_t line = line0; line < line1; ++line)
          _mm_prefetch(next.w + k * w_block * int64_t{sizeof(float)} + line * 64, _MM_HINT_T1);
    }
    int64_t pixel[R];  // offset of each pixel's first tap in x, in floats
    if constexpr (kAcross) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        pixel[r] = (ph * s.sh * s.w + pw * s.sw) * kBlock;
        if (++pw == s.ow) pw = 0, ++ph;
      }
    } else {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) pixel[r] = r * xstep;
    }
    // Every b and r loop is unrolled by pragma: left to itself GCC unrolls them after it has
    // decided to keep acc in memory, and stores every accumulator after every FMA (measured:
    // 1.15x on 1x1 convs, 1.6x on the stems).
    __m256 acc[B][R];
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[b][r] = !t.first ? _mm256_loadu_ps(y + b * out_plane + r * kBlock)
                    : bias   ? _mm256_loadu_ps(bias + b * kBlock)
                             : _mm256_setzero_ps();
    for (int64_t k = 0; k < steps; ++k) {
      const float* xp = x + xo[k];
      const float* wp = w + wo[k];
#pragma GCC unroll 8
      for (int ci = 0; ci < kLanes; ++ci) {
        // Weights held in registers. A tile that fills all 16 (3 x 4: 12 accumulators, 3
        // weights, a broadcast) left GCC no room: it spilled accumulators and moved them round
        // at every step. Its last block's weights are then FMA memory operands instead, the
        // pointer hidden from GCC (asm) so that it cannot load them once into a register:
        // 10 loads a lane step for 12 FMAs; resnet's 512-channel 3x3 at 7x7 1.08x faster than
        // with all 3 held (Zen 4).
        constexpr int kHeld = B * R + B + 1 > 15 ? B - 1 : B;
        __m256 wv[B];
#pragma GCC unroll 8
        for (int b = 0; b < kHeld; ++b) wv[b] = _mm256_loadu_ps(wp + b * w_block + ci * kBlock);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256 xv = _mm256_broadcast_ss(xp + pixel[r] + ci);
#pragma GCC unroll 8
          for (int b = 0; b < kHeld; ++b) acc[b][r] = _mm256_fmadd_ps(xv, wv[b], acc[b][r]);
          if constexpr (kHeld < B) {
            const float* wl = wp + (B - 1) * w_block + ci * kBlock;
            asm("" : "+r"(wl));
            acc[B - 1][r] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wl), acc[B - 1][r]);
          }
        }
      }
    }
    if constexpr (!kAcross) x += R * xstep;
    if (t.last) {
      using K = kiln_ops::Activation::Kind;
      switch (j.e.act.kind) {
        case K::kNone: finish_in_registers<K::kNone>(j, t, acc, y); continue;
        case K::kRelu: finish_in_registers<K::kRelu>(j, t, acc, y); continue;
        case K::kClip: finish_in_registers<K::kClip>(j, t, acc, y); continue;
        case K::kLeakyRelu: finish_in_registers<K::kLeakyRelu>(j, t, acc, y); continue;
        case K::kHardSwish: finish_in_registers<K::kHardSwish>(j, t, acc, y); continue;
        case K::kSilu: finish_in_registers<K::kSilu>(j, t, acc, y); continue;
        default: {  // on a copy
          __m256 v[B * R];
#pragma GCC unroll 8
          for (int b = 0; b < B; ++b)
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) v[b * R + r] = acc[b][r];
          finish<B, R>(j, t, v, y);
          continue;
        }
      }
    }
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + b * out_plane + r * kBlock, acc[b][r]);
  }
}

using TileFn = void (*)(const Job&, const Tile&, const Steps&, int64_t, int64_t, int64_t,
                        const Prefetch&);

template <int B, Input kIn, int... Rs>
constexpr std::array<TileFn, 8> tiles_of(std::integer_sequence<int, Rs...>) {
  return {&tile<B, Rs + 1, kIn>...};
}
using TileTable = std::array<std::array<TileFn, 8>, kMaxB + 1>;
// kTiles<input>[B][R - 1]; null past kMaxR[B].
template <Input kIn>
constexpr TileTable kTiles = {
    std::array<TileFn, 8>{}, tiles_of<1, kIn>(std::make_integer_sequence<int, kMaxR[1]>{}),
    tiles_of<2, kIn>(std::make_integer_sequence<int, kMaxR[2]>{}),
    tiles_of<3, kIn>(std::make_integer_sequence<int, kMaxR[3]>{})};

// Output blocks per tile for rows of `len` pixels: 2 unless another count is cheaper by
// row_cost, a tile of B x R costing the most of its FMAs (2 a cycle), the FMA latency (4 cycles:
// each accumulator takes one FMA per lane) and its loads (3 a cycle), in half-cycles per input
// lane, times the share of the taps its tiles read (taps_read). Rows of 7 pixels take 3: 3 x 4-
// and 3 x 3-pixel tiles hold 12 and 9 accumulators where 2 x 4 and 2 x 3 hold 8 and 6. DeepLab's
// ASPP at rate 24 on 33-pixel rows takes 3 too: its 4-pixel tiles read fewer kernel columns that
// land in the border than 6-pixel ones, 0.88x the time.
int tile_blocks(int64_t mb, int64_t len, const TapPlan& plan, const BlockedConvShape& in) {
  auto cost = [&](int b) {
    return taps_read(plan, b, in) * row_cost(mb, len, b, kMaxR, [](int bb, int64_t r) {
      return std::max({static_cast<double>(bb * r), 8.0, 2.0 * static_cast<double>(bb + r) / 3});
    });
  };
  int best = 2;
  for (int b = 1; b <= kMaxB; ++b)
    if (cost(b) < cost(best)) best = b;
  return best;
}

const TileTable& tiles_for(const BlockedConvShape& s, bool across_rows) {
  return across_rows            ? kTiles<Input::kAcrossRows>
         : s.plain_channels > 0 ? kTiles<Input::kPlain>
         : s.sw == 1            ? kTiles<Input::kBlockedUnit>
         : s.sw == 2            ? kTiles<Input::kBlockedStride2>
                                : kTiles<Input::kBlocked>;
}

// Output row oh, output blocks [mb0, mb0 + b), input blocks [cb0, cb1): the row's runs of tiles.
void row(const Job& j, const TapPlan& plan, int b, const Tile& t, int64_t oh) {
  const TileTable& tiles = tiles_for(j.s, false);
  for (const Run& run : plan.runs[b])
    tiles[b][run.width - 1](j, t, plan.of(oh, run.cols), oh, run.ow, run.count, Prefetch{{}, 0, 1});
}

// Output pixels [ow_begin, ow_end) of row oh (across_rows: of the image, rows running on) with
// every tap (pointwise convs, rows too short for a tile), with the prefetch of the next weights.
void pixels(const Job& j, const TapPlan& plan, int b, const Tile& t, int64_t oh, int64_t ow_begin,
            int64_t ow_end, bool across_rows, const NextWeights& next) {
  const TileTable& tiles = tiles_for(j.s, across_rows);
  const Steps& st = plan.steps[0];
  const RowCut cut = cut_row(ow_end - ow_begin, kMaxR[b]);
  if (cut.wide > 0) tiles[b][cut.narrow](j, t, st, oh, ow_begin, cut.wide, Prefetch{next, 0, cut.count});
  tiles[b][cut.narrow - 1](j, t, st, oh, ow_begin + cut.wide * (cut.narrow + 1), cut.count - cut.wide,
                           Prefetch{next, cut.wide, cut.count});
}

}  // namespace

void blocked_conv_dense_avx2(const BlockedConvShape& shape, const float* x, const float* w,
                             const BlockedEpilogue& e, float* y, ThreadPool* pool,
                             const DenseTuning& tuning) {
  if (shape.n == 0 || shape.mb == 0 || shape.oh == 0 || shape.ow == 0) return;
  // Every tap of every output pixel inside the input: X itself, or a copy with a zero border (a
  // strided 1x1 reads a gathered copy of its pixels as a pointwise conv: 1.3x on resnet's
  // downsample convs).
  thread_local AlignedBuffer scratch;
  thread_local TapPlan plan_of_thread;
  TapPlan& plan = plan_of_thread;  // the tasks' lambda, on other threads, must see this one
  const DenseInput in = dense_input(shape, x, scratch, pool);
  Job j{in.s, in.x, w, y, e, 0, 0, 0, _mm256_setzero_ps(), false};
  BlockedConvShape& s = j.s;
  j.w_block = s.cb * s.kh * s.kw * kBlock * kBlock;
  const bool plain = s.plain_channels > 0;
  j.in_plane = s.h * s.w * (plain ? s.plain_channels : kBlock);
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
  // once; each group's weights are visited in L1-sized chunks of input blocks. A pointwise conv
  // runs chunk by chunk, every group inside a chunk, so that only one chunk's input slab need stay
  // in L2: with many input blocks (fcn's 2048 channels: 8 KiB a pixel) units stay hundreds of
  // pixels wide and each chunk's weights, fetched from L3, serve all of them, where units sized
  // to whole pixels would be 24 pixels and refetch 4 MiB of weights each (measured: Zen 2).
  // Rows of at most half a tile (the late layers of small-image CNNs) are tiled as one run of
  // pixels across rows: 1.5x on 96 -> 96 channels at 10 x 2 (Zen 2, one thread), where 4-pixel
  // rows measured 10 % slower across rows than row by row.
  const bool across_rows = !pointwise && !plain && 2 * s.ow <= kMaxR[2];
  // Rows of tiles (pointwise convs and rows too short for a tile run pixels(), with every tap);
  // a copy with a zero border has taps to skip.
  const bool by_rows = !pointwise && !across_rows;
  plan_taps(shape, s, by_rows, by_rows && in.x != x, kMaxR, kMaxB, plan);
  // Output blocks per tile; long rows (pointwise, across rows) take 2.
  const int bt = tuning.pairs >= 1 && tuning.pairs <= kMaxB ? tuning.pairs
                 : pointwise || across_rows                 ? 2
                                                            : tile_blocks(s.mb, s.ow, plan, s);
  const int64_t groups = (s.mb + bt - 1) / bt;
  const int64_t threads = pool ? pool->threads() : 1;
  const int64_t chunk_bytes = tuning.chunk_bytes > 0 ? tuning.chunk_bytes : kChunkWeightBytes;
  const int64_t unit_bytes = tuning.unit_bytes > 0 ? tuning.unit_bytes : kUnitInputBytes;
  // The weights a tile reads per input block: of the taps it reads (DeepLab's ASPP at rate 24
  // reads about a quarter of them; chunks sized to every tap would hold 2 of its 120 blocks).
  const int64_t tap_weight_bytes = kBlock * kBlock * bt * int64_t{sizeof(float)};
  const int64_t tile_weight_bytes = std::max(
      tap_weight_bytes, static_cast<int64_t>(taps_read(plan, bt, s) * static_cast<double>(s.kh * s.kw * tap_weight_bytes)));
  int64_t chunk = std::max<int64_t>(1, chunk_bytes / tile_weight_bytes);
  const int64_t lane_bytes = (plain ? s.plain_channels : kBlock) * int64_t{sizeof(float)};
  int64_t unit_rows = 1, unit_px = s.ow, units = 1;
  if (pointwise) {
    const int64_t slab_px_bytes = std::min(chunk, s.cb) * lane_bytes;  // one pixel of one chunk
    const int64_t widest = std::clamp<int64_t>(unit_bytes / std::max<int64_t>(slab_px_bytes, 1), 24, 480);
    units = (s.ow + widest - 1) / widest;
    unit_px = (s.ow + units - 1) / units;  // units of equal width: 196 pixels are 98 + 98, not 168 + 28
  } else {
    // A unit streams all the weights once, so past L2's share they set its size instead: fcn's
    // 2048 -> 512 3x3 at 64x64 (38 MB of weights, a 270 KB input row) took a unit per output
    // row and read its weights from memory 64 times (138 -> 162-166 GFLOP/s as one unit, Zen 2).
    const int64_t row_bytes = s.sh * s.w * s.cb * lane_bytes;
    const int64_t weight_bytes = s.mb * j.w_block * int64_t{sizeof(float)};
    unit_rows = std::clamp<int64_t>(std::max(unit_bytes, weight_bytes) / std::max<int64_t>(row_bytes, 1), 1, s.oh);
    units = (s.oh + unit_rows - 1) / unit_rows;
  }
  const int64_t want_tasks = threads == 1 ? 1 : 8 * threads;
  if (!pointwise && s.n * units * groups < want_tasks) {
    // Few output-block groups (mobilenet_v3's 16-channel stem has one): shorter units, so that
    // the tasks share out evenly (the stem ran as 5 tasks on 2 threads).
    unit_rows = std::max<int64_t>(1, s.oh / ((want_tasks + s.n * groups - 1) / (s.n * groups)));
    units = (s.oh + unit_rows - 1) / unit_rows;
  }
  if (pointwise && s.n * units * groups < want_tasks) {
    // A small image (7x7, 14x14): narrower units, down to two tiles, so that the tasks share
    // out evenly (mobilenet_v2's 960->160 at 7x7 was 5 tasks on 2 threads).
    units = std::max(units, std::min((s.ow + 11) / 12, (want_tasks + s.n * groups - 1) / (s.n * groups)));
    unit_px = (s.ow + units - 1) / units;
  }
  // Each unit's output-block groups split into `splits` tasks of groups_per_task groups.
  auto groups_per_task_of = [&](int64_t u) {
    const int64_t wanted = std::clamp<int64_t>((want_tasks + s.n * u - 1) / (s.n * u), 1, groups);
    return (groups + wanted - 1) / wanted;
  };
  if (threads > 1) {
    // Tasks that share out evenly, of equal units where they can be (even_units).
    const int64_t extent = pointwise ? s.ow : s.oh, most = pointwise ? (s.ow + 11) / 12 : s.oh;
    int64_t& len = pointwise ? unit_px : unit_rows;
    const Units even = even_units(extent, {units, len}, most, threads, true, [&](int64_t count) {
      const int64_t per = groups_per_task_of(count);
      return s.n * count * ((groups + per - 1) / per);
    });
    units = even.units, len = even.len;
  }
  // A unit of few tiles (3x3s at 7x7: 7 rows of 2) reuses an L1 chunk too little to pay for
  // fetching it and for the partial sums between chunks: its tiles stream L2-sized chunks
  // instead, as the AVX-512 kernel's do (0.90-0.93x on resnet's 512-channel 3x3 at 7x7, Zen 4;
  // 1.01-1.02x *slower* at 14x14, 42 tiles a unit).
  const int64_t unit_tiles = across_rows ? (unit_rows * s.ow + kMaxR[bt] - 1) / kMaxR[bt]
                                         : unit_rows * ((s.ow + kMaxR[bt] - 1) / kMaxR[bt]);
  if (!pointwise && tuning.chunk_bytes <= 0 && unit_tiles <= 16)
    chunk = std::max<int64_t>(1, kL2ChunkWeightBytes / tile_weight_bytes);
  fill_plan_steps(s, j.in_plane, std::min(chunk, s.cb), plan);
  const int64_t groups_per_task = groups_per_task_of(units);
  const int64_t splits = (groups + groups_per_task - 1) / groups_per_task;  // none of them empty
  auto task = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t split = t % splits, unit = (t / splits) % units, n = t / (splits * units);
      const int64_t oh0 = pointwise ? 0 : unit * unit_rows;
      const int64_t oh1 = pointwise ? 1 : std::min(s.oh, oh0 + unit_rows);
      const int64_t ow0 = pointwise ? unit * unit_px : 0;
      const int64_t ow1 = pointwise ? std::min(s.ow, ow0 + unit_px) : s.ow;
      const int64_t g0 = split * groups_per_task, g1 = std::min(groups, g0 + groups_per_task);
      const int64_t chunk_end = std::max<int64_t>(s.cb, 1);  // cb 0: one pass, bias only
      // A pointwise task's runs go chunk by chunk, every group inside a chunk (see above).
      auto next_weights = [&](int64_t g, int64_t cb0) {
        if (++g == g1) g = g0, cb0 += chunk;
        if (!pointwise || cb0 >= s.cb) return NextWeights{};
        const int64_t tap_floats = s.kh * s.kw * kBlock * kBlock;
        return NextWeights{reinterpret_cast<const char*>(j.w + (g * bt * s.cb + cb0) * tap_floats),
                           std::min(chunk, s.cb - cb0) * tap_floats * int64_t{sizeof(float)},
                           static_cast<int>(std::min<int64_t>(bt, s.mb - g * bt))};
      };
      auto run = [&](int64_t g, int64_t cb0) {
        const int64_t mb0 = g * bt;
        const int b = static_cast<int>(std::min<int64_t>(bt, s.mb - mb0));
        const Tile tl{n, mb0, cb0, std::min(s.cb, cb0 + chunk), cb0 == 0, cb0 + chunk >= s.cb};
        const NextWeights next = next_weights(g, cb0);
        if (across_rows) return pixels(j, plan, b, tl, 0, oh0 * s.ow, oh1 * s.ow, true, next);
        if (pointwise) return pixels(j, plan, b, tl, 0, ow0, ow1, false, next);
        for (int64_t oh = oh0; oh < oh1; ++oh) row(j, plan, b, tl, oh);
      };
      if (pointwise) {
        for (int64_t cb0 = 0; cb0 < chunk_end; cb0 += chunk)
          for (int64_t g = g0; g < g1; ++g) run(g, cb0);
      } else {
        for (int64_t g = g0; g < g1; ++g)
          for (int64_t cb0 = 0; cb0 < chunk_end; cb0 += chunk) run(g, cb0);
      }
    }
  };
  const int64_t flops = 2 * s.n * s.mb * s.oh * s.ow * s.cb * s.kh * s.kw * kBlock * kBlock;
  parallel_range(pool, s.n * units * splits, flops / 64, task);
}

}  // namespace kiln::nchwc
