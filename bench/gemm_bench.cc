// FP32 GEMM throughput at the shapes kiln's models run (BERT projections and MLP, ResNet-50
// convolutions as im2col GEMMs), per micro-kernel, thread count and way of getting B (packed by
// every call, or prepacked once as the MatMul-like kernels do with weights), as GFLOP/s and as %
// of the peak fma_peak.h measures on this machine.
//   kiln_bench_gemm [--benchmark_filter=...]
//   KILN_BENCH_BLOCKS=mc,kc,nc[,kc_packed] overrides the kernels' cache blocks (for tuning them).
//   KILN_BENCH_COLD=1 evicts the caches before every timed call (timed_runs.h).
// "GFLOPs_best" uses the fastest iteration: on a shared machine it is the steadier figure.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "fma_peak.h"
#include "kernels/cpu/gemm/dynamic_quant_gemm.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/gemm/gemm_s16.h"
#include "kernels/cpu/gemm/gemm_u8s8.h"
#include "timed_runs.h"

namespace {


kiln::gemm::MicroKernel with_blocks_from_env(kiln::gemm::MicroKernel k) {
  if (const char* env = std::getenv("KILN_BENCH_BLOCKS")) {
    long mc = 0, kc = 0, nc = 0, kc_packed = 0;
    const int got = std::sscanf(env, "%ld,%ld,%ld,%ld", &mc, &kc, &nc, &kc_packed);
    if (got >= 3) k.mc = mc, k.kc = kc, k.nc = nc;
    if (got == 4) k.kc_packed = kc_packed;
  }
  return k;
}

// How B reaches the GEMM: packed by every call (a non-constant B), or packed once beforehand
// (a weight, what the MatMul/Gemm/FusedMatMul kernels do in Kernel::prepare).
enum class BMode { kPackedPerCall, kPrepacked };

void BM_Gemm(benchmark::State& state, kiln::gemm::MicroKernel kernel, int64_t m, int64_t n,
             int64_t k, int threads, BMode mode) {
  kernel = with_blocks_from_env(kernel);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  kiln::ThreadPool pool(threads);
  kiln::gemm::GemmF32Args g;
  g.m = m, g.n = n, g.k = k;
  g.a = a.data(), g.lda = k, g.b = b.data(), g.ldb = n, g.c = c.data(), g.ldc = n;
  kiln::gemm::PackedMatrix packed;
  if (mode == BMode::kPrepacked) {
    packed = kiln::gemm::PackedMatrix::pack_b(b.data(), n, false, k, n, &kernel);
    g.packed_b = &packed;
  }
  kiln::gemm::gemm_f32_blocked(g, &pool, &kernel);  // warm up buffers and threads
  const kiln::bench::RunTimes t =
      kiln::bench::time_runs(state, [&] { kiln::gemm::gemm_f32_blocked(g, &pool, &kernel); });
  const double gflops = 2.0 * m * n * k * state.iterations() / t.seconds * 1e-9;
  state.counters["GFLOPs"] = gflops;
  state.counters["GFLOPs_best"] = 2.0 * m * n * k / t.best * 1e-9;
  state.counters["pct_peak"] = 100.0 * gflops / kiln::bench::peak_gflops(threads);
}

// The integer GEMM of MatMulInteger/ConvInteger (gemm_s16.h) on a prepacked B, per tile, as
// GOP/s (two a product) and as % of the FP32 peak: its vpmaddwd does twice an FMA's products, so
// 200 % is this kernel's ceiling where the CPU issues two of them a cycle.
void BM_GemmS16(benchmark::State& state, kiln::gemm::S16Kernel kernel, int64_t m, int64_t n, int64_t k,
                int threads) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> dist(-255, 255);
  std::vector<int16_t> a(m * k), b(k * n);
  std::vector<int32_t> c(m * n);
  for (int16_t& x : a) x = static_cast<int16_t>(dist(rng));
  for (int16_t& x : b) x = static_cast<int16_t>(dist(rng));
  kiln::ThreadPool pool(threads);
  const auto packed = kiln::gemm::PackedS16::pack(b.data(), n, k, n, &kernel);
  kiln::gemm::gemm_s16(m, a.data(), k, packed, c.data(), n, &pool);
  const kiln::bench::RunTimes t =
      kiln::bench::time_runs(state, [&] { kiln::gemm::gemm_s16(m, a.data(), k, packed, c.data(), n, &pool); });
  const double gops = 2.0 * m * n * k * state.iterations() / t.seconds * 1e-9;
  state.counters["GOPs"] = gops;
  state.counters["GOPs_best"] = 2.0 * m * n * k / t.best * 1e-9;
  state.counters["pct_f32_peak"] = 100.0 * gops / kiln::bench::peak_gflops(threads);
}

