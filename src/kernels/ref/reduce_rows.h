// float32 reductions of a tensor viewed as [outer, red, inner] over its middle dim: rows
// (inner = 1) by eight accumulators, columns along inner, the outer index over the pool. Float
// accumulation; NaN propagates through Max and Min. Shared by the Reduce ops and the global pools.
#pragma once

#include <cstdint>

namespace kiln {

class ThreadPool;

enum class RowReduce { kSum, kMean, kMax, kMin, kSumSquare };

// y [outer, inner] from x [outer, red, inner].
void reduce_rows_f32(RowReduce op, const float* x, float* y, int64_t outer, int64_t red, int64_t inner,
                     ThreadPool* pool);

}  // namespace kiln
