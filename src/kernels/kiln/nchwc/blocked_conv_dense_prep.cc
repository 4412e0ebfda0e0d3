// The padded or gathered input copies and the paired weights of the dense BlockedConv kernels
// (blocked_conv_dense_prep.h).
#include "kernels/kiln/nchwc/blocked_conv_dense_prep.h"

#include <algorithm>
#include <cstring>

#include "kernels/kiln/nchwc/blocked_layout.h"

namespace kiln::nchwc {

DenseInput dense_input(const BlockedConvShape& s, const float* x, AlignedBuffer& scratch,
                       ThreadPool* pool) {
  const bool plain = s.plain_channels > 0;
  const int64_t planes = s.n * (plain ? s.plain_channels : s.cb);
  const int64_t pixel = plain ? 1 : kBlock;
  const bool past_edge = s.pt > 0 || s.pl > 0 || (s.oh - 1) * s.sh + (s.kh - 1) * s.dh >= s.h ||
                         (s.ow - 1) * s.sw + (s.kw - 1) * s.dw >= s.w;
  const bool strided_1x1 = s.kh == 1 && s.kw == 1 && (s.sh > 1 || s.sw > 1) && !past_edge;
  if (s.oh == 0 || s.ow == 0 || (!past_edge && !strided_1x1)) return {s, x};

  DenseInput in{s, nullptr};
  if (strided_1x1) {
    in.s.h = s.oh, in.s.w = s.ow, in.s.sh = in.s.sw = 1;
  } else {
    in.s.h = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1;
    in.s.w = (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1;
    in.s.pt = in.s.pl = 0;
  }
  const int64_t src_plane = s.h * s.w * pixel, dst_plane = in.s.h * in.s.w * pixel;
  const int64_t dst_row = in.s.w * pixel;
  float* dst = scratch.get(planes * dst_plane);
  in.x = dst;
  auto copy = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* src = x + p * src_plane;
      float* out = dst + p * dst_plane;
      for (int64_t r = 0; r < in.s.h; ++r, out += dst_row) {
        if (strided_1x1) {
          const float* row = src + r * s.sh * s.w * pixel;
          if (plain)
            for (int64_t c = 0; c < in.s.w; ++c) out[c] = row[c * s.sw];
          else  // a fixed size: one 32-byte move per pixel, not a memcpy call
            for (int64_t c = 0; c < in.s.w; ++c)
              std::memcpy(out + c * kBlock, row + c * s.sw * kBlock, kBlock * sizeof(float));
          continue;
        }
        const int64_t ih = r - s.pt;
        if (ih < 0 || ih >= s.h) {
          std::memset(out, 0, dst_row * sizeof(float));
          continue;
        }
        // Columns [0, c0) and [c1, w) are padding; [c0, c1) come from input columns c - pl.
        const int64_t c0 = std::min(s.pl, in.s.w);
        const int64_t c1 = std::clamp(s.pl + s.w, c0, in.s.w);
        std::memset(out, 0, c0 * pixel * sizeof(float));
        if (c1 > c0)
          std::memcpy(out + c0 * pixel, src + (ih * s.w + c0 - s.pl) * pixel,
                      (c1 - c0) * pixel * sizeof(float));
        std::memset(out + c1 * pixel, 0, (in.s.w - c1) * pixel * sizeof(float));
      }
    }
  };
  parallel_range(pool, planes, planes * dst_plane, copy);
  return in;
}

int64_t paired_weights_floats(int64_t mb, int64_t cb, int64_t taps) {
  return (mb + 1) / 2 * cb * taps * kBlock * 2 * kBlock;
}

void pair_dense_weights(const float* w, int64_t mb, int64_t cb, int64_t taps, float* out) {
  const int64_t tap = kBlock * kBlock;  // one tap of one output block in w
  for (int64_t p = 0; p < (mb + 1) / 2; ++p)
    for (int64_t c = 0; c < cb; ++c)
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t ci = 0; ci < kBlock; ++ci, out += 2 * kBlock)
          for (int64_t half = 0; half < 2; ++half) {
            const int64_t m = 2 * p + half;
            float* o = out + half * kBlock;
            if (m >= mb) {
              std::fill(o, o + kBlock, 0.0f);
              continue;
            }
            const float* src = w + ((m * cb + c) * taps + t) * tap + ci * kBlock;
            std::copy(src, src + kBlock, o);
          }
}

}  // namespace kiln::nchwc
