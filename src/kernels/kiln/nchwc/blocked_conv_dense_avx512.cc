// ai.kiln.BlockedConv, group 1, as a direct convolution in AVX-512. This file alone is compiled
// with KILN_AVX512_FLAGS (CMakeLists.txt); blocked_conv.cc calls it only when cpu_features()
// reports AVX-512. The tensors keep their 8-float blocks (a saved model must not depend on the
// CPU); one zmm accumulator holds one output pixel of a *pair* of output blocks (16 channels),
// reading the weights paired by pair_dense_weights. A register tile of P pairs x R pixels
// (P * R <= 24 of the 32 zmm) takes P weight loads and R broadcasts per input channel for P * R
// FMAs. Zen 4 splits a zmm FMA into two 256-bit halves: the gain over the AVX2 kernel is the
// register file (a 4x larger tile, so fewer loads per FMA) and half the instructions. The lone
// last block of an odd block count runs as ymm tiles of its own instead of half-empty pairs.
//
// dense_input first pads (or, for a strided 1x1, gathers) the input so that every tap of every
// tile is inside it: no border tiles. Pointwise convs run the tile over the flattened pixels (a
// GEMM on the blocked layout). Tasks are (image, unit of output rows or pixels, group of P
// pairs); a thread's consecutive tasks share the larger operand in L2 (a unit's input, or a
// group's weights in the deep layers). A tile runs over many input blocks at once: its weights
// streaming from L2 beat L1-sized chunks with partial sums in Y (95% vs 80-90% of peak on
// resnet's layers, one thread).
//
// GCC 12's intrinsics pass _mm512_undefined_ps() (a self-initialised variable) to the builtins
// behind _mm512_max_ps, _mm512_castps512_ps256 and others, which the uninitialized-use warnings
// report once inlined (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/kiln/nchwc/activation_avx2.h"
#include "kernels/kiln/nchwc/activation_avx512.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_conv_dense_prep.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

constexpr int kMaxPairs = 4;
// Pixels per tile for P pairs (P = 0: the lone block): P * R accumulators, P weights and a
// broadcast within the 32 registers.
constexpr int kMaxR[kMaxPairs + 1] = {12, 12, 12, 8, 6};
constexpr int64_t kPair = 2 * kBlock;           // floats of one pair: one zmm
constexpr int64_t kPairTap = kBlock * kPair;    // one tap of one pair in the paired weights

struct Job {
  BlockedConvShape s;  // over the tiles' input: no pads; pointwise convs flattened to one row
  const float* x;
  const float* w;      // paired weights
  float* y;
  BlockedEpilogue e;
  int64_t pairs;                  // full pairs: mb / 2 (an odd mb's last block is lone)
  int64_t w_pair;                 // floats between consecutive pairs of w
  int64_t in_image, in_plane, in_row;
  int64_t pixel;                  // floats between neighbouring input pixels: 8, or 1 (plain)
  int64_t lanes, lane_step;       // input channels per block and floats between them
  int64_t out_plane;
  __mmask16 last_keep;            // the real channels of the last pair, or of the lone block
  int64_t pad_top, rows;          // X's top pad and rows before dense_input's zero border
  int64_t pad_left, cols;         // and its left pad and columns
};

struct Tile {
  int64_t n, pair0, oh, ow0, cb0, cb1;
  bool first, last;
};

// One accumulator: a pixel of a pair of output blocks in a zmm (blocks `plane` floats apart in
// Y), or of the lone last block in a ymm.
struct PairReg {
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V weights(const float* p) { return _mm512_load_ps(p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V keep(__mmask16 k, V v) { return _mm512_maskz_mov_ps(k, v); }
  static V load(const float* p, int64_t plane) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm256_loadu_ps(p + plane), 1);
  }
  static void store(float* p, int64_t plane, V v) {
    _mm256_storeu_ps(p, _mm512_castps512_ps256(v));
    _mm256_storeu_ps(p + plane, _mm512_extractf32x8_ps(v, 1));
  }
  static V bias(const float* p) { return _mm512_loadu_ps(p); }
};

