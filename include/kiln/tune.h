// Timing-based kernel choice: for each node more than one backend can run, time every candidate
// kernel on the values the node really sees and keep the fastest that agrees with kiln's own.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln {

namespace ir {
struct Model;
}

struct TuneOptions {
  int threads = 0;              // as SessionOptions::threads: the count the choices are for
  double node_budget_ms = 400;  // timing of one node, all its candidates together
  double total_budget_s = 60;   // all nodes; past it, the rest keep kiln's own kernels
  // A candidate whose outputs differ from kiln's own kernel's beyond atol + rtol·|reference|
  // (numpy.isclose) is rejected.
  double rtol = 1e-3, atol = 1e-4;
  // A JSON file of earlier decisions, read first and written back: "" for none.
  std::string cache_path;
  // Another backend must beat kiln's own kernel by this fraction to be chosen for a node, and a
  // configuration of choices must beat kiln's kernels alone by it in the whole-model check: ties
  // are noise, and a library's kernel brings its own threads, which compete with kiln's.
  double min_gain = 0.03;
  // Whole-model check of the per-node choices (below): each configuration runs at least this
  // many times, one run of each in turn; a faster model runs more, up to 61 (about 3 s of each).
  int model_rounds = 9;
};

// One configuration the whole-model check ran, and its time.
struct ModelTiming {
  // "kiln" (no choices), "mix" (all choices), "mix: onednn" (onednn's choices only), "all: onednn"
  // (onednn for every node it runs correctly, as forcing it would)
  std::string config;
  double ms = 0;  // the lower quartile of its runs
  // How sure the check is against kiln's kernels alone, run for run: the median over rounds of
  // this configuration's time over kiln's in the same round, and the rounds it was the faster.
  double vs_kiln = 1;
  int faster_rounds = 0, rounds = 0;
};

// One candidate kernel of a node: its median time per run, or why it was not timed or chosen.
struct CandidateTiming {
  std::string backend;  // a backend, or a variant of kiln's kernels ("kiln.direct")
  double median_us = 0;
  std::string rejected;  // "" when timed and correct
};

struct NodeTuning {
  std::string key;                          // backends::node_key: the node's first output
  std::string op_type;                      // "ai.kiln.BlockedConv"
  std::string shapes;                       // input shapes, "[1,64,56,56,8] [8,8,3,3,8,8]"
  std::vector<CandidateTiming> candidates;  // empty when the decision came from the cache
  std::string winner;
  bool cached = false;       // decided by the tuning cache, nothing timed
  bool over_budget = false;  // not timed: the total budget was spent
};

struct TuneReport {
  std::vector<NodeTuning> nodes;               // the nodes with more than one candidate
  std::map<std::string, std::string> choices;  // node key -> backend, where not kiln's own
  // Nodes are timed alone, but in a model a library's threads (OpenMP, OpenBLAS's, pthreadpool)
  // keep spinning after its kernel and slow kiln's next one. So the whole model is then timed in
  // each configuration (ModelTiming): kiln's kernels only, all the choices, each backend's
  // choices alone, each backend wherever it can run; `choices` keeps the fastest one's, which is
  // thus never slower than one backend alone (within the noise of the timing).
  std::vector<ModelTiming> model_timings;
  std::string kept = "kiln";  // the configuration `choices` is
  bool kept_from_cache = false;   // the whole-model decision came from the tuning cache
  int timed = 0, cache_hits = 0;  // nodes timed, nodes decided by the cache
  double seconds = 0;
};

// Tunes `model` (as it will be run: optimized already) on `inputs`, one value per graph input
// that is not an initializer. The choices take effect once recorded in the model's metadata
// (record_backend_choices): sessions made on it, and loads of it once saved, use them.
Result<TuneReport> tune(const ir::Model& model, const std::vector<Value>& inputs,
                        const TuneOptions& options = {});

// Records `choices` in the model's metadata ("kiln.backends"): sessions loading it use them.
void record_backend_choices(ir::Model& model, const std::map<std::string, std::string>& choices);

}  // namespace kiln
