// ThreadPool::parallel_for overhead for the short ops kiln runs back to back (bert_tiny's whole
// run is under a millisecond over ~16 ops):
//   RoundTrip     2 empty chunks, calls back to back: the pure hand-off and join cost;
//   AfterGap/G    the same after G us of serial work on the caller (workers idle meanwhile):
//                 the wake-up latency a worker adds after the previous op;
//   Work5us       2 chunks of 5 us each: 5 us when the worker takes one, 10 us when it is late.
//   LinePingPong  two plain threads bouncing one cache line, no pool: the machine's own round
//                 trip between cores, the floor under every hand-off. On the 2-vCPU VM it is
//                 50-70 ns, and ~330 ns in phases where the host places the vCPUs apart (then
//                 every value one thread writes and the other reads costs that much more).
//   kiln_bench_thread_pool [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

void spin_for(std::chrono::nanoseconds d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) {
  }
}

void BM_RoundTrip(benchmark::State& state) {
  kiln::ThreadPool pool(2);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) pool.parallel_for(2, 1, [&](int64_t b, int64_t e) { sink += e - b; });
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_RoundTrip)->UseRealTime();

void BM_AfterGap(benchmark::State& state) {
  kiln::ThreadPool pool(2);
  std::atomic<int64_t> sink{0};
  const auto gap = std::chrono::microseconds(state.range(0));
  for (auto _ : state) {
    spin_for(gap);
    const auto t0 = Clock::now();
    pool.parallel_for(2, 1, [&](int64_t b, int64_t e) { sink += e - b; });
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
}
BENCHMARK(BM_AfterGap)->Arg(20)->Arg(200)->Arg(2000)->UseManualTime();

void BM_Work5us(benchmark::State& state) {
  kiln::ThreadPool pool(2);
  for (auto _ : state)
    pool.parallel_for(2, 1, [&](int64_t, int64_t) { spin_for(std::chrono::microseconds(5)); });
}
BENCHMARK(BM_Work5us)->UseRealTime();

void BM_LinePingPong(benchmark::State& state) {
  std::atomic<int> turn{0};  // 1: the other thread's move; 0: ours; -1: stop
  std::thread other([&] {
    for (;;) {
      int t;
      while ((t = turn.load(std::memory_order_acquire)) == 0) {
      }
      if (t < 0) return;
      turn.store(0, std::memory_order_release);
    }
  });
  for (auto _ : state) {
    turn.store(1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 0) {
    }
  }
  turn.store(-1, std::memory_order_release);
  other.join();
}
BENCHMARK(BM_LinePingPong)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
