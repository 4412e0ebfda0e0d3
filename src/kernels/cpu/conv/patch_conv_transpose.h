// ConvTranspose whose kernel equals its stride, without dilation, to few output channels (the
// last 2x2/2 upsampling of a DB text detector or a segmentation head, to one map): every input
// pixel owns an s x s patch of the output, so each output row is one kernel row's taps of one
// input row, a sum over the input channels with no overlap. Computed directly, row by row,
// instead of a GEMM of a few rows into columns and col2im, which wrote and read back the whole
// output's worth of columns. With many outputs a channel, the GEMM's register tiles reuse each
// input load over 16 outputs where this kernel reloads it per output channel: 64 -> 64 at
// 160 x 160 ran 1.5x slower this way.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/epilogue.h"
#include "kernels/ref/conv_util.h"

namespace kiln {

class ThreadPool;

// Whether patch_conv_transpose_f32 runs this geometry: 1-D or 2-D, kernel = stride on each axis
// (at most 4), dilation 1, fewer than kPatchMaxOutputs output channels a group.
inline constexpr int64_t kPatchMaxOutputs = 4;
bool patch_conv_transpose_fits(const conv_util::Geo3& g, int64_t outputs_per_group);

// y [n, m, out...] = bias[o] + the tap of w [c, m / group, k...] that lands on each output,
// times x [n, c, in...], summed over the group's input channels; then the tail e (null: none;
// its residual read at y's offsets). bias and pool may be null.
void patch_conv_transpose_f32(const float* x, const float* w, const float* bias, float* y, int64_t n,
                              int64_t c, int64_t m, int64_t group, const conv_util::Geo3& g,
                              const gemm::Epilogue* e, ThreadPool* pool);

}  // namespace kiln
