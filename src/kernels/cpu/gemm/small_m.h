// GEMMs with fewer rows than the micro-kernel's tile against a prepacked B (a fully connected
// layer at batch 1, a decoder step): the tile would compute mostly zero rows, so these walk the
// packed panels with one accumulator row per row of A instead. Memory-bound on B, like a GEMV.
#pragma once

#include "kernels/cpu/gemm/gemm.h"

namespace kiln::gemm {

// g.packed_b set, 0 < g.m < its kernel's mr, g.k > 0. Columns are split over `pool` when large.
void gemm_small_m_packed(const GemmF32Args& g, ThreadPool* pool);

}  // namespace kiln::gemm
