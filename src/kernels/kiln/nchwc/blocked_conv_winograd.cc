// The per-call part of Winograd F(4x4, 3x3) on the blocked layout (the scheme of NNPACK and
// oneDNN's winograd convs): a task takes a chunk of output tiles and a range of output panels,
//   1. transforms each tile's 6x6 input patch, 8 input channels at a time (one ymm per pixel),
//      into V [36 points][input blocks][tiles][8];
//   2. runs the 36 GEMMs M[xi] = V[xi] * U[xi] with the micro-kernel (..._avx2/avx512.cc);
//   3. transforms M back to 4x4 output pixels per tile, 8 output channels at a time, adding the
//      bias and the fused epilogue, and stores the pixels inside the output.
// V and M of a task are sized to stay in L2 (chunk of tiles); when the image has few tiles (deep
// layers), tasks split the output channels instead, so each thread streams only its part of U.
// A U too big for the caches over many tiles runs point-major instead (run_point_major), and a
// dilated conv runs on its interleaved grids (tile_pos).
#include "kernels/kiln/nchwc/blocked_conv_winograd.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>

#include "core/aligned_buffer.h"
#include "core/thread_scratch.h"
#include "kernels/kiln/nchwc/activation_avx2.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

// One task's transformed input and products (bytes): about half of Zen 4's 1 MiB L2 (measured
// by bench/conv_winograd_bench.cc: 256-768 KiB within noise on resnet50's layers).
constexpr int64_t kDefaultL2Bytes = 512 * 1024;
// Streaming a byte of U from memory costs about as long as this many flops of the GEMMs (2-core
// AVX2/AVX-512 peaks of 190-340 GFLOP/s over 20-40 GB/s).
constexpr double kFlopsPerStreamedByte = 8;
// V and M of one group of chunks in the point-major order (run_point_major).
constexpr int64_t kPointMajorGroupBytes = 64 << 20;

// The 1-D transforms of F(m, 3), applied to the columns then the rows of a patch. F(4, 3):
// o = B^T d over six values (a column or a row of the patch):
//   o0 = 4 d0 - 5 d2 + d4            o3 = (d4 - d2) + 2 (d3 - d1)
//   o1 = (d3 + d4) - 4 (d1 + d2)     o4 = (d4 - d2) - 2 (d3 - d1)
//   o2 = (d4 - d3) + 4 (d1 - d2)     o5 = 4 d1 - 5 d3 + d5
inline void input_1d_f4(const __m256* d, __m256* o) {
  const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f);
  const __m256 five = _mm256_set1_ps(5.0f);
  o[0] = _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4]));
  o[1] = _mm256_fnmadd_ps(four, _mm256_add_ps(d[1], d[2]), _mm256_add_ps(d[3], d[4]));
  o[2] = _mm256_fmadd_ps(four, _mm256_sub_ps(d[1], d[2]), _mm256_sub_ps(d[4], d[3]));
  const __m256 e42 = _mm256_sub_ps(d[4], d[2]), d31 = _mm256_sub_ps(d[3], d[1]);
  o[3] = _mm256_fmadd_ps(two, d31, e42);
  o[4] = _mm256_fnmadd_ps(two, d31, e42);
  o[5] = _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5]));
}

// o = A^T m over six values: with a = m1 + m2, b = m1 - m2, c = m3 + m4, d = m3 - m4,
//   o0 = m0 + a + c,  o1 = b + 2 d,  o2 = a + 4 c,  o3 = b + 8 d + m5.
inline void output_1d_f4(const __m256* m, __m256* o) {
  const __m256 a = _mm256_add_ps(m[1], m[2]), b = _mm256_sub_ps(m[1], m[2]);
  const __m256 c = _mm256_add_ps(m[3], m[4]), d = _mm256_sub_ps(m[3], m[4]);
  o[0] = _mm256_add_ps(_mm256_add_ps(m[0], a), c);
  o[1] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d, b);
  o[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), c, a);
  o[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), d, b), m[5]);
}

// F(2, 3): o = B^T d over four values: o0 = d0 - d2, o1 = d1 + d2, o2 = d2 - d1, o3 = d1 - d3.
inline void input_1d_f2(const __m256* d, __m256* o) {
  o[0] = _mm256_sub_ps(d[0], d[2]);
  o[1] = _mm256_add_ps(d[1], d[2]);
  o[2] = _mm256_sub_ps(d[2], d[1]);
  o[3] = _mm256_sub_ps(d[1], d[3]);
}

