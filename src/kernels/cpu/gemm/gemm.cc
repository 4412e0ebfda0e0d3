// GotoBLAS/BLIS loop nest: for each nc-wide column block and kc-deep slice, pack B's slice once
// (or find it in the prepacked B); for each mc-tall row block pack A; then sweep nr-wide B
// micro-panels against the mr-tall A micro-panels, each finished tile getting the epilogue while
// it is in L1. Threads each take a rectangle of C and run the nest on it with their own packing
// buffers, so no synchronisation is needed inside.
#include "kernels/cpu/gemm/gemm.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "core/thread_scratch.h"
#include "kernels/cpu/gemm/pack.h"
#include "kernels/cpu/gemm/small_m.h"

namespace kiln::gemm {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// c = tile + beta * c (+ bias) for the valid rows x cols corner of a full tile.
void merge_edge(const float* tile, int64_t nr, int64_t rows, int64_t cols, float beta,
                const float* bias, float* c, int64_t ldc) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float v = tile[i * nr + j];
      if (beta != 0.0f) v += beta * c[i * ldc + j];
      if (bias) v += bias[j];
      c[i * ldc + j] = v;
    }
}

// run_block's packing buffers, one pair per thread.
struct BlockScratch {
  AlignedBuffer a, b;
};
BlockScratch& block_scratch() {
  thread_local BlockScratch scratch;
  return scratch;
}

struct BlockSizes {
  int64_t mc_max, nc_max, kc_max;
  std::array<int64_t, 2> floats() const { return {mc_max * kc_max, nc_max * kc_max}; }
};

// Cache blocks of the loop nest over a rows x cols rectangle of C (packed A: mc x kc; B, unless
// prepacked: nc x kc).
BlockSizes block_sizes(const GemmF32Args& g, const MicroKernel& mk, int64_t rows, int64_t cols) {
  return {std::min(round_up(mk.mc, mk.mr), round_up(rows, mk.mr)),
          std::min(round_up(mk.nc, mk.nr), round_up(cols, mk.nr)),
          g.packed_b ? g.packed_b->kc() : std::min(mk.kc, g.k)};
}

void grow_block_scratch(const std::array<int64_t, 2>& floats) {
  block_scratch().a.get(floats[0]);
  block_scratch().b.get(floats[1]);
}

// Whether run_block reads A's full row tiles in place over a rectangle `cols` wide, not packed.
bool reads_a_in_place(const GemmF32Args& g, const MicroKernel& mk, int64_t cols) {
  return mk.fn_strided_a && !g.trans_a && cols <= 16 * mk.nr && g.lda % 1024 != 0;
}

