// `kiln profile MODEL`: where the time of a run goes — per node and per op type, with GFLOP/s
// against the FMA peak of its threads and ISA — and optionally a Chrome trace of one run.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "io_files.h"
#include "kiln/session.h"
#include "kiln/cpu.h"

namespace kiln::cli {
namespace {

std::string qualified_op(const NodeTiming& t) {
  return t.domain.empty() ? t.op_type : t.domain + "." + t.op_type;
}

// A node's mean over the profiled runs.
struct NodeStats {
  const NodeTiming* first;  // name, op and FLOPs (the same every run)
  double total_us = 0;
};

// Long names keep their end, which tells nodes apart ("/layer4/layer4.0/downsample/...").
std::string fit(const std::string& s, size_t width) {
  return s.size() <= width ? s : "..." + s.substr(s.size() - (width - 3));
}

// GFLOP/s of `flops` in `us` microseconds, as text; blank without FLOPs.
std::string gflops_str(double flops, double us) {
  if (flops <= 0 || us <= 0) return "";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", flops / us / 1e3);
  return b;
}

Status write_trace(const std::string& path, const RunProfile& p) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  events.push_back({{"name", "run"},
                    {"cat", "run"},
                    {"ph", "X"},
                    {"ts", 0.0},
                    {"dur", p.wall_us},
                    {"pid", 1},
                    {"tid", 1},
                    {"args", nlohmann::ordered_json::object()}});
  for (const NodeTiming& t : p.nodes) {
    nlohmann::ordered_json args = {{"op", qualified_op(t)}, {"inputs", t.input_shapes}};
    if (t.flops >= 0) args["flops"] = t.flops;
    if (t.flops > 0 && t.dur_us > 0) args["gflops_per_s"] = t.flops / t.dur_us / 1e3;
    events.push_back({{"name", t.node.empty() ? t.op_type : t.node},
                      {"cat", qualified_op(t)},
                      {"ph", "X"},
                      {"ts", t.start_us},
                      {"dur", t.dur_us},
                      {"pid", 1},
                      {"tid", 1},
                      {"args", std::move(args)}});
  }
  nlohmann::ordered_json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  std::ofstream out(path);
  if (!out) return Status::error("cannot write '" + path + "'");
  out << doc.dump() << "\n";
  if (!out) return Status::error("writing '" + path + "' failed");
  return Status::ok();
}

}  // namespace

