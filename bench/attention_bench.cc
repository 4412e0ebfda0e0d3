// Attention throughput at bert_base's shapes (12 heads of 64, batch 1, seq 128 and 512; 197 is
// ViT-B/16's tokens): the
// flash-attention core alone (Q·K^T, softmax, ·V) per micro-kernel, and the whole
// ai.kiln.MultiHeadAttention op (projection GEMM included) through a session, as GFLOP/s and %
// of the FMA peak fma_peak.h measures on this machine.
//   kiln_bench_attention [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "fma_peak.h"
#include "ir/graph.h"
#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/gemm/microkernel.h"
#include "kiln/session.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kHeads = 12, kHeadDim = 64, kHidden = kHeads * kHeadDim;

std::vector<float> random_vec(int64_t n, float lo, float hi) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

void report(benchmark::State& state, double flops, double seconds, int threads) {
  const double gflops = flops * static_cast<double>(state.iterations()) / seconds * 1e-9;
  state.counters["GFLOPs"] = gflops;
  state.counters["pct_peak"] = 100.0 * gflops / kiln::bench::peak_gflops(threads);
}

// The core on Q|K|V rows as the op's projection lays them out, with BERT's padding mask.
void BM_Core(benchmark::State& state, kiln::gemm::MicroKernel kernel, int64_t seq, int threads) {
  const auto qkv = random_vec(seq * 3 * kHidden, -1, 1);
  const auto mask = random_vec(seq, -1, 0);
  std::vector<float> y(static_cast<size_t>(seq * kHidden));
  kiln::attention::AttentionArgs a;
  a.batch = 1, a.heads = kHeads, a.seq = seq, a.head_dim = kHeadDim;
  a.q = {qkv.data(), seq * 3 * kHidden, 3 * kHidden};
  a.k = {qkv.data() + kHidden, seq * 3 * kHidden, 3 * kHidden};
  a.v = {qkv.data() + 2 * kHidden, seq * 3 * kHidden, 3 * kHidden};
  a.y = y.data(), a.y_batch_stride = seq * kHidden, a.y_token_stride = kHidden;
  a.scale = 0.125f, a.mask = mask.data(), a.mask_strides[3] = 1;
  kiln::ThreadPool pool(threads);
  kiln::attention::attention_f32(a, &pool, {&kernel});  // warm up buffers and threads
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    kiln::attention::attention_f32(a, &pool, {&kernel});
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    benchmark::ClobberMemory();
  }
  report(state, 4.0 * kHeads * seq * seq * kHeadDim, seconds, threads);
}

// The whole op: one MultiHeadAttention node with bert_base's weights' shapes, through a session.
void BM_Op(benchmark::State& state, int64_t seq, int threads) {
  auto model = std::make_shared<kiln::ir::Model>();
  model->opsets[""] = 17, model->opsets["ai.kiln"] = 1;
  auto& g = model->graph;
  g.inputs.push_back(
      {"x", kiln::ir::TypeInfo::tensor(kiln::DType::kFloat32, {1, seq, kHidden}), ""});
  g.inputs.push_back(
      {"mask", kiln::ir::TypeInfo::tensor(kiln::DType::kFloat32, {1, 1, 1, seq}), ""});
  g.outputs.push_back({"y", kiln::ir::TypeInfo::tensor(kiln::DType::kFloat32), ""});
  for (const auto& [name, shape] :
       {std::pair<std::string, kiln::Shape>{"w", {kHidden, 3 * kHidden}}, {"b", {3 * kHidden}}}) {
    kiln::Tensor t = kiln::Tensor::make(kiln::DType::kFloat32, shape).value();
    const auto v = random_vec(t.numel(), -0.05f, 0.05f);
    std::copy(v.begin(), v.end(), t.data<float>());
    g.initializers[name] = t;
  }
  kiln::ir::Node n;
  n.name = "mha", n.op_type = "MultiHeadAttention", n.domain = "ai.kiln";
  n.inputs = {"x", "w", "b", "mask"}, n.outputs = {"y"};
  kiln::ir::Attribute heads, scale;
  heads.name = "num_heads", heads.type = kiln::ir::Attribute::Type::kInt, heads.i = kHeads;
  scale.name = "scale", scale.type = kiln::ir::Attribute::Type::kFloat, scale.f = 0.125f;
  n.attrs = {heads, scale};
  g.nodes.push_back(n);
  kiln::SessionOptions opts;
  opts.threads = threads;
  auto session = kiln::Session::create(model, opts);
  if (!session) {
    state.SkipWithError(session.status().message().c_str());
    return;
  }
  kiln::Tensor x = kiln::Tensor::make(kiln::DType::kFloat32, {1, seq, kHidden}).value();
  kiln::Tensor mask = kiln::Tensor::make(kiln::DType::kFloat32, {1, 1, 1, seq}).value();
  const auto xv = random_vec(x.numel(), -1, 1);
  std::copy(xv.begin(), xv.end(), x.data<float>());
  const std::vector<kiln::Value> feeds = {kiln::Value::of(x), kiln::Value::of(mask)};
  (void)(*session)->run(feeds);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    auto out = (*session)->run(feeds);
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    benchmark::DoNotOptimize(out);
  }
  const double projection = 2.0 * seq * kHidden * 3 * kHidden;
  report(state, projection + 4.0 * kHeads * seq * seq * kHeadDim, seconds, threads);
}

void register_all() {
  kiln::bench::register_fma_peak();
  for (int64_t seq : {128, 197, 512})
    for (int threads : {1, 2}) {
      const std::string shape =
          "/seq:" + std::to_string(seq) + "/threads:" + std::to_string(threads);
      for (const auto& kernel : kiln::gemm::available_f32_kernels())
        benchmark::RegisterBenchmark(("core/" + std::string(kernel.name) + shape).c_str(), BM_Core,
                                     kernel, seq, threads)
            ->UseRealTime()
            ->MinTime(0.3)
            ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("op" + shape).c_str(), BM_Op, seq, threads)
          ->UseRealTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
