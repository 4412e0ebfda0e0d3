// The one FP32 peak: what "% of peak" in `kiln profile` and the micro-benchmarks divides by.
#pragma once

namespace kiln::runtime {

// Single-precision GFLOP/s (a fused multiply-add counts 2) that `threads` threads sustain
// together, all running register-resident FMA chains at once, at the ISA level in use
// (cpu_features(): zmm at avx512 and above, else ymm). The best of short batches over a window
// of about `ms` milliseconds (other processes on a shared machine only ever lower a batch), and
// of up to three more windows where a vCPU was away. Cores that share an FMA unit (SMT siblings)
// or clock down when all are busy show it here, as they should.
double measure_fma_peak_gflops(int threads, double ms = 30);

// The FMA loops, one per ISA in a translation unit of its own (cpu_peak_avx2.cc,
// cpu_peak_avx512.cc): `rounds` rounds of independent FMAs, a value that depends on them all.
// kFlopsPerRound* is the work of one round.
float fma_rounds_avx2(long rounds);
float fma_rounds_avx512(long rounds);
// 12 ymm chains: FMA latency (4-5 cycles) times two FMA pipes needs 8-10, and 12 chains plus
// the two constants fit AVX2's 16 registers (24 spilled to memory and read 60 % low on Zen 3).
constexpr double kFlopsPerRoundAvx2 = 12 * 8 * 2;
// 24 zmm chains of AVX-512's 32 registers: enough for two 512-bit FMA pipes of latency 4-6.
constexpr double kFlopsPerRoundAvx512 = 24 * 16 * 2;

}  // namespace kiln::runtime