struct BlockReg {
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V weights(const float* p) { return _mm256_load_ps(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V keep(__mmask16 k, V v) { return _mm256_maskz_mov_ps(static_cast<__mmask8>(k), v); }
  static V load(const float* p, int64_t) { return _mm256_loadu_ps(p); }
  static void store(float* p, int64_t, V v) { _mm256_storeu_ps(p, v); }
  static V bias(const float* p) { return _mm256_loadu_ps(p); }
};

// f(acc[p][r], p, r) for every accumulator, unrolled: with constant indices the tile stays in
// registers.
template <int P, int R, class V, class F>
[[gnu::always_inline]] inline void for_each(V (&acc)[P][R], F&& f) {
#pragma GCC unroll 4
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) f(acc[p][r], p, r);
}

// The activation on the tile: the piecewise-linear ones and SiLU in registers, the rest through
// apply_unclamped on a copy (their math outweighs the copy); then the activation's clamp.
template <class Reg, int P, int R>
[[gnu::always_inline]] inline void activate(const kiln_ops::Activation& act,
                                            typename Reg::V (&acc)[P][R]) {
  using K = kiln_ops::Activation::Kind;
  using V = typename Reg::V;
  switch (act.kind) {
    case K::kNone:
      break;
    case K::kRelu:
      for_each(acc, [&](V& v, int, int) { v = Reg::max(v, Reg::zero()); });
      break;
    case K::kClip: {
      const V lo = Reg::set1(static_cast<float>(act.p0)), hi = Reg::set1(static_cast<float>(act.p1));
      for_each(acc, [&](V& v, int, int) { v = Reg::min(Reg::max(v, lo), hi); });
      break;
    }
    case K::kSilu:  // efficientnet's epilogue: its math in registers too, for the zmm tiles
      if constexpr (sizeof(V) == sizeof(__m512)) {  // a pair tile, not the lone block
        for_each(acc, [&](V& v, int, int) { v = silu_avx512(v); });
        break;
      }
      [[fallthrough]];
    default: {
      V v[P * R];
      for_each(acc, [&](V& a, int p, int r) { v[p * R + r] = a; });
      apply_unclamped(act, v, P * R);
      for_each(acc, [&](V& a, int p, int r) { a = v[p * R + r]; });
    }
  }
  if (act.clamped()) {
    const V lo = Reg::set1(static_cast<float>(act.lo)), hi = Reg::set1(static_cast<float>(act.hi));
    for_each(acc, [&](V& v, int, int) { v = Reg::min(Reg::max(v, lo), hi); });
  }
}

// Residual, activation, padding lanes and store of a finished tile at y; `tail`: the tile holds
// the last channels, whose lanes past `channels` are zeroed.
template <class Reg, int P, int R>
[[gnu::always_inline]] inline void finish(const Job& j, bool tail, typename Reg::V (&acc)[P][R],
                                          float* y) {
  using V = typename Reg::V;
  const int64_t plane = j.out_plane;
  const float* z = j.e.z ? j.e.z + (y - j.y) : nullptr;
  auto add_residual = [&] {
    for_each(acc, [&](V& v, int p, int r) {
      v = Reg::add(v, Reg::load(z + 2 * p * plane + r * kBlock, plane));
    });
  };
  if (z && j.e.residual_first) add_residual();
  activate<Reg>(j.e.act, acc);
  if (z && !j.e.residual_first) add_residual();
  if (tail)
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[P - 1][r] = Reg::keep(j.last_keep, acc[P - 1][r]);
  for_each(acc, [&](V& v, int p, int r) { Reg::store(y + 2 * p * plane + r * kBlock, plane, v); });
}

// How a tile reads X: blocked with stride 1 or 2, plain NCHW (C <= 8 channels, one block of C
// lanes) with stride 2 (the stems of mobilenet and efficientnet), all with the pixels' offsets
// constants; or anything else.
enum class Mode { kUnit, kStride2, kPlainStride2, kAny };

// `count` tiles of P pairs (PairReg) or the lone block (BlockReg, P = 1) x R pixels from t.ow0
// on, one after the other along the row.
template <class Reg, int P, int R, Mode M>
void tile(const Job& j, const Tile& t, int64_t count) {
  using V = typename Reg::V;
  constexpr bool kFixed = M == Mode::kUnit || M == Mode::kStride2;  // blocked X
  const BlockedConvShape& s = j.s;
  const int64_t pixel = kFixed ? kBlock : M == Mode::kPlainStride2 ? 1 : j.pixel;
  const int64_t xstep = M == Mode::kUnit           ? kBlock
                        : M == Mode::kStride2      ? 2 * kBlock
                        : M == Mode::kPlainStride2 ? 2
                                                   : s.sw * pixel;
  const int64_t lanes = kFixed ? kBlock : j.lanes, lane_step = kFixed ? 1 : j.lane_step;
  const int64_t w_pair = j.w_pair, plane = j.out_plane, in_row = j.in_row, in_plane = j.in_plane;
  const int64_t kh_n = s.kh, kw_n = s.kw, kh_step = s.dh * in_row, kw_step = s.dw * pixel;
  const int64_t cb0 = t.cb0, cb1 = t.cb1;
  // The tile's first output block: 2 per pair; the lone block follows the full pairs.
  const int64_t block0 = 2 * t.pair0;
  const bool tail = block0 + 2 * P >= s.mb && j.last_keep != 0xFFFF;
  const float* const w0 = j.w + t.pair0 * w_pair + cb0 * kh_n * kw_n * kPairTap;
  const float* const bias = j.e.bias ? j.e.bias + block0 * kBlock : nullptr;
  float* y = j.y + (t.n * s.mb + block0) * plane + (t.oh * s.ow + t.ow0) * kBlock;
  const float* xn = j.x + t.n * j.in_image + t.oh * s.sh * in_row + t.ow0 * xstep + cb0 * in_plane;

  // The kernel rows that read X's rows rather than its zero border, the same for the whole
  // output row, and of each tile the kernel columns that read X's columns for some pixel: a
  // dilated conv's taps often all land in the border (DeepLab's ASPP at rate 24 on a 33x33 map:
  // half its kernel rows, and of the middle tiles all but the middle column).
  const auto [kh0, kh1] = valid_taps(t.oh * s.sh - j.pad_top, s.dh, kh_n, j.rows);
  const int64_t skip_before = kh0 * kw_n * kPairTap, skip_after = (kh_n - kh1) * kw_n * kPairTap;
  for (int64_t i = 0; i < count; ++i, y += R * kBlock, xn += R * xstep) {
    const int64_t first_col = (t.ow0 + i * R) * s.sw - j.pad_left;
    const auto [kw0, kw1] = tile_taps(first_col, first_col + (R - 1) * s.sw, s.dw, kw_n, j.cols);
    V acc[P][R];
    if (t.first) {
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {
        const V b = bias ? Reg::bias(bias + p * kPair) : Reg::zero();
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) acc[p][r] = b;
      }
    } else {
      for_each(acc, [&](V& v, int p, int r) { v = Reg::load(y + 2 * p * plane + r * kBlock, plane); });
    }
    const float* wp = w0;
    const float* xc = xn;
    for (int64_t cb = cb0; cb < cb1; ++cb, xc += in_plane, wp += skip_after) {
      wp += skip_before;
      for (int64_t kh = kh0; kh < kh1; ++kh, wp += (kw_n - kw1) * kPairTap) {
        const float* xr = xc + kh * kh_step;
        wp += kw0 * kPairTap;
        for (int64_t kw = kw0; kw < kw1; ++kw, wp += kPairTap) {
          const float* xp = xr + kw * kw_step;
#pragma GCC unroll 8
          for (int64_t ci = 0; ci < lanes; ++ci) {
            V wv[P];
#pragma GCC unroll 4
            for (int p = 0; p < P; ++p) wv[p] = Reg::weights(wp + p * w_pair + ci * kPair);
#pragma GCC unroll 12
            for (int r = 0; r < R; ++r) {
              const V xv = Reg::set1(xp[r * xstep + ci * lane_step]);
#pragma GCC unroll 4
              for (int p = 0; p < P; ++p) acc[p][r] = Reg::fma(xv, wv[p], acc[p][r]);
            }
          }
        }
      }
    }
    if (t.last)
      finish<Reg>(j, tail, acc, y);
    else
      for_each(acc, [&](V& v, int p, int r) { Reg::store(y + 2 * p * plane + r * kBlock, plane, v); });
  }
}