// gemm_u8s8 on a prepacked int8 B (of 7-bit values on CPUs without VNNI, which take them alone),
// u8 A with per-row zero points, dequantized to floats in its tiles: DynamicQuantMatMul's GEMM.
// With `cold`, each run takes the next of enough copies of B (64 MiB in all) that it comes from
// memory, as a model's weights do.
void BM_GemmU8S8(benchmark::State& state, int64_t m, int64_t n, int64_t k, int threads, bool cold) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<uint8_t> a(m * k);
  std::vector<int8_t> b(k * n);
  for (uint8_t& x : a) x = static_cast<uint8_t>(dist(rng));
  const bool seven_bit = !kiln::gemm::u8s8_available(false);
  for (int8_t& x : b) x = static_cast<int8_t>((dist(rng) - 128) / (seven_bit ? 2 : 1));
  std::vector<int32_t> za(m, 100);
  std::vector<float> as(m, 0.01f), bs(n, 0.02f), y(m * n);
  kiln::gemm::Dequantize dq;
  dq.a_scale = as.data(), dq.a_per_row = true, dq.b_scale = bs.data(), dq.b_per_column = true;
  kiln::ThreadPool pool(threads);
  std::vector<kiln::gemm::PackedU8S8> packed(cold ? std::max<int64_t>(1, (int64_t{64} << 20) / (k * n)) : 1,
                                               kiln::gemm::PackedU8S8::pack(b.data(), true, n, k, n, {0}));
  size_t next = 0;
  auto run = [&] {
    kiln::gemm::gemm_u8s8(m, a.data(), false, k, za, packed[next], dq, y.data(), n, &pool);
    next = (next + 1) % packed.size();
  };
  run();
  const kiln::bench::RunTimes t = kiln::bench::time_runs(state, run);
  const double gops = 2.0 * m * n * k * state.iterations() / t.seconds * 1e-9;
  state.counters["GOPs"] = gops;
  state.counters["GOPs_best"] = 2.0 * m * n * k / t.best * 1e-9;
  state.counters["pct_f32_peak"] = 100.0 * gops / kiln::bench::peak_gflops(threads);
}

// DynamicQuantMatMul's product as the op runs it (DynamicQuantGemm): float A quantized to rows
// of `row_bits` at each run, int8 B (each column's normal values scaled so that its largest is
// 127, as per-column symmetric quantization writes them). Rows of 7 bits take gemm_u8s8's
// vpmaddubsw tile on any CPU; rows of 8, gemm_s16 where the CPU lacks VNNI.
void BM_DynamicQuantGemm(benchmark::State& state, int64_t m, int64_t n, int64_t k, int threads, int row_bits) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(m * k), w(k * n);
  for (float& x : a) x = normal(rng);
  for (float& x : w) x = normal(rng);
  std::vector<int8_t> b(k * n);
  for (int64_t j = 0; j < n; ++j) {
    float top = 0;
    for (int64_t q = 0; q < k; ++q) top = std::max(top, std::fabs(w[q * n + j]));
    for (int64_t q = 0; q < k; ++q) b[q * n + j] = static_cast<int8_t>(std::nearbyint(w[q * n + j] / top * 127.0f));
  }
  std::vector<float> bs(n, 0.02f), y(m * n);
  kiln::ThreadPool pool(threads);
  const kiln::gemm::DynamicQuantGemm g = kiln::gemm::DynamicQuantGemm::pack(b.data(), k, n, row_bits);
  auto run = [&] { g.run(a.data(), m, bs.data(), true, nullptr, nullptr, y.data(), &pool); };
  run();
  const kiln::bench::RunTimes t = kiln::bench::time_runs(state, run);
  state.counters["GOPs"] = 2.0 * m * n * k * state.iterations() / t.seconds * 1e-9;
  state.counters["GOPs_best"] = 2.0 * m * n * k / t.best * 1e-9;
}

