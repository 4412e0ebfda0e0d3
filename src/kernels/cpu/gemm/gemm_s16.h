// The integer GEMM of the 8-bit ops (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul):
// 8-bit values with their zero points subtracted are 16-bit (|v| <= 255), and vpmaddwd
// multiplies 16 such pairs and adds each two products into one of 8 int32 lanes, exactly (two
// products of at most 255 x 255 fit easily). So the result is the exact int32 sum the ONNX ops
// define, with no saturation case to handle (vpmaddubsw's u8 x s8 pairs saturate at 16 bits) and
// no compensation terms for zero points.
#pragma once

#include <cstdint>

namespace kiln {
class ThreadPool;
}

namespace kiln::gemm {

// Sums of up to this many products of 8-bit values minus zero points (each <= 255 x 255 in size)
// stay inside int32; longer ones the callers run on their plain loops.
inline constexpr int64_t kMaxS16Depth = 32768;

// C[m x n] = A[m x k] · B[k x n], all row-major with leading dimensions lda, ldb, ldc; A and B
// int16 with |values| <= 255, C int32, k <= kMaxS16Depth. `pool` may be null.
void gemm_s16(int64_t m, int64_t n, int64_t k, const int16_t* a, int64_t lda, const int16_t* b,
              int64_t ldb, int32_t* c, int64_t ldc, ThreadPool* pool);

}  // namespace kiln::gemm
