// Depthwise 1-D / 2-D convolution (one input channel a group, any channel multiplier) in the
// plain NCHW layout, computed directly: any kernel size, stride, dilation and padding. What Conv
// runs for a depthwise conv the blocked layout did not take (ConvNeXt's 7x7 between
// channels-last LayerNorms, a lone one between plain ops); the GEMM of one row per group that
// im2col leads to ran it at 2 GFLOP/s.
#pragma once

#include <cstdint>

#include "kernels/ref/conv_util.h"

namespace kiln {

class ThreadPool;

// Whether depthwise_conv_f32 runs this conv: one input channel a group, at most two spatial dims.
bool depthwise_conv_fits(int64_t group, int64_t channels_per_group, const conv_util::Geo3& g);

// y[n, m, ...] = bias[m] + sum over the taps of w[m, 0, ...] * x[n, m / (m / group), ...], for
// x [n, group, in...], w [m, 1, k...], y [n, m, out...]; bias may be null, `pool` too.
void depthwise_conv_f32(const float* x, const float* w, const float* bias, float* y, int64_t n, int64_t group,
                        int64_t m, const conv_util::Geo3& g, ThreadPool* pool);

}  // namespace kiln