void register_integer() {
  struct Shape {
    const char* name;
    int64_t m, n, k;
  };
  const Shape shapes[] = {{"crnn_cls_20x8210x1024", 20, 8210, 1024}, {"square_256x1024x1024", 256, 1024, 1024},
                          {"classifier_1x1000x1280", 1, 1000, 1280}};
  for (const auto& kernel : kiln::gemm::s16_kernels())
    for (const Shape& s : shapes)
      for (int threads : {1, 2}) {
        const std::string name = std::string(kernel.name) + "/" + s.name + "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_GemmS16, kernel, s.m, s.n, s.k, threads)
            ->UseRealTime()
            ->MinTime(0.3)
            ->Unit(benchmark::kMillisecond);
      }
  const kiln::CpuFeatures& f = kiln::cpu_features();
  const std::string tile = f.has_avx512_vnni() ? "u8s8_6x64_avx512vnni"
                           : f.has_avx_vnni()  ? "u8s8_6x16_avxvnni"
                                               : "u8s8_6x16_avx2_7bit";
  const Shape bert[] = {{"bert_qkvo_128x768x768", 128, 768, 768}, {"bert_fc1_128x3072x768", 128, 3072, 768},
                        {"bert_fc2_128x768x3072", 128, 768, 3072}, {"classifier_1x1000x1280", 1, 1000, 1280}};
  for (const Shape& s : bert)
    for (int threads : {1, 2})
      for (int row_bits : {8, 7}) {
        const std::string name = std::string("dynamic_quant_gemm/") + s.name + "/rows_" + std::to_string(row_bits) +
                                 "bit/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_DynamicQuantGemm, s.m, s.n, s.k, threads, row_bits)
            ->UseRealTime()
            ->MinTime(0.3)
            ->Unit(benchmark::kMillisecond);
      }
  for (const Shape& s : bert)
    for (int threads : {1, 2})
      for (bool cold : {false, true}) {
      const std::string name = tile + "/" + s.name + (cold ? "/cold_b" : "") +
                               "/threads:" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), BM_GemmU8S8, s.m, s.n, s.k, threads, cold)
          ->UseRealTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
}

void register_all() {
  kiln::bench::register_fma_peak();
  struct Shape {
    const char* name;
    int64_t m, n, k;
  };
  const Shape shapes[] = {
      {"bert_ffn_768x3072x768", 768, 3072, 768},  {"bert_b1_128x768x768", 128, 768, 768},
      {"bert_fc2_128x768x3072", 128, 768, 3072},  {"bert_3072x768x768", 3072, 768, 768},
      {"rn50_64x3136x576", 64, 3136, 576},
      {"rn50_256x196x2304", 256, 196, 2304},
      {"vit_fc1_197x3072x768", 197, 3072, 768},   {"vit_fc2_197x768x3072", 197, 768, 3072},
      {"vit_qkv_197x2304x768", 197, 2304, 768},
      {"mlp_block_64x3072x768", 64, 3072, 768},  {"mlp_block_64x768x3072", 64, 768, 3072},
      {"stft_97x514x512", 97, 514, 512},  // log-mel's STFT as a Conv: frames x filters x window
      {"rn50_cls_1x1000x2048", 1, 1000, 2048},  // a batch-1 classifier: B from L3 or memory
  };
  for (const auto& kernel : kiln::gemm::available_f32_kernels())
    for (const Shape& s : shapes)
      for (BMode mode : {BMode::kPackedPerCall, BMode::kPrepacked})
        for (int threads : {1, 2}) {
          const std::string name = std::string(kernel.name) + "/" + s.name +
                                   (mode == BMode::kPrepacked ? "/b_prepacked" : "/packs_b") +
                                   "/threads:" + std::to_string(threads);
          benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, kernel, s.m, s.n, s.k, threads, mode)
              ->UseRealTime()
              ->MinTime(0.3)
              ->Unit(benchmark::kMillisecond);
        }
  register_integer();
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
