// Float convolution as GEMMs on the plain layout (conv_gemm.h).
#include "kernels/cpu/conv/conv_gemm.h"

#include <algorithm>
#include <array>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "core/thread_scratch.h"
#include "kernels/cpu/gemm/gemm.h"

namespace kiln {
namespace {

// im2col of a chunk of output rows at a time: its columns stay in L2 while the GEMM packs them.
// A whole-image im2col of R(2+1)D's 64 -> 144 (1,3,3) conv at 16x56x56 (115 MB) went to memory
// and back: 58 -> 47 ms with chunks (Zen 4, 2 threads).
constexpr int64_t kChunkColBytes = 512 * 1024;
// A plane-shift task's output columns at the least: GEMMs narrower than this spend more on
// packing than on FMAs.
constexpr int64_t kMinShiftColumns = 1024;

bool identity_dim(const conv_util::Geo3& g, int i) {
  return g.k[i] == 1 && g.s[i] == 1 && g.pb[i] == 0 && g.out[i] == g.in[i];
}

// The shift axis of a plane-shift conv (plane_shift_fits), or -1. Planes of fewer than
// kMinShiftPlane positions (a 1-D conv's are single positions) leave it to im2col: a GEMM a tap
// reads and writes the output once per tap.
constexpr int64_t kMinShiftPlane = 16;
int shift_axis(const conv_util::Geo3& g) {
  for (int a = 0; a < 3; ++a) {
    bool fits = true;
    int64_t plane = 1;
    for (int i = 0; i < a; ++i) fits = fits && g.in[i] == 1 && g.out[i] == 1 && g.k[i] == 1;
    for (int i = a + 1; i < 3; ++i) fits = fits && identity_dim(g, i), plane *= g.in[i];
    if (fits) return plane >= kMinShiftPlane ? a : -1;
  }
  return -1;
}

// Runs task(i) for i in [0, tasks) over the pool, each on one thread, when there are enough of
// them to share out; otherwise one after the other, each GEMM over the pool (`inner`).
template <class Task>
void run_tasks(ThreadPool* pool, int64_t tasks, const gemm::GemmF32Args& largest, Task task) {
  const int64_t threads = pool ? pool->threads() : 1;
  if (threads > 1 && tasks >= 2 * threads) {
    gemm::reserve_single_thread_scratch(largest, pool);
    pool->parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) task(t, nullptr);
    });
  } else {
    for (int64_t t = 0; t < tasks; ++t) task(t, pool);
  }
}

// rows x cols of y (row stride ldy) set to bias[row] or zero.
void fill_bias(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias) {
  for (int64_t i = 0; i < rows; ++i) std::fill(y + i * ldy, y + i * ldy + cols, bias ? bias[i] : 0.0f);
}

// conv_f32_by_row_chunks' columns, one buffer per thread.
AlignedBuffer& chunk_cols() {
  thread_local AlignedBuffer col;
  return col;
}

}  // namespace

bool plane_shift_fits(const ConvGemmShape& s) { return shift_axis(s.g) >= 0; }

bool row_chunks_pay(const ConvGemmShape& s) {
  const conv_util::Geo3& g = s.g;
  const int64_t col_bytes = 4 * (s.c / s.group) * g.k[0] * g.k[1] * g.k[2] * g.out[0] * g.out[1] * g.out[2];
  return g.out[0] * g.out[1] > 1 && col_bytes > 4 * kChunkColBytes;
}

