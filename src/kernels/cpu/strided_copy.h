// One copy engine for the data-movement ops whose output element at index i reads the input at
// offset + sum(i[d] * strides[d]): Slice (steps), Transpose (permuted strides), Expand (stride
// 0). Dims are collapsed first; contiguous rows are memcpy'd, broadcast rows filled, transposes
// copied in cache tiles, and large copies split over the thread pool.
#pragma once

#include "kiln/status.h"
#include "kiln/tensor.h"

namespace kiln {

class ThreadPool;

// dst (already shaped, same dtype as src) = the strided view of src. strides has one entry per
// dim of dst, in elements, and may hold 0 or negative values; every element the view reads
// must lie inside src. `pool` may be null.
Status copy_strided(const Tensor& src, int64_t offset, const Shape& strides, Tensor* dst, ThreadPool* pool);

}  // namespace kiln
