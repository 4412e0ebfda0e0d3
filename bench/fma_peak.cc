// The single-core peak the micro-benchmarks report their % of: the fastest of short runs of the
// best ISA's FMA loop, in thread CPU time so that time slices given to other processes on a
// shared machine do not lower it.
#include "fma_peak.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "core/cpu_features.h"

namespace kiln::bench {
namespace {

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void BM_FmaPeak(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(peak_gflops_per_core());
  state.counters["GFLOPs"] = peak_gflops_per_core();
}

}  // namespace

double peak_gflops_per_core() {
  static const double peak = [] {
    const bool wide = cpu_features().has_avx512();
    const int64_t iters = 2'000'000;
    const int64_t per = wide ? kFlopsPerIterAvx512 : kFlopsPerIterAvx2;
    double best = 0;
    for (int rep = 0; rep < 20; ++rep) {
      const double t0 = thread_seconds();
      const float sink = wide ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
      const double s = thread_seconds() - t0;
      benchmark::DoNotOptimize(sink);
      best = std::max(best, static_cast<double>(per) * iters / s * 1e-9);
    }
    std::printf("measured FP32 peak: %.1f GFLOP/s per core (%s FMA loop)\n", best,
                wide ? "avx512" : "avx2");
    return best;
  }();
  return peak;
}

void register_fma_peak() { benchmark::RegisterBenchmark("FmaPeak", BM_FmaPeak)->Iterations(1); }

}  // namespace kiln::bench