using TileFn = void (*)(const Job&, const Tile&, int64_t count);
using TileRow = std::array<TileFn, 12>;

template <class Reg, int P, Mode M, int... Rs>
constexpr TileRow tiles_of(std::integer_sequence<int, Rs...>) {
  return {&tile<Reg, P, Rs + 1, M>...};
}
using TileTable = std::array<TileRow, kMaxPairs + 1>;
// kTiles<mode>[P][R - 1] for P pairs, [0][R - 1] for the lone block; null past kMaxR[P].
template <Mode M>
constexpr TileTable kTiles = {
    tiles_of<BlockReg, 1, M>(std::make_integer_sequence<int, kMaxR[0]>{}),
    tiles_of<PairReg, 1, M>(std::make_integer_sequence<int, kMaxR[1]>{}),
    tiles_of<PairReg, 2, M>(std::make_integer_sequence<int, kMaxR[2]>{}),
    tiles_of<PairReg, 3, M>(std::make_integer_sequence<int, kMaxR[3]>{}),
    tiles_of<PairReg, 4, M>(std::make_integer_sequence<int, kMaxR[4]>{})};

// Runs pixels [ow0, ow1) of t's row in tiles of as even a size as kMaxR[p] allows: `extra`
// tiles of base + 1 pixels, then the rest of base.
void run_span(const Job& j, const TileRow& tiles, int p, Tile t, int64_t ow0, int64_t ow1) {
  const int64_t len = ow1 - ow0;
  if (len <= 0) return;
  const int64_t count = (len + kMaxR[p] - 1) / kMaxR[p], base = len / count, extra = len % count;
  t.ow0 = ow0;
  if (extra > 0) tiles[base](j, t, extra);
  t.ow0 += extra * (base + 1);
  tiles[base - 1](j, t, count - extra);
}

