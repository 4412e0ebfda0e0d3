// gemm_u8s8's driver (gemm_u8s8.h): B's packing, A's rows copied (or, for DynamicQuantMatMul,
// quantized) into u8 rows padded to whole quads with their sums, for every ISA's tiles, and the
// tiles over B's panels, threads taking panels; the ISA's tile (gemm_u8s8_kernels.h) does the
// arithmetic. Here too the AVX2 tile: gemm_u8s8_ymm.h's with vpmaddubsw + vpmaddwd, for B or A
// of 7-bit values on CPUs without VNNI.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/function_ref.h"
#include "core/thread_pool.h"
#include "kernels/cpu/gemm/gemm_u8s8_ymm.h"
#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/cpu/ymm_dot_steps.h"
#include "kernels/ref/quantize.h"

namespace kiln::gemm {
namespace u8s8 {
namespace {

int32_t sum_of_bytes(__m256i v) {  // the 32 bytes' sum
  const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
  const __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int32_t>(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1));
}

}  // namespace

Kernels avx2_bytes_kernels() { return {YmmTile<ymm::QuadsOf7BitValues>::tile}; }

}  // namespace u8s8

namespace {

// A's rows [i0, i1) as u8 (a signed A moved up by 128), zero past k up to `stride`, and each
// row's sum, 32 bytes a step, for every ISA's tiles (a pass over m x k bytes beside their
// m x k x n products).
void copy_rows(const void* a, bool a_signed, int64_t lda, int64_t k, int64_t stride, int64_t i0, int64_t i1,
               uint8_t* au, int32_t* sums) {
  const __m256i flip = _mm256_set1_epi8(a_signed ? static_cast<char>(0x80) : 0);
  for (int64_t i = i0; i < i1; ++i) {
    const uint8_t* in = static_cast<const uint8_t*>(a) + i * lda;
    uint8_t* out = au + i * stride;
    int32_t sum = 0;
    for (int64_t q = 0; q < stride; q += 32) {
      const int64_t valid = std::clamp<int64_t>(k - q, 0, 32), n = std::min<int64_t>(32, stride - q);
      __m256i v;
      if (valid == 32) {
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + q));
      } else {  // no read past the row
        alignas(32) uint8_t part[32] = {};
        std::memcpy(part, in + q, static_cast<size_t>(valid));
        v = _mm256_load_si256(reinterpret_cast<const __m256i*>(part));
      }
      v = _mm256_xor_si256(v, flip);
      if (valid < 32) {  // zero past k (the flip made them 0x80)
        alignas(32) uint8_t keep[32] = {};
        std::memset(keep, 0xff, static_cast<size_t>(valid));
        v = _mm256_and_si256(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(keep)));
      }
      sum += u8s8::sum_of_bytes(v);
      if (n == 32) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q), v);
      } else {
        alignas(32) uint8_t tmp[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), v);
        std::memcpy(out + q, tmp, static_cast<size_t>(n));
      }
    }
    sums[i] = sum;
  }
}

// DynamicQuantMatMul's rule itself (dynamic_quantize_row_u8, codes up to `top`) on A's rows
// [i0, i1), into u8 rows of `stride` (zero past k), with each row's sum, zero point and scale:
// every ISA's tiles take these rows (the rows' k values are little work beside their k x n
// products).
void quantize_rows(const float* a, int64_t lda, int64_t k, int64_t stride, int64_t i0, int64_t i1, int top,
                   uint8_t* au, int32_t* sums, int32_t* zero_points, float* scales) {
  for (int64_t i = i0; i < i1; ++i) {
    uint8_t* out = au + i * stride;
    dynamic_quantize_row_u8(a + i * lda, k, out, &scales[i], &zero_points[i], top);
    std::memset(out + k, 0, static_cast<size_t>(stride - k));
    int32_t sum = 0;
    int64_t q = 0;
    for (; q + 32 <= stride; q += 32) sum += u8s8::sum_of_bytes(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(out + q)));
    for (; q < stride; ++q) sum += out[q];
    sums[i] = sum;
  }
}


