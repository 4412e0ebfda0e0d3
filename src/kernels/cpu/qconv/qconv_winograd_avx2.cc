// The 8-bit 3x3 stride-1 conv by Winograd F(2x2, 3x3) in exact integers, for CPUs without VNNI
// (qconv.h, kWinogradAvx2). Each 2x2 output tile is
//   Y = A^T [ U . V ] A / 4,   U = G' g G'^T (per filter and channel), V = B^T d B (per tile),
// over the tile's 4x4 input patch d, with G' = 2G (integers: rows 2 0 0 | 1 1 1 | 1 -1 1 |
// 0 0 2, so U = 4 G g G^T and the sum comes out 4 times too big, an exact multiple of 4).
// Every value fits 16 bits: |V| <= 2 * 255 (d is the staged u8 input), |U| <= 9 * 128. The 16
// points' products are 16 GEMMs over channel pairs by vpmaddwd, 16 products a tile and channel
// where the direct conv does 36: 2.25x fewer, at kAvx2's rate (vpmaddwd + vpaddd for 16
// products). Sums wrap in int32 lanes; the result is exact while the true sum, times 4, fits
// int32, which holds for channels <= kWinogradMaxChannels (4 * 1024 * 9 * 255 * 128 < 2^31).
// On VNNI CPUs vpdpbusd does 64 products an instruction on 8-bit values and the direct tiles
// are faster. Without VNNI, best_tile picks this tile for any weights, 7-bit ones too (it beats
// kAvx2Bytes' 32 products in 3 ops), except on the runs where U (3.6x the weights' bytes) would
// stream from memory for few tiles, a small image of many channels (qconv.h, winograd_pays).
//
// A run stages X padded to whole tiles (qconv.cc), then takes chunks of tiles (sized so their V,
// 16 points x tiles x channels of int16, stays in L2): the input transform writes V point by
// point, then per block of 16 filters each point's GEMM writes int32 sums for the chunk's tiles
// (6 tiles x 16 filters a register tile) and the output transform finishes the
// block's 2x2 pixels, bias added and requantized as the ymm tiles store (qconv_tile_ymm.h).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "core/thread_scratch.h"
#include "kernels/cpu/qconv/qconv_tile_ymm.h"
#include "kernels/cpu/ymm_dot_steps.h"

namespace kiln::qconv {
namespace {

constexpr int kPoints = 16;  // (2 + 2) x (2 + 2)

struct Plan {
  const Geometry& g;
  const Staged& x;
  const PackedWeights& w;
  const Requantize& rq;
  void* y;
  const void* residual;  // R, with rq.add (Y's layout)
  bool clamp_high;
  int64_t tiles_h, tiles_w, chunk;  // tiles a row, a column; tiles a chunk
};

// V of tiles [t0, t0 + count) into v: [point][tile - t0][cp] int16 (rows of `chunk` tiles).
void input_transform(const Plan& plan, int64_t t0, int64_t count, int16_t* v) {
  const int64_t cp = plan.x.cp, per_image = plan.tiles_h * plan.tiles_w;
  const uint8_t* xp = static_cast<const uint8_t*>(plan.x.xp);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = t0 + i, n = t / per_image, ty = (t % per_image) / plan.tiles_w, tx = t % plan.tiles_w;
    const uint8_t* patch = xp + ((n * plan.x.padded_h + 2 * ty) * plan.x.padded_w + 2 * tx) * cp;
    for (int64_t c = 0; c < cp; c += 16) {
      __m256i d[4][4], s[4][4];
      for (int r = 0; r < 4; ++r)
        for (int k = 0; k < 4; ++k)
          d[r][k] = _mm256_cvtepu8_epi16(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(patch + (r * plan.x.padded_w + k) * cp + c)));
      for (int k = 0; k < 4; ++k) {  // B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3
        s[0][k] = _mm256_sub_epi16(d[0][k], d[2][k]);
        s[1][k] = _mm256_add_epi16(d[1][k], d[2][k]);
        s[2][k] = _mm256_sub_epi16(d[2][k], d[1][k]);
        s[3][k] = _mm256_sub_epi16(d[1][k], d[3][k]);
      }
      for (int r = 0; r < 4; ++r) {  // (B^T d) B: the same on columns
        const __m256i out[4] = {_mm256_sub_epi16(s[r][0], s[r][2]), _mm256_add_epi16(s[r][1], s[r][2]),
                                _mm256_sub_epi16(s[r][2], s[r][1]), _mm256_sub_epi16(s[r][1], s[r][3])};
        for (int k = 0; k < 4; ++k)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + ((4 * r + k) * plan.chunk + i) * cp + c), out[k]);
      }
    }
  }
}