// The loop nest over rows [i0, i1) x columns [j0, j1) of C.
void run_block(const GemmF32Args& g, const MicroKernel& mk, int64_t i0, int64_t i1, int64_t j0,
               int64_t j1) {
  BlockScratch& scratch = block_scratch();
  const PackedMatrix* packed = g.packed_b;
  const Epilogue* epilogue = g.epilogue && !g.epilogue->empty() ? g.epilogue : nullptr;
  const int64_t mr = mk.mr, nr = mk.nr;
  const BlockSizes bs = block_sizes(g, mk, i1 - i0, j1 - j0);
  const int64_t mc_max = bs.mc_max, nc_max = bs.nc_max, kc_max = bs.kc_max;
  float* ap = scratch.a.get(mc_max * kc_max);
  float* bp = packed ? nullptr : scratch.b.get(nc_max * kc_max);
  alignas(64) float edge[32 * 64];  // one tile: mr * nr <= 2048 for every kernel
  // A read in place, unpacked, where B's columns are few: each packed element of A would serve
  // at most 16 micro-panels (convnext's MLPs on Zen 3: N = 96 products 10 % faster, N = 192 7 %;
  // unclear beyond), and rows of A are not 4 KiB apart (six rows in one L1 set).
  const MicroKernelFn strided_a = reads_a_in_place(g, mk, j1 - j0) ? mk.fn_strided_a : nullptr;
  for (int64_t jc = j0; jc < j1; jc += nc_max) {
    const int64_t nc = std::min(nc_max, j1 - jc);
    for (int64_t pc = 0; pc < g.k; pc += kc_max) {
      const int64_t kc = std::min(kc_max, g.k - pc);
      const bool last = pc + kc >= g.k;
      const float beta = pc == 0 ? g.beta : 1.0f;
      if (!packed) pack_b(g.b, g.ldb, g.trans_b, pc, kc, jc, nc, nr, bp);
      for (int64_t ic = i0; ic < i1; ic += mc_max) {
        const int64_t mc = std::min(mc_max, i1 - ic);
        // Full row tiles read A in place where it pays; the partial last one is packed.
        const int64_t in_place = strided_a ? mc / mr * mr : 0;
        if (in_place < mc)
          pack_a(g.a, g.lda, g.trans_a, ic + in_place, mc - in_place, pc, kc, mr,
                 ap + in_place * kc);
        for (int64_t jr = 0; jr < nc; jr += nr) {
          const int64_t cols = std::min(nr, nc - jr);
          const float* bias = last && g.bias ? g.bias + jc + jr : nullptr;
          const float* b_panel = packed ? packed->panel(pc, jc + jr) : bp + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += mr) {
            const int64_t rows = std::min(mr, mc - ir);
            float* c = g.c + (ic + ir) * g.ldc + jc + jr;
            TileArgs t{kc, ap + ir * kc, b_panel, c, g.ldc, g.alpha, beta, bias};
            MicroKernelFn fn = mk.fn;
            if (ir < in_place) t.a = g.a + (ic + ir) * g.lda + pc, t.lda = g.lda, fn = strided_a;
            // A prepacked panel's first row tile streams the next panel into L2 (microkernel.h).
            if (packed && mk.fn_prefetch && fn == mk.fn && ir == 0 && rows == mr && cols == nr &&
                jr + nr < nc)
              t.prefetch_b = packed->panel(pc, jc + jr + nr), fn = mk.fn_prefetch;
            if (rows == mr && cols == nr) {
              fn(t);
            } else if (cols == nr && ir >= in_place && mk.fn_short[rows]) {
              mk.fn_short[rows](t);
            } else {
              t.c = edge, t.ldc = nr, t.beta = 0.0f, t.bias = nullptr;
              fn(t);
              merge_edge(edge, nr, rows, cols, beta, bias, c, g.ldc);
            }
            if (last && epilogue) apply_epilogue(*epilogue, c, g.ldc, ic + ir, jc + jr, rows, cols);
          }
        }
      }
    }
  }
}

// K == 0: the product is empty, C = beta * C (+ bias).
void scale_only(const GemmF32Args& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      float& c = g.c[i * g.ldc + j];
      c = (g.beta == 0.0f ? 0.0f : g.beta * c) + (g.bias ? g.bias[j] : 0.0f);
    }
  if (g.epilogue && !g.epilogue->empty()) apply_epilogue(*g.epilogue, g.c, g.ldc, 0, 0, g.m, g.n);
}

