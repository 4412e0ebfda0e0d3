// What the ai.kiln norm kernels share: a scale or bias broadcast to one row, and one row of layer
// normalization (mean and variance in double, y = (x - mean) / sqrt(var + eps) * gamma (+ beta),
// rounded to float once).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {

// `t` broadcast to one row of the normalised shape, as float32; `what` names it in the error
// ("LayerNorm Scale").
inline Result<std::vector<float>> broadcast_row(const KernelContext& ctx, const Tensor& t,
                                                const Shape& norm_shape, const std::string& what) {
  auto bs = broadcast_shapes(t.shape(), norm_shape);
  if (!bs || *bs != norm_shape)
    return ctx.error(what + " of shape " + shape_str(t.shape()) + " does not broadcast to " +
                     shape_str(norm_shape));
  KILN_ASSIGN_OR_RETURN(Tensor tf, to_float32(t));
  std::vector<float> row;
  for (int64_t o : broadcast_offsets(t.shape(), norm_shape)) row.push_back(tf.data<float>()[o]);
  return row;
}

inline void normalize_row(const float* x, int64_t len, double eps, const float* gamma,
                          const float* beta, float* y) {
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < len; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(len);
  for (int64_t i = 0; i < len; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(len) + eps);
  for (int64_t i = 0; i < len; ++i) {
    double v = (x[i] - mean) * inv * gamma[i];
    if (beta) v += beta[i];
    y[i] = static_cast<float>(v);
  }
}

}  // namespace kiln
