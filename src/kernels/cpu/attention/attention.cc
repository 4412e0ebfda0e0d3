// Flash-attention loop nest, computed transposed so that the softmax runs down columns: a task is
// one head's block of nr queries (one B panel of the micro-kernel), and for each block of keys
//   S^T = scale * K·Q^T        (keys x nr: K's A panels, packed once per head, against Q^T)
//   S^T += mask; per query column: m' = max(m, max S), P = exp(S - m'), l = l*exp(m - m') + sum P
//   O^T = O^T*exp(m - m') + V^T·P^T   (V^T's A panels, packed once per head, against S^T itself)
// and finally Y = (O^T / l)^T. S^T laid out keys x nr *is* a packed B panel, so P is never
// copied, and the running max and sum of the nr queries are vectors: no horizontal reductions.
// The score block (key_block x nr floats, <= 16 KiB) stays in L1.
#include "kernels/cpu/attention/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "core/thread_scratch.h"
#include "kernels/cpu/attention/pack_heads.h"
#include "kernels/cpu/attention/softmax_step.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::attention {
namespace {

constexpr int64_t kScoreBytes = 16 * 1024;  // the score block, to stay in L1 with a K/V panel
constexpr int64_t kSerialFlops = int64_t{1} << 20;  // below this one thread is faster
constexpr float kInf = std::numeric_limits<float>::infinity();

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

struct Plan {
  const gemm::MicroKernel* mk;
  int64_t mr, nr;
  int64_t key_block, key_blocks;  // key_block a multiple of mr
  int64_t query_blocks;           // of nr queries
  int64_t seq_pad, dim_pad;       // seq and head_dim rounded up to mr
  const float* ka;                // per head: seq_pad/mr panels of head_dim x mr (K)
  const float* va;                // per head: dim_pad/mr panels of seq x mr (V^T)
  bool (*softmax_step)(float*, int64_t, int64_t, float*, float*, float*);  // softmax_step.h
};

// Adds the mask to score rows [0, cols) of block keys j0.., queries [0, nq) from q0.
void add_mask(const AttentionArgs& a, int64_t b, int64_t h, int64_t q0, int64_t nq, int64_t j0,
              int64_t cols, int64_t nr, float* st) {
  const int64_t* ms = a.mask_strides;
  const float* base = a.mask + b * ms[0] + h * ms[1] + q0 * ms[2] + j0 * ms[3];
  for (int64_t j = 0; j < cols; ++j) {
    const float* mj = base + j * ms[3];
    float* row = st + j * nr;
    if (ms[2] == 0) {  // the same for every query (BERT's padding mask): one broadcast add
      const __m256 v = _mm256_set1_ps(*mj);
      for (int64_t q = 0; q < nr; q += 8)
        _mm256_store_ps(row + q, _mm256_add_ps(_mm256_load_ps(row + q), v));
    } else {
      for (int64_t q = 0; q < nq; ++q) row[q] += mj[q * ms[2]];
    }
  }
}

// query_block's buffers, one set per thread: Q^T, scores, O^T, softmax statistics.
struct QueryScratch {
  AlignedBuffer q, s, o, stat;
};
QueryScratch& query_scratch() {
  thread_local QueryScratch scratch;
  return scratch;
}

// Queries [qb * nr, +nr) of head bh.
void query_block(const AttentionArgs& a, const Plan& p, int64_t bh, int64_t qb) {
  QueryScratch& scratch = query_scratch();
  AlignedBuffer &q_buf = scratch.q, &s_buf = scratch.s, &o_buf = scratch.o, &stat_buf = scratch.stat;
  const int64_t b = bh / a.heads, h = bh % a.heads, d = a.head_dim;
  const int64_t mr = p.mr, nr = p.nr;
  const int64_t q0 = qb * nr, nq = std::min(nr, a.seq - q0);
  float* qt = q_buf.get(d * nr);
  float* st = s_buf.get(p.key_block * nr);
  float* ot = o_buf.get(p.dim_pad * nr);
  float* m = stat_buf.get(3 * nr);
  float* l = m + nr;
  float* factor = l + nr;
  std::fill(m, m + nr, -kInf);
  std::fill(l, l + nr, 0.0f);
  pack_transposed(a.q.data + b * a.q.batch_stride + q0 * a.q.token_stride + h * d, a.q.token_stride,
                  nq, d, nr, qt, nr);
  const float* ka = p.ka + bh * p.seq_pad * d;
  const float* va = p.va + bh * p.dim_pad * a.seq;
  const gemm::MicroKernelFn tile = p.mk->fn;

  for (int64_t kb = 0; kb < p.key_blocks; ++kb) {
    const int64_t j0 = kb * p.key_block, cols = std::min(p.key_block, a.seq - j0);
    for (int64_t ir = 0; ir < cols; ir += mr)
      tile({d, ka + (j0 + ir) * d, qt, st + ir * nr, nr, a.scale, 0.0f, nullptr});
    if (a.mask) add_mask(a, b, h, q0, nq, j0, cols, nr, st);
    if (p.softmax_step(st, cols, nr, m, l, factor) && kb > 0)
      for (int64_t c = 0; c < d; ++c)
        for (int64_t q = 0; q < nr; ++q) ot[c * nr + q] *= factor[q];
    const float beta = kb == 0 ? 0.0f : 1.0f;
    for (int64_t ir = 0; ir < d; ir += mr)
      tile({cols, va + ir * a.seq + j0 * mr, st, ot + ir * nr, nr, 1.0f, beta, nullptr});
  }
  // Y rows = O^T's columns, then each divided by its sum.
  float* y = a.y + b * a.y_batch_stride + q0 * a.y_token_stride + h * d;
  pack_transposed(ot, nr, d, nq, d, y, a.y_token_stride);
  for (int64_t q = 0; q < nq; ++q) {
    float* row = y + q * a.y_token_stride;
    // The sum of exponents is positive and finite unless the row's softmax is NaN.
    if (a.zero_nan_rows && !(l[q] > 0.0f && std::isfinite(l[q]))) {
      std::fill(row, row + d, 0.0f);
      continue;
    }
    const float inv = 1.0f / l[q];
    for (int64_t c = 0; c < d; ++c) row[c] *= inv;
  }
}

void run(ThreadPool* pool, int64_t n, FunctionRef<void(int64_t, int64_t)> fn) {
  if (pool && n > 1)
    pool->parallel_for(n, 1, fn);
  else
    fn(0, n);
}

}  // namespace

