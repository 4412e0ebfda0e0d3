// Calibration ranges (calibration.h). The clipping methods work on the |x| histogram: a
// threshold T at a bin edge; the tensor's range is then [max(min, -T), min(max, T)]. The 8-bit
// grid that T is judged for has 255 steps over [-T, T] when the tensor has negative values, over
// [0, T] when it has none (a Relu's output).
#include "quantize/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::quantize {

void TensorStats::add_range(const float* x, int64_t n) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);  // NaN skipped: the comparison is false
    hi = std::max(hi, x[i]);
  }
  if (lo > hi) return;
  if (!any_) min_ = lo, max_ = hi, any_ = true;
  min_ = std::min(min_, lo), max_ = std::max(max_, hi);
  if (!std::isfinite(min_)) min_ = std::numeric_limits<float>::lowest();
  if (!std::isfinite(max_)) max_ = std::numeric_limits<float>::max();
}

void TensorStats::add_histogram(const float* x, int64_t n) {
  if (!seen()) return;
  hist_.resize(kHistogramBins, 0.0);
  const double top = std::max(std::fabs(static_cast<double>(min_)), std::fabs(static_cast<double>(max_)));
  if (top == 0) {
    hist_[0] += static_cast<double>(n);
    return;
  }
  const double per_bin = kHistogramBins / top;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    if (!(a <= top)) continue;  // NaN
    hist_[std::min<size_t>(kHistogramBins - 1, static_cast<size_t>(a * per_bin))] += 1.0;
  }
}

namespace {

// KL(P || Q) of histogram p[0, i) (outliers folded into its last bin) against its `levels`-level
// quantization, each level's mass spread evenly over the bins that had any (TensorRT's rule).
double kl_divergence(const std::vector<double>& hist, size_t i, size_t levels) {
  std::vector<double> p(hist.begin(), hist.begin() + static_cast<std::ptrdiff_t>(i));
  for (size_t j = i; j < hist.size(); ++j) p[i - 1] += hist[j];
  std::vector<double> q(i, 0.0);
  for (size_t l = 0; l < levels; ++l) {
    const size_t b0 = l * i / levels, b1 = (l + 1) * i / levels;
    double mass = 0;
    size_t used = 0;
    for (size_t j = b0; j < b1; ++j) mass += hist[j], used += hist[j] > 0;
    for (size_t j = b0; j < b1; ++j)
      if (hist[j] > 0) q[j] = mass / static_cast<double>(used);
  }
  double sp = 0, sq = 0;
  for (size_t j = 0; j < i; ++j) sp += p[j], sq += q[j];
  if (sp <= 0 || sq <= 0) return std::numeric_limits<double>::infinity();
  double kl = 0;
  for (size_t j = 0; j < i; ++j) {
    if (p[j] <= 0) continue;
    const double pj = p[j] / sp, qj = q[j] > 0 ? q[j] / sq : 1e-12;
    kl += pj * std::log(pj / qj);
  }
  return kl;
}

// Mean squared error of clipping at bin edge i with `steps` steps across the clipped range.
double clip_error(const std::vector<double>& hist, size_t i, double bin, double steps) {
  const double t = static_cast<double>(i) * bin, step = t / steps;
  double err = 0;
  for (size_t j = 0; j < hist.size(); ++j) {
    const double centre = (static_cast<double>(j) + 0.5) * bin;
    err += hist[j] * (j < i ? step * step / 12 : (centre - t) * (centre - t));
  }
  return err;
}

}  // namespace

float TensorStats::threshold(const QuantizeOptions& o) const {
  const double top = std::max(std::fabs(static_cast<double>(min_)), std::fabs(static_cast<double>(max_)));
  if (hist_.empty() || top == 0 || o.method == CalibrationMethod::kMinMax || o.method == CalibrationMethod::kAuto)
    return static_cast<float>(top);
  const double bin = top / kHistogramBins;
  double total = 0;
  for (double h : hist_) total += h;
  if (total <= 0) return static_cast<float>(top);
  const bool two_sided = min_ < 0;
  size_t best = hist_.size();
  if (o.method == CalibrationMethod::kPercentile) {
    const double want = total * std::clamp(o.percentile, 0.0, 100.0) / 100.0;
    double seen = 0;
    for (size_t j = 0; j < hist_.size(); ++j)
      if ((seen += hist_[j]) >= want) {
        best = j + 1;
        break;
      }
  } else {
    const size_t levels = two_sided ? 128 : 256;  // 8-bit codes on |x|
    double best_score = std::numeric_limits<double>::infinity();
    for (size_t i = levels; i <= hist_.size(); ++i) {
      const double score = o.method == CalibrationMethod::kEntropy ? kl_divergence(hist_, i, levels)
                                                                   : clip_error(hist_, i, bin, two_sided ? 127.5 : 255.0);
      if (score < best_score) best_score = score, best = i;
    }
  }
  return static_cast<float>(static_cast<double>(best) * bin);
}

void TensorStats::range(const QuantizeOptions& options, float* lo, float* hi) const {
  if (!seen()) {
    *lo = *hi = 0;
    return;
  }
  const float t = threshold(options);
  *lo = std::min(0.0f, std::max(min_, -t));
  *hi = std::max(0.0f, std::min(max_, t));
}

QuantParams activation_params(float lo, float hi, bool is_signed) {
  lo = std::min(lo, 0.0f), hi = std::max(hi, 0.0f);
  QuantParams p;
  if (is_signed) {
    const float a = std::max(-lo, hi);
    p.scale = a > 0 ? a / 127.0f : 1.0f;
    return p;
  }
  p.scale = hi > lo ? (hi - lo) / 255.0f : 1.0f;
  p.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / p.scale), 0.0f, 255.0f));
  return p;
}

}  // namespace kiln::quantize