// Splits C into tm x tn rectangles, which the pool's threads claim as they come free: the split
// whose busiest thread has the least work, counted in micro-tiles (padded) plus what each
// rectangle packs (a tile's worth per row tile of A unless A is read in place, per column tile of
// B unless B is prepacked) and a tile's worth of overhead. Up to 4 rectangles a thread, so that a
// split need not leave a thread idle where the tiles do not divide evenly, or where the host has
// paused one: log-mel's 97 x 514 x 512 STFT GEMM as 2 x 4 rectangles (A in place), not 1 x 2 of
// 17 and 16 column tiles (A packed by one), 0.86-0.91x the time of the whole model (Zen 3,
// alternated). Ties go to fewer rectangles, then to fewer row splits when B is packed per call
// (each thread packs the B columns it uses), to more when B is prepacked (each thread packs only
// its own rows of A). Measured on 2 Zen 4 cores, BERT's 768x3072x768 / 128x768x768 /
// 128x768x3072 prepacked: rows 90 / 91 / 90% of peak, columns 86 / 91 / 83%; packing B per call:
// rows 80 / 65 / 66%, columns 78 / 78 / 74%. A prepacked B past what L3 keeps for the second
// thread is split by columns only: with rows, every thread streams all of it from memory (crnn's
// 20 x 1024 x 8210 classifier, 34 MB of weights: 5.6 ms on 2 Zen 2 threads).
void choose_split(const GemmF32Args& g, const MicroKernel& mk, int threads, bool prefer_rows,
                  int* tm, int* tn) {
  const int64_t row_tiles = (g.m + mk.mr - 1) / mk.mr, col_tiles = (g.n + mk.nr - 1) / mk.nr;
  int64_t best = -1;
  *tm = *tn = 1;
  thread_local std::vector<int64_t> load;  // work per thread; grows once
  load.resize(static_cast<size_t>(threads));
  const int64_t max_r = prefer_rows || !g.packed_b ? std::min<int64_t>(row_tiles, 4 * threads) : 1;
  for (int64_t r = 1; r <= max_r; ++r)
    for (int64_t c = 1; c <= std::min<int64_t>(col_tiles, 4 * threads / r); ++c) {
      if (r * c < threads) continue;
      const int64_t rt = (row_tiles + r - 1) / r, ct = (col_tiles + c - 1) / c;  // per rectangle
      if ((r - 1) * rt >= row_tiles || (c - 1) * ct >= col_tiles) continue;      // one is empty
      const bool pack_a = !reads_a_in_place(g, mk, ct * mk.nr);
      std::fill(load.begin(), load.end(), 0);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) {  // to the least loaded thread, in the pool's order
          const int64_t rows = std::min(rt, row_tiles - i * rt),
                        cols = std::min(ct, col_tiles - j * ct);
          const int64_t work = rows * cols + (pack_a ? rows : 0) + (g.packed_b ? 0 : cols) + 1;
          *std::min_element(load.begin(), load.end()) += work;
        }
      const int64_t busiest = *std::max_element(load.begin(), load.end());
      const int64_t rects = int64_t{*tm} * *tn;
      const bool tie_won = busiest == best &&
                           (r * c < rects || (r * c == rects && (prefer_rows ? r > *tm : r < *tm)));
      if (best < 0 || busiest < best || tie_won)
        best = busiest, *tm = static_cast<int>(r), *tn = static_cast<int>(c);
    }
}

}  // namespace

void gemm_f32_blocked(const GemmF32Args& g, ThreadPool* pool, const MicroKernel* kernel) {
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k <= 0) return scale_only(g);
  const MicroKernel& mk = g.packed_b ? g.packed_b->kernel() : kernel ? *kernel : *best_f32_kernel();
  if (g.packed_b && g.m < mk.mr) return gemm_small_m_packed(g, pool);
  // Below ~1 MFLOP waking a thread costs more than it saves.
  int threads = pool ? pool->threads() : 1;
  if (g.m * g.n * g.k < (int64_t{1} << 18)) threads = 1;
  int tm = 1, tn = 1;
  if (threads > 1) {
    constexpr int64_t kSharedBBytes = 8 << 20;  // a prepacked B both threads read from L3
    const bool prefer_rows = g.packed_b != nullptr && g.packed_b->bytes() <= kSharedBBytes;
    choose_split(g, mk, threads, prefer_rows, &tm, &tn);
  }
  if (tm * tn == 1) return run_block(g, mk, 0, g.m, 0, g.n);
  // Rectangle edges fall on tile boundaries so only the matrix edge has partial tiles.
  const int64_t rows = round_up((g.m + tm - 1) / tm, mk.mr);
  const int64_t cols = round_up((g.n + tn - 1) / tn, mk.nr);
  // Every thread that may take a rectangle has its buffers sized first (thread_scratch.h).
  thread_local ScratchReservation<2> reservation;
  std::array<int64_t, 2> floats = block_sizes(g, mk, rows, cols).floats();
  if (g.packed_b) floats[1] = 0;
  reservation.ensure(pool, floats, grow_block_scratch);
  pool->parallel_for(tm * tn, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t / tn) * rows, j0 = (t % tn) * cols;
      if (i0 >= g.m || j0 >= g.n) continue;
      run_block(g, mk, i0, std::min(g.m, i0 + rows), j0, std::min(g.n, j0 + cols));
    }
  });
}

void reserve_single_thread_scratch(const GemmF32Args& g, ThreadPool* pool,
                                   const MicroKernel* kernel) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return;
  const MicroKernel& mk = g.packed_b ? g.packed_b->kernel() : kernel ? *kernel : *best_f32_kernel();
  if (g.packed_b && g.m < mk.mr) return;  // gemm_small_m_packed: no packing buffers
  thread_local ScratchReservation<2> reservation;
  std::array<int64_t, 2> floats = block_sizes(g, mk, g.m, g.n).floats();
  if (g.packed_b) floats[1] = 0;
  reservation.ensure(pool, floats, grow_block_scratch);
}

}  // namespace kiln::gemm
