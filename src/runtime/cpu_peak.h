// A measured ceiling for "% of peak" in profiles.
#pragma once

namespace kiln::runtime {

// Single-precision GFLOP/s of AVX2 FMA (8 lanes, a fused multiply-add counts 2) that one thread
// sustains, measured for about `ms` milliseconds, times `threads`. It is the AVX2 FMA peak, the ISA
// kiln's baseline kernels use; wider ISAs (AVX-512) can exceed it, and cores that share an FMA
// unit (SMT siblings) or clock down under load reach less than the product.
double measure_fma_peak_gflops(int threads, double ms = 20);

}  // namespace kiln::runtime
