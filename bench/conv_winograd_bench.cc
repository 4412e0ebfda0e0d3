// BlockedConv 3x3 stride-1 layers, direct (blocked_conv_dense_avx2, and _avx512 when the CPU has
// it) vs Winograd F(4x4, 3x3) and
// F(2x2, 3x3) (blocked_conv_winograd, per micro-kernel), in effective GFLOP/s: the direct
// convolution's FLOPs over the time, so all are comparable. Layers: resnet50's four 3x3 stages,
// smaller channel counts that decide Winograd's channel threshold, and wide ones whose U streams. Batch 1, pad 1, bias+Relu.
//   kiln_bench_conv_winograd [--benchmark_filter=...]
//   KILN_BENCH_WINOGRAD=chunk_tiles,m_splits,l2_bytes forces the task split (for tuning it).
//   KILN_BENCH_COLD=1 evicts the caches before every timed call, as a model's other layers do:
//   the weights (U for Winograd) then come from memory.
// "GFLOPs_best" uses the fastest iteration: on a shared machine it is the steadier figure.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/kiln/nchwc/blocked_conv_dense_prep.h"
#include "kernels/kiln/nchwc/blocked_conv_winograd.h"
#include "timed_runs.h"

namespace {

using kiln::nchwc::BlockedConvShape;

kiln::nchwc::WinogradTuning tuning_from_env() {
  kiln::nchwc::WinogradTuning t;
  if (const char* env = std::getenv("KILN_BENCH_WINOGRAD")) {
    long chunk = 0, splits = 0, l2 = 0;
    if (std::sscanf(env, "%ld,%ld,%ld", &chunk, &splits, &l2) == 3)
      t.chunk_tiles = chunk, t.m_splits = splits, t.l2_bytes = l2;
  }
  return t;
}

enum class Path { kDirectAvx2, kDirectAvx512, kWinograd };

// kernel and tile: Winograd's micro-kernel and F(tile x tile, 3x3); kernel null: the direct kernel.
void BM_Conv3x3(benchmark::State& state, int64_t c, int64_t m, int64_t hw, int threads, Path path,
                const kiln::nchwc::WinogradGemmKernel* kernel, int64_t tile) {
  BlockedConvShape s;
  s.n = 1, s.cb = (c + 7) / 8, s.h = s.w = hw, s.mb = (m + 7) / 8, s.oh = s.ow = hw;
  s.kh = s.kw = 3, s.pt = s.pl = 1, s.channels = m;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(s.cb * hw * hw * 8), w(s.mb * s.cb * 9 * 64), bias(s.mb * 8);
  std::vector<float> y(s.mb * hw * hw * 8);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng) * 0.1f;
  for (float& v : bias) v = dist(rng);
  kiln::nchwc::BlockedEpilogue e;
  e.bias = bias.data();
  e.act.kind = kiln::kiln_ops::Activation::Kind::kRelu;
  kiln::ThreadPool pool(threads);
  kiln::ThreadPool* p = threads > 1 ? &pool : nullptr;
  std::unique_ptr<kiln::nchwc::WinogradWeights> ww;
  if (path == Path::kWinograd)
    ww = std::make_unique<kiln::nchwc::WinogradWeights>(w.data(), s.mb, s.cb, tile, *kernel);
  kiln::AlignedBuffer paired;
  if (path == Path::kDirectAvx512)
    kiln::nchwc::pair_dense_weights(w.data(), s.mb, s.cb, 9,
                                    paired.get(kiln::nchwc::paired_weights_floats(s.mb, s.cb, 9)));
  const kiln::nchwc::WinogradTuning tuning = tuning_from_env();
  auto once = [&] {
    if (ww)
      kiln::nchwc::blocked_conv_winograd(s, x.data(), *ww, e, y.data(), p, tuning);
    else if (path == Path::kDirectAvx512)
      kiln::nchwc::blocked_conv_dense_avx512(s, x.data(), paired.data(), e, y.data(), p);
    else
      kiln::nchwc::blocked_conv_dense_avx2(s, x.data(), w.data(), e, y.data(), p);
  };
  once();  // warm up buffers and threads
  const kiln::bench::RunTimes t = kiln::bench::time_runs(state, once);
  const double flops = 2.0 * hw * hw * c * m * 9;
  state.counters["GFLOPs"] = flops * state.iterations() / t.seconds * 1e-9;
  state.counters["GFLOPs_best"] = flops / t.best * 1e-9;
  state.counters["ms_best"] = t.best * 1e3;
}

struct Layer {
  int64_t c, m, hw;
};
// resnet50's 3x3 stride-1 convs (counts per model: 3, 4, 6, 3 at batch 1), then smaller ones.
const Layer kLayers[] = {{64, 64, 56},  {128, 128, 28}, {256, 256, 14}, {512, 512, 7},
                         {32, 32, 56},  {16, 16, 56},   {24, 24, 56},   {32, 64, 28},
                         {64, 64, 7},
                         // U past the caches over many tiles (the point-major order): a 640 ->
                         // 256 at 16x16, resnet's 512 -> 512 at 32x32, FCN's 2048 -> 512 head.
                         {640, 256, 16}, {512, 512, 32}, {2048, 512, 64}};

int register_all() {
  for (const Layer& l : kLayers)
    for (int threads : {1, 2}) {
      const std::string base = std::to_string(l.c) + "x" + std::to_string(l.m) + "@" +
                               std::to_string(l.hw) + "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(("direct/" + base).c_str(), BM_Conv3x3, l.c, l.m, l.hw,
                                   threads, Path::kDirectAvx2, nullptr, 0)
          ->UseRealTime();
      if (kiln::cpu_features().has_avx512())
        benchmark::RegisterBenchmark(("direct_avx512/" + base).c_str(), BM_Conv3x3, l.c, l.m,
                                     l.hw, threads, Path::kDirectAvx512, nullptr, 0)
            ->UseRealTime();
      for (int64_t tile : {4, 2})
        for (const auto& k : kiln::nchwc::winograd_gemm_kernels())
          benchmark::RegisterBenchmark(
              ("f" + std::to_string(tile) + "_" + k.name + "/" + base).c_str(), BM_Conv3x3, l.c,
              l.m, l.hw, threads, Path::kWinograd, &k, tile)
              ->UseRealTime();
    }
  return 0;
}
const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
