// Constants of the nchwc-layout pass in the blocked layouts ai.kiln.BlockedConv reads
// (docs/ops.md): weights reordered once at optimize time, channels zero-padded to blocks of 8.
#pragma once

#include "kiln/tensor.h"

namespace kiln::passes::nchwc {

inline constexpr int64_t kBlock = 8;

inline int64_t blocks_of(int64_t channels) { return (channels + kBlock - 1) / kBlock; }

// Float32 W [M, C, KH, KW] (group 1) as [M/8, C/8, KH, KW, 8 (input lane), 8 (output lane)].
Tensor blocked_dense_weights(const Tensor& w);

// Float32 W [C, 1, KH, KW] (group C) as [C/8, KH, KW, 8].
Tensor blocked_depthwise_weights(const Tensor& w);

// Float32 B [M] as [blocks * 8], the padding zero.
Tensor padded_bias(const Tensor& b, int64_t blocks);

}  // namespace kiln::passes::nchwc
