// What the 8-bit conv's tiles share (qconv_avx512vnni.cc, qconv_avx2.cc, qconv_depthwise.cc
// include it, each compiled for its ISA): the input pointers of each output pixel's window, the
// tap offsets, the loop that hands (group of blocks, run of pixels) items to the threads, and
// small load/store helpers.
//
// A tile covers kPixels output pixels consecutive in the flattened output (they may cross rows
// and images), each with its own input pointer, so narrow outputs (7x7) waste no lanes. Threads
// take items group by group, so that a group's weights stay in L2 while its pixels stream by.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/qconv/qconv.h"

namespace kiln::qconv {

// 4 bytes of the input (a quad of u8 channels, a pair of int16 ones) to broadcast, unaligned.
inline int32_t load_u32(const char* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Row iy of image n of channels-last X (`stride` bytes a pixel), or `pad` (zero_point_row)
// where iy lies above or below X.
inline const uint8_t* row_or_pad(const Geometry& g, const uint8_t* x, int64_t stride, const uint8_t* pad, int64_t n,
                                 int64_t iy) {
  return iy >= 0 && iy < g.in_h ? x + (n * g.in_h + iy) * g.in_w * stride : pad;
}

// The first n of 8 int32 lanes, as an AVX2 maskload/maskstore mask.
inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The first `count` (at most 16) bytes of `bytes` to `out`: a whole store when it fits, else
// through a buffer (AVX2 has no byte-masked store).
inline void store_first_bytes(char* out, __m128i bytes, int64_t count, int64_t whole) {
  if (count == whole && whole == 16) return _mm_storeu_si128(reinterpret_cast<__m128i*>(out), bytes);
  if (count == 8) return _mm_storel_epi64(reinterpret_cast<__m128i*>(out), bytes);  // a block of 24 filters' last
  alignas(16) char tmp[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(tmp), bytes);
  std::memcpy(out, tmp, static_cast<size_t>(count));
}

struct TilePlan {
  const Geometry& g;
  const Staged& x;
  const PackedWeights& w;
  const Requantize& rq;
  void* y;
  const void* residual;              // R, with rq.add (Y's layout)
  int64_t element;                          // bytes of a staged value
  const std::vector<int64_t>& tap_offsets;  // bytes from a window's corner to each tap's pixel
  bool clamp_high = true;  // rq.needs_float_clamp()
  // Whether output pixel p's window is staged pixel p (windows()).
  bool pixel_is_window = false;
  bool one_tap = false;  // a window of one tap, at its corner (a 1x1 conv)
};

// The window corners of pixels p0, p0 + 1, ..., `rows` of them, into px[0, count) (the last
// repeated past `rows`): one division for the first, then steps along the row (a tile's pixels
// are consecutive; dividing for each cost more than a small conv's arithmetic).
inline void windows(const TilePlan& plan, int64_t p0, int rows, const char** px, int count) {
  const Geometry& g = plan.g;
  const int64_t pixel_bytes = plan.x.cp * plan.element;
  if (plan.pixel_is_window) {  // a 1x1 conv of stride 1 on an unpadded X: no division
    for (int i = 0; i < count; ++i)
      px[i] = static_cast<const char*>(plan.x.xp) + (p0 + std::min(i, rows - 1)) * pixel_bytes;
    return;
  }
  const int64_t per_image = g.out_h * g.out_w;
  int64_t n = p0 / per_image, oy = (p0 % per_image) / g.out_w, ox = p0 % g.out_w;
  const char* last = nullptr;
  for (int i = 0; i < count; ++i) {
    if (i < rows) {
      if (i > 0 && ++ox == g.out_w) {
        ox = 0;
        if (++oy == g.out_h) oy = 0, ++n;
      }
      last = static_cast<const char*>(plan.x.xp) +
             ((n * plan.x.padded_h + oy * g.stride_h) * plan.x.padded_w + ox * g.stride_w) * pixel_bytes;
    }
    px[i] = last;
  }
}

inline constexpr int64_t kRunMajorWeightBytes = 256 << 10;

// Lines of the weights a thread reads next, fetched into L2 a line a step of its tiles: a big
// layer's weights come from memory (a model's other layers evicted them), and a group's first
// tile would otherwise wait for each of its lines.
struct Prefetch {
  const char* at = nullptr;
  const char* end = nullptr;
  [[gnu::always_inline]] void step() {
    if (at < end) {
      _mm_prefetch(at, _MM_HINT_T1);
      at += 64;
    }
  }
};

// Runs Tiles::run(plan, p_begin, p_end, b0, blocks, next) over every pixel and block: runs of
// tiles of kPixels pixels, blocks up to Tiles::kMaxBlocks.
template <class Tiles>
void drive(const Geometry& g, const Staged& x, const PackedWeights& w, const Requantize& rq, void* y,
           const void* residual, int64_t element, ThreadPool* pool) {
  constexpr int kPixels = Tiles::kPixels, kMaxBlocks = Tiles::kMaxBlocks;
  // The tap offsets go in a list of the calling thread's, kept from conv to conv, which the pool's
  // threads read through the plan (a list of the plan's own was allocated at every conv of a run).
  thread_local std::vector<int64_t> tap_offsets;
  tap_offsets.clear();
  for (int64_t ky = 0; ky < g.kernel_h; ++ky)
    for (int64_t kx = 0; kx < g.kernel_w; ++kx)
      tap_offsets.push_back((ky * g.dilation_h * x.padded_w + kx * g.dilation_w) * x.cp * element);
  TilePlan plan{g, x, w, rq, y, residual, element, tap_offsets};
  plan.pixel_is_window = g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 &&
                         x.padded_h == g.out_h && x.padded_w == g.out_w;
  plan.clamp_high = rq.needs_float_clamp();
  plan.one_tap = g.kernel_h == 1 && g.kernel_w == 1;
  const int64_t pixels = g.batch * g.out_h * g.out_w;
  const int64_t tiles = (pixels + kPixels - 1) / kPixels;
  const int64_t groups = (w.blocks() + kMaxBlocks - 1) / kMaxBlocks;
  // Runs of up to 8 tiles an item, fewer where that would leave a thread fewer than 16 items:
  // a 7x7 layer's 9 tiles as runs of 8 were 2 runs of unequal work, and the threads' shares of
  // them unequal (mobilenet_v2's 960 -> 160 at 7x7 on 2 threads: 12.3 -> 10.1 us, 17 on one).
  const int64_t threads = pool ? pool->threads() : 1;
  const int64_t tiles_an_item = std::clamp<int64_t>(tiles * groups / (16 * threads), 1, 8);
  const int64_t runs = (tiles + tiles_an_item - 1) / tiles_an_item;
  // Items go group by group, so that a group's weights stay in cache while the pixels stream by;
  // but where all the weights fit in L2 with room (a 1x1 conv of few channels), run by run, so
  // that a run's output pixels, written a group's few bytes at a time, stay in L1 until whole
  // (mobilenet_v2's 16 -> 96 at 112x112 on the ymm tiles: 6 sweeps of 16 bytes a pixel, each
  // fetching every line of its 1.2 MB output again).
  const bool run_major = w.blocks() * w.block_bytes() <= kRunMajorWeightBytes;
  auto work = [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t group = run_major ? item % groups : item / runs, run = run_major ? item / groups : item % runs;
      const int64_t b0 = group * kMaxBlocks, blocks = std::min<int64_t>(kMaxBlocks, w.blocks() - b0);
      const int64_t p_begin = run * tiles_an_item * kPixels;
      const int64_t p_end = std::min(pixels, p_begin + tiles_an_item * kPixels);
      // Group-major, a thread's next item is mostly the next group's (its share of the items is
      // contiguous, claimed from the front: core/thread_pool.h): each item of this group fetches
      // its part of the next group's lines, in proportion to its pixels. (Run-major weights are
      // few, and stay in cache from run to run.)
      Prefetch next;
      if (!run_major && group + 1 < groups) {
        const int64_t lines = std::min<int64_t>(kMaxBlocks, w.blocks() - b0 - kMaxBlocks) * w.block_bytes() / 64;
        const char* from = reinterpret_cast<const char*>(w.block(b0 + kMaxBlocks));
        next.at = from + lines * p_begin / pixels * 64, next.end = from + lines * p_end / pixels * 64;
      }
      Tiles::run(plan, p_begin, p_end, b0, static_cast<int>(blocks), next);
    }
  };
  const int64_t items = groups * runs;
  if (pool && items > 1)
    pool->parallel_for(items, 1, work);
  else
    work(0, items);
}

}  // namespace kiln::qconv
