// What the dense BlockedConv kernels prepare before their register tiles run (plain C++, no ISA
// flags):
//  - the input as the tiles want it: every tap of every output pixel inside the tensor (no border
//    cases), and a strided 1x1 conv (resnet's downsample) turned into a GEMM over contiguous
//    pixels. Either costs one copy of the input, small next to the Cb * KH * KW FMAs per output
//    element, and makes every tile a full one;
//  - the dense weights in the AVX-512 kernel's layout (packed once, at compile time).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/aligned_buffer.h"
#include "kernels/kiln/nchwc/blocked_conv.h"

namespace kiln::nchwc {

struct DenseInput {
  BlockedConvShape s;  // the geometry over `x`: pads 0
  const float* x;      // the caller's X, or `scratch` holding the copy
};

// X [N, planes, H, W, pixel] (planes = Cb, pixel = 8; or a plain input: planes = C, pixel = 1) as
// the tiles read it:
//  - a 1x1 conv with stride > 1 and no pads: the pixels it reads, gathered contiguously
//    (s.h x s.w = OH x OW, stride 1: a pointwise conv);
//  - a conv whose taps reach past the input: copied into a zero border just wide enough;
//  - anything else: X itself.
// `scratch` must outlive the use of the result; the copy runs on `pool`.
DenseInput dense_input(const BlockedConvShape& s, const float* x, AlignedBuffer& scratch,
                       ThreadPool* pool);

// The estimated cost of a row of `len` output pixels over `units` output units (blocks or block
// pairs) in register tiles of up to `per_tile` units: each group of units cuts the row into the
// fewest tiles of at most max_r[units in the group] pixels, as even as can be, and each tile costs
// tile_cost(units, pixels). The dense kernels pick their tile height by it.
template <class TileCost>
double row_cost(int64_t units, int64_t len, int per_tile, const int* max_r, TileCost tile_cost) {
  double cost = 0;
  for (int64_t left = units; left > 0; left -= per_tile) {
    const int u = static_cast<int>(left < per_tile ? left : per_tile);
    const int64_t count = (len + max_r[u] - 1) / max_r[u];
    for (int64_t i = 0; i < count; ++i)
      cost += tile_cost(u, len / count + (i < len % count ? 1 : 0));
  }
  return cost;
}

// Units of `extent` output rows or pixels whose tasks share out evenly over `threads`: from
// `units` up to threads - 1 more (and at most `most`), the first count of units of ceil(extent /
// u) each for which tasks(count) divides by threads; with equal_first, units of one length are
// looked for first. {units, len}, or {units, len} as given when none is near: mobilenet's 24 ->
// 144 at 56 had run as 9 tasks on 2 threads (5 + 4), resnet's 3x3s2 128 at 28 rows as units of
// 10, 10 and 8 rows.
struct Units {
  int64_t units, len;
};
template <class Tasks>
Units even_units(int64_t extent, Units current, int64_t most, int64_t threads, bool equal_first,
                 Tasks tasks) {
  for (const bool equal : {true, false}) {
    if (equal && !equal_first) continue;
    for (int64_t u = current.units; u < current.units + threads && u <= most; ++u) {
      const int64_t len = (extent + u - 1) / u, count = (extent + len - 1) / len;
      if ((!equal || extent % len == 0) && tasks(count) % threads == 0) return {count, len};
    }
  }
  return current;
}

// Dense weights [mb, cb, kh, kw, 8 (input lane), 8 (output lane)] as blocked_conv_dense_avx512
// reads them: output blocks in pairs (16 channels, one zmm),
//   [ceil(mb / 2), cb, kh, kw, 8 (input lane), 16 (lanes of blocks 2p, 2p + 1)],
// the second block of an odd last pair zero.
int64_t paired_weights_floats(int64_t mb, int64_t cb, int64_t taps);
void pair_dense_weights(const float* w, int64_t mb, int64_t cb, int64_t taps, float* out);

}  // namespace kiln::nchwc
