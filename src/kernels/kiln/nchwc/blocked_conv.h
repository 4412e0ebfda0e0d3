// The computation behind ai.kiln.BlockedConv, shared by the op's kernel, its AVX2 paths and the
// scalar reference the tests compare them with. Layouts (docs/ops.md):
//   X [N, Cb, H, W, 8], or plain [N, C, H, W] with C <= 8 (group 1; then Cb = 1);
//   Y and Z [N, Mb, OH, OW, 8];
//   W dense (group 1) [Mb, Cb, KH, KW, 8 (input lane), 8 (output lane)];
//   W depthwise (group = C = M) [Cb, KH, KW, 8];  bias [Mb * 8] (padding lanes zero).
#pragma once

#include <cstdint>

#include "kernels/kiln/epilogue_activation.h"

namespace kiln {
class ThreadPool;
}

namespace kiln::nchwc {

struct BlockedConvShape {
  int64_t n = 0, cb = 0, h = 0, w = 0;   // input
  int64_t mb = 0, oh = 0, ow = 0;        // output
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0;
  int64_t channels = 0;                  // real output channels M (<= mb * 8)
  bool depthwise = false;                // then cb == mb
  int64_t plain_channels = 0;            // > 0: X is plain NCHW with this many (<= 8) channels

  // A 1x1 kernel with unit stride and no padding: a GEMM over the pixels.
  bool pointwise() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h && ow == w;
  }
};

// The fused tail: Y = act(R + Z) when residual_first, else act(R) + Z (Z optional), R the
// convolution plus bias; then the lanes past `channels` are set to zero.
struct BlockedEpilogue {
  const float* bias = nullptr;  // [mb * 8] or null
  const float* z = nullptr;     // Y's shape or null
  kiln_ops::Activation act;
  bool residual_first = false;
};

// Plain loops over every output element, accumulating in double: the oracle.
void blocked_conv_reference(const BlockedConvShape& s, const float* x, const float* w,
                            const BlockedEpilogue& e, float* y);

// How the dense kernels split the work; zero fields are chosen from the shape (the benchmark and
// the tests force them).
struct DenseTuning {
  int pairs = 0;             // per tile: output block pairs (AVX-512, 1-4) or blocks (AVX2, 1-3)
  int64_t chunk_bytes = 0;   // weights of one tile's chunk of input blocks
  int64_t unit_bytes = 0;    // input of one unit of output rows or pixels (kept in L2)
};

// The AVX2/FMA direct convolution (group 1), register tiles of pixels x output blocks; reads a
// blocked or, with plain_channels, a plain X.
void blocked_conv_dense_avx2(const BlockedConvShape& s, const float* x, const float* w,
                             const BlockedEpilogue& e, float* y, ThreadPool* pool,
                             const DenseTuning& tuning = {});

// The AVX-512 direct convolution (group 1), register tiles of pixels x pairs of output blocks:
// w is paired by pair_dense_weights (blocked_conv_dense_prep.h). Only call it when
// cpu_features().has_avx512().
void blocked_conv_dense_avx512(const BlockedConvShape& s, const float* x, const float* w,
                               const BlockedEpilogue& e, float* y, ThreadPool* pool,
                               const DenseTuning& tuning = {});

// The AVX2/FMA depthwise convolution, a register tile of pixels x one channel block.
void blocked_conv_depthwise_avx2(const BlockedConvShape& s, const float* x, const float* w,
                                 const BlockedEpilogue& e, float* y, ThreadPool* pool);

// The AVX-512 depthwise convolution, a register tile of pixel pairs x one channel block. Only
// call it when cpu_features().has_avx512().
void blocked_conv_depthwise_avx512(const BlockedConvShape& s, const float* x, const float* w,
                                   const BlockedEpilogue& e, float* y, ThreadPool* pool);

}  // namespace kiln::nchwc
