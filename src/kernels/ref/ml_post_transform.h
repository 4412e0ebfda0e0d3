// The score transforms of the ai.onnx.ml classifiers and regressors (their post_transform
// attribute: NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT), on one row of scores in double.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/status.h"

namespace kiln {

enum class PostTransform : uint8_t { kNone, kLogistic, kSoftmax, kSoftmaxZero, kProbit };

Result<PostTransform> parse_post_transform(const std::string& name);

double logistic(double x);
// The inverse of the standard normal CDF.
double probit(double p);

// Applies `t` to the n scores of one row in place. SOFTMAX_ZERO leaves zero scores at zero.
void apply_post_transform(PostTransform t, double* row, int64_t n);

}  // namespace kiln
