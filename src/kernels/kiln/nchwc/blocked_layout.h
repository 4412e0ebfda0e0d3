// The blocked NCHWc layout of the -O3 layout ops (docs/ops.md, "ai.kiln NCHWc ops"): a 4-D NCHW
// float tensor stored as [N, ceil(C/8), H, W, 8], channel c at block c/8, lane c%8; the lanes past
// C in the last block are zero. Eight floats are one AVX2 register.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "core/thread_pool.h"
#include "kernels/kernel.h"

namespace kiln::nchwc {

inline constexpr int64_t kBlock = 8;

inline int64_t blocks_of(int64_t channels) { return (channels + kBlock - 1) / kBlock; }

// The dims of a blocked activation tensor.
struct BlockedDims {
  int64_t n = 0, cb = 0, h = 0, w = 0;
  int64_t plane() const { return h * w * kBlock; }  // floats in one channel block of one image
};

// Checks that `t` is a float32 [N, Cb, H, W, 8] tensor; `what` names it in the error.
inline Result<BlockedDims> blocked_dims(const Tensor& t, const char* what) {
  if (t.dtype() != DType::kFloat32 || t.rank() != 5 || t.dim(4) != kBlock)
    return Status::error(std::string(what) + " must be a float32 blocked tensor [N, C/8, H, W, 8], got " +
                         shape_str(t.shape()));
  return BlockedDims{t.dim(0), t.dim(1), t.dim(2), t.dim(3)};
}

// The taps k in [0, count) that read [0, size) for some window from position `first` to `last`
// (first + k * step to last + k * step), as [first, end): the kernel columns a register tile of
// pixels reads the input with, where the others read only padding.
inline std::pair<int64_t, int64_t> tile_taps(int64_t first, int64_t last, int64_t step,
                                             int64_t count, int64_t size) {
  int64_t k0 = 0, k1 = count;
  while (k0 < count && last + k0 * step < 0) ++k0;
  while (k1 > k0 && first + (k1 - 1) * step >= size) --k1;
  return {k0, k1};
}

// The taps k in [0, count) whose position base + k * step lies in [0, size), as [first, end):
// a window's valid rows or columns at the edge of the input.
inline std::pair<int64_t, int64_t> valid_taps(int64_t base, int64_t step, int64_t count,
                                              int64_t size) {
  return tile_taps(base, base, step, count, size);
}

// Runs fn(begin, end) over [0, n) on the pool when there is one and the work is worth it.
inline void parallel_range(ThreadPool* pool, int64_t n, int64_t work,
                           FunctionRef<void(int64_t, int64_t)> fn) {
  if (pool == nullptr || n <= 1 || work < (int64_t{1} << 15))
    fn(0, n);
  else
    pool->parallel_for(n, 1, fn);
}

}  // namespace kiln::nchwc
