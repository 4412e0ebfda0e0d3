// `kiln bench MODEL`: latency percentiles and throughput, inputs filled by the benchmark rule of
// ../shared/bench/README.md so that compare.sh measures kiln and ONNX Runtime on equal terms.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "io_files.h"

namespace kiln::cli {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

}  // namespace

void add_bench_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string model, backend = "kiln";
    bool json = false, no_arena = false;
    int threads = 0, iters = 50, warmup = 5, level = 3;
    int64_t batch = 1, seq = 128;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure latency and throughput");
  cmd->add_option("model", opt->model, "ONNX model")->required();
  cmd->add_flag("--json", opt->json, "Print one JSON line");
  cmd->add_option("--threads", opt->threads, "Threads (default: one per core)")->check(CLI::Range(0, 1024));
  cmd->add_option("-O,--optimize", opt->level, "Optimization at load, 0-3 (default 3; a model saved by `kiln optimize` is run as saved)")
      ->check(CLI::Range(0, 3));
  cmd->add_option("--iters", opt->iters, "Timed runs")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", opt->warmup, "Untimed runs first")->check(CLI::Range(0, 1000000));
  cmd->add_option("--backend", opt->backend, "Kernels from this backend where it takes a node, kiln's own elsewhere (default kiln; e.g. openblas)");
  cmd->add_flag("--no-arena", opt->no_arena, "Take every tensor from the heap instead of the memory plan's arena");
  cmd->add_option("--batch", opt->batch, "Size of a dynamic first dimension")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seq", opt->seq, "Size of other dynamic dimensions")->check(CLI::Range(1, 1 << 20));
  cmd->callback([opt, exit_code] {
    auto fail = [&](const Status& st) {
      std::cerr << "kiln bench: " << st.message() << "\n";
      *exit_code = 1;
    };
    SessionOptions so;
    so.threads = opt->threads;
    so.optimize_level = opt->level;
    so.memory_arena = !opt->no_arena;
    so.backend = opt->backend;
    auto t0 = std::chrono::steady_clock::now();
    auto session = Session::load(opt->model, so);
    if (!session) return fail(session.status());
    const double load_ms = ms_since(t0);
    auto inputs = make_bench_inputs(**session, opt->batch, opt->seq);
    if (!inputs) return fail(inputs.status());
    const bool progress = isatty(STDERR_FILENO);
    // Runs write into the same outputs each time, so that a timed run allocates no tensor.
    std::vector<Value> outputs;
    for (int i = 0; i < opt->warmup; ++i) {
      Status r = (*session)->run_into(*inputs, outputs);
      if (!r.is_ok()) return fail(r);
      if (progress) std::fprintf(stderr, "\rwarmup %d/%d", i + 1, opt->warmup);
    }
    std::vector<double> times;
    times.reserve(opt->iters);
    auto wall0 = std::chrono::steady_clock::now();
    for (int i = 0; i < opt->iters; ++i) {
      auto t = std::chrono::steady_clock::now();
      Status r = (*session)->run_into(*inputs, outputs);
      times.push_back(ms_since(t));
      if (!r.is_ok()) return fail(r);
      if (progress) std::fprintf(stderr, "\rrun %d/%d, last %.2f ms   ", i + 1, opt->iters, times.back());
    }
    const double wall_ms = ms_since(wall0);
    if (progress) std::fprintf(stderr, "\r%*s\r", 40, "");
    std::vector<double> s = times;
    std::sort(s.begin(), s.end());
    auto pct = [&](double q) { return s[std::min(s.size() - 1, static_cast<size_t>(q / 100 * s.size()))]; };
    double mean = 0;
    for (double t : times) mean += t / times.size();
    const double throughput = opt->batch * 1000.0 * times.size() / wall_ms;
    if (opt->json) {
      nlohmann::ordered_json j = {
          {"engine", "kiln"}, {"model", opt->model}, {"threads", (*session)->threads()},
          {"batch", opt->batch}, {"seq", opt->seq}, {"load_ms", std::round(load_ms * 10) / 10},
          {"p50_ms", round3(pct(50))}, {"p90_ms", round3(pct(90))}, {"p99_ms", round3(pct(99))},
          {"mean_ms", round3(mean)}, {"min_ms", round3(s.front())}, {"iters", opt->iters},
          {"throughput_per_s", round3(throughput)}};
      std::cout << j.dump() << std::endl;
      return;
    }
    std::printf("model       %s\nthreads     %d\nload        %.1f ms\n", opt->model.c_str(), (*session)->threads(), load_ms);
    std::printf("latency     p50 %.3f  p90 %.3f  p99 %.3f  mean %.3f  min %.3f ms (%d runs)\n", pct(50), pct(90),
                pct(99), mean, s.front(), opt->iters);
    std::printf("throughput  %.2f samples/s (batch %lld)\n", throughput, static_cast<long long>(opt->batch));
  });
}

}  // namespace kiln::cli
