// The public entry point: load a model, then run it as many times as needed.
// Thread safety: one Session runs one request at a time (run() is not reentrant).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/io_info.h"
#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln {

namespace ir {
struct Model;
}
class Model;

struct SessionOptions {
  // 0 (or one a core): the process-wide pool, one thread a core, shared by such sessions; another
  // count: a pool of the session's own
  int threads = 0;
  // Session::load runs kiln::optimize at this level first (see kiln/optimize.h), unless the model
  // was saved by `kiln optimize` already. 0 runs the model exactly as written.
  int optimize_level = 3;
  // Runs after the first of each input-shape signature take their tensors from one arena laid out
  // by the memory plan; false takes every tensor from the heap (to compare, or to debug a kernel).
  bool memory_arena = true;
  // The backend whose kernels run the nodes it takes ("openblas", ...); kiln's own kernels run
  // the rest. With "kiln" (the default), the choices a tuned model records in its metadata
  // (kiln::tune, `kiln optimize --tune`) apply, kiln's own kernels running every other node. One
  // of kiln's kernel variants ("kiln.direct"), which tuning otherwise chooses node by node, may
  // be forced the same way, to test or compare it. An unknown name is an error.
  std::string backend = "kiln";
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

// A node kiln runs on a plain reference loop: no fast kernel takes its op with these types and
// attributes (`kiln info --kernels` lists them, `kiln profile` marks them).
struct ReferenceNode {
  std::string node, op_type, domain;
  std::string input_types;  // "float32[1,3,224,224] float32[64,3,7,7]", as shape inference knows them
  std::string attributes;   // "group=32 kernel_shape=[3,3]"
};

// A profiled run: one timing per node of the main graph in execution order (the nodes of If/Loop/
// Scan bodies count in the time of the node that runs them), and the wall time of the whole run.
struct RunProfile {
  std::vector<NodeTiming> nodes;
  double wall_us = 0;  // input checks and the walk; the FLOP counts are made after it
};

// Where a session's memory goes (`kiln info --memory`). The activation figures are those of the
// input shapes of the last run (all zero before the first run).
struct MemoryInfo {
  int64_t weight_bytes = 0;           // the initializers' data, as the session got the model
  int64_t released_weight_bytes = 0;  // of which dropped: kernels prepacked it and never read it again
  int64_t plan_bytes = 0;  // heap the compiled plan took: kernels' prepacked weights and the plan itself
  // Activations (every tensor a run allocates, kernels' scratch tensors included):
  int64_t arena_bytes = 0;       // the arena serving them: the peak activation memory of a run
  int64_t peak_live_bytes = 0;   // most bytes alive at once (what a perfect plan would need)
  int64_t activation_bytes = 0;  // all of them added up, as if no memory were reused
  int64_t activations = 0;       // how many tensors a run allocates
  int64_t output_bytes = 0;      // of those, the ones outliving the run (outputs), from the heap
  int64_t arena_runs = 0;        // runs served from the arena so far
  int64_t recorded_runs = 0;     // first runs of a shape signature, from the heap, recorded for a plan
  int64_t stray_runs = 0;        // arena runs that strayed from their plan (data-dependent shapes)
  int64_t in_place_outputs = 0;  // outputs run_into had written straight into the caller's tensors
};

// The backends SessionOptions::backend may name in this build: "kiln" first, then the
// third-party libraries built in ("onednn", "openblas", "xnnpack", where their packages were).
std::vector<std::string> available_backends();

class Session {
 public:
  static Result<std::unique_ptr<Session>> load(const std::string& path, const SessionOptions& options = {});
  // Runs `model` as given: optimize_level is not applied (the model is shared and const).
  static Result<std::unique_ptr<Session>> create(std::shared_ptr<const ir::Model> model,
                                                 const SessionOptions& options = {});
  // The same for a public Model handle (kiln/model.h): shares its graph, which the Model copies
  // before it changes it again, so the session is unaffected by later optimize() or tune().
  static Result<std::unique_ptr<Session>> create(const Model& model, const SessionOptions& options = {});
  ~Session();

  // The graph's inputs that are not initializers, in graph order; and its outputs.
  const std::vector<IoInfo>& inputs() const;
  const std::vector<IoInfo>& outputs() const;
  // The model as run. In a model the session made itself (load, or a copy create() took), an
  // initializer whose readers all prepacked it keeps its type and shape but no data (raw_data()
  // is null); a model shared with the caller is left as it was.
  const ir::Model& model() const;
  int threads() const;
  // (node, backend) of the main graph's nodes in plan order: whose kernel runs each. A node is
  // named by its first output, as in the backend choices a tuned model records.
  std::vector<std::pair<std::string, std::string>> node_backends() const;
  // The main graph's nodes that run on a plain reference loop, in plan order (infers the model's
  // shapes: a call costs what inference does).
  std::vector<ReferenceNode> reference_nodes() const;
  // The same for a run on `inputs` (one per input(), as run() takes them): the model's dynamic
  // dims bound to theirs, so that a kernel whose fast path needs known sizes is judged on them.
  std::vector<ReferenceNode> reference_nodes(const std::vector<Value>& inputs) const;

  // Runs with one value per input(), in order; checks kinds, dtypes and static dims first.
  Result<std::vector<Value>> run(const std::vector<Value>& inputs);
  // The same, into `outputs` (ONNX Runtime's IO binding): resized to one value per output(); a
  // tensor already there whose type and shape are the output's gets the output's data (its
  // storage is reused, even if shared), anything else is replaced by a tensor of its own. Called
  // again with the same vector, a run whose input shapes were seen before allocates no tensor, and
  // writes each output straight into its tensor where it can (64-byte aligned, a multiple of 64
  // bytes, sharing no byte with an input or another output), else copies it in. On error,
  // `outputs` keeps its tensors, but what they hold is unspecified.
  Status run_into(const std::vector<Value>& inputs, std::vector<Value>& outputs);
  // The same, timing each node into *profile (replaced). run() itself takes no timings.
  Result<std::vector<Value>> run_profiled(const std::vector<Value>& inputs, RunProfile* profile);

  MemoryInfo memory_info() const;

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  // A model only this session holds: it may drop the data of weights its kernels absorbed.
  static Result<std::unique_ptr<Session>> create_owned(std::shared_ptr<ir::Model> model, const SessionOptions& options);
  static Result<std::unique_ptr<Session>> create_shared(std::shared_ptr<const ir::Model> model, ir::Model* owned,
                                                        const SessionOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
