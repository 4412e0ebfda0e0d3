// gemm_u8s8 (gemm_u8s8.h): a register tile of 6 rows x 32 columns (12 zmm accumulators), each k
// quad one broadcast of A's 4 bytes per row, two loads of B's packed quad and 12 vpdpbusd. A is
// first copied to u8 rows padded to whole quads; a B panel (k / 4 x 128 bytes, 256 KiB at the
// deepest) stays in L2 while the row tiles sweep it; threads take panels. This file alone is
// compiled with -mavx512vnni (CMakeLists.txt); it is reached only when u8s8_available().
#include <immintrin.h>

#include <algorithm>

#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm_u8s8.h"

namespace kiln::gemm {
namespace {

constexpr int64_t kMr = 6, kNr = 32;

struct Call {
  const uint8_t* a;  // u8 rows of `quads` int32 words
  int64_t quads, k;
  const int32_t* alpha;     // per row
  const int32_t* row_sums;  // sum_k au, per row
  const PackedU8S8* b;
  int32_t* c;
  int64_t ldc;
};

// Rows [i0, i0 + rows) of panel p (cols of its 32 columns).
void tile(const Call& call, int64_t i0, int64_t rows, int64_t p, int64_t cols) {
  __m512i acc[kMr][2];
  for (auto& r : acc) r[0] = r[1] = _mm512_setzero_si512();
  const int32_t* a = reinterpret_cast<const int32_t*>(call.a) + i0 * call.quads;
  const int8_t* bp = call.b->panel(p);
  for (int64_t q = 0; q < call.quads; ++q, bp += 128) {
    const __m512i b0 = _mm512_loadu_si512(bp), b1 = _mm512_loadu_si512(bp + 64);
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      const __m512i av = _mm512_set1_epi32(a[i * call.quads + q]);
      acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], av, b0);
      acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], av, b1);
    }
  }
  // The compensation, in int64 (its terms can pass int32 while the result does not).
  const int64_t j0 = p * kNr;
  const int32_t* beta = call.b->beta().data() + j0;
  const int32_t* sums = call.b->column_sums().data() + j0;
  for (int64_t i = 0; i < rows; ++i) {
    alignas(64) int32_t t[kNr];
    _mm512_store_si512(t, acc[i][0]);
    _mm512_store_si512(t + 16, acc[i][1]);
    const int64_t alpha = call.alpha[i0 + i], ra = call.row_sums[i0 + i];
    int32_t* out = call.c + (i0 + i) * call.ldc + j0;
    for (int64_t j = 0; j < cols; ++j)
      out[j] = static_cast<int32_t>(t[j] + beta[j] * ra - alpha * sums[j] - call.k * alpha * beta[j]);
  }
}

}  // namespace

PackedU8S8 PackedU8S8::pack(const void* b, bool b_signed, int64_t ldb, int64_t k, int64_t n,
                            const std::vector<int32_t>& zb) {
  PackedU8S8 r;
  r.k_ = k, r.n_ = n;
  const int64_t panels = (n + kNr - 1) / kNr, quads = r.quads();
  r.data_.assign(static_cast<size_t>(panels * quads * 128), 0);
  r.column_sums_.assign(static_cast<size_t>(panels * kNr), 0);
  r.beta_.assign(static_cast<size_t>(panels * kNr), 0);
  for (int64_t j = 0; j < n; ++j) {
    const int32_t z = zb.size() == 1 ? zb[0] : zb[static_cast<size_t>(j)];
    r.beta_[static_cast<size_t>(j)] = (b_signed ? 0 : 128) - z;
    int8_t* panel = r.data_.data() + (j / kNr) * quads * 128 + (j % kNr) * 4;
    int32_t sum = 0;
    for (int64_t q = 0; q < k; ++q) {
      const int32_t v = b_signed ? static_cast<const int8_t*>(b)[q * ldb + j]
                                 : static_cast<const uint8_t*>(b)[q * ldb + j] - 128;
      panel[(q / 4) * 128 + q % 4] = static_cast<int8_t>(v);
      sum += v;
    }
    r.column_sums_[static_cast<size_t>(j)] = sum;
  }
  return r;
}

void gemm_u8s8(int64_t m, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
               const PackedU8S8& b, int32_t* c, int64_t ldc, ThreadPool* pool) {
  const int64_t k = b.k(), n = b.n(), quads = b.quads();
  if (m <= 0 || n <= 0) return;
  // A as u8 rows of whole quads (zero past k), their sums, and alpha per row.
  thread_local std::vector<uint8_t> au;
  thread_local std::vector<int32_t> row_sums, alpha;
  au.assign(static_cast<size_t>((m + kMr) * quads * 4), 0);  // a tile's rows past m read zeros
  row_sums.assign(static_cast<size_t>(m), 0);
  alpha.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    uint8_t* row = au.data() + i * quads * 4;
    int32_t sum = 0;
    for (int64_t q = 0; q < k; ++q) {
      const int32_t v = a_signed ? static_cast<const int8_t*>(a)[i * lda + q] + 128
                                 : static_cast<const uint8_t*>(a)[i * lda + q];
      row[q] = static_cast<uint8_t>(v);
      sum += v;
    }
    row_sums[static_cast<size_t>(i)] = sum;
    alpha[static_cast<size_t>(i)] = (za.size() == 1 ? za[0] : za[static_cast<size_t>(i)]) + (a_signed ? 128 : 0);
  }
  const Call call{au.data(), quads, k, alpha.data(), row_sums.data(), &b, c, ldc};
  const int64_t panels = (n + kNr - 1) / kNr;
  auto run = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t i0 = 0; i0 < m; i0 += kMr)
        tile(call, i0, std::min(kMr, m - i0), p, std::min(kNr, n - p * kNr));
  };
  if (pool && panels > 1 && m * n * k >= (int64_t{1} << 18))
    pool->parallel_for(panels, 1, run);
  else
    run(0, panels);
}

}  // namespace kiln::gemm
