// Timing a micro-benchmark's runs. KILN_BENCH_COLD=1 evicts the caches before every timed run,
// as a model's other layers do: the weights then come from memory, not from the L3 the previous
// iteration left them in.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

namespace kiln::bench {

// Whether KILN_BENCH_COLD=1 is set.
bool cold_from_env();
// Writes 64 MiB, more than the L3, so that the next call finds nothing of its data in cache.
void evict_caches();

struct RunTimes {
  double seconds = 0;  // all timed runs together
  double best = 0;     // the fastest: on a shared machine the steadier figure
};

// Calls run() once an iteration of `state`, timed alone (the eviction of a cold run is not).
template <typename Run>
RunTimes time_runs(benchmark::State& state, Run&& run) {
  using Clock = std::chrono::steady_clock;
  const bool cold = cold_from_env();
  RunTimes t;
  t.best = 1e30;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict_caches();
      state.ResumeTiming();
    }
    const auto t0 = Clock::now();
    run();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    t.seconds += dt;
    t.best = std::min(t.best, dt);
    benchmark::ClobberMemory();
  }
  return t;
}

}  // namespace kiln::bench
