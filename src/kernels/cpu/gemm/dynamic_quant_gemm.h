// A float A times a constant int8 B whose rows of A are quantized at each run, one u8 scale and
// zero point a row (DynamicQuantizeLinear's rule per row: docs/ops.md, DynamicQuantMatMul), the
// product dequantized as the GEMM leaves it. DynamicQuantMatMul and MultiHeadAttention's int8
// Q/K/V projection run it. Rows of 8 bits (codes 0-255) or 7 (0-127, `row_bits` 7): a CPU without
// VNNI multiplies the 7-bit ones on vpmaddubsw (gemm_u8s8's AVX2 tile, exact with any int8 B),
// the 8-bit ones on gemm_s16's 16-bit products.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/gemm/packed_int8.h"
#include "kiln/status.h"

namespace kiln::gemm {

// The ops' row_bits attribute (absent: 8): 7 or 8, else an error naming it.
inline Result<int> checked_row_bits(int64_t row_bits) {
  if (row_bits != 7 && row_bits != 8)
    return Status::invalid_argument("row_bits must be 7 or 8, got " + std::to_string(row_bits));
  return static_cast<int>(row_bits);
}

class DynamicQuantGemm {
 public:
  // b int8 [k x n], row-major; k <= kMaxS16Depth; row_bits 8 or 7.
  static DynamicQuantGemm pack(const int8_t* b, int64_t k, int64_t n, int row_bits = 8);
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
  int row_top_ = 255;  // the rows' largest code
};

}  // namespace kiln::gemm
