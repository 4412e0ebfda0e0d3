// The 8-bit conv of QLinearConv (kernels/cpu/qconv) on the conv layers of int8 resnet50 and
// mobilenet_v2: channels-last u8 in and out, per-channel requantization, batch 1, on every tile
// this CPU has (KILN_ISA caps them; 7-bit weights for the tiles that need them), 1 and 2 threads. Reports GOP/s of the fastest run
// (multiply-adds inside the input only, x2) and, where the CPU has AVX512-VNNI, % of its int8
// peak: vpdpbusd does 4x the multiply-adds of an FMA in the same slot, so 4x the FMA peak.
// `count` is the number of such layers in the model, for weighing a change by its share. The
// layers a block's residual add follows run again with the add (`+add`): in the tile's store
// (`fused`, Requantize::add) and as the separate QLinearAdd's rows over the conv's output
// (`apart`); GOP/s count the conv's multiply-adds alone.
//   kiln_bench_qconv [--benchmark_filter=resnet_3x3]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "fma_peak.h"
#include "kernels/cpu/qconv/qconv.h"
#include "kernels/kiln/epilogue_activation.h"
#include "kernels/ref/conv_util.h"
#include "timed_runs.h"

namespace {

namespace qconv = kiln::qconv;

struct Layer {
  const char* name;
  int64_t c, m, hw, k, stride, count;
  bool depthwise = false;
  bool residual = false;  // a block's residual add follows it
  bool silu = false;      // its sums go through a SiLU before the store's quantization
};

enum class Add { kNone, kFused, kApart };

const Layer kLayers[] = {
    {"resnet_stem_7x7s2_3to64_224", 3, 64, 224, 7, 2, 1},
    {"resnet_1x1_64to256_56", 64, 256, 56, 1, 1, 4, false, true},
    {"resnet_3x3_64_56", 64, 64, 56, 3, 1, 3},
    {"resnet_1x1_256to64_56", 256, 64, 56, 1, 1, 2},
    {"resnet_3x3s2_128_56", 128, 128, 56, 3, 2, 1},
    {"resnet_3x3_128_28", 128, 128, 28, 3, 1, 3},
    {"resnet_1x1_128to512_28", 128, 512, 28, 1, 1, 4, false, true},
    {"resnet_1x1_512to128_28", 512, 128, 28, 1, 1, 3},
    {"resnet_3x3s2_256_28", 256, 256, 28, 3, 2, 1},
    {"resnet_3x3_256_14", 256, 256, 14, 3, 1, 5},
    {"resnet_1x1_256to1024_14", 256, 1024, 14, 1, 1, 6, false, true},
    {"resnet_1x1_1024to256_14", 1024, 256, 14, 1, 1, 5},
    {"resnet_3x3s2_512_14", 512, 512, 14, 3, 2, 1},
    {"resnet_3x3_512_7", 512, 512, 7, 3, 1, 2},
    {"resnet_1x1_512to2048_7", 512, 2048, 7, 1, 1, 4, false, true},
    {"resnet_1x1_2048to512_7", 2048, 512, 7, 1, 1, 2},
    {"mobilenet_stem_3x3s2_3to32_224", 3, 32, 224, 3, 2, 1},
    {"mobilenet_1x1_16to96_112", 16, 96, 112, 1, 1, 1},
    {"mobilenet_1x1_24to144_56", 24, 144, 56, 1, 1, 2},
    {"mobilenet_1x1_144to24_56", 144, 24, 56, 1, 1, 2, false, true},
    {"mobilenet_1x1_192to32_28", 192, 32, 28, 1, 1, 3, false, true},
    {"mobilenet_1x1_320to1280_7", 320, 1280, 7, 1, 1, 1},
    {"mobilenet_dw3x3_32_112", 32, 32, 112, 3, 1, 1, true},
    {"mobilenet_dw3x3s2_96_112", 96, 96, 112, 3, 2, 1, true},
    {"mobilenet_dw3x3_144_56", 144, 144, 56, 3, 1, 1, true},
    {"mobilenet_dw3x3_192_28", 192, 192, 28, 3, 1, 2, true},
    {"mobilenet_dw3x3_576_14", 576, 576, 14, 3, 1, 2, true},
    {"mobilenet_dw3x3_960_7", 960, 960, 7, 3, 1, 2, true},
    {"efficientnet_stem_3x3s2_3to32_224_silu", 3, 32, 224, 3, 2, 1, false, false, true},
    {"efficientnet_1x1_16to96_112_silu", 16, 96, 112, 1, 1, 1, false, false, true},
    {"efficientnet_dw5x5s2_144_56", 144, 144, 56, 5, 2, 1, true},
    {"efficientnet_dw5x5_240_28", 240, 240, 28, 5, 1, 2, true},
    {"efficientnet_dw5x5_672_14", 672, 672, 14, 5, 1, 2, true},
};

void BM_QConv(benchmark::State& state, Layer l, qconv::Tile tile, int threads, Add add) {
  qconv::Geometry g;
  g.batch = 1, g.channels = l.c, g.in_h = g.in_w = l.hw, g.filters = l.m;
  g.kernel_h = g.kernel_w = l.k, g.stride_h = g.stride_w = l.stride, g.pad_top = g.pad_left = l.k / 2;
  g.out_h = g.out_w = (l.hw + 2 * g.pad_top - l.k) / l.stride + 1;
  std::mt19937 rng(1);
  const int wmax = qconv::needs_seven_bit_weights(tile) ? 64 : 127;
  // Weights as per-channel symmetric quantization writes a trained layer's: each filter's values
  // bell-shaped and scaled so that its largest is wmax (kiln's int8 resnet50: every filter's
  // largest 63, its mean magnitude 0.25-0.31 of that). kAvx2Bytes pairs quads on such weights as
  // on the models' (PackedWeights::paired_steps), on uniform ones rarely.
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> x(static_cast<size_t>(l.hw * l.hw * l.c));
  for (auto& v : x) v = static_cast<uint8_t>(byte(rng));
  const int64_t per_filter = (l.depthwise ? 1 : l.c) * l.k * l.k;
  std::vector<int8_t> w(static_cast<size_t>(l.m * per_filter));
  std::vector<float> values(static_cast<size_t>(per_filter));
  for (int64_t f = 0; f < l.m; ++f) {
    float largest = 0;
    for (float& v : values) v = normal(rng), largest = std::max(largest, std::fabs(v));
    for (int64_t i = 0; i < per_filter; ++i)
      w[static_cast<size_t>(f * per_filter + i)] =
          static_cast<int8_t>(std::nearbyint(values[static_cast<size_t>(i)] * static_cast<float>(wmax) / largest));
  }
  const qconv::PackedWeights packed = qconv::PackedWeights::pack(w.data(), g, tile);
  qconv::Requantize rq;
  rq.bias.assign(static_cast<size_t>(l.m), -1000);
  rq.scale.assign(static_cast<size_t>(l.m), 1e-4f);
  rq.zero_point = 3;
  kiln::kiln_ops::Activation silu;
  silu.kind = kiln::kiln_ops::Activation::Kind::kSilu;
  if (l.silu) rq.activation = &silu, rq.inverse_y_scale = 20.0f;  // (sums of a few 1e4 to floats of a few units)
  std::vector<uint8_t> y(static_cast<size_t>(g.out_h * g.out_w * l.m)), residual(y.size());
  for (auto& v : residual) v = static_cast<uint8_t>(byte(rng));
  // Scales as calibration gives them, not round numbers (whose ties keep the add from its
  // multiply-adds: QLinearBinaryMethod).
  const kiln::QLinearBinaryParams params{0.0371f, 0.0213f, 0.0497f, 121, 117, 119, 0, 255, false};
  if (add == Add::kFused) rq.add = {params, kiln::qlinear_binary_method(params, false)};
  static kiln::ThreadPool* const pools[3] = {nullptr, new kiln::ThreadPool(1), new kiln::ThreadPool(2)};
  std::vector<float> xf;  // KILN_BENCH_FROM_FLOAT=1: X float NCHW, quantized while staged (ai.kiln's)
  const float quantize_scale = 0.02f;
  if (std::getenv("KILN_BENCH_FROM_FLOAT")) {
    xf.resize(x.size());
    for (auto& v : xf) v = static_cast<float>(byte(rng)) * 0.02f - 2.56f;
  }
  auto run = [&] {
    if (!xf.empty())
      return qconv::conv(g, xf.data(), false, false, 128, packed, rq, y.data(), true, pools[threads], nullptr,
                         &quantize_scale);
    qconv::conv(g, x.data(), false, true, 128, packed, rq, y.data(), true, pools[threads], residual.data());
    if (add == Add::kApart)
      kiln::qlinear_binary_same_shape(params, false, y.data(), residual.data(), y.data(),
                                      static_cast<int64_t>(y.size()), pools[threads]);
  };
  run();  // warm up the staging buffer, caches and threads
  const kiln::bench::RunTimes t = kiln::bench::time_runs(state, run);
  auto inside = [&](int64_t out, int64_t size) {
    int64_t n = 0, lo, hi;
    for (int64_t o = 0; o < out; ++o, n += hi - lo)
      kiln::conv_util::indices_inside(l.k, size, 1, o * l.stride - l.k / 2, &lo, &hi);
    return n;
  };
  const double ops = 2.0 * l.m * (l.depthwise ? 1 : l.c) * inside(g.out_h, l.hw) * inside(g.out_w, l.hw);
  const double gops = ops / t.best * 1e-9;
  state.counters["us"] = t.best * 1e6;
  state.counters["GOPs"] = gops;
  state.counters["count"] = static_cast<double>(l.count);
  if (kiln::cpu_features().has_avx512_vnni())
    state.counters["pct_vnni_peak"] = 100.0 * gops / (4 * kiln::bench::peak_gflops(threads));
}

const bool kRegistered = [] {
  kiln::bench::register_fma_peak();
  for (const Layer& l : kLayers)
    for (const qconv::Tile tile : qconv::available_tiles(l.depthwise))
      for (int threads : {1, 2}) {
        qconv::Geometry g;
        g.channels = l.c, g.kernel_h = g.kernel_w = l.k, g.stride_h = g.stride_w = l.stride;
        if (!qconv::tile_fits(tile, g)) continue;
        for (const Add add : {Add::kNone, Add::kFused, Add::kApart}) {
          if (add != Add::kNone && (!l.residual || threads != 2)) continue;
          const std::string how = add == Add::kNone ? "" : add == Add::kFused ? "+add/fused" : "+add/apart";
          const std::string name = std::string(l.name) + how + "/" + qconv::tile_name(tile);
          benchmark::RegisterBenchmark((name + "/threads:" + std::to_string(threads)).c_str(), BM_QConv, l, tile,
                                       threads, add)
              ->UseRealTime()
              ->MinTime(0.2);
        }
      }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