// Estimated cycles per input channel of a row of `len` pixels for `pairs` pairs in tiles of P
// (row_cost): per tile the FMAs, or the loads (2 per cycle, a zmm counting 2) when they are more,
// plus a loop step.
double pair_row_cost(int64_t pairs, int64_t len, int P) {
  return row_cost(pairs, len, P, kMaxR,
                  [](int p, int64_t r) { return std::max<double>(p * r, (2.0 * p + r) / 2) + 1; });
}

// How a call is cut into tasks.
struct Split {
  int P;                     // pairs per tile
  int64_t pair_groups;       // groups of P pairs (the last may hold fewer)
  int64_t groups;            // pair groups, then the lone block's
  int64_t units, unit_len;   // units of output rows (pointwise: pixels) and their length
  int64_t chunk;             // input blocks per pass over a unit
  bool weights_stay;         // consecutive tasks share a group (else a unit)
};

Split split(const Job& j, bool pointwise, bool lone, int64_t threads, const DenseTuning& tuning) {
  const BlockedConvShape& s = j.s;
  Split sp{};
  // Units of output pixels: a unit's input stays in L2 while the thread's groups sweep it.
  const int64_t px_bytes = std::max<int64_t>(1, s.cb * j.lanes * int64_t{sizeof(float)});
  const int64_t unit_bytes = tuning.unit_bytes > 0 ? tuning.unit_bytes : 128 * 1024;
  const int64_t extent = pointwise ? s.ow : s.oh;
  const int64_t per_unit = pointwise ? std::max<int64_t>(48, unit_bytes / px_bytes)
                                     : std::max<int64_t>(1, unit_bytes / (s.sh * s.w * px_bytes));
  sp.units = (extent + per_unit - 1) / per_unit;
  sp.P = tuning.pairs;
  if (sp.P <= 0 || sp.P > kMaxPairs) {
    sp.P = 1;
    const int64_t len = pointwise ? (extent + sp.units - 1) / sp.units : s.ow;
    for (int cand = 2; cand <= kMaxPairs && cand <= j.pairs; ++cand)
      if (pair_row_cost(j.pairs, len, cand) <= pair_row_cost(j.pairs, len, sp.P)) sp.P = cand;
  }
  sp.pair_groups = (j.pairs + sp.P - 1) / sp.P;
  sp.groups = sp.pair_groups + (lone ? 1 : 0);
  const int64_t taps = s.kh * s.kw;
  const int64_t chunk_bytes = tuning.chunk_bytes > 0 ? tuning.chunk_bytes : 256 * 1024;
  sp.chunk = std::max<int64_t>(1, chunk_bytes / (taps * sp.P * kPairTap * int64_t{sizeof(float)}));
  // Enough tasks (4 a thread) for the threads to finish together: split the pixels finer, down
  // to rows (or 8 pixels). More tasks measured 3% slower on mobilenet_v2 (16 a thread).
  if (threads > 1 && s.n * sp.groups * sp.units < 4 * threads)
    sp.units = std::min(pointwise ? (s.ow + 7) / 8 : s.oh,
                        std::max(sp.units, (4 * threads + s.n * sp.groups - 1) / (s.n * sp.groups)));
  sp.unit_len = (extent + sp.units - 1) / sp.units;
  sp.units = (extent + sp.unit_len - 1) / sp.unit_len;
  if (pointwise && threads > 1) {  // tasks that share out evenly (even_units)
    const Units even = even_units(extent, {sp.units, sp.unit_len}, (extent + 7) / 8, threads, false,
                                  [&](int64_t count) { return s.n * sp.groups * count; });
    sp.units = even.units, sp.unit_len = even.len;
  }
  // The larger operand stays put: with more weights than input (the deep layers), a thread's
  // consecutive tasks are one group's units, its weights staying in L2; else one unit's groups.
  sp.weights_stay = s.mb * s.cb * taps * kBlock * kBlock > s.n * s.cb * j.lanes * s.h * s.w;
  return sp;
}

}  // namespace

