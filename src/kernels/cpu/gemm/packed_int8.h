// An 8-bit B [k x n] minus its zero points, packed once for the integer GEMM this CPU runs best
// (gemm_u8s8 for k <= kMaxU8S8Depth on VNNI CPUs, or on AVX2 for 7-bit B or A; else gemm_s16),
// its products with 8-bit rows of A, and the rows' dequantization: what MatMulInteger,
// MatMulIntegerToFloat and DynamicQuantMatMul share.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm/gemm_s16.h"
#include "kernels/cpu/gemm/gemm_u8s8.h"

namespace kiln {
class ThreadPool;
}

namespace kiln::gemm {

class PackedInt8 {
 public:
  // b row-major with leading dimension ldb, int8 when b_signed else uint8; zb one zero point or
  // one per column; k <= kMaxS16Depth. a_seven_bit: every A it will multiply holds u8 values
  // below 128 (DynamicQuantMatMul's 7-bit rows), which AVX2's u8s8 tile takes with any B.
  static PackedInt8 pack(const void* b, bool b_signed, int64_t ldb, int64_t k, int64_t n,
                         const std::vector<int32_t>& zb, bool a_seven_bit = false);
  bool empty() const { return u8s8_.empty() && s16_.empty(); }
  // B as gemm_u8s8 packed it, or null where this CPU runs gemm_s16.
  const PackedU8S8* u8s8() const { return u8s8_.empty() ? nullptr : &u8s8_; }
  int64_t k() const { return u8s8_.empty() ? s16_.k() : u8s8_.k(); }
  int64_t n() const { return u8s8_.empty() ? s16_.n() : u8s8_.n(); }
  // C[rows x n] (leading dimension n) = (A - za) B: A [rows x k] 8-bit with leading dimension
  // lda, za one zero point or one per row. `pool` may be null.
  void multiply(int64_t rows, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za, int32_t* c,
                ThreadPool* pool) const;
  // The same dequantized to floats y [rows x n]: in gemm_u8s8's tiles as they finish, or through
  // an int32 product and dequantize_rows on gemm_s16.
  void multiply(int64_t rows, const void* a, bool a_signed, int64_t lda, const std::vector<int32_t>& za,
                const Dequantize& dq, float* y, ThreadPool* pool) const;

 private:
  PackedU8S8 u8s8_;
  PackedS16 s16_;
};

// y = dq(c) over rows of n columns (Dequantize, gemm_u8s8.h).
void dequantize_rows(const int32_t* c, int64_t rows, int64_t n, const Dequantize& dq, float* y, ThreadPool* pool);

}  // namespace kiln::gemm