// o = A^T m over four values: o0 = m0 + m1 + m2, o1 = m1 - m2 - m3.
inline void output_1d_f2(const __m256* m, __m256* o) {
  o[0] = _mm256_add_ps(_mm256_add_ps(m[0], m[1]), m[2]);
  o[1] = _mm256_sub_ps(_mm256_sub_ps(m[1], m[2]), m[3]);
}

template <int kTile>
inline void input_1d(const __m256* d, __m256* o) {
  if constexpr (kTile == 4)
    input_1d_f4(d, o);
  else
    input_1d_f2(d, o);
}

template <int kTile>
inline void output_1d(const __m256* m, __m256* o) {
  if constexpr (kTile == 4)
    output_1d_f4(m, o);
  else
    output_1d_f2(m, o);
}

struct Job {
  const BlockedConvShape& s;
  const float* x;
  const WinogradWeights& w;
  const BlockedEpilogue& e;
  float* y;
  int64_t tile;                         // output pixels per tile side: 4 or 2
  int64_t tiles_w, phase_tiles;         // per row and per phase of one image
  int64_t image_tiles, tiles;           // per image (every phase), in all
  __m256 tail_keep;                     // real lanes of the last output block
  bool has_tail;
};

struct TilePos {
  int64_t n, row, col;  // image, first output row and column
};

// A dilated conv is dh x dw convs of dilation 1 on interleaved grids (the phases: the output
// pixels row % dh, col % dw, and the inputs they read), so a tile's pixels and its patch's are
// dh rows and dw columns apart: tiles run phase by phase, then row by row.
TilePos tile_pos(const Job& j, int64_t t) {
  const int64_t r = t % j.image_tiles, phase = r / j.phase_tiles, q = r % j.phase_tiles;
  const BlockedConvShape& s = j.s;
  return {t / j.image_tiles, phase / s.dw + q / j.tiles_w * j.tile * s.dh,
          phase % s.dw + q % j.tiles_w * j.tile * s.dw};
}

// Tiles per row and per column of one phase.
int64_t phase_tiles_w(const BlockedConvShape& s, int64_t tile) {
  return ((s.ow + s.dw - 1) / s.dw + tile - 1) / tile;
}
int64_t phase_tiles_h(const BlockedConvShape& s, int64_t tile) {
  return ((s.oh + s.dh - 1) / s.dh + tile - 1) / tile;
}

// V[xi][cb][i][8] for the `count` tiles from t0.
template <int kTile>
void transform_input(const Job& j, int64_t t0, int64_t count, float* v) {
  constexpr int kP = kTile + 2;  // patch side
  const BlockedConvShape& s = j.s;
  const int64_t plane = s.h * s.w * kBlock, point = s.cb * count * kBlock;
  for (int64_t cb = 0; cb < s.cb; ++cb)
    for (int64_t i = 0; i < count; ++i) {
      const TilePos p = tile_pos(j, t0 + i);
      const int64_t ih0 = p.row - s.pt, iw0 = p.col - s.pl;
      const float* xp = j.x + (p.n * s.cb + cb) * plane + (ih0 * s.w + iw0) * kBlock;
      const int64_t row_step = s.dh * s.w * kBlock, col_step = s.dw * kBlock;
      __m256 d[kP][kP];
      if (ih0 >= 0 && ih0 + (kP - 1) * s.dh < s.h && iw0 >= 0 && iw0 + (kP - 1) * s.dw < s.w) {
        for (int a = 0; a < kP; ++a)
          for (int b = 0; b < kP; ++b) d[a][b] = _mm256_loadu_ps(xp + a * row_step + b * col_step);
      } else {
        for (int a = 0; a < kP; ++a)
          for (int b = 0; b < kP; ++b) {
            const int64_t ih = ih0 + a * s.dh, iw = iw0 + b * s.dw;
            const bool inside = ih >= 0 && ih < s.h && iw >= 0 && iw < s.w;
            d[a][b] = inside ? _mm256_loadu_ps(xp + a * row_step + b * col_step) : _mm256_setzero_ps();
          }
      }
      __m256 t[kP][kP], col[kP], out[kP];
      for (int b = 0; b < kP; ++b) {
        for (int a = 0; a < kP; ++a) col[a] = d[a][b];
        input_1d<kTile>(col, out);
        for (int a = 0; a < kP; ++a) t[a][b] = out[a];
      }
      float* vp = v + (cb * count + i) * kBlock;
      for (int a = 0; a < kP; ++a) {
        input_1d<kTile>(t[a], out);
        for (int b = 0; b < kP; ++b) _mm256_storeu_ps(vp + (a * kP + b) * point, out[b]);
      }
    }
}