void add_profile_command(CLI::App& app, int* exit_code) {
  struct Options {
    std::string model, trace, backend = "kiln";
    InputOptions inputs;
    int threads = 0, iters = 10, warmup = 3, level = 3, top = 20;
    double peak = 0;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd =
      app.add_subcommand("profile", "Time each node of a run; per-op totals; Chrome trace");
  cmd->add_option("model", opt->model, "ONNX model")->required();
  add_input_options(cmd, &opt->inputs);
  cmd->add_option("--threads", opt->threads, "Threads (default: one per core)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option(
         "-O,--optimize", opt->level,
         "Optimization at load, 0-3 (default 3; a model saved by `kiln optimize` is run as saved)")
      ->check(CLI::Range(0, 3));
  cmd->add_option("--iters", opt->iters, "Profiled runs (default 10)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", opt->warmup, "Unprofiled runs first (default 3)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--backend", opt->backend, "Kernels from this backend where it takes a node, kiln's own elsewhere (default kiln; e.g. openblas)");
  cmd->add_option("--top", opt->top, "Nodes listed (default 20)")->check(CLI::Range(1, 1000000));
  cmd->add_option("--trace", opt->trace,
                  "Write a Chrome trace (chrome://tracing, Perfetto) of the last run");
  cmd->add_option("--peak", opt->peak,
                  "GFLOP/s taken as 100% (default: the FMA peak of the run's threads and ISA, measured at start)")
      ->check(CLI::PositiveNumber);
  cmd->callback([opt, exit_code] {
    auto fail = [&](const Status& st) {
      *exit_code = report_failure("profile", st);
    };
    SessionOptions so;
    so.threads = opt->threads;
    so.optimize_level = opt->level;
    so.backend = opt->backend;
    auto session = Session::load(opt->model, so);
    if (!session) return fail(session.status());
    InputOptions io = opt->inputs;
    if (io.files.empty()) io.random = true;  // no files: inputs by the benchmark rule
    auto inputs = make_inputs((*session)->inputs(), io);
    if (!inputs) return fail(inputs.status());
    const int threads = (*session)->threads();
    const bool measured = opt->peak <= 0;
    const double peak = measured ? fma_peak_gflops(threads) : opt->peak;

    for (int i = 0; i < opt->warmup; ++i) {
      auto r = (*session)->run(*inputs);
      if (!r) return fail(r.status());
    }
    std::vector<RunProfile> runs(opt->iters);
    for (RunProfile& p : runs) {
      auto r = (*session)->run_profiled(*inputs, &p);
      if (!r) return fail(r.status());
      if (p.nodes.size() != runs.front().nodes.size())
        return fail(Status::error("the number of nodes run changed between runs"));
    }
    std::set<std::string> reference;  // nodes on plain reference loops
    for (const ReferenceNode& r : (*session)->reference_nodes(*inputs)) reference.insert(r.node);
    std::vector<NodeStats> nodes;
    for (const NodeTiming& t : runs.front().nodes) nodes.push_back({&t});
    double wall_us = 0;
    for (const RunProfile& p : runs) {
      wall_us += p.wall_us / runs.size();
      for (size_t k = 0; k < p.nodes.size(); ++k) nodes[k].total_us += p.nodes[k].dur_us;
    }
    double node_us = 0;
    for (NodeStats& n : nodes) {
      n.total_us /= runs.size();  // now the mean
      node_us += n.total_us;
    }
    const double sum_us = std::max(node_us, 1e-9);

    std::printf(
        "model    %s (-O%d)\nthreads  %d\nisa      %s\npeak     %.1f GFLOP/s (%s)\nruns     %d profiled after "
        "%d warmup\n",
        opt->model.c_str(), opt->level, threads, isa_name(active_isa()), peak,
        measured ? "FMA loop on every thread at once, at this ISA; --peak sets it" : "--peak", opt->iters,
        opt->warmup);

    std::vector<const NodeStats*> order;
    for (const NodeStats& n : nodes) order.push_back(&n);
    std::stable_sort(order.begin(), order.end(),
                     [](auto* a, auto* b) { return a->total_us > b->total_us; });
    const size_t top = std::min<size_t>(opt->top, order.size());
    std::printf("\ntop %zu of %zu nodes by mean time (ref: the node ran a plain reference loop)\n", top,
                order.size());
    std::printf("  %-40s %-24s %9s %6s %8s %6s\n", "node", "op", "ms", "%", "GFLOP/s", "%peak");
    for (size_t k = 0; k < top; ++k) {
      const NodeStats& n = *order[k];
      const double f = static_cast<double>(n.first->flops);
      std::string pct_peak;
      if (f > 0 && n.total_us > 0) {
        char b[16];
        std::snprintf(b, sizeof b, "%.0f", 100.0 * f / n.total_us / 1e3 / peak);
        pct_peak = b;
      }
      std::printf("  %-40s %-24s %9.3f %6.1f %8s %6s%s\n", fit(n.first->node, 40).c_str(),
                  fit(qualified_op(*n.first), 24).c_str(), n.total_us / 1e3,
                  100 * n.total_us / sum_us, gflops_str(f, n.total_us).c_str(), pct_peak.c_str(),
                  reference.count(n.first->node) ? "  ref" : "");
    }

    struct OpTotal {
      int count = 0;
      double us = 0, flops = 0;
    };
    std::map<std::string, OpTotal> ops;
    for (const NodeStats& n : nodes) {
      OpTotal& o = ops[qualified_op(*n.first)];
      ++o.count;
      o.us += n.total_us;
      if (n.first->flops > 0) o.flops += static_cast<double>(n.first->flops);
    }
    std::vector<std::pair<std::string, OpTotal>> by_time(ops.begin(), ops.end());
    std::stable_sort(by_time.begin(), by_time.end(),
                     [](auto& a, auto& b) { return a.second.us > b.second.us; });
    std::printf("\nby op type\n  %-32s %6s %9s %6s %8s\n", "op", "count", "ms", "%", "GFLOP/s");
    for (const auto& [op, o] : by_time)
      std::printf("  %-32s %6d %9.3f %6.1f %8s\n", fit(op, 32).c_str(), o.count, o.us / 1e3,
                  100 * o.us / sum_us, gflops_str(o.flops, o.us).c_str());

    int ref_nodes = 0;
    double ref_us = 0;
    std::map<std::string, int> ref_ops;
    for (const NodeStats& n : nodes)
      if (reference.count(n.first->node)) {
        ++ref_nodes;
        ref_us += n.total_us;
        ++ref_ops[qualified_op(*n.first)];
      }
    std::string ref_list;
    for (const auto& [op, count] : ref_ops) ref_list += (ref_list.empty() ? "" : ", ") + op + " " + std::to_string(count);
    std::printf("\nreference %d nodes on plain reference loops, %.3f ms (%.1f%% of node time)%s%s\n", ref_nodes,
                ref_us / 1e3, 100 * ref_us / sum_us, ref_list.empty() ? "" : ": ", ref_list.c_str());
    std::printf("\ntotal    %.3f ms per run (mean); nodes %.3f ms; overhead %.3f ms (%.1f%%)\n",
                wall_us / 1e3, node_us / 1e3, (wall_us - node_us) / 1e3,
                wall_us > 0 ? 100 * (wall_us - node_us) / wall_us : 0.0);
    if (!opt->trace.empty()) {
      Status st = write_trace(opt->trace, runs.back());
      if (!st.is_ok()) return fail(st);
      std::printf("trace    %s (last run; open in chrome://tracing or ui.perfetto.dev)\n",
                  opt->trace.c_str());
    }
  });
}

}  // namespace kiln::cli
