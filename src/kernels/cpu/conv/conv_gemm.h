// Float convolution as GEMMs on the plain layout, for the convs the blocked layout does not take
// (3-D video convs, 1-D convs, every conv at -O0) when im2col of a whole image would be large:
//  - a conv that only moves whole planes (a kernel of 1 over the inner dims: R(2+1)D's temporal
//    (3,1,1) convs, a (k,1) 2-D conv) needs no im2col: each tap is a GEMM reading X's planes in
//    place (conv_f32_plane_shift);
//  - any other conv runs im2col a chunk of output rows at a time, in a buffer of the thread that
//    takes the chunk, so that it stays in cache (conv_f32_by_row_chunks).
// Both add the bias while the output is in cache and share out over the pool.
#pragma once

#include <cstdint>

#include "kernels/ref/conv_util.h"

namespace kiln {

class ThreadPool;

// x [n, c, in...], w [m, c / group, k...], y [n, m, out...] on the 3-dim geometry g.
struct ConvGemmShape {
  int64_t n = 0, c = 0, m = 0, group = 1;
  conv_util::Geo3 g;
};

// Whether conv_f32_plane_shift takes the conv: kernel 1, stride 1 and no padding on every dim
// after one (the shift axis), and every dim before it of size 1.
bool plane_shift_fits(const ConvGemmShape& s);
// Whether conv_f32_by_row_chunks pays: im2col of one image and group past a few MB.
bool row_chunks_pay(const ConvGemmShape& s);

// y = conv(x, w) + bias (bias [m] or null); `pool` may be null.
void conv_f32_plane_shift(const ConvGemmShape& s, const float* x, const float* w, const float* bias,
                          float* y, ThreadPool* pool);
void conv_f32_by_row_chunks(const ConvGemmShape& s, const float* x, const float* w, const float* bias,
                            float* y, ThreadPool* pool);

}  // namespace kiln
