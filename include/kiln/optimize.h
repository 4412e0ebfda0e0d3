// Model optimization: the pass pipeline `kiln optimize` and model loading run.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/status.h"

namespace kiln {

namespace ir {
struct Model;
}

struct OptimizeOptions {
  // 0: nothing; 1: exact simplifications keeping standard ONNX ops (portable); 2: also fusion into
  // kiln's own ops (domain ai.kiln); 3: also layout changes.
  int level = 3;
  bool portable = false;               // never introduce ai.kiln ops, whatever the level
  std::set<std::string> disabled;      // pass names to skip
  std::map<std::string, int64_t> fixed_dims;  // symbolic dim name -> size, e.g. batch=1
};

// What one pass did, for `kiln optimize -v`.
struct PassReport {
  std::string name;
  int64_t rewrites = 0;
  int64_t nodes_before = 0;
  int64_t nodes_after = 0;
  double ms = 0;
};

struct OptimizeReport {
  std::vector<PassReport> passes;
  int64_t nodes_before = 0;
  int64_t nodes_after = 0;
  int64_t type_inferences = 0;  // how often the passes' shared type analysis ran shape inference
};

// Rewrites `model` in place. The result computes the same outputs (within float rounding for
// reassociating fusions) and records kiln's version and the passes applied in its metadata.
Result<OptimizeReport> optimize(ir::Model& model, const OptimizeOptions& options);

// What model loading does: optimizes `model` at `level` (0: not at all), unless it is a model
// `kiln optimize` saved, which records its level in the metadata. True when it optimized.
Result<bool> optimize_unless_saved(ir::Model& model, int level);

// Whether `model` came out of kiln::optimize (its metadata records the level that ran).
bool is_optimized(const ir::Model& model);

// Names of all registered passes with their levels, in pipeline order.
std::vector<std::pair<std::string, int>> list_passes();

}  // namespace kiln
