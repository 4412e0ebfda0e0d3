// ai.kiln.BlockedConv's dense direct kernels (AVX2, AVX-512) on conv layers of resnet50 and
// mobilenet_v2, and its depthwise kernels on mobilenet_v2's and efficientnet_b0's, per thread
// count, as GFLOP/s of the fastest run (dense: counting only the taps inside the input) and as
// % of the peak the FMA loop fma_peak.h measures on this machine for the thread count. Bias +
// Relu epilogue, batch 1.
//   kiln_bench_conv [--benchmark_filter=resnet_3x3]
//   KILN_BENCH_CONV_TUNING=pairs,chunk_bytes,unit_bytes overrides the dense kernels' split (pairs:
//   AVX-512 only; 0 keeps a field's default).
//   KILN_BENCH_CONV_TUNING_B=... a second split, run alternately with the first in the same
//   iterations (this machine's run-to-run noise hides a 10 % change between separate runs):
//   B_over_A is the ratio of their fastest runs.
//   KILN_BENCH_CONV_COLD=1 evicts the caches before each run.
//   KILN_BENCH_CONV_ACT=silu gives the dense layers a SiLU epilogue instead of Relu.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "fma_peak.h"
#include "kernels/kiln/nchwc/blocked_conv.h"
#include "kernels/kiln/nchwc/blocked_conv_dense_prep.h"
#include "kernels/ref/conv_util.h"

