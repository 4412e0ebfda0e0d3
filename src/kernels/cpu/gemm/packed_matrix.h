// A GEMM's B operand packed once, ahead of time, into the micro-kernel's panel layout for the
// whole K x N: what a kernel builds from a constant weight in Kernel::prepare so that runs only
// pack A (the activations) and never copy the weight again.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "kernels/cpu/gemm/microkernel.h"

namespace kiln::gemm {

class PackedMatrix {
 public:
  PackedMatrix() = default;

  // op(B), K x N (B stored N x K when trans, row-major with leading dimension ldb), packed for
  // `kernel` (null: best_f32_kernel()). The layout follows the kernel's nr and kc_packed, so the
  // GEMM that reads it runs that kernel (GemmF32Args::packed_b). empty() if out of memory.
  static PackedMatrix pack_b(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n,
                             const MicroKernel* kernel = nullptr);

  bool empty() const { return data_ == nullptr; }
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  // Depth of the K slices (the last may be shallower): one slice when K is at most the kernel's
  // kc_packed, so the GEMM makes a single pass over C; else the fewest slices of at most that.
  int64_t kc() const { return kc_; }
  const MicroKernel& kernel() const { return kernel_; }
  int64_t bytes() const { return static_cast<int64_t>(sizeof(float)) * k_ * n_padded_; }

  // The panel of slice p0 (a multiple of kc()) and columns [j0, j0 + nr) (j0 a multiple of nr):
  // depth x nr floats, row p contiguous, columns past n zero.
  const float* panel(int64_t p0, int64_t j0) const {
    const int64_t depth = k_ - p0 < kc_ ? k_ - p0 : kc_;
    return data_.get() + p0 * n_padded_ + j0 * depth;
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  MicroKernel kernel_{};
  int64_t k_ = 0, n_ = 0, n_padded_ = 0, kc_ = 0;
};

}  // namespace kiln::gemm
