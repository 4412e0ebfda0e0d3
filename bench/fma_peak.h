// Peak float throughput of this core: a loop of independent FMAs and nothing else, one per ISA
// (each in a translation unit compiled for that ISA). The GEMM benchmark reports % of this.
#pragma once

#include <cstdint>

namespace kiln::bench {

// Runs `iters` rounds of 24 independent vector FMAs; returns a value that depends on them all.
float fma_loop_avx2(int64_t iters);
float fma_loop_avx512(int64_t iters);
constexpr int64_t kFlopsPerIterAvx2 = 24 * 8 * 2, kFlopsPerIterAvx512 = 24 * 16 * 2;

// GFLOP/s of one core on the best ISA's loop, measured once (printed when first measured).
double peak_gflops_per_core();
// Registers the "FmaPeak" benchmark, which reports it.
void register_fma_peak();

}  // namespace kiln::bench
