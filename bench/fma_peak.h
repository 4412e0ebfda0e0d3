// Peak float throughput of this core: a loop of independent FMAs and nothing else, one per ISA
// (each in a translation unit compiled for that ISA). The GEMM benchmark reports % of this.
#pragma once

#include <cstdint>

namespace kiln::bench {

// Runs `iters` rounds of 24 independent vector FMAs; returns a value that depends on them all.
float fma_loop_avx2(int64_t iters);
float fma_loop_avx512(int64_t iters);
constexpr int64_t kFlopsPerIterAvx2 = 24 * 8 * 2, kFlopsPerIterAvx512 = 24 * 16 * 2;

}  // namespace kiln::bench