constexpr int64_t kMr = u8s8::kRows, kNr = PackedU8S8::kPanelColumns;

// The kernels of this CPU: AVX-512 VNNI, AVX-VNNI, else AVX2's (whose tile takes 7-bit B or A
// only: u8s8_available holds for every pair the callers bring).
u8s8::Kernels kernels() {
  if (cpu_features().has_avx512_vnni()) return u8s8::avx512vnni_kernels();
  if (cpu_features().has_avx_vnni()) return u8s8::avxvnni_kernels();
  return u8s8::avx2_bytes_kernels();
}

// A's rows for the tiles: u8 rows of whole quads (kMr zero rows past m), alpha and sum_k au -
// k alpha per row; buffers that grow once per calling thread.
struct RowsU8 {
  uint8_t* data;
  int32_t* row_term;
  int32_t* alpha;
};
RowsU8 rows_for(int64_t m, int64_t stride) {
  thread_local std::vector<uint8_t> au;
  thread_local std::vector<int32_t> row_term, alpha;
  au.resize(static_cast<size_t>((m + kMr) * stride));
  std::memset(au.data() + m * stride, 0, static_cast<size_t>(kMr * stride));  // a tile's rows past m
  row_term.resize(static_cast<size_t>(m));
  alpha.resize(static_cast<size_t>(m));
  // Pointers, not the thread_local names: in a worker those would name the worker's own buffers.
  return {au.data(), row_term.data(), alpha.data()};
}

// Whether a product of this size is worth the threads.
bool threaded(ThreadPool* pool, int64_t m, int64_t n, int64_t k) { return pool && m * n * k >= (int64_t{1} << 18); }
// fill(i0, i1) over A's rows: each fills its u8 rows and their sums (in row_term).
void over_rows(ThreadPool* pool, int64_t m, int64_t n, int64_t k, FunctionRef<void(int64_t, int64_t)> fill) {
  if (threaded(pool, m, n, k) && m > 1 && m * k >= (int64_t{1} << 16))
    pool->parallel_for(m, 1, fill);
  else
    fill(0, m);
}

// The tiles over B's panels, A's rows ready (row_term holding the row sums, alpha set).
void run_tiles(const u8s8::Kernels& kernels, int64_t m, const RowsU8& rows, const PackedU8S8& b, int32_t* c, float* y,
               const Dequantize* dq, int64_t ldc, ThreadPool* pool) {
  const int64_t k = b.k(), n = b.n();
  for (int64_t i = 0; i < m; ++i)
    rows.row_term[i] = static_cast<int32_t>(static_cast<uint32_t>(rows.row_term[i]) -
                                            static_cast<uint32_t>(k) * static_cast<uint32_t>(rows.alpha[i]));
  const u8s8::Call call{rows.data, b.quads(), rows.alpha, rows.row_term, &b, c, y, ldc, dq};
  const int64_t panels = (n + kNr - 1) / kNr;
  // The weights come from memory (a model's B is seldom still in cache), ~20 % slower than from
  // L2 when the first row tile waits for each panel (bench/gemm_bench.cc's cold_b cases). So the
  // row tiles of a panel share out the next panel's lines and prefetch them as they go.
  const int64_t tiles = (m + kMr - 1) / kMr, panel_lines = b.quads() * kNr * 4 / 64;
  const int64_t tile_lines = (panel_lines + tiles - 1) / tiles;
  const int64_t step = (tile_lines + b.quads() - 1) / b.quads();
  auto run = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t t = 0; t < tiles; ++t) {
        u8s8::Prefetch next;
        if (p + 1 < p1) {
          const int64_t first = std::min(panel_lines, t * tile_lines);
          next = {b.panel(p + 1) + first * 64, std::min(tile_lines, panel_lines - first), step};
        }
        kernels.tile(call, t * kMr, std::min(kMr, m - t * kMr), p, std::min(kNr, n - p * kNr), next);
      }
  };
  if (threaded(pool, m, n, k) && panels > 1)
    pool->parallel_for(panels, 1, run);
  else
    run(0, panels);
}

