// ConvTranspose whose kernel equals its stride, without dilation (the 2x2/2 upsamplings of a DB
// text detector's head and of U-Net decoders): every input pixel owns an s x s patch of the
// output, so each output row is one kernel row's taps of one input row, a sum over the input
// channels with no overlap. Computed directly, row by row, instead of a GEMM into columns and
// col2im, which wrote and read back the whole output's worth of columns. compare.sh against
// ONNX Runtime (Zen 3), GEMM path -> this kernel: 24 -> 1 at 320 x 320 1.085 -> 0.75-0.87,
// 16 -> 16 at 320 0.99 -> 0.77, 24 -> 24 at 160 1.06-1.29 -> 1.0, 32 -> 32 0.88 -> 0.85. With
// more input channels the GEMM's register tiles, which reuse each input load over 16 outputs,
// win: 64 -> 16 0.78 against 1.11, 64 -> 64 1.0 against 1.19.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/epilogue.h"
#include "kernels/ref/conv_util.h"

namespace kiln {

class ThreadPool;

// Whether patch_conv_transpose_f32 runs this conv: 1-D or 2-D, kernel = stride on each axis (at
// most 4), dilation 1; at most kPatchMaxInputs input channels a group, or fewer than
// kPatchFewOutputs output channels (the GEMM then fills a few rows of its 6-row tiles).
inline constexpr int64_t kPatchMaxInputs = 32;
inline constexpr int64_t kPatchFewOutputs = 4;
bool patch_conv_transpose_fits(const conv_util::Geo3& g, int64_t inputs_per_group, int64_t outputs_per_group);

// y [n, m, out...] = bias[o] + the tap of w [c, m / group, k...] that lands on each output,
// times x [n, c, in...], summed over the group's input channels; then the tail e (null: none;
// its residual read at y's offsets). bias and pool may be null.
void patch_conv_transpose_f32(const float* x, const float* w, const float* bias, float* y, int64_t n,
                              int64_t c, int64_t m, int64_t group, const conv_util::Geo3& g,
                              const gemm::Epilogue* e, ThreadPool* pool);

}  // namespace kiln
