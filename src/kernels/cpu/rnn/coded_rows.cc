// coded_rows.h: the codes of B, a's rows rounded to 16 bits, the driver over tiles and chunks, and
// the AVX2 tile (vpmaddwd). The AVX-512 VNNI tile is in coded_rows_avx512vnni.cc.
#include "kernels/cpu/rnn/coded_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace kiln::rnn {
namespace {

constexpr int64_t kTile = CodedRows::kTile;
// Pairs of k a chunk: 512 products of |a| <= 32767 and |code| <= 128 sum to at most
// 2,147,418,112, inside int32.
constexpr int64_t kChunkPairs = 256;
constexpr float kMaxA = 32767.0f;

// Row a[:k] as 16-bit values a16 = round(a * 32767 / max|a|) into q (2 * pairs of them, zero past
// k); returns max|a| / 32767, the scale that gives a back (0 for a zero row, NaN where a has a NaN
// or an infinity: then every output of the row is NaN, as float's products would make them).
float quantize_row(const float* a, int64_t k, int64_t pairs, int16_t* q) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 top = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 v = _mm256_loadu_ps(a + i);
    top = _mm256_max_ps(top, _mm256_and_ps(v, abs_mask));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, top);
  float m = *std::max_element(lanes, lanes + 8);
  bool finite = _mm256_movemask_ps(bad) == 0;
  for (; i < k; ++i) {
    m = std::max(m, std::fabs(a[i]));
    finite = finite && !std::isnan(a[i]);
  }
  finite = finite && m <= std::numeric_limits<float>::max();
  if (!finite || m == 0.0f) {
    std::fill(q, q + 2 * pairs, int16_t{0});
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = kMaxA / m;
  const __m256 vinv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 16 <= k; i += 16) {  // packs saturates a product rounded past 32767
    const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(a + i), vinv));
    const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(a + i + 8), vinv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8));
  }
  for (; i < k; ++i) q[i] = static_cast<int16_t>(std::clamp(std::nearbyint(a[i] * inv), -kMaxA, kMaxA));
  std::fill(q + k, q + 2 * pairs, int16_t{0});
  return m / kMaxA;
}

// R rows (from row0) x 8V outputs (from col0, inside tile t) of the AVX2 tile: per pair of k,
// V loads of 16 codes (8 outputs x 2) widened to 16 bits, each against every row's broadcast
// pair through vpmaddwd. Every loop over acc is unrolled, and codes are widened 4 vectors at a
// time at most: else GCC keeps acc on the stack, or hoists all 8 widenings ahead of the products
// and spills an accumulator.
template <int R, int V>
void tile_avx2(const CodedArgs& args, int64_t t, int64_t row0, int64_t col0) {
  constexpr int kWiden = V < 4 ? V : 4;
  const CodedRows& b = *args.b;
  const int8_t* c = b.codes.data() + ((t * b.pairs + args.p0) * kTile + (col0 - t * kTile)) * 2;
  const int32_t* a = args.a + row0 * args.lda;
  __m256i acc[R][V];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[i][v] = _mm256_setzero_si256();
  for (int64_t p = args.p0; p < args.p1; ++p, c += 2 * kTile)
#pragma GCC unroll 8
    for (int v0 = 0; v0 < V; v0 += kWiden) {
      __m256i w[kWiden];
#pragma GCC unroll 8
      for (int v = 0; v < kWiden; ++v)
        w[v] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16 * (v0 + v))));
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256i x = _mm256_set1_epi32(a[i * args.lda + p]);
#pragma GCC unroll 8
        for (int v = 0; v < kWiden; ++v)
          acc[i][v0 + v] = _mm256_add_epi32(acc[i][v0 + v], _mm256_madd_epi16(x, w[v]));
      }
    }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    const int64_t col = col0 + 8 * v, left = std::min<int64_t>(8, b.n - col);
    if (left <= 0) continue;
    const __m256i m = vec::tail_mask_avx2(static_cast<int>(left));
    const __m256 scale = _mm256_loadu_ps(b.scale.data() + col);  // zero-padded to whole tiles
    const __m256 bias = args.bias && !args.accumulate ? _mm256_maskload_ps(args.bias + col, m) : _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      float* out = args.out + (row0 + i) * args.ldo + col;
      const __m256 base = args.accumulate ? _mm256_maskload_ps(out, m) : bias;
      const __m256 s = _mm256_mul_ps(scale, _mm256_set1_ps(args.row_scale[row0 + i]));
      _mm256_maskstore_ps(out, m, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][v]), s, base));
    }
  }
}

}  // namespace