bool softmax_step_avx2(float* st, int64_t cols, int64_t nr, float* m, float* l, float* factor) {
  bool rescale = false;
  for (int64_t q = 0; q < nr; q += 8) {
    __m256 mx = _mm256_set1_ps(-kInf);
    for (int64_t j = 0; j < cols; ++j) mx = _mm256_max_ps(mx, _mm256_load_ps(st + j * nr + q));
    const __m256 m_old = _mm256_load_ps(m + q);
    const __m256 m_new = _mm256_max_ps(m_old, mx);
    // Exponents relative to 0 while every score so far is -inf, so they give 0, not NaN.
    const __m256 ref = _mm256_blendv_ps(m_new, _mm256_setzero_ps(),
                                        _mm256_cmp_ps(m_new, _mm256_set1_ps(-kInf), _CMP_EQ_OQ));
    const __m256 f = vec::exp_avx2(_mm256_sub_ps(m_old, ref));
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < cols; ++j) {
      float* row = st + j * nr + q;
      const __m256 e = vec::exp_avx2(_mm256_sub_ps(_mm256_load_ps(row), ref));
      _mm256_store_ps(row, e);
      sum = _mm256_add_ps(sum, e);
    }
    _mm256_store_ps(l + q, _mm256_fmadd_ps(_mm256_load_ps(l + q), f, sum));
    _mm256_store_ps(m + q, m_new);
    _mm256_store_ps(factor + q, f);
    rescale |= _mm256_movemask_ps(_mm256_cmp_ps(f, _mm256_set1_ps(1.0f), _CMP_NEQ_UQ)) != 0;
  }
  return rescale;
}

void attention_f32(const AttentionArgs& a, ThreadPool* pool, const AttentionTuning& tuning) {
  if (a.batch <= 0 || a.heads <= 0 || a.seq <= 0 || a.head_dim <= 0) return;
  Plan p;
  p.mk = tuning.kernel ? tuning.kernel : gemm::best_f32_kernel();
  p.mr = p.mk->mr, p.nr = p.mk->nr;
  p.softmax_step = cpu_features().has_avx512() && p.nr % 16 == 0 ? softmax_step_avx512 : softmax_step_avx2;
  const int64_t bh = a.batch * a.heads, d = a.head_dim;
  if (4 * bh * a.seq * a.seq * d < kSerialFlops) pool = nullptr;

  const int64_t max_keys = tuning.key_block > 0 ? tuning.key_block : kScoreBytes / (4 * p.nr);
  p.key_blocks = ceil_div(a.seq, max_keys);
  p.key_block = round_up(ceil_div(a.seq, p.key_blocks), p.mr);
  p.key_blocks = ceil_div(a.seq, p.key_block);
  p.query_blocks = ceil_div(a.seq, p.nr);
  p.seq_pad = round_up(a.seq, p.mr);
  p.dim_pad = round_up(d, p.mr);

  thread_local AlignedBuffer k_buf, v_buf;
  float* ka = k_buf.get(bh * p.seq_pad * d);
  float* va = v_buf.get(bh * p.dim_pad * a.seq);
  p.ka = ka, p.va = va;
  run(pool, bh, [&](int64_t h0, int64_t h1) {
    for (int64_t i = h0; i < h1; ++i) {
      const int64_t b = i / a.heads, h = i % a.heads;
      const float* k = a.k.data + b * a.k.batch_stride + h * d;
      for (int64_t k0 = 0; k0 < a.seq; k0 += p.mr)
        pack_transposed(k + k0 * a.k.token_stride, a.k.token_stride, std::min(p.mr, a.seq - k0), d,
                        p.mr, ka + i * p.seq_pad * d + k0 * d, p.mr);
      pack_v_panels(a.v.data + b * a.v.batch_stride + h * d, a.v.token_stride, a.seq, d, p.mr,
                    va + i * p.dim_pad * a.seq);
    }
  });
  // Every thread that may take a query block has its buffers sized first (thread_scratch.h).
  thread_local ScratchReservation<4> reservation;
  reservation.ensure(pool, {d * p.nr, p.key_block * p.nr, p.dim_pad * p.nr, 3 * p.nr},
                     [](const std::array<int64_t, 4>& n) {
                       QueryScratch& s = query_scratch();
                       s.q.get(n[0]), s.s.get(n[1]), s.o.get(n[2]), s.stat.get(n[3]);
                     });
  run(pool, bh * p.query_blocks, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) query_block(a, p, t / p.query_blocks, t % p.query_blocks);
  });
}

}  // namespace kiln::attention
