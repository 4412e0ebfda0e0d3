// `kiln bench MODEL`: latency percentiles and throughput, inputs filled by the benchmark rule of
// ../shared/bench/README.md so that compare.sh measures kiln and ONNX Runtime on equal terms.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "cli.h"
#include "kiln/cpu.h"
#include "io_files.h"
#include "kiln/session.h"
#include "run_timing.h"
#include "tuning.h"

namespace kiln::cli {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

// kiln's own kernels, each registered backend forced in turn, and the tuned mix: the model's p50
// under each, the configurations alternating round by round, in a new order each round, so that
// drifts of a noisy machine hit them all alike. A row's p50 is the median of its rounds; its "vs
// kiln" is the median of its round's p50 over kiln's of the same round (paired: in fixed order
// with unpaired medians, two runs of the same kiln configuration read 0.82-0.99 of each other on
// resnet50, Zen 4).
Status print_backend_table(Model model, const std::vector<Value>& inputs, SessionOptions so,
                           const TuneFlags& tune, int iters, int warmup, int rounds) {
  model.clear_backend_choices();
  struct Row {
    std::string name;
    std::unique_ptr<Session> session;
    std::vector<double> p50s;
  };
  std::vector<Row> rows;
  for (const std::string& b : available_backends()) {
    so.backend = b;
    KILN_ASSIGN_OR_RETURN(auto s, Session::create(model, so));
    rows.push_back(Row{b, std::move(s), {}});
  }
  Model tuned = model;
  KILN_ASSIGN_OR_RETURN(TuneReport report, tune_and_record(tuned, inputs, tune, so.threads));
  print_tune_summary(report);
  so.backend = "kiln";
  KILN_ASSIGN_OR_RETURN(auto ts, Session::create(tuned, so));
  rows.push_back(Row{"tuned", std::move(ts), {}});
  std::vector<size_t> order(rows.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937 shuffle_rng(1);
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (size_t i : order) {
      KILN_ASSIGN_OR_RETURN(auto times,
                            time_runs(*rows[i].session, inputs, r == 0 ? warmup : 2, iters));
      rows[i].p50s.push_back(median(times));
    }
  }
  std::printf("%-14s %14s %10s %9s   (medians of %d rounds of %d runs)\n", "backend", "nodes taken",
              "p50 ms", "vs kiln", rounds, iters);
  for (Row& row : rows) {
    const auto nodes = row.session->node_backends();
    const auto taken = std::count_if(nodes.begin(), nodes.end(),
                                     [](const auto& nb) { return nb.second != "kiln"; });
    std::vector<double> vs_kiln;
    for (int r = 0; r < rounds; ++r) vs_kiln.push_back(row.p50s[r] / rows[0].p50s[r]);
    std::printf("%-14s %8zd / %-4zu %10.3f %9.3f\n", row.name.c_str(), static_cast<ssize_t>(taken),
                nodes.size(), median(row.p50s), median(vs_kiln));
  }
  return Status::ok();
}

// "backends    kiln 50, onednn 3": whose kernels the session's nodes run; with `each_node`, then
// a line per node another backend runs (the choices a tuned model recorded, as loaded).
void print_node_backends(const Session& session, bool each_node) {
  std::map<std::string, int> count;
  for (const auto& [node, backend] : session.node_backends()) ++count[backend];
  std::string line;
  for (const auto& [backend, n] : count)
    line += (line.empty() ? "" : ", ") + backend + " " + std::to_string(n);
  std::printf("backends    %s\n", line.c_str());
  if (!each_node) return;
  for (const auto& [node, backend] : session.node_backends())
    if (backend != "kiln") std::printf("    %-40s %s\n", node.c_str(), backend.c_str());
}

}  // namespace