// Y's pixels of the `count` tiles from t0, output blocks [mb0, mb1), from M[xi][i][ldm] whose
// column 0 is output channel mb0 * 8.
template <int kTile>
void transform_output(const Job& j, int64_t t0, int64_t count, int64_t mb0, int64_t mb1,
                      const float* m, int64_t ldm) {
  constexpr int kP = kTile + 2, kPixels = kTile * kTile;
  const BlockedConvShape& s = j.s;
  const int64_t plane = s.oh * s.ow * kBlock, point = count * ldm;
  for (int64_t i = 0; i < count; ++i) {
    const TilePos p = tile_pos(j, t0 + i);
    // The tile's pixels inside Y (a phase's last tiles can hold none).
    const int rows = static_cast<int>(std::min<int64_t>(kTile, (s.oh - p.row + s.dh - 1) / s.dh));
    const int cols = static_cast<int>(std::min<int64_t>(kTile, (s.ow - p.col + s.dw - 1) / s.dw));
    if (rows <= 0 || cols <= 0) continue;
    const int64_t row_step = s.dh * s.ow * kBlock, col_step = s.dw * kBlock;
    for (int64_t mb = mb0; mb < mb1; ++mb) {
      const float* mp = m + i * ldm + (mb - mb0) * kBlock;
      __m256 q[kP], t[kTile][kP], o[kPixels];
      for (int b = 0; b < kP; ++b) {
        for (int a = 0; a < kP; ++a) q[a] = _mm256_loadu_ps(mp + (a * kP + b) * point);
        __m256 out[kTile];
        output_1d<kTile>(q, out);
        for (int a = 0; a < kTile; ++a) t[a][b] = out[a];
      }
      for (int a = 0; a < kTile; ++a) output_1d<kTile>(t[a], o + a * kTile);
      if (j.e.bias) {
        const __m256 bias = _mm256_loadu_ps(j.e.bias + mb * kBlock);
        for (__m256& v : o) v = _mm256_add_ps(v, bias);
      }
      const int64_t at = (p.n * s.mb + mb) * plane + (p.row * s.ow + p.col) * kBlock;
      const float* z = j.e.z ? j.e.z + at : nullptr;
      if (z && j.e.residual_first)
        for (int a = 0; a < rows; ++a)
          for (int b = 0; b < cols; ++b)
            o[a * kTile + b] =
                _mm256_add_ps(o[a * kTile + b], _mm256_loadu_ps(z + a * row_step + b * col_step));
      apply_activation(j.e.act, o, kPixels);
      if (z && !j.e.residual_first)
        for (int a = 0; a < rows; ++a)
          for (int b = 0; b < cols; ++b)
            o[a * kTile + b] =
                _mm256_add_ps(o[a * kTile + b], _mm256_loadu_ps(z + a * row_step + b * col_step));
      if (j.has_tail && mb == s.mb - 1)
        for (__m256& v : o) v = _mm256_and_ps(v, j.tail_keep);
      float* yp = j.y + at;
      for (int a = 0; a < rows; ++a)
        for (int b = 0; b < cols; ++b)
          _mm256_storeu_ps(yp + a * row_step + b * col_step, o[a * kTile + b]);
    }
  }
}

// The transforms for the Job's tile size.
void transform_input(const Job& j, int64_t t0, int64_t count, float* v) {
  if (j.tile == 4)
    transform_input<4>(j, t0, count, v);
  else
    transform_input<2>(j, t0, count, v);
}
void transform_output(const Job& j, int64_t t0, int64_t count, int64_t mb0, int64_t mb1,
                      const float* m, int64_t ldm) {
  if (j.tile == 4)
    transform_output<4>(j, t0, count, mb0, mb1, m, ldm);
  else
    transform_output<2>(j, t0, count, mb0, mb1, m, ldm);
}

