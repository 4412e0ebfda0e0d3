// A float A times a constant int8 B whose rows of A are quantized at each run, one u8 scale and
// zero point a row (DynamicQuantizeLinear's rule per row: docs/ops.md, DynamicQuantMatMul), the
// product dequantized as the GEMM leaves it. DynamicQuantMatMul and MultiHeadAttention's int8
// Q/K/V projection run it.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/packed_int8.h"

namespace kiln::gemm {

class DynamicQuantGemm {
 public:
  // b int8 [k x n], row-major; k <= kMaxS16Depth.
  static DynamicQuantGemm pack(const int8_t* b, int64_t k, int64_t n);
  bool empty() const { return packed_.empty(); }
  int64_t k() const { return packed_.k(); }
  int64_t n() const { return packed_.n(); }
  // y [rows x n] = float(sum_k (aq[i,k] - za[i]) B[k,j]) * (a_scale[i] * b_scale[j]) + bias[j], then
  // `epilogue` (null: none): b_scale one value or one per column (b_per_column), bias null or n
  // values. Safe to call from several threads at once (its scratch is per thread).
  void run(const float* a, int64_t rows, const float* b_scale, bool b_per_column, const float* bias,
           const Epilogue* epilogue, float* y, ThreadPool* pool) const;

 private:
  PackedInt8 packed_;
};

}  // namespace kiln::gemm