void coded_tile_avx2(const CodedArgs& args, int64_t t) {
  int64_t i = 0;
  for (; i + 6 <= args.rows; i += 6)
    for (int64_t col = t * kTile; col < std::min(args.b->n, (t + 1) * kTile); col += 16) tile_avx2<6, 2>(args, t, i, col);
  for (; i < args.rows; ++i) tile_avx2<1, 8>(args, t, i, t * kTile);
}

CodedRows code_rows(const float* b, int64_t n, int64_t k) {
  CodedRows out;
  const int64_t tiles = (n + kTile - 1) / kTile, pairs = (k + 1) / 2;
  std::vector<int8_t> row_codes(static_cast<size_t>(k));
  std::vector<float> scale(static_cast<size_t>(tiles * kTile), 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* row = b + j * k;
    float top = 0.0f;
    for (int64_t i = 0; i < k; ++i) top = std::max(top, std::fabs(row[i]));
    if (!std::isfinite(top)) return {};
    bool coded = top == 0.0f;  // a zero row: codes and scale 0
    std::fill(row_codes.begin(), row_codes.end(), int8_t{0});
    for (int q = 127; q >= 1 && !coded; --q) {
      const float step = top / static_cast<float>(q);
      coded = true;
      for (int64_t i = 0; i < k && coded; ++i) {
        const float c = std::nearbyint(row[i] / step);
        coded = std::fabs(c * step - row[i]) <= 4e-7f * std::fabs(row[i]);
        row_codes[i] = static_cast<int8_t>(c);
      }
      if (coded) scale[j] = step;
    }
    if (!coded) return {};  // float weights: the first row fails, at the first values
    if (out.codes.empty()) out.codes.assign(static_cast<size_t>(tiles * pairs * kTile * 2), 0);
    const int64_t tile = j / kTile, lane = j % kTile;
    for (int64_t i = 0; i < k; ++i) out.codes[((tile * pairs + i / 2) * kTile + lane) * 2 + i % 2] = row_codes[i];
  }
  out.scale = std::move(scale);
  out.n = n;
  out.k = k;
  out.pairs = pairs;
  return out;
}

void coded_product(const CodedRows& b, const float* a, int64_t rows, int64_t lda, const float* bias, float* out,
                   int64_t ldo, ThreadPool* pool) {
  thread_local std::vector<int32_t> pairs;
  thread_local std::vector<float> row_scale;
  pairs.resize(static_cast<size_t>(rows * b.pairs));
  row_scale.resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    row_scale[i] = quantize_row(a + i * lda, b.k, b.pairs, reinterpret_cast<int16_t*>(pairs.data() + i * b.pairs));
  const auto tile = cpu_features().has_avx512_vnni() ? coded_tile_avx512vnni : coded_tile_avx2;
  CodedArgs args{&b, pairs.data(), b.pairs, rows, row_scale.data(), bias, out, ldo, 0, 0, false};
  auto tiles = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t p0 = 0; p0 == 0 || p0 < b.pairs; p0 += kChunkPairs) {  // once at least: the bias
        CodedArgs chunk = args;
        chunk.p0 = p0;
        chunk.p1 = std::min(b.pairs, p0 + kChunkPairs);
        chunk.accumulate = p0 > 0;
        tile(chunk, t);
      }
  };
  const int64_t count = (b.n + kTile - 1) / kTile;
  if (pool && count > 1 && rows * b.n * b.k >= (int64_t{1} << 18)) pool->parallel_for(count, 1, tiles);
  else tiles(0, count);
}

}  // namespace kiln::rnn
