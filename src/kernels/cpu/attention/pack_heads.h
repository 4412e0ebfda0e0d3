// Copies one head's Q, K and V rows (head_dim floats each, a token stride apart) into the panel
// layouts the GEMM micro-kernels read (microkernel.h): transposes by 8x8 register blocks and
// short vector copies, where the general gemm packers would make a call per 8 floats.
#pragma once

#include <cstdint>

namespace kiln::attention {

// dst[c * ld + i] = src[i * stride + c] for i < rows, c < dim; 0 for rows <= i < width.
// K's A panels (rows = keys of one panel, width = mr) and Q^T's B panel (rows = queries,
// width = nr) are both this.
void pack_transposed(const float* src, int64_t stride, int64_t rows, int64_t dim, int64_t width,
                     float* dst, int64_t ld);

// V^T's A panels: for each panel of mr dims from c0, dst[panel][p][i] = src[p * stride + c0 + i]
// for p < tokens, i < mr (0 past dim). dst holds round_up(dim, mr) * tokens floats.
void pack_v_panels(const float* src, int64_t stride, int64_t tokens, int64_t dim, int64_t mr,
                   float* dst);

}  // namespace kiln::attention