// Y[:, o] = bias + sum over taps t of W_t · X[:, o * s - p + t * d], o and the input index running
// over the shift axis, each a plane of the identity dims after it. W_t (m x c/group) is W's tap t,
// gathered once a call.
void conv_f32_plane_shift(const ConvGemmShape& s, const float* x, const float* w, const float* bias,
                          float* y, ThreadPool* pool) {
  const conv_util::Geo3& g = s.g;
  const int a = shift_axis(g);
  int64_t plane = 1;
  for (int i = a + 1; i < 3; ++i) plane *= g.in[i];
  const int64_t taps = g.k[a], frames_in = g.in[a], frames_out = g.out[a];
  const int64_t stride = g.s[a], dilation = g.d[a], pad = g.pb[a];
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t in_sz = frames_in * plane, out_sz = frames_out * plane;
  if (s.n == 0 || s.m == 0 || out_sz == 0) return;
  thread_local AlignedBuffer tap_weights;
  float* wt = tap_weights.get(taps * s.m * cg);  // [tap][m][c / group]
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t i = 0; i < s.m * cg; ++i) wt[t * s.m * cg + i] = w[i * taps + t];

  // Tasks: (image, group, run of output frames), frames enough for kMinShiftColumns columns.
  const int64_t run = std::clamp<int64_t>((kMinShiftColumns + plane - 1) / plane, 1, frames_out);
  const int64_t runs = (frames_out + run - 1) / run;
  gemm::GemmF32Args largest;
  largest.m = mg, largest.n = (stride == 1 ? run : 1) * plane, largest.k = cg;
  run_tasks(pool, s.n * s.group * runs, largest, [&](int64_t task, ThreadPool* inner) {
    const int64_t r = task % runs, gi = task / runs % s.group, ni = task / (runs * s.group);
    const int64_t o0 = r * run, o1 = std::min(frames_out, o0 + run);
    const float* xg = x + (ni * s.c + gi * cg) * in_sz;
    float* yg = y + (ni * s.m + gi * mg) * out_sz;
    fill_bias(yg + o0 * plane, out_sz, mg, (o1 - o0) * plane, bias ? bias + gi * mg : nullptr);
    gemm::GemmF32Args p;
    p.m = mg, p.k = cg, p.lda = cg, p.ldb = in_sz, p.ldc = out_sz, p.beta = 1.0f;
    // Output frames [b, e) read input frames from f on, one after the other when stride is 1.
    auto product = [&](int64_t t, int64_t b, int64_t e, int64_t f) {
      p.n = (e - b) * plane;
      p.a = wt + (t * s.m + gi * mg) * cg;
      p.b = xg + f * plane;
      p.c = yg + b * plane;
      gemm::gemm_f32_blocked(p, inner);
    };
    for (int64_t t = 0; t < taps; ++t) {
      const int64_t shift = t * dilation - pad;  // input frame of output frame o: o * stride + shift
      if (stride == 1) {
        const int64_t b = std::max(o0, -shift), e = std::min(o1, frames_in - shift);
        if (b < e) product(t, b, e, b + shift);
      } else {
        for (int64_t o = o0; o < o1; ++o) {
          const int64_t f = o * stride + shift;
          if (f >= 0 && f < frames_in) product(t, o, o + 1, f);
        }
      }
    }
  });
}

// im2col of output rows [r0, r1) (row: all but the last dim) into a buffer of the thread, then
// the GEMM onto those rows' columns of Y, set to the bias first.
void conv_f32_by_row_chunks(const ConvGemmShape& s, const float* x, const float* w, const float* bias,
                            float* y, ThreadPool* pool) {
  const conv_util::Geo3& g = s.g;
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t k = cg * g.k[0] * g.k[1] * g.k[2];
  const int64_t rows = g.out[0] * g.out[1], width = g.out[2], out_sz = rows * width;
  const int64_t in_sz = g.in[0] * g.in[1] * g.in[2];
  const int64_t chunk_rows = std::clamp<int64_t>(kChunkColBytes / (4 * k * width), 1, rows);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  gemm::GemmF32Args largest;
  largest.m = mg, largest.n = chunk_rows * width, largest.k = k;
  thread_local ScratchReservation<1> reservation;
  reservation.ensure(pool, {k * chunk_rows * width},
                     [](const std::array<int64_t, 1>& n) { chunk_cols().get(n[0]); });
  run_tasks(pool, s.n * s.group * chunks, largest, [&](int64_t task, ThreadPool* inner) {
    const int64_t chunk = task % chunks, gi = task / chunks % s.group, ni = task / (chunks * s.group);
    const int64_t r0 = chunk * chunk_rows, r1 = std::min(rows, r0 + chunk_rows);
    float* col = chunk_cols().get(k * chunk_rows * width);
    conv_util::im2col_rows(x + (ni * s.c + gi * cg) * in_sz, 0, cg, g, r0, r1, col);
    gemm::GemmF32Args p = largest;
    p.n = (r1 - r0) * width;
    p.a = w + gi * mg * k, p.lda = k;
    p.b = col, p.ldb = p.n;
    p.c = y + (ni * s.m + gi * mg) * out_sz + r0 * width, p.ldc = out_sz, p.beta = 1.0f;
    fill_bias(p.c, out_sz, mg, p.n, bias ? bias + gi * mg : nullptr);
    gemm::gemm_f32_blocked(p, inner);
  });
}

}  // namespace kiln
