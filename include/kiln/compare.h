// Accuracy comparison of two models on the same inputs: per-output error, and optionally per-layer
// error over the tensors both graphs name, to find where an optimized model first goes wrong.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln {

namespace ir {
struct Model;
}

struct CompareOptions {
  // Per element, as numpy.allclose with A as the reference: |a - b| <= atol + rtol * |a|.
  double rtol = 1e-3;
  double atol = 1e-4;
  // Also compare every intermediate tensor the two main graphs both name.
  bool per_layer = false;
};

// How far one tensor of model B is from the same tensor of model A.
struct TensorDiff {
  std::string name;        // as model A names it
  std::string name_b;      // model B's name when it differs (outputs match by position)
  std::string producer_a;  // "nodename (Op)"; empty for graph outputs that no node produces
  std::string producer_b;
  double max_abs = 0;      // largest |a - b|; +inf where one side is NaN and the other is not
  double max_rel = 0;      // largest |a - b| / |a| over elements with a != 0
  double max_ref = 0;      // largest finite |a|: when it is below atol, anything B computes passes
  int64_t mismatches = 0;  // elements beyond tolerance (integer and bool: elements that differ)
  int64_t numel = 0;
  bool ok = true;
};

struct CompareReport {
  std::vector<TensorDiff> outputs;  // one per graph output, by position
  // With per_layer: in model A's topological order, the first common tensor beyond tolerance.
  std::optional<TensorDiff> first_divergence;
  // With per_layer: every common tensor compared, in model A's topological order.
  std::vector<TensorDiff> layers;
  // With per_layer: common names not compared because kind, dtype or shape differ (a layout
  // change keeps a name but not the shape) or a value was left empty.
  std::vector<std::string> layers_skipped;
  bool ok = true;  // every output within tolerance (intermediates do not decide it)
};

// Runs both models exactly as given (no optimization) on `inputs`, in model A's input order, and
// compares their outputs by position. Outputs that differ in count, kind, dtype or shape are an
// error naming them. Floats compare within tolerance (NaN agrees only with NaN, infinities only
// with themselves); integers, bools and strings compare exactly. `threads` as in SessionOptions.
Result<CompareReport> compare_models(const ir::Model& a, const ir::Model& b,
                                     const std::vector<Value>& inputs,
                                     const CompareOptions& options, int threads = 0);

// One value of B against the same value of A; an error when kind, dtype or shape differ.
Result<TensorDiff> compare_values(const Value& a, const Value& b, const CompareOptions& options);

}  // namespace kiln
