// ai.kiln.BlockedConv with group = C (depthwise) in AVX2/FMA: the 8 lanes of a block are 8
// channels, so a register tile is R output pixels of one block, each tap one FMA per pixel.
// Tasks are (image, channel block, rows).
#include <immintrin.h>

#include <algorithm>
#include <utility>

#include "kernels/kiln/nchwc/activation_avx2.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {
namespace {

constexpr int kMaxR = 8;

struct Job {
  const BlockedConvShape& s;
  const float* x;
  const float* w;
  float* y;
  const BlockedEpilogue& e;
  __m256 tail_keep;
  bool has_tail;
};

// R pixels of row oh from ow0 on, channel block cb of image n, taps [kh0,kh1) x [kw0,kw1).
template <int R>
void tile(const Job& j, int64_t n, int64_t cb, int64_t oh, int64_t ow0, int64_t kh0, int64_t kh1,
          int64_t kw0, int64_t kw1) {
  const BlockedConvShape& s = j.s;
  const int64_t out_at = ((n * s.mb + cb) * s.oh * s.ow + oh * s.ow + ow0) * kBlock;
  const float* xc = j.x + (n * s.cb + cb) * s.h * s.w * kBlock;
  const float* wc = j.w + cb * s.kh * s.kw * kBlock;
  __m256 acc[R];
  const __m256 bias = j.e.bias ? _mm256_loadu_ps(j.e.bias + cb * kBlock) : _mm256_setzero_ps();
  for (int r = 0; r < R; ++r) acc[r] = bias;
  const int64_t iw0 = ow0 * s.sw - s.pl, xstep = s.sw * kBlock;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const int64_t ih = oh * s.sh - s.pt + kh * s.dh;
    for (int64_t kw = kw0; kw < kw1; ++kw) {
      const __m256 wv = _mm256_loadu_ps(wc + (kh * s.kw + kw) * kBlock);
      const float* xp = xc + (ih * s.w + iw0 + kw * s.dw) * kBlock;
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + r * xstep), wv, acc[r]);
    }
  }
  __m256 v[R];  // a copy: taking its address must not keep acc out of registers
  for (int r = 0; r < R; ++r) v[r] = acc[r];
  const float* z = j.e.z ? j.e.z + out_at : nullptr;
  if (z && j.e.residual_first)
    for (int r = 0; r < R; ++r) v[r] = _mm256_add_ps(v[r], _mm256_loadu_ps(z + r * kBlock));
  apply_activation(j.e.act, v, R);
  if (z && !j.e.residual_first)
    for (int r = 0; r < R; ++r) v[r] = _mm256_add_ps(v[r], _mm256_loadu_ps(z + r * kBlock));
  if (j.has_tail && cb + 1 == s.mb)
    for (int r = 0; r < R; ++r) v[r] = _mm256_and_ps(v[r], j.tail_keep);
  float* y = j.y + out_at;
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * kBlock, v[r]);
}

using TileFn = void (*)(const Job&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                        int64_t);
constexpr TileFn kTiles[kMaxR] = {&tile<1>, &tile<2>, &tile<3>, &tile<4>,
                                  &tile<5>, &tile<6>, &tile<7>, &tile<8>};

void row(const Job& j, int64_t n, int64_t cb, int64_t oh) {
  const BlockedConvShape& s = j.s;
  const auto [kh0, kh1] = valid_taps(oh * s.sh - s.pt, s.dh, s.kh, s.h);
  const int64_t lo = (s.pl + s.sw - 1) / s.sw;
  const int64_t span = s.w - 1 + s.pl - (s.kw - 1) * s.dw;
  const int64_t hi = span < 0 ? 0 : span / s.sw + 1;
  for (int64_t ow = 0; ow < s.ow;) {
    if (ow < lo || ow >= hi) {
      const auto [kw0, kw1] = valid_taps(ow * s.sw - s.pl, s.dw, s.kw, s.w);
      tile<1>(j, n, cb, oh, ow, kh0, kh1, kw0, kw1);
      ++ow;
      continue;
    }
    const int64_t r = std::min<int64_t>(kMaxR, std::min(s.ow, hi) - ow);
    kTiles[r - 1](j, n, cb, oh, ow, kh0, kh1, 0, s.kw);
    ow += r;
  }
}

}  // namespace

void blocked_conv_depthwise_avx2(const BlockedConvShape& s, const float* x, const float* w,
                                 const BlockedEpilogue& e, float* y, ThreadPool* pool) {
  const int64_t rem = s.channels % kBlock;
  const Job j{s, x, w, y, e,
              _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)),
                                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))),
              rem != 0};
  // Rows are independent; a task is one row of one block.
  const int64_t rows = s.n * s.mb * s.oh;
  parallel_range(pool, rows, rows * s.ow * s.kh * s.kw * kBlock * 2, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) row(j, r / (s.mb * s.oh), (r / s.oh) % s.mb, r % s.oh);
  });
}

}  // namespace kiln::nchwc
