#include "tuning.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>


namespace kiln::cli {

void add_tune_options(CLI::App* cmd, TuneFlags* f, bool with_flag) {
  if (with_flag)
    cmd->add_flag("--tune", f->tune,
                  "Time each backend that can run a node on the real shapes and keep the fastest");
  cmd->add_option(
      "--tuning-cache", f->cache,
      "JSON file of earlier timing decisions, reused where the key matches and updated");
  cmd->add_option("--tune-node-ms", f->options.node_budget_ms,
                  "Timing budget of one node, all candidates (default 400)")
      ->check(CLI::Range(1.0, 1e6));
  cmd->add_option("--tune-total-s", f->options.total_budget_s,
                  "Timing budget of the whole model; later nodes keep kiln's kernels (default 60)")
      ->check(CLI::Range(0.0, 1e6));
}

Result<Model> load_for_tuning(const std::string& path, int level) {
  KILN_ASSIGN_OR_RETURN(Model m, Model::load(path));
  if (auto optimized = m.optimize_unless_saved(level); !optimized)
    return optimized.status().with_context(path);
  return m;
}

Result<TuneReport> tune_and_record(Model& model, const std::vector<Value>& inputs,
                                   const TuneFlags& flags, int threads) {
  TuneOptions to = flags.options;
  to.threads = threads;
  to.cache_path = flags.cache;
  return model.tune(inputs, to);
}

// "0.951x kiln's time, faster in 29 of 31 rounds": a configuration against kiln's kernels alone.
std::string against_kiln(const ModelTiming& t) {
  char s[96];
  std::snprintf(s, sizeof(s), "%.3fx kiln's time, faster in %d of %d rounds", t.vs_kiln,
                t.faster_rounds, t.rounds);
  return s;
}

void print_tune_summary(const TuneReport& r) {
  int over = 0;
  for (const NodeTuning& n : r.nodes) over += n.over_budget ? 1 : 0;
  std::string how = r.kept_from_cache         ? "from the cache"
                    : r.model_timings.empty() ? "nothing to compare"
                                              : "timed";
  // How sure: the kept configuration against kiln's kernels alone, or, when that is kiln's, the
  // closest other one.
  const ModelTiming* shown = nullptr;
  for (const ModelTiming& t : r.model_timings) {
    if (t.config == "kiln") continue;
    if (t.config == r.kept || (r.kept == "kiln" && (!shown || t.vs_kiln < shown->vs_kiln))) shown = &t;
  }
  if (shown)
    how += (r.kept == "kiln" ? "; closest " + shown->config + ": " : ": ") + against_kiln(*shown);
  std::printf(
      "tuning      %zu nodes with several backends: %d timed, %d from the cache, %d over "
      "budget; %zu not kiln's own (%s, %s); %.1f s\n",
      r.nodes.size(), r.timed, r.cache_hits, over, r.choices.size(), r.kept.c_str(), how.c_str(),
      r.seconds);
}

void print_tune_report(const TuneReport& r) {
  double own_us = 0, chosen_us = 0;
  for (const NodeTuning& n : r.nodes) {
    std::printf("%-28s %-22s %s\n", n.key.substr(0, 28).c_str(), n.op_type.c_str(),
                n.shapes.c_str());
    if (n.cached) std::printf("    %-10s (tuning cache)\n", n.winner.c_str());
    if (n.over_budget) std::printf("    %-10s (not timed: total budget spent)\n", n.winner.c_str());
    double own = 0, chosen = 0;
    for (const CandidateTiming& c : n.candidates) {
      const bool won = c.backend == n.winner;
      if (c.rejected.empty())
        std::printf("    %-10s %10.1f us%s\n", c.backend.c_str(), c.median_us,
                    won ? "  <- chosen" : "");
      else
        std::printf("    %-10s rejected: %s\n", c.backend.c_str(), c.rejected.c_str());
      if (c.backend == "kiln" && c.rejected.empty()) own = c.median_us;
      if (won) chosen = c.median_us;
    }
    if (own > 0 && chosen > 0) {
      own_us += own;
      chosen_us += chosen;
    }
  }
  // Predicted: the model's time with kiln's kernels less what the choices saved node by node.
  double own_model = 0;
  for (const ModelTiming& t : r.model_timings) {
    if (t.config == "kiln") own_model = t.ms;
    const std::string sure = t.config == "kiln" ? "" : against_kiln(t);
    std::printf("model p25 %-20s %10.3f ms  %s%s\n", t.config.c_str(), t.ms, sure.c_str(),
                t.config == r.kept ? "  <- kept" : "");
  }
  if (own_model > 0 && own_us > 0) {
    double kept_ms = own_model;
    for (const ModelTiming& t : r.model_timings)
      if (t.config == r.kept) kept_ms = t.ms;
    const double predicted = own_model / std::max(own_model - (own_us - chosen_us) / 1000, 1e-9);
    std::printf(
        "speedup over kiln's own kernels: predicted %.3fx (from the node timings), "
        "measured %.3fx (%s)\n",
        predicted, own_model / kept_ms, r.kept.c_str());
  }
  // What the model records (`kiln bench -v` lists the same nodes when it loads the model).
  std::printf("kept        %s: %zu nodes on other backends\n", r.kept.c_str(), r.choices.size());
  for (const auto& [node, backend] : r.choices)
    std::printf("    %-40s %s\n", node.c_str(), backend.c_str());
  print_tune_summary(r);
}

}  // namespace kiln::cli
