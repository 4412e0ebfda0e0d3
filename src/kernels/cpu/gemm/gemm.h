// The fast float GEMM: packed panels, cache blocking sized per micro-kernel, the micro-kernel
// picked at run time for the CPU, and the work split over the thread pool.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm/epilogue.h"
#include "kernels/cpu/gemm/microkernel.h"
#include "kernels/cpu/gemm/packed_matrix.h"

namespace kiln {
class ThreadPool;
}

namespace kiln::gemm {

// C[MxN] = epilogue(alpha * op(A) * op(B) + beta * C (+ bias[j] on every row when bias is set));
// row-major with leading dimensions; op(A) is MxK (A stored KxM when trans_a), op(B) is KxN
// (B stored NxK when trans_b), or packed_b when set (b, ldb and trans_b are then unused; its k
// and n must equal k and n). beta == 0 ignores C's old contents (NaN included).
struct GemmF32Args {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  int64_t ldc = 0;
  const float* bias = nullptr;  // n floats, or null
  const PackedMatrix* packed_b = nullptr;
  const Epilogue* epilogue = nullptr;  // null or empty: none
};

// `pool` may be null (one thread). `kernel` null means best_f32_kernel(); tests and benchmarks
// pass another entry of available_f32_kernels() (or a copy with other block sizes). With
// packed_b the kernel it was packed for runs, whatever `kernel` says.
void gemm_f32_blocked(const GemmF32Args& args, ThreadPool* pool,
                      const MicroKernel* kernel = nullptr);

// Has every thread of `pool` size its packing buffers for gemm_f32_blocked(args, nullptr, kernel),
// so that a parallel loop whose tasks each run such a one-thread GEMM allocates nothing after its
// first run, whichever threads take the tasks (core/thread_scratch.h).
void reserve_single_thread_scratch(const GemmF32Args& args, ThreadPool* pool,
                                   const MicroKernel* kernel = nullptr);

}  // namespace kiln::gemm
