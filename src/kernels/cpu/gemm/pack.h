// Copies blocks of A and B into the panel layouts the micro-kernels stream through: contiguous,
// 64-byte aligned, zero-padded to whole tiles so the kernels never see a ragged edge.
#pragma once

#include <cstdint>

namespace kiln::gemm {

// rows [i0, i0+mc) x cols [p0, p0+kc) of op(A) into ceil(mc/mr) panels of kc x mr:
// dst[panel][p][i]. op(A)(i, p) is a[i*lda + p], or a[p*lda + i] when trans.
void pack_a(const float* a, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t p0,
            int64_t kc, int64_t mr, float* dst);

// rows [p0, p0+kc) x cols [j0, j0+nc) of op(B) into ceil(nc/nr) panels of kc x nr:
// dst[panel][p][j]. op(B)(p, j) is b[p*ldb + j], or b[j*ldb + p] when trans.
void pack_b(const float* b, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0,
            int64_t nc, int64_t nr, float* dst);

}  // namespace kiln::gemm