void run_gemm(int64_t m, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
              const PackedU8S8& b, int32_t* c, float* y, const Dequantize* dq, int64_t ldc, ThreadPool* pool) {
  const int64_t k = b.k(), n = b.n(), stride = b.quads() * 4;
  if (m <= 0 || n <= 0) return;
  const u8s8::Kernels ks = kernels();
  const RowsU8 rows = rows_for(m, stride);
  over_rows(pool, m, n, k, [&](int64_t i0, int64_t i1) {
    copy_rows(a, a_signed, lda, k, stride, i0, i1, rows.data, rows.row_term);
  });
  for (int64_t i = 0; i < m; ++i)
    rows.alpha[i] = (za.size() == 1 ? za[0] : za[static_cast<size_t>(i)]) + (a_signed ? 128 : 0);
  run_tiles(ks, m, rows, b, c, y, dq, ldc, pool);
}

}  // namespace

PackedU8S8 PackedU8S8::pack(const void* b, bool b_signed, int64_t ldb, int64_t k, int64_t n,
                            const std::vector<int32_t>& zb) {
  PackedU8S8 r;
  r.k_ = k, r.n_ = n;
  const int64_t panels = (n + kNr - 1) / kNr, quads = r.quads();
  r.data_.assign(static_cast<size_t>(panels * quads * kNr * 4), 0);
  r.column_sums_.assign(static_cast<size_t>(panels * kNr), 0);
  r.beta_.assign(static_cast<size_t>(panels * kNr), 0);
  for (int64_t j = 0; j < n; ++j) {
    const int32_t z = zb.size() == 1 ? zb[0] : zb[static_cast<size_t>(j)];
    r.beta_[static_cast<size_t>(j)] = (b_signed ? 0 : 128) - z;
    const int64_t in_panel = j % kNr, strip = in_panel / PackedU8S8::kStripColumns;
    int8_t* column = r.data_.data() + (j / kNr) * quads * kNr * 4 + strip * r.strip_bytes() +
                     (in_panel % PackedU8S8::kStripColumns) * 4;
    int32_t sum = 0;
    for (int64_t q = 0; q < k; ++q) {
      const int32_t v = b_signed ? static_cast<const int8_t*>(b)[q * ldb + j]
                                 : static_cast<const uint8_t*>(b)[q * ldb + j] - 128;
      column[(q / 4) * PackedU8S8::kStripColumns * 4 + q % 4] = static_cast<int8_t>(v);
      sum += v;
      r.seven_bit_ = r.seven_bit_ && v >= -64 && v <= 64;
    }
    r.column_sums_[static_cast<size_t>(j)] = sum;
  }
  return r;
}

void gemm_u8s8(int64_t m, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
               const PackedU8S8& b, int32_t* c, int64_t ldc, ThreadPool* pool) {
  run_gemm(m, a, a_signed, lda, za, b, c, nullptr, nullptr, ldc, pool);
}

void gemm_u8s8(int64_t m, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
               const PackedU8S8& b, const Dequantize& dq, float* y, int64_t ldy, ThreadPool* pool) {
  run_gemm(m, a, a_signed, lda, za, b, nullptr, y, &dq, ldy, pool);
}


void gemm_u8s8_dynamic(int64_t m, const float* a, int64_t lda, const PackedU8S8& b, Dequantize dq, float* y,
                       int64_t ldy, ThreadPool* pool, int row_top) {
  const int64_t k = b.k(), n = b.n(), stride = b.quads() * 4;
  if (m <= 0 || n <= 0) return;
  const u8s8::Kernels ks = kernels();
  const RowsU8 rows = rows_for(m, stride);
  thread_local std::vector<float> scale_buffer;
  scale_buffer.resize(static_cast<size_t>(m));
  float* scales = scale_buffer.data();
  over_rows(pool, m, n, k, [&](int64_t i0, int64_t i1) {
    quantize_rows(a, lda, k, stride, i0, i1, row_top, rows.data, rows.row_term, rows.alpha, scales);
  });
  dq.a_scale = scales, dq.a_per_row = true;
  run_tiles(ks, m, rows, b, nullptr, y, &dq, ldy, pool);
}

}  // namespace kiln::gemm