// The GEMMs of block b over the chunk's `count` tiles: m [point][tile][16] int32, filters in
// the ymm tiles' order. A register tile is kRows tiles x 16 filters, on the ymm tiles' add_steps.
constexpr int kRows = 6;

void point_products(const Plan& plan, const int16_t* v, int64_t count, int64_t b, int32_t* m) {
  const int64_t cp = plan.x.cp, pairs = cp / 2;
  for (int xi = 0; xi < kPoints; ++xi) {
    const int8_t* wb = plan.w.block(b) + xi * pairs * 64;
    for (int64_t t0 = 0; t0 < count; t0 += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, count - t0));  // the rest repeat the last
      const char* p[kRows];
      for (int i = 0; i < kRows; ++i)
        p[i] = reinterpret_cast<const char*>(v + (xi * plan.chunk + t0 + std::min(i, rows - 1)) * cp);
      __m256i acc[kRows][2];
      for (auto& r : acc) r[0] = r[1] = _mm256_setzero_si256();
      const int8_t* w = wb;
      add_steps<ymm::PairsOf16Bits>(p, pairs, w, acc);
      // Every row, whole (the chunk has room; rows past `count` are never read): a row count
      // known only at run time would index the accumulators, and GCC then kept them in memory.
#pragma GCC unroll 6
      for (int i = 0; i < kRows; ++i) {
        int32_t* out = m + (xi * plan.chunk + t0 + i) * 16;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), acc[i][0]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), acc[i][1]);
      }
    }
  }
}

// A^T M A / 4 + bias of block b for the chunk's tiles, requantized into Y's pixels inside it.
void output_transform(const Plan& plan, const int32_t* m, int64_t t0, int64_t count, int64_t b) {
  const Geometry& g = plan.g;
  const int64_t m0 = b * 16, filters = std::min<int64_t>(16, g.filters - m0), per_image = plan.tiles_h * plan.tiles_w;
  __m256i bias[2], scale_bits[2];
  load_in_tile_order(plan.rq.bias.data() + m0, filters, bias);
  load_in_tile_order(reinterpret_cast<const int32_t*>(plan.rq.scale.data() + m0), filters, scale_bits);
  const __m256 scale[2] = {_mm256_castsi256_ps(scale_bits[0]), _mm256_castsi256_ps(scale_bits[1])};
  const size_t elem = plan.rq.output == Output::kFloat ? 4 : 1;
  const char* residual = static_cast<const char*>(plan.residual);
  const std::optional<ResidualAdd> add = residual ? std::optional<ResidualAdd>(ResidualAdd(plan.rq)) : std::nullopt;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = t0 + i, n = t / per_image, ty = (t % per_image) / plan.tiles_w, tx = t % plan.tiles_w;
    __m256i y[2][2][2];  // [row][column][half]
    for (int h = 0; h < 2; ++h) {
      auto at = [&](int r, int k) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + ((4 * r + k) * plan.chunk + i) * 16 + 8 * h));
      };
      __m256i p[2][4];  // A^T M: rows m0 + m1 + m2, m1 - m2 - m3
      for (int k = 0; k < 4; ++k) {
        const __m256i a1 = at(1, k), a2 = at(2, k);
        p[0][k] = _mm256_add_epi32(_mm256_add_epi32(at(0, k), a1), a2);
        p[1][k] = _mm256_sub_epi32(_mm256_sub_epi32(a1, a2), at(3, k));
      }
      for (int r = 0; r < 2; ++r) {  // (A^T M) A, then / 4 (exact) and the bias
        const __m256i c0 = _mm256_add_epi32(_mm256_add_epi32(p[r][0], p[r][1]), p[r][2]);
        const __m256i c1 = _mm256_sub_epi32(_mm256_sub_epi32(p[r][1], p[r][2]), p[r][3]);
        y[r][0][h] = _mm256_add_epi32(_mm256_srai_epi32(c0, 2), bias[h]);
        y[r][1][h] = _mm256_add_epi32(_mm256_srai_epi32(c1, 2), bias[h]);
      }
    }
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < 2; ++k) {
        const int64_t oy = 2 * ty + r, ox = 2 * tx + k;
        if (oy >= g.out_h || ox >= g.out_w) continue;
        const int64_t at = ((n * g.out_h + oy) * g.out_w + ox) * g.filters + m0;
        store_ymm_sums(plan.rq, plan.clamp_high, scale, y[r][k][0], y[r][k][1], static_cast<char*>(plan.y) + at * elem,
                       filters, add ? &*add : nullptr, add ? residual + at : nullptr);
      }
  }
}

