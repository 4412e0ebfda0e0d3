#include "kernels/ref/ml_post_transform.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln {

Result<PostTransform> parse_post_transform(const std::string& name) {
  if (name == "NONE") return PostTransform::kNone;
  if (name == "LOGISTIC") return PostTransform::kLogistic;
  if (name == "SOFTMAX") return PostTransform::kSoftmax;
  if (name == "SOFTMAX_ZERO") return PostTransform::kSoftmaxZero;
  if (name == "PROBIT") return PostTransform::kProbit;
  return Status::error("post_transform '" + name + "' is not one of NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT");
}

double logistic(double x) {
  // exp of a non-positive number only: no overflow for large |x|.
  const double e = std::exp(-std::fabs(x));
  return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

// Newton steps on erfc from 0; each step is clamped so that the tails converge too.
double probit(double p) {
  if (!(p > 0)) return p == 0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (!(p < 1)) return p == 1 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  double x = 0;
  for (int it = 0; it < 100; ++it) {
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * 3.14159265358979323846);
    const double step = (cdf - p) / std::max(pdf, 1e-300);
    x -= std::max(-1.0, std::min(1.0, step));
    if (std::fabs(step) < 1e-15) break;
  }
  return x;
}

void apply_post_transform(PostTransform t, double* row, int64_t n) {
  switch (t) {
    case PostTransform::kNone: return;
    case PostTransform::kLogistic:
      for (int64_t i = 0; i < n; ++i) row[i] = logistic(row[i]);
      return;
    case PostTransform::kProbit:
      for (int64_t i = 0; i < n; ++i) row[i] = probit(row[i]);
      return;
    case PostTransform::kSoftmax:
    case PostTransform::kSoftmaxZero: {
      const bool zero = t == PostTransform::kSoftmaxZero;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < n; ++i)
        if (!(row[i] <= mx)) mx = row[i];  // a NaN score makes the whole row NaN
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        row[i] = zero && row[i] == 0 ? 0.0 : std::exp(row[i] - mx);
        sum += row[i];
      }
      for (int64_t i = 0; i < n; ++i) row[i] = sum != 0 ? row[i] / sum : 0.0;
      return;
    }
  }
}

}  // namespace kiln
