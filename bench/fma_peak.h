// The peak the micro-benchmarks report their pct_peak of: runtime::measure_fma_peak_gflops, the
// same measurement `kiln profile` divides by, at the same ISA level and thread count.
#pragma once

namespace kiln::bench {

// GFLOP/s that `threads` threads sustain together, measured once per thread count (and printed
// then).
double peak_gflops(int threads);
// Registers the "FmaPeak" benchmark, which reports it for 1 and 2 threads.
void register_fma_peak();

}  // namespace kiln::bench