// A thread's V ([point][tile][cp] int16) and M ([point][tile][16] int32) of a chunk.
struct Scratch {
  std::vector<int16_t> v;
  std::vector<int32_t> m;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

void conv_winograd_avx2(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq, void* y,
                        const void* residual, ThreadPool* pool) {
  Plan plan{g, x, w, rq, y, residual, rq.needs_float_clamp(), (g.out_h + 1) / 2, (g.out_w + 1) / 2, 0};
  const int64_t tiles = g.batch * plan.tiles_h * plan.tiles_w;
  // V of a chunk within ~192 KiB (of L2), 6 to 60 tiles in whole register tiles; or all of a
  // small image's tiles in one chunk within 1 MiB, so that U (16/9 the weights, in 16 bits)
  // streams once a run, not once a chunk: a 7x7 output of 512 channels in chunks of 12 tiles
  // read its 8 MB U twice, a 14x14 one of 256 in chunks of 24 its 2 MB three times (0.86 ms on 2
  // threads against the direct tile's 0.72-0.78; Intel Xeon model 207 posing as AVX2-only).
  const int64_t v_bytes = kPoints * x.cp * 2, all = (tiles + kRows - 1) / kRows * kRows;
  plan.chunk = all * v_bytes <= (1 << 20) ? all : std::clamp<int64_t>((192 << 10) / v_bytes / kRows * kRows, kRows, 60);
  const int64_t chunks = (tiles + plan.chunk - 1) / plan.chunk, blocks = w.blocks();
  const int64_t threads = pool ? pool->threads() : 1;
  // Each thread's V and M, grown on every thread of the pool before the loop (ScratchReservation:
  // which threads take the chunks changes from run to run).
  const int64_t v_size = kPoints * plan.chunk * x.cp, m_size = kPoints * plan.chunk * 16;
  thread_local ScratchReservation<2> reservation;
  reservation.ensure(pool, {v_size, m_size}, [](const std::array<int64_t, 2>& n) {
    scratch().v.reserve(static_cast<size_t>(n[0]));
    scratch().m.reserve(static_cast<size_t>(n[1]));
  });
  if (chunks == 1) {
    // All the tiles in one chunk (a small image): its V transformed once, the threads taking
    // shares of the tiles, into the calling thread's V, which every thread's GEMMs then read, the
    // blocks split among them. Each split of the blocks transforming the chunk again took 9 % of
    // resnet50's 256-channel 14x14 layer on 2 threads (4 transforms a run); one split a thread,
    // each transforming it once, ran resnet50's 8 such layers 1.04x this way's time (Zen 3).
    std::vector<int16_t>& caller_v = scratch().v;
    caller_v.resize(static_cast<size_t>(v_size));
    int16_t* const v = caller_v.data();
    auto transform = [&](int64_t t0, int64_t t1) { input_transform(plan, t0, t1 - t0, v + t0 * x.cp); };
    auto products = [&](int64_t b0, int64_t b1) {
      std::vector<int32_t>& m = scratch().m;  // the running thread's
      m.resize(static_cast<size_t>(m_size));
      for (int64_t b = b0; b < b1; ++b) {
        point_products(plan, v, tiles, b, m.data());
        output_transform(plan, m.data(), 0, tiles, b);
      }
    };
    if (pool) {
      pool->parallel_for(tiles, 1, transform);
      pool->parallel_for(blocks, 1, products);
    } else {
      transform(0, tiles);
      products(0, blocks);
    }
    return;
  }
  // Few chunks: the blocks of filters are split among the threads too, each split transforming
  // its chunk's input again.
  const int64_t splits = chunks >= 2 * threads ? 1 : std::min(blocks, (2 * threads + chunks - 1) / chunks);
  const int64_t per_split = (blocks + splits - 1) / splits;
  auto work = [&](int64_t i0, int64_t i1) {
    std::vector<int16_t>& v = scratch().v;
    std::vector<int32_t>& m = scratch().m;
    v.resize(static_cast<size_t>(v_size));
    m.resize(static_cast<size_t>(m_size));
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t c = item / splits, s = item % splits;
      const int64_t t0 = c * plan.chunk, count = std::min(plan.chunk, tiles - t0);
      const int64_t b0 = s * per_split, b1 = std::min(blocks, b0 + per_split);
      if (b0 >= b1) continue;
      input_transform(plan, t0, count, v.data());
      for (int64_t b = b0; b < b1; ++b) {
        point_products(plan, v.data(), count, b, m.data());
        output_transform(plan, m.data(), t0, count, b);
      }
    }
  };
  if (pool && chunks * splits > 1)
    pool->parallel_for(chunks * splits, 1, work);
  else
    work(0, chunks * splits);
}

}  // namespace kiln::qconv
