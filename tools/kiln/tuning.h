// What `kiln optimize / run / bench` share for tuning: the --tune options, loading a model the
// way Session::load does while keeping its weights for the tuner, and the -v report.
#pragma once

#include <memory>
#include <string>

#include "kiln/model.h"
#include "kiln/tune.h"

namespace CLI {
class App;
}

namespace kiln::cli {

struct TuneFlags {
  bool tune = false;
  std::string cache;
  TuneOptions options;
};
// Adds --tuning-cache, --tune-node-ms and --tune-total-s, and --tune when `with_flag`.
void add_tune_options(CLI::App* cmd, TuneFlags* flags, bool with_flag);

// The model at `path` as Session::load would run it (optimized at `level` unless `kiln optimize`
// saved it), held by the caller, so that sessions on it leave its weights in place.
Result<Model> load_for_tuning(const std::string& path, int level);

// Tunes `model` on `inputs` for `threads` (as SessionOptions::threads) and records the choices
// in its metadata (replacing any recorded).
Result<TuneReport> tune_and_record(Model& model, const std::vector<Value>& inputs,
                                   const TuneFlags& flags, int threads);

// One line per tuned node (candidates and their times, the winner), then the totals.
void print_tune_report(const TuneReport& report);
// One summary line: how many nodes were timed, taken from the cache, or left over budget.
void print_tune_summary(const TuneReport& report);

}  // namespace kiln::cli