// Point xi's GEMMs for `count` tiles and output panels [p0, p1): M (+ldm per tile, column 0
// output panel p0) = V (cb blocks of count x 8) x U[xi].
void point_gemms(const Job& j, int64_t xi, int64_t count, int64_t p0, int64_t p1, const float* v,
                 float* m, int64_t ldm) {
  const WinogradGemmKernel& k = j.w.kernel();
  const int64_t cb = j.s.cb;
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t kb = 0; kb < cb; kb += k.kc_blocks) {
      WinogradGemmArgs g;
      g.tiles = count;
      g.k_blocks = std::min(k.kc_blocks, cb - kb);
      g.v = v + kb * count * kBlock;
      g.v_block = count * kBlock;
      g.u = j.w.panel(xi, p) + kb * kBlock * k.nr;
      g.m = m + (p - p0) * k.nr;
      g.ldm = ldm;
      g.accumulate = kb > 0;
      k.fn(g);
    }
}

// run_task's buffers, one pair per thread: the transformed input V and the products M.
struct TaskScratch {
  AlignedBuffer v, m;
};
TaskScratch& task_scratch() {
  thread_local TaskScratch scratch;
  return scratch;
}

// Tiles [t0, t0 + count) x output panels [p0, p1): transform, 36 GEMMs, transform back.
void run_task(const Job& j, int64_t t0, int64_t count, int64_t p0, int64_t p1) {
  AlignedBuffer &v_buf = task_scratch().v, &m_buf = task_scratch().m;
  const BlockedConvShape& s = j.s;
  const WinogradGemmKernel& k = j.w.kernel();
  const int64_t mb0 = p0 * k.nr / kBlock, mb1 = std::min(s.mb, p1 * k.nr / kBlock);
  const int64_t ldm = (p1 - p0) * k.nr, v_point = s.cb * count * kBlock;
  const int64_t points = j.w.points();
  float* v = v_buf.get(points * v_point);
  float* m = m_buf.get(points * count * ldm);
  transform_input(j, t0, count, v);
  for (int64_t xi = 0; xi < points; ++xi)
    point_gemms(j, xi, count, p0, p1, v + xi * v_point, m + xi * count * ldm, ldm);
  transform_output(j, t0, count, mb0, mb1, m, ldm);
}

}  // namespace

bool winograd_fits(const BlockedConvShape& s) {
  return !s.depthwise && s.plain_channels == 0 && s.kh == 3 && s.kw == 3 && s.sh == 1 &&
         s.sw == 1 && s.dh >= 1 && s.dw >= 1;
}

int64_t winograd_tiles(const BlockedConvShape& s, int64_t tile) {
  return s.n * s.dh * s.dw * phase_tiles_h(s, tile) * phase_tiles_w(s, tile);
}

WinogradSplit winograd_split(const BlockedConvShape& s, const WinogradWeights& w, int64_t threads,
                             const WinogradTuning& tuning) {
  const int64_t tiles = winograd_tiles(s, w.tile());
  const WinogradGemmKernel& k = w.kernel();
  WinogradSplit r;
  // Output panels per task: all of them, unless there are too few tiles to give every thread
  // two register tiles; then each thread takes a share of the output channels (and of U).
  int64_t splits = tuning.m_splits;
  if (splits <= 0) splits = threads > 1 && tiles < 2 * k.rows * threads ? threads : 1;
  r.per_split = (w.panels() + std::min(splits, w.panels()) - 1) / std::min(splits, w.panels());
  r.splits = (w.panels() + r.per_split - 1) / r.per_split;
  // Tiles per task: V and M within the L2 budget, whole register tiles, and a task count that
  // the threads share evenly.
  int64_t chunk = tuning.chunk_tiles;
  if (chunk <= 0) {
    const int64_t budget = tuning.l2_bytes > 0 ? tuning.l2_bytes : kDefaultL2Bytes;
    const int64_t per_tile = w.points() * 4 * (s.cb * kBlock + r.per_split * k.nr);
    chunk = std::max<int64_t>(1, budget / per_tile);
    if (chunk > k.rows) chunk = chunk / k.rows * k.rows;
    // Few tiles (deep layers): one chunk per split even past the budget, so that each task
    // streams its share of U once rather than once per chunk (512x512@7: 1.3x).
    if (tiles * per_tile <= 2 * budget) chunk = tiles;
    int64_t chunks = (tiles + chunk - 1) / chunk;
    while (threads > 1 && (chunks * r.splits) % threads != 0 && chunks < tiles) ++chunks;
    chunk = (tiles + chunks - 1) / chunks;
  }
  r.chunk = std::max<int64_t>(1, std::min(chunk, tiles));
  r.chunks = (tiles + r.chunk - 1) / r.chunk;
  return r;
}

