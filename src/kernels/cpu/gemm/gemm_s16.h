// The integer GEMM of the 8-bit ops (ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul):
// 8-bit values with their zero points subtracted are 16-bit (|v| <= 255), and vpmaddwd
// multiplies 16 such pairs and adds each two products into one of 8 int32 lanes, exactly (two
// products of at most 255 x 255 fit easily). So the result is the exact int32 sum the ONNX ops
// define, with no saturation case to handle (vpmaddubsw's u8 x s8 pairs saturate at 16 bits) and
// no compensation terms for zero points.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {
class ThreadPool;
}

namespace kiln::gemm {

// One register tile: C[rows x cols] (=, or += when accumulate) the kMr x nr tile of `pairs` k pairs
// of packed A (ap) and B (bp); rows <= kMr, cols <= nr are the part of it C has.
inline constexpr int64_t kS16Mr = 6;
using S16TileFn = void (*)(int64_t pairs, const int32_t* ap, const int16_t* bp, int32_t* c, int64_t ldc,
                           bool accumulate, int64_t rows, int64_t cols);
struct S16Kernel {
  const char* name;  // "s16_6x16_avx2", "s16_6x32_avx512vnni"
  int64_t nr;        // columns per B panel
  S16TileFn tile;
};
// Every tile this CPU can run, best first (tests and benchmarks try each).
const std::vector<S16Kernel>& s16_kernels();
S16Kernel s16_avx2_kernel();         // gemm_s16.cc
S16Kernel s16_avx512_vnni_kernel();  // gemm_s16_avx512vnni.cc

// Sums of up to this many products of 8-bit values minus zero points (each <= 255 x 255 in size)
// stay inside int32; longer ones the callers run on their plain loops.
inline constexpr int64_t kMaxS16Depth = 32768;

// B [k x n] packed once for gemm_s16 (a constant weight, in Kernel::prepare): runs then pack
// only A.
class PackedS16 {
 public:
  // For `kernel` (null: the best); the GEMM reading it runs that kernel.
  static PackedS16 pack(const int16_t* b, int64_t ldb, int64_t k, int64_t n, const S16Kernel* kernel = nullptr);
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  bool empty() const { return data_.empty(); }
  const S16Kernel& kernel() const { return kernel_; }
  // The panel of the K slice starting at p0 and the nr columns from j0.
  const int16_t* panel(int64_t p0, int64_t j0) const;

 private:
  int64_t k_ = 0, n_ = 0;
  S16Kernel kernel_{};
  std::vector<int16_t> data_;
};

// C[m x n] = A[m x k] · B[k x n], all row-major with leading dimensions lda, ldb, ldc; A and B
// int16 with |values| <= 255, C int32, k <= kMaxS16Depth. `pool` may be null.
// `kernel` null: the best.
void gemm_s16(int64_t m, int64_t n, int64_t k, const int16_t* a, int64_t lda, const int16_t* b,
              int64_t ldb, int32_t* c, int64_t ldc, ThreadPool* pool, const S16Kernel* kernel = nullptr);
// The same with B packed beforehand (k and n are b's; its kernel runs).
void gemm_s16(int64_t m, const int16_t* a, int64_t lda, const PackedS16& b, int32_t* c, int64_t ldc,
              ThreadPool* pool);

}  // namespace kiln::gemm