namespace {

namespace nchwc = kiln::nchwc;

// Thread CPU time with one thread, else wall time.
double seconds_now(int threads) {
  timespec t;
  clock_gettime(threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Layer {
  const char* name;
  int64_t c, m, hw, k, stride, pad;
  bool plain = false;  // the RGB stem reads plain NCHW
  // A non-square layer: width, kernel width and horizontal pad (0, 0, -1: hw, k and pad).
  int64_t w = 0, kw = 0, pad_w = -1;
  int64_t dilation = 1;
};

const Layer kLayers[] = {
    {"resnet_stem_7x7s2_3to64_224", 3, 64, 224, 7, 2, 3, true},
    {"resnet_1x1_64to256_56", 64, 256, 56, 1, 1, 0},
    {"resnet_3x3_64to64_56", 64, 64, 56, 3, 1, 1},
    {"resnet_3x3s2_128_56", 128, 128, 56, 3, 2, 1},
    {"resnet_3x3_256_14", 256, 256, 14, 3, 1, 1},
    {"resnet_1x1s2_512to1024_28", 512, 1024, 28, 1, 2, 0},
    {"resnet_1x1_1024to256_14", 1024, 256, 14, 1, 1, 0},
    {"resnet_3x3_512_7", 512, 512, 7, 3, 1, 1},
    {"resnet_1x1_512to2048_7", 512, 2048, 7, 1, 1, 0},
    {"fcn_1x1_2048to512_64", 2048, 512, 64, 1, 1, 0},  // dilated layer4: big weights, many pixels
    {"fcn_1x1_512to2048_64", 512, 2048, 64, 1, 1, 0},
    {"fcn_head_3x3_2048to512_64", 2048, 512, 64, 3, 1, 1},  // big weights: 38 MB
    // DeepLabV3-MobileNetV3's ASPP at 520x520: most taps of rates 12 and 24 read only padding.
    {"deeplab_aspp_3x3d12_960to256_33", 960, 256, 33, 3, 1, 12, false, 0, 0, -1, 12},
    {"deeplab_aspp_3x3d24_960to256_33", 960, 256, 33, 3, 1, 24, false, 0, 0, -1, 24},
    {"mobilenet_stem_3x3s2_3to32_224", 3, 32, 224, 3, 2, 1, true},
    {"mobilenet_v3_stem_3x3s2_3to16_224", 3, 16, 224, 3, 2, 1, true},  // one output-block group
    {"mobilenet_1x1_16to96_112", 16, 96, 112, 1, 1, 0},
    {"mobilenet_1x1_96to24_56", 96, 24, 56, 1, 1, 0},
    {"mobilenet_1x1_24to144_56", 24, 144, 56, 1, 1, 0},
    {"mobilenet_1x1_144to24_56", 144, 24, 56, 1, 1, 0},
    {"efficientnet_1x1_240to40_28", 240, 40, 28, 1, 1, 0},
    {"mobilenet_1x1_320to1280_7", 320, 1280, 7, 1, 1, 0},
    // The speech-embedding CNN (tf2onnx): 1x3 and 3x1 convs on narrow planes.
    {"speech_1x3_24_74x32", 24, 24, 74, 1, 1, 0, false, 32, 3, 1},
    {"speech_3x1_72_30x8", 72, 72, 30, 3, 1, 0, false, 8, 1, 0},
    {"speech_3x1_96_14x4", 96, 96, 14, 3, 1, 0, false, 4, 1, 0},
    {"speech_1x3_96_10x2", 96, 96, 10, 1, 1, 0, false, 2, 3, 1},
    {"speech_3x1_96_10x2", 96, 96, 10, 3, 1, 0, false, 2, 1, 0},
};

nchwc::DenseTuning tuning_from_env(const char* name) {
  nchwc::DenseTuning t;
  if (const char* env = std::getenv(name)) {
    long pairs = 0, chunk = 0, unit = 0;
    if (std::sscanf(env, "%ld,%ld,%ld", &pairs, &chunk, &unit) == 3)
      t.pairs = static_cast<int>(pairs), t.chunk_bytes = chunk, t.unit_bytes = unit;
  }
  return t;
}

void BM_Conv(benchmark::State& state, Layer l, bool avx512, int threads) {
  if (avx512 && !kiln::cpu_features().has_avx512()) {
    state.SkipWithError("no AVX-512");
    return;
  }
  nchwc::BlockedConvShape s;
  s.n = 1;
  s.cb = l.plain ? 1 : (l.c + 7) / 8;
  s.plain_channels = l.plain ? l.c : 0;
  s.h = l.hw;
  s.w = l.w ? l.w : l.hw;
  s.mb = (l.m + 7) / 8;
  s.channels = l.m;
  s.kh = l.k;
  s.kw = l.kw ? l.kw : l.k;
  s.sh = s.sw = l.stride;
  s.dh = s.dw = l.dilation;
  s.pt = l.pad;
  s.pl = l.pad_w >= 0 ? l.pad_w : l.pad;
  s.oh = (s.h + 2 * s.pt - s.dh * (s.kh - 1) - 1) / l.stride + 1;
  s.ow = (s.w + 2 * s.pl - s.dw * (s.kw - 1) - 1) / l.stride + 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = dist(rng);
    return v;
  };
  const int64_t taps = s.kh * s.kw;
  const std::vector<float> x = random(s.n * (l.plain ? l.c : s.cb * 8) * s.h * s.w);
  const std::vector<float> w = random(s.mb * s.cb * taps * 64), bias = random(s.mb * 8);
  std::vector<float> y(s.n * s.mb * s.oh * s.ow * 8);
  kiln::AlignedBuffer paired;
  nchwc::pair_dense_weights(w.data(), s.mb, s.cb, taps,
                            paired.get(nchwc::paired_weights_floats(s.mb, s.cb, taps)));
  nchwc::BlockedEpilogue e;
  e.bias = bias.data();
  e.act.kind = kiln::kiln_ops::Activation::Kind::kRelu;
  if (const char* act = std::getenv("KILN_BENCH_CONV_ACT"); act && std::string(act) == "silu")
    e.act.kind = kiln::kiln_ops::Activation::Kind::kSilu;  // efficientnet's epilogue
  const nchwc::DenseTuning tunings[2] = {tuning_from_env("KILN_BENCH_CONV_TUNING"),
                                         tuning_from_env("KILN_BENCH_CONV_TUNING_B")};
  const bool ab = std::getenv("KILN_BENCH_CONV_TUNING_B") != nullptr;
  // One pool per thread count for the whole run, as a session keeps its pool.
  static kiln::ThreadPool* const pools[3] = {nullptr, new kiln::ThreadPool(1), new kiln::ThreadPool(2)};
  kiln::ThreadPool& pool = *pools[threads];
  auto run_with = [&](const nchwc::DenseTuning& tuning) {
    if (avx512)
      nchwc::blocked_conv_dense_avx512(s, x.data(), paired.data(), e, y.data(), &pool, tuning);
    else
      nchwc::blocked_conv_dense_avx2(s, x.data(), w.data(), e, y.data(), &pool, tuning);
  };
  run_with(tunings[0]);  // warm up the caches, scratch buffers and threads
  // The fastest run: the CPU is shared, and a slower run measures the neighbours. One thread
  // counts its own CPU time, which time slices given to other processes do not inflate.
  // KILN_BENCH_CONV_COLD=1: evict the caches before each run (a model's layer finds its weights
  // in memory, not in L2/L3), by writing a buffer twice the L3 size.
  static const bool cold = std::getenv("KILN_BENCH_CONV_COLD") != nullptr;
  static std::vector<float> evict(cold ? 16 << 20 : 0);
  double best[2] = {1e30, 1e30};
  for (auto _ : state) {
    for (int k = 0; k < (ab ? 2 : 1); ++k) {
      for (size_t i = 0; i < evict.size(); i += 16) evict[i] += 1.0f;
      const double t0 = seconds_now(threads);
      run_with(tunings[k]);
      best[k] = std::min(best[k], seconds_now(threads) - t0);
      benchmark::ClobberMemory();
    }
  }
  // Useful multiply-adds only: taps that land in the padding are not counted, whether a kernel
  // skips them (the AVX-512 kernel skips whole kernel rows) or multiplies zeros.
  auto inside = [](int64_t out, int64_t k, int64_t stride, int64_t dilation, int64_t pad, int64_t size) {
    int64_t n = 0, lo, hi;
    for (int64_t o = 0; o < out; ++o, n += hi - lo)
      kiln::conv_util::indices_inside(k, size, dilation, o * stride - pad, &lo, &hi);
    return n;
  };
  const double flops = 2.0 * s.n * l.m * l.c * inside(s.oh, s.kh, s.sh, s.dh, s.pt, s.h) *
                       inside(s.ow, s.kw, s.sw, s.dw, s.pl, s.w);
  const double gflops = flops / best[0] * 1e-9;
  state.counters["GFLOPs"] = gflops;
  state.counters["pct_peak"] = 100.0 * gflops / kiln::bench::peak_gflops(threads);
  if (ab) state.counters["B_over_A"] = best[1] / best[0];
}

struct DepthwiseLayer {
  const char* name;
  int64_t c, hw, k, stride;
  kiln::kiln_ops::Activation::Kind act;
};

using Act = kiln::kiln_ops::Activation::Kind;
const DepthwiseLayer kDepthwiseLayers[] = {
    {"mobilenet_dw3x3_32_112", 32, 112, 3, 1, Act::kClip},
    {"mobilenet_dw3x3s2_96_112", 96, 112, 3, 2, Act::kClip},
    {"mobilenet_dw3x3_144_56", 144, 56, 3, 1, Act::kClip},
    {"mobilenet_dw3x3s2_144_56", 144, 56, 3, 2, Act::kClip},
    {"mobilenet_dw3x3_192_28", 192, 28, 3, 1, Act::kClip},
    {"mobilenet_dw3x3s2_192_28", 192, 28, 3, 2, Act::kClip},
    {"mobilenet_dw3x3_576_14", 576, 14, 3, 1, Act::kClip},
    {"mobilenet_dw3x3s2_576_14", 576, 14, 3, 2, Act::kClip},
    {"mobilenet_dw3x3_960_7", 960, 7, 3, 1, Act::kClip},
    {"efficientnet_dw3x3_32_112_silu", 32, 112, 3, 1, Act::kSilu},
    {"efficientnet_dw5x5s2_144_56_silu", 144, 56, 5, 2, Act::kSilu},
    {"efficientnet_dw5x5_480_14_silu", 480, 14, 5, 1, Act::kSilu},
};

// The depthwise kernel (pad k / 2, bias + the layer's activation), GFLOP/s as BM_Conv's.
void BM_Depthwise(benchmark::State& state, DepthwiseLayer l, bool avx512, int threads) {
  if (avx512 && !kiln::cpu_features().has_avx512()) {
    state.SkipWithError("no AVX-512");
    return;
  }
  nchwc::BlockedConvShape s;
  s.n = 1;
  s.cb = s.mb = (l.c + 7) / 8;
  s.channels = l.c;
  s.depthwise = true;
  s.h = s.w = l.hw;
  s.kh = s.kw = l.k;
  s.sh = s.sw = l.stride;
  s.pt = s.pl = l.k / 2;
  s.oh = s.ow = (l.hw + 2 * s.pt - l.k) / l.stride + 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = dist(rng);
    return v;
  };
  const std::vector<float> x = random(s.cb * 8 * l.hw * l.hw), w = random(s.cb * l.k * l.k * 8),
                           bias = random(s.mb * 8);
  std::vector<float> y(s.mb * s.oh * s.ow * 8);
  nchwc::BlockedEpilogue e;
  e.bias = bias.data();
  e.act.kind = l.act;
  e.act.p0 = 0;
  e.act.p1 = 6;
  static kiln::ThreadPool* const pools[3] = {nullptr, new kiln::ThreadPool(1), new kiln::ThreadPool(2)};
  kiln::ThreadPool& pool = *pools[threads];
  auto run = [&] {
    (avx512 ? nchwc::blocked_conv_depthwise_avx512 : nchwc::blocked_conv_depthwise_avx2)(
        s, x.data(), w.data(), e, y.data(), &pool);
  };
  run();
  double best = 1e30;
  for (auto _ : state) {
    const double t0 = seconds_now(threads);
    run();
    best = std::min(best, seconds_now(threads) - t0);
    benchmark::ClobberMemory();
  }
  const double gflops = 2.0 * l.c * s.oh * s.ow * l.k * l.k / best * 1e-9;
  state.counters["us"] = best * 1e6;
  state.counters["GFLOPs"] = gflops;
  state.counters["pct_peak"] = 100.0 * gflops / kiln::bench::peak_gflops(threads);
}

// Each layer of `layers` through `bench`, on AVX2 and AVX-512, 1 and 2 threads.
template <class Layers, class Bench>
void register_layers(const Layers& layers, Bench bench) {
  for (const auto& l : layers)
    for (bool avx512 : {false, true})
      for (int threads : {1, 2})
        benchmark::RegisterBenchmark((std::string(l.name) + (avx512 ? "/avx512" : "/avx2") +
                                      "/threads:" + std::to_string(threads)).c_str(),
                                     bench, l, avx512, threads)
            ->UseRealTime()
            ->MinTime(0.2);
}

const bool kRegistered = [] {
  kiln::bench::register_fma_peak();
  register_layers(kLayers, BM_Conv);
  register_layers(kDepthwiseLayers, BM_Depthwise);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
