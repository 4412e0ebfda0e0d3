// Reordering of convolution weights into the blocked layouts of ai.kiln.BlockedConv.
#include "passes/layout/nchwc_weights.h"

#include <algorithm>

namespace kiln::passes::nchwc {

Tensor blocked_dense_weights(const Tensor& w) {
  const int64_t m = w.dim(0), c = w.dim(1), kh = w.dim(2), kw = w.dim(3);
  const int64_t mb = blocks_of(m), cb = blocks_of(c), taps = kh * kw;
  Tensor out = Tensor::make(DType::kFloat32, {mb, cb, kh, kw, kBlock, kBlock}).value();
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (int64_t mi = 0; mi < m; ++mi)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t t = 0; t < taps; ++t)
        dst[(((mi / kBlock) * cb + ci / kBlock) * taps + t) * kBlock * kBlock +
            (ci % kBlock) * kBlock + mi % kBlock] = src[(mi * c + ci) * taps + t];
  return out;
}

Tensor blocked_depthwise_weights(const Tensor& w) {
  const int64_t c = w.dim(0), kh = w.dim(2), kw = w.dim(3), taps = kh * kw;
  Tensor out = Tensor::make(DType::kFloat32, {blocks_of(c), kh, kw, kBlock}).value();
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t t = 0; t < taps; ++t)
      dst[((ci / kBlock) * taps + t) * kBlock + ci % kBlock] = src[ci * taps + t];
  return out;
}

Tensor padded_bias(const Tensor& b, int64_t blocks) {
  Tensor out = Tensor::make(DType::kFloat32, {blocks * kBlock}).value();
  std::copy(b.data<float>(), b.data<float>() + b.numel(), out.data<float>());
  return out;
}

}  // namespace kiln::passes::nchwc
