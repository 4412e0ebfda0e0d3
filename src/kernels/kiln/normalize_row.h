// One row of layer normalization, as the ai.kiln norm kernels compute it: mean and variance in
// double, y = (x - mean) / sqrt(var + eps) * gamma (+ beta), rounded to float once.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln {

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
