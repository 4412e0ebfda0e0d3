// A 64-byte aligned float buffer that only grows: kernels' scratch (packed panels, transformed
// tiles, padded inputs), kept per kernel or per thread so that steady-state runs reuse it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace kiln {

class AlignedBuffer {
 public:
  // At least `floats` floats (one when 0); the contents are kept only when it does not grow.
  float* get(int64_t floats) {
    if (floats > size_ || !data_) {
      const int64_t bytes = (std::max<int64_t>(floats, 1) * int64_t{sizeof(float)} + 63) / 64 * 64;
      data_.reset(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(bytes))));
      size_ = floats;
    }
    return data_.get();
  }
  const float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  int64_t size_ = 0;
};

}  // namespace kiln