static double u_bytes(const WinogradWeights& w) {
  return 4.0 * w.points() * static_cast<double>(w.cb() * kBlock) *
         static_cast<double>(w.panels() * w.kernel().nr);
}

bool winograd_weights_stream(const WinogradWeights& w) { return u_bytes(w) > kWinogradCachedWeightBytes; }

namespace {

// The point-major order, for a U that streams from memory over many tiles: a group of chunks
// has V transformed first (all points), then each task runs one point's GEMMs over one chunk for
// every output panel, tasks of one point one after the other, so that U[xi] (Cin x Cout, a few
// MB) is read from L3 by the group's chunks; M is transformed back last. U streams from memory
// once per group instead of once per chunk (FCN's 2048 -> 512 head at 64x64: 3 times, not 128),
// for V and M of the group written to memory and read back once.
struct PointMajor {
  int64_t chunk = 0, chunks = 0;  // tiles per chunk, chunks in all
  int64_t group = 0;              // chunks per group
  int64_t tile_floats = 0;        // V and M of one tile at one point
};

PointMajor point_major_split(const BlockedConvShape& s, const WinogradWeights& w,
                             const WinogradTuning& tuning = {}) {
  const WinogradGemmKernel& k = w.kernel();
  const int64_t tiles = winograd_tiles(s, w.tile());
  PointMajor r;
  r.tile_floats = s.cb * kBlock + w.panels() * k.nr;
  const int64_t tile_floats = r.tile_floats;
  r.chunk = std::max<int64_t>(k.rows, kDefaultL2Bytes / (4 * tile_floats) / k.rows * k.rows);
  if (tuning.chunk_tiles > 0) r.chunk = tuning.chunk_tiles;
  r.chunk = std::min(r.chunk, tiles);
  r.chunks = (tiles + r.chunk - 1) / r.chunk;
  r.group = tuning.point_major_group > 0
                ? std::min(tuning.point_major_group, r.chunks)
                : std::clamp<int64_t>(kPointMajorGroupBytes / (4 * w.points() * tile_floats * r.chunk), 1, r.chunks);
  return r;
}

// Point-major only where the chunk-major order would stream U more than twice.
bool uses_point_major(const BlockedConvShape& s, const WinogradWeights& w, int64_t threads) {
  return winograd_weights_stream(w) && winograd_split(s, w, threads).chunks > 2;
}

void run_point_major(const Job& j, ThreadPool* pool, const WinogradTuning& tuning) {
  const BlockedConvShape& s = j.s;
  const WinogradGemmKernel& k = j.w.kernel();
  const PointMajor pm = point_major_split(s, j.w, tuning);
  const int64_t points = j.w.points(), ldm = j.w.panels() * k.nr;
  const int64_t v_chunk = points * s.cb * pm.chunk * kBlock, m_chunk = points * pm.chunk * ldm;
  thread_local AlignedBuffer v_buf, m_buf;  // the calling thread's: its tasks share them
  float* v = v_buf.get(pm.group * v_chunk);
  float* m = m_buf.get(pm.group * m_chunk);
  const int64_t gemm_flops = 2 * points * pm.chunk * s.cb * ldm * kBlock;
  for (int64_t c0 = 0; c0 < pm.chunks; c0 += pm.group) {
    const int64_t group = std::min(pm.group, pm.chunks - c0);
    auto count_of = [&](int64_t c) { return std::min(pm.chunk, j.tiles - (c0 + c) * pm.chunk); };
    parallel_range(pool, group, gemm_flops / 16, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) transform_input(j, (c0 + c) * pm.chunk, count_of(c), v + c * v_chunk);
    });
    parallel_range(pool, points * group, gemm_flops / points, [&](int64_t b, int64_t e) {
      for (int64_t task = b; task < e; ++task) {
        const int64_t xi = task / group, c = task % group, count = count_of(c);
        point_gemms(j, xi, count, 0, j.w.panels(), v + c * v_chunk + xi * s.cb * count * kBlock,
                    m + c * m_chunk + xi * count * ldm, ldm);
      }
    });
    parallel_range(pool, group, gemm_flops / 16, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c)
        transform_output(j, (c0 + c) * pm.chunk, count_of(c), 0, s.mb, m + c * m_chunk, ldm);
    });
  }
}

}  // namespace

