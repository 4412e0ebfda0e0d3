// The FMA throughput loop behind measure_fma_peak_gflops. Compiled with the AVX2 baseline flags
// (-mavx2 -mfma, set for the whole project), so this is the AVX2 FMA peak.
#include "runtime/cpu_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace kiln::runtime {
namespace {

// Twelve independent accumulators cover FMA latency (4-5 cycles) times two FMA ports; named
// variables, not an array, so that they stay in registers.
constexpr int kChains = 12;

// Runs `rounds` rounds of kChains FMAs and returns a value that depends on all of them, so that
// the compiler keeps the work.
float fma_rounds(int64_t rounds) {
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  __m256 c0 = b, c1 = b, c2 = b, c3 = b, c4 = b, c5 = b, c6 = b, c7 = b, c8 = b, c9 = b, c10 = b,
         c11 = b;
  // The empty asm makes each accumulator opaque once per round: the chains cannot be folded or
  // run one after another (which would be latency-bound).
#define KILN_FMA_STEP(c)        \
  c = _mm256_fmadd_ps(c, a, b); \
  asm volatile("" : "+x"(c))
  for (int64_t r = 0; r < rounds; ++r) {
    KILN_FMA_STEP(c0);
    KILN_FMA_STEP(c1);
    KILN_FMA_STEP(c2);
    KILN_FMA_STEP(c3);
    KILN_FMA_STEP(c4);
    KILN_FMA_STEP(c5);
    KILN_FMA_STEP(c6);
    KILN_FMA_STEP(c7);
    KILN_FMA_STEP(c8);
    KILN_FMA_STEP(c9);
    KILN_FMA_STEP(c10);
    KILN_FMA_STEP(c11);
  }
#undef KILN_FMA_STEP
  const __m256 sum =
      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                                  _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7))),
                    _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  float out[8];
  _mm256_storeu_ps(out, sum);
  return out[0];
}

}  // namespace

double measure_fma_peak_gflops(int threads, double ms) {
  using Clock = std::chrono::steady_clock;
  constexpr int64_t kRounds = 1 << 16;
  constexpr double kFlopsPerRound = kChains * 8 * 2;
  volatile float sink = fma_rounds(kRounds);  // warm up the clock and the FMA units
  // The best of several short batches: the least disturbed by other processes.
  double best = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(ms);
  do {
    const auto t0 = Clock::now();
    sink = sink + fma_rounds(kRounds);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0) best = std::max(best, kRounds * kFlopsPerRound / s / 1e9);
  } while (Clock::now() < deadline);
  return best * (threads > 0 ? threads : 1);
}

}  // namespace kiln::runtime
