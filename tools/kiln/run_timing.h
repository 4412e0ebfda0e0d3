// Timed runs of a session, as `kiln bench` takes them: warm-up runs first, then each run timed,
// all into the same outputs so that a timed run allocates no tensor.
#pragma once

#include <vector>

#include "kiln/session.h"

namespace kiln::cli {

// Milliseconds of each of `iters` runs after `warmup` untimed ones.
Result<std::vector<double>> time_runs(Session& session, const std::vector<Value>& inputs,
                                      int warmup, int iters, bool progress = false);

// The median of `times` (which it reorders).
double median(std::vector<double> times);

}  // namespace kiln::cli