bool winograd_pays(const BlockedConvShape& s, const WinogradWeights& w, int64_t threads) {
  const double channels = static_cast<double>(s.cb * kBlock) * static_cast<double>(s.mb * kBlock);
  const double direct = 2.0 * 9 * static_cast<double>(s.n * s.oh * s.ow) * channels;
  const double wino = 2.0 * w.points() * static_cast<double>(winograd_tiles(s, w.tile())) * channels;
  // Every chunk of tiles streams all of U from memory once U is past what the caches keep; the
  // direct kernel streams its own weights (9 floats per channel pair) once.
  // In the point-major order, once per group, with V and M written and read back once.
  double extra = 0;
  if (uses_point_major(s, w, threads)) {
    const PointMajor pm = point_major_split(s, w);
    const double tiles = static_cast<double>(winograd_tiles(s, w.tile()));
    extra = u_bytes(w) * static_cast<double>((pm.chunks + pm.group - 1) / pm.group) +
            2 * 4.0 * w.points() * tiles * static_cast<double>(pm.tile_floats) -
            4.0 * 9 * channels;
  } else if (winograd_weights_stream(w)) {
    extra = u_bytes(w) * static_cast<double>(winograd_split(s, w, threads).chunks) - 4.0 * 9 * channels;
  }
  return wino + kFlopsPerStreamedByte * std::max(0.0, extra) < direct;
}

void blocked_conv_winograd(const BlockedConvShape& s, const float* x, const WinogradWeights& w,
                           const BlockedEpilogue& e, float* y, ThreadPool* pool,
                           const WinogradTuning& tuning) {
  const int64_t tiles_w = phase_tiles_w(s, w.tile()), phase_tiles = phase_tiles_h(s, w.tile()) * tiles_w;
  const int64_t rem = s.channels % kBlock;
  const Job j{s, x, w, e, y, w.tile(), tiles_w, phase_tiles, s.dh * s.dw * phase_tiles,
              winograd_tiles(s, w.tile()),
              _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)),
                                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))),
              rem != 0};
  if (j.tiles == 0 || s.mb == 0) return;
  const WinogradGemmKernel& k = w.kernel();
  const int64_t threads = pool ? pool->threads() : 1;
  if (tuning.point_major_group > 0 ||
      (tuning.chunk_tiles == 0 && tuning.m_splits == 0 && uses_point_major(s, w, threads)))
    return run_point_major(j, pool, tuning);
  const WinogradSplit split = winograd_split(s, w, threads, tuning);
  const int64_t splits = split.splits, per_split = split.per_split, chunk = split.chunk,
                chunks = split.chunks;
  const int64_t flops = 2 * w.points() * j.tiles * s.cb * s.mb * kBlock * kBlock;
  // Every thread that may take a task has V and M sized first for the largest task (chunk tiles,
  // per_split panels), so that runs after the first allocate nothing (core/thread_scratch.h).
  thread_local ScratchReservation<2> reservation;
  reservation.ensure(pool,
                     {w.points() * s.cb * chunk * kBlock, w.points() * chunk * per_split * k.nr},
                     [](const std::array<int64_t, 2>& n) {
                       task_scratch().v.get(n[0]);
                       task_scratch().m.get(n[1]);
                     });
  parallel_range(pool, chunks * splits, flops / 64, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t0 = task / splits * chunk, p0 = task % splits * per_split;
      run_task(j, t0, std::min(chunk, j.tiles - t0), p0, std::min(w.panels(), p0 + per_split));
    }
  });
}

}  // namespace kiln::nchwc
