// The public entry point: load a model, then run it as many times as needed.
// Thread safety: one Session runs one request at a time (run() is not reentrant).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln {

namespace ir {
struct Model;
}

struct SessionOptions {
  int threads = 0;  // 0: one per core
  // Session::load runs kiln::optimize at this level first (see kiln/optimize.h), unless the model
  // was saved by `kiln optimize` already. 0 runs the model exactly as written.
  int optimize_level = 2;
};

// A graph input or output as users see it: dims of -1 are dynamic, named in dim_names.
struct IoInfo {
  std::string name;
  Value::Kind kind = Value::Kind::kTensor;
  DType dtype = DType::kUndefined;
  bool has_shape = false;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;
};

// One node of a profiled run: when its kernel ran (from the start of run_profiled) and its work.
struct NodeTiming {
  std::string node, op_type, domain;
  double start_us = 0, dur_us = 0;
  // By the op schema's cost rule on the shapes of this run; 0 when the op does no arithmetic,
  // -1 when it has no cost rule or a shape is not a tensor's.
  int64_t flops = -1;
  std::string input_shapes;  // "[1,3,224,224] [64,3,7,7]", "-" for an omitted input
};

// A profiled run: one timing per node of the main graph in execution order (the nodes of If/Loop/
// Scan bodies count in the time of the node that runs them), and the wall time of the whole run.
struct RunProfile {
  std::vector<NodeTiming> nodes;
  double wall_us = 0;  // input checks and the walk; the FLOP counts are made after it
};

class Session {
 public:
  static Result<std::unique_ptr<Session>> load(const std::string& path, const SessionOptions& options = {});
  // Runs `model` as given: optimize_level is not applied (the model is shared and const).
  static Result<std::unique_ptr<Session>> create(std::shared_ptr<const ir::Model> model,
                                                 const SessionOptions& options = {});
  ~Session();

  // The graph's inputs that are not initializers, in graph order; and its outputs.
  const std::vector<IoInfo>& inputs() const;
  const std::vector<IoInfo>& outputs() const;
  const ir::Model& model() const;
  int threads() const;

  // Runs with one value per input(), in order; checks kinds, dtypes and static dims first.
  Result<std::vector<Value>> run(const std::vector<Value>& inputs);
  // The same, timing each node into *profile (replaced). run() itself takes no timings.
  Result<std::vector<Value>> run_profiled(const std::vector<Value>& inputs, RunProfile* profile);

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
