// peak_gflops: runtime::measure_fma_peak_gflops, cached per thread count.
#include "fma_peak.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "core/cpu_features.h"
#include "runtime/cpu_peak.h"

namespace kiln::bench {
namespace {

void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(peak_gflops(threads));
  state.counters["GFLOPs"] = peak_gflops(threads);
}

}  // namespace

double peak_gflops(int threads) {
  static std::mutex mu;
  static std::map<int, double> peaks;
  std::lock_guard<std::mutex> lock(mu);
  auto it = peaks.find(threads);
  if (it != peaks.end()) return it->second;
  const double peak = runtime::measure_fma_peak_gflops(threads, 200);
  std::printf("measured FP32 peak: %.1f GFLOP/s on %d thread(s) together (FMA loop at %s)\n", peak, threads,
              isa_name(cpu_features().level()));
  return peaks[threads] = peak;
}

void register_fma_peak() { benchmark::RegisterBenchmark("FmaPeak", BM_FmaPeak)->Arg(1)->Arg(2)->Iterations(1); }

}  // namespace kiln::bench
