// The flash-attention loop's online-softmax step (attention.cc) on a score block st of `cols`
// rows of nr queries: per query column, m' = max(m, max S), st = exp(S - m'), l = l * f + sum,
// f = exp(m - m') left in `factor` for the caller to rescale its outputs by. Returns whether any
// f differs from 1. The AVX2 step runs 8 queries at a time; the AVX-512 one (its own
// translation unit, nr a multiple of 16) runs the same operations on 16, with exp_avx2's
// polynomial, so both give the same values.
#pragma once

#include <cstdint>

namespace kiln::attention {

bool softmax_step_avx2(float* st, int64_t cols, int64_t nr, float* m, float* l, float* factor);
bool softmax_step_avx512(float* st, int64_t cols, int64_t nr, float* m, float* l, float* factor);

}  // namespace kiln::attention