void blocked_conv_dense_avx512(const BlockedConvShape& shape, const float* x, const float* w,
                               const BlockedEpilogue& e, float* y, ThreadPool* pool,
                               const DenseTuning& tuning) {
  if (shape.n == 0 || shape.mb == 0 || shape.oh == 0 || shape.ow == 0) return;
  thread_local AlignedBuffer scratch;
  const DenseInput in = dense_input(shape, x, scratch, pool);
  Job j{};
  j.s = in.s;
  j.x = in.x;
  j.w = w;
  j.y = y;
  j.e = e;
  BlockedConvShape& s = j.s;
  const bool plain = s.plain_channels > 0;
  j.pairs = s.mb / 2;
  const bool lone = s.mb % 2 == 1;
  j.w_pair = s.cb * s.kh * s.kw * kPairTap;
  j.pixel = plain ? 1 : kBlock;
  j.lanes = plain ? s.plain_channels : kBlock;
  j.lane_step = plain ? s.h * s.w : 1;
  j.in_plane = s.h * s.w * (plain ? 1 : kBlock);
  j.in_image = s.cb * s.h * s.w * (plain ? s.plain_channels : kBlock);
  j.in_row = s.w * j.pixel;
  j.out_plane = s.oh * s.ow * kBlock;
  // The real channels of the last pair or lone block: 1 to 16.
  const int64_t real = s.channels - (s.mb - (lone ? 1 : 2)) * kBlock;
  j.last_keep = static_cast<__mmask16>((1u << real) - 1);
  j.pad_top = shape.pt, j.rows = shape.h;
  j.pad_left = shape.pl, j.cols = shape.w;
  const bool pointwise = s.pointwise();
  if (pointwise) {  // one long row: tiles run across the image's rows (and any zero border)
    s.w = s.ow = s.h * s.w;
    s.h = s.oh = 1;
    j.in_row = s.w * j.pixel;
    j.pad_top = 0, j.rows = 1, j.pad_left = 0, j.cols = s.w;
  }
  const TileTable& tiles = plain ? (s.sw == 2 ? kTiles<Mode::kPlainStride2> : kTiles<Mode::kAny>)
                           : s.sw == 1 ? kTiles<Mode::kUnit>
                           : s.sw == 2 ? kTiles<Mode::kStride2>
                                       : kTiles<Mode::kAny>;

  const int64_t threads = pool ? pool->threads() : 1;
  const Split sp = split(j, pointwise, lone, threads, tuning);
  const int64_t extent = pointwise ? s.ow : s.oh, units = sp.units, groups = sp.groups;

  auto task = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t g = sp.weights_stay ? (t / units) % groups : t % groups;
      const int64_t unit = sp.weights_stay ? t % units : (t / groups) % units;
      const int64_t u0 = unit * sp.unit_len, u1 = std::min(u0 + sp.unit_len, extent);
      const int p = g == sp.pair_groups ? 0 : static_cast<int>(std::min<int64_t>(sp.P, j.pairs - g * sp.P));
      Tile tl{};
      tl.n = t / (groups * units);
      tl.pair0 = p == 0 ? j.pairs : g * sp.P;  // the lone block sits in pair j.pairs's first half
      for (int64_t cb0 = 0; cb0 < s.cb || cb0 == 0; cb0 += sp.chunk) {
        tl.cb0 = cb0;
        tl.cb1 = std::min(s.cb, cb0 + sp.chunk);
        tl.first = cb0 == 0;
        tl.last = tl.cb1 == s.cb;
        if (pointwise) {
          tl.oh = 0;
          run_span(j, tiles[p], p, tl, u0, u1);
        } else {
          for (int64_t oh = u0; oh < u1; ++oh) {
            tl.oh = oh;
            run_span(j, tiles[p], p, tl, 0, s.ow);
          }
        }
        if (s.cb == 0) break;
      }
    }
  };
  const int64_t flops = 2 * s.n * s.mb * s.oh * s.ow * s.cb * s.kh * s.kw * kBlock * kBlock;
  parallel_range(pool, s.n * units * groups, flops / 64, task);
}

}  // namespace kiln::nchwc
