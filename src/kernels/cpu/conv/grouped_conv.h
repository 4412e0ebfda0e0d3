// Grouped 1-D / 2-D convolution with few input channels a group (depthwise: one; ResNeXt's and
// RegNet's 4-32), or with one group and few outputs (a 1-channel head), in the plain NCHW layout,
// computed directly: any kernel size, stride, dilation and padding, any channel multiplier. What
// Conv runs for the grouped convs the blocked layout does not take (ConvNeXt's 7x7 depthwise
// between channels-last LayerNorms, every grouped conv that is not depthwise); im2col and a GEMM
// of a few rows per group ran those at 2-12 GFLOP/s.
#pragma once

#include <cstdint>

#include "kernels/ref/conv_util.h"

namespace kiln {

class ThreadPool;

// The most input channels a group grouped_conv_f32 takes: past it the taps of one output (32 x
// 3 x 3 = 288) are many enough for im2col and the GEMM to pay.
inline constexpr int64_t kDirectConvMaxGroupChannels = 32;
// A group-1 conv with fewer output channels runs directly whatever its input channels: the GEMM
// of im2col's columns would fill at most this many of its 6-row tiles' rows, and im2col writes
// the taps of every input channel for every output (a segmentation head's 16 -> 1 3x3 at 640 x 640
// ran 53 ms that way, 2.2 GFLOP/s).
inline constexpr int64_t kDirectConvMinGemmOutputs = 4;

// Whether grouped_conv_f32 runs this conv: group > 1 with at most kDirectConvMaxGroupChannels
// input channels a group, or group 1 with fewer than kDirectConvMinGemmOutputs outputs; at most
// two spatial dims.
bool grouped_conv_direct_fits(int64_t group, int64_t channels_per_group, int64_t outputs, const conv_util::Geo3& g);

// y[n, o, ...] = bias[o] + sum over group(o)'s input channels and the taps of w[o, c, ...] *
// x[n, c, ...], for x [n, c, in...], w [m, c / group, k...], y [n, m, out...]; bias may be null,
// `pool` too.
void grouped_conv_f32(const float* x, const float* w, const float* bias, float* y, int64_t n, int64_t c, int64_t m,
                      int64_t group, const conv_util::Geo3& g, ThreadPool* pool);

}  // namespace kiln