void add_bench_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string model, backend = "kiln";
    bool json = false, no_arena = false, backends = false, verbose = false;
    int threads = 0, iters = 50, warmup = 5, level = 3, rounds = 3;
    InputShapes shape;
    TuneFlags tune;
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
  add_tune_options(cmd, &opt->tune, /*with_flag=*/true);
  cmd->add_flag("--backends", opt->backends,
                "A table of the latency with each backend forced and with the tuned mix");
  cmd->add_option("--rounds", opt->rounds, "With --backends: alternating rounds (default 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("-v,--verbose", opt->verbose, "List the nodes backends other than kiln run");
  cmd->add_flag("--no-arena", opt->no_arena, "Take every tensor from the heap instead of the memory plan's arena");
  add_shape_options(cmd, &opt->shape);
  cmd->callback([opt, exit_code] {
    auto fail = [&](const Status& st) {
      *exit_code = report_failure("bench", st);
    };
    SessionOptions so;
    so.threads = opt->threads;
    so.optimize_level = opt->level;
    so.memory_arena = !opt->no_arena;
    so.backend = opt->backend;
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Session> session;
    std::vector<Value> inputs;
    if (!opt->tune.tune && !opt->backends) {
      auto s = Session::load(opt->model, so);
      if (!s) return fail(s.status());
      session = std::move(s).value();
    } else {
      // The tuner replays nodes on their weights: the model stays here, shared with the sessions.
      auto model = load_for_tuning(opt->model, opt->level);
      if (!model) return fail(model.status());
      auto in = make_bench_inputs(model->inputs(), opt->shape);
      if (!in) return fail(in.status());
      inputs = std::move(in).value();
      if (opt->backends) {
        Status st = print_backend_table(*model, inputs, so, opt->tune, opt->iters, opt->warmup,
                                        opt->rounds);
        if (!st.is_ok()) return fail(st);
        return;
      }
      auto report = tune_and_record(*model, inputs, opt->tune, so.threads);
      if (!report) return fail(report.status());
      if (!opt->json) print_tune_summary(*report);
      auto s = Session::create(*model, so);
      if (!s) return fail(s.status());
      session = std::move(s).value();
    }
    const double load_ms = ms_since(t0);
    if (inputs.empty()) {
      auto in = make_bench_inputs(session->inputs(), opt->shape);
      if (!in) return fail(in.status());
      inputs = std::move(in).value();
    }
    const bool progress = isatty(STDERR_FILENO);
    auto timed = time_runs(*session, inputs, opt->warmup, opt->iters, progress);
    if (!timed) return fail(timed.status());
    const std::vector<double>& times = *timed;
    double wall_ms = 0;
    for (double t : times) wall_ms += t;
    std::vector<double> s = times;
    std::sort(s.begin(), s.end());
    auto pct = [&](double q) { return s[std::min(s.size() - 1, static_cast<size_t>(q / 100 * s.size()))]; };
    double mean = 0;
    for (double t : times) mean += t / times.size();
    const double throughput = opt->shape.batch * 1000.0 * times.size() / wall_ms;
    if (opt->json) {
      nlohmann::ordered_json j = {{"engine", "kiln"},
                                  {"model", opt->model},
                                  {"threads", session->threads()},
                                  {"isa", isa_name(active_isa())},
                                  {"batch", opt->shape.batch},
                                  {"seq", opt->shape.seq},
                                  {"shapes", opt->shape.shapes},
                                  {"load_ms", std::round(load_ms * 10) / 10},
                                  {"p50_ms", round3(pct(50))},
                                  {"p90_ms", round3(pct(90))},
                                  {"p99_ms", round3(pct(99))},
                                  {"mean_ms", round3(mean)},
                                  {"min_ms", round3(s.front())},
                                  {"iters", opt->iters},
                                  {"throughput_per_s", round3(throughput)}};
      std::cout << j.dump() << std::endl;
      return;
    }
    std::printf("model       %s\nthreads     %d\nisa         %s\nload        %.1f ms\n", opt->model.c_str(),
                session->threads(), isa_name(active_isa()), load_ms);
    print_node_backends(*session, opt->verbose);
    std::printf("latency     p50 %.3f  p90 %.3f  p99 %.3f  mean %.3f  min %.3f ms (%d runs)\n", pct(50), pct(90),
                pct(99), mean, s.front(), opt->iters);
    std::printf("throughput  %.2f samples/s (batch %lld)\n", throughput, static_cast<long long>(opt->shape.batch));
  });
}

}  // namespace kiln::cli
