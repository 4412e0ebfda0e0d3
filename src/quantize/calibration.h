// What calibration learns of each tensor the quantizer puts in 8 bits: its range over the
// samples, and (for the methods that clip) a histogram of |x|, from which each
// CalibrationMethod picks the range the tensor's scale and zero point then cover.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/quantize.h"

namespace kiln::quantize {

// Bins of the |x| histogram over [0, the largest |x| seen] (TensorRT's and ONNX Runtime's size).
inline constexpr int kHistogramBins = 2048;

class TensorStats {
 public:
  // First pass over the samples: the range.
  void add_range(const float* x, int64_t n);
  // Second pass, once every range is known: the histogram of |x| (NaN skipped).
  void add_histogram(const float* x, int64_t n);
  float min() const { return min_; }
  float max() const { return max_; }
  bool seen() const { return min_ <= max_; }
  // The range [lo, hi] the method keeps, lo <= 0 <= hi.
  void range(const QuantizeOptions& options, float* lo, float* hi) const;

 private:
  float threshold(const QuantizeOptions& options) const;  // on |x|
  float min_ = 0, max_ = -1;  // empty until a value is seen
  bool any_ = false;
  std::vector<double> hist_;
};

// Scale and zero point of an activation covering [lo, hi]: uint8 over the whole range
// (asymmetric), or int8 symmetric around 0 with zero point 0.
struct QuantParams {
  float scale = 1;
  int32_t zero_point = 0;
};
QuantParams activation_params(float lo, float hi, bool is_signed);

}  // namespace kiln::quantize
