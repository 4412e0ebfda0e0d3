// A model as users handle it: load an ONNX file or bytes, optimize and tune it, look at its
// inputs, outputs and metadata, save it; then run it with a Session (kiln/session.h). The
// public face of the IR (which stays in src/): the CLI and the Python package use only this.
//
//   auto model = kiln::Model::load("model.onnx");
//   model->optimize({});                      // what `kiln optimize` does
//   model->save("model.opt.onnx");
//   auto session = kiln::Session::create(*model);
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io_info.h"
#include "kiln/optimize.h"
#include "kiln/quantize.h"
#include "kiln/status.h"
#include "kiln/tune.h"
#include "kiln/value.h"

namespace kiln {

namespace ir {
struct Model;
}

// How Model::save stores weights: inline in the model file, or in one external data file beside
// it, as onnx.save_model(..., save_as_external_data=True) and ONNX Runtime do.
struct SaveOptions {
  enum class ExternalData {
    kAuto,    // external when the model was loaded with external data or would not fit inline
              // (over max_inline_bytes); inline otherwise
    kAlways,
    kNever,
  };
  ExternalData external_data = ExternalData::kAuto;
  // The data file: a plain file name, written beside the model; "" means "<model file name>.data".
  std::string location;
  // Initializers of at least this many bytes go to the data file; smaller ones stay inline.
  size_t size_threshold = 1024;
  // Every tensor starts at a multiple of this in the data file, so a runtime can mmap it.
  size_t alignment = 4096;
  // kAuto goes external when the inline model would be larger than this: protobuf's 2 GiB limit.
  uint64_t max_inline_bytes = INT32_MAX;
};

// What a save wrote besides the model file (nothing when every tensor stayed inline).
struct SaveReport {
  std::string data_path;  // "" when no data file was written
  int64_t external_tensors = 0;
  uint64_t data_file_bytes = 0;
};

// What `kiln info` prints about a model.
struct ModelSummary {
  int64_t nodes = 0;                   // of the main graph
  std::map<std::string, int64_t> ops;  // "Conv", "ai.kiln.FusedMLP" -> count, subgraphs included
  int64_t parameters = 0, parameter_bytes = 0;  // the initializers
  // FLOPs of one run by the op schemas' cost rules, dynamic dims bound as the bench rule binds
  // them (an input's first dim the batch, any other the seq); -1 when shape inference failed,
  // which shape_error then names.
  double flops = -1;
  int64_t nodes_without_cost = 0;
  std::string shape_error;
};

class Model {
 public:
  // A model file; external data is resolved against its folder and must stay in it. Errors:
  // kNotFound for a missing file, kInvalidModel for one that does not parse or check.
  static Result<Model> load(const std::string& path);
  // Serialized ModelProto bytes; `base_dir` resolves external data ("" refuses external data).
  static Result<Model> load_bytes(std::string_view bytes, const std::string& base_dir = "");

  // Writes the model (the data file first, so a crash never leaves a model pointing at missing
  // data). The weights are streamed to the files: saving makes no copy of them.
  Status save(const std::string& path, const SaveOptions& options = {},
              SaveReport* report = nullptr) const;
  // The ModelProto bytes, every weight inline (an error past protobuf's 2 GiB).
  Result<std::string> to_bytes() const;

  // The pass pipeline of `kiln optimize`, in place. Sessions made before keep the model they had.
  Result<OptimizeReport> optimize(const OptimizeOptions& options = {});
  // What loading does (Session::load, `kiln run`): optimize at `level` unless kiln optimized the
  // model already or `level` is 0. True when it optimized.
  Result<bool> optimize_unless_saved(int level);
  // Static post-training quantization (kiln/quantize.h), in place: calibrates on the samples
  // `next` gives, rewrites the model to QDQ form, and measures it (the accuracy guard) on the
  // samples `held_out` gives (none: the calibration samples). On an error the model stays as it was.
  Result<QuantizeReport> quantize(const CalibrationReader& next, const QuantizeOptions& options = {},
                                  const CalibrationReader& held_out = {});
  // Forgets the backend choices tune() (or a tuned model's metadata) recorded: kiln's kernels
  // run every node again.
  void clear_backend_choices();
  // Times the backends that can run each node on `inputs` (one per inputs(), as Session::run
  // takes them) and records the fastest in the metadata, where sessions and saved copies find
  // them (kiln/tune.h). Optimize first: the choices are for the nodes as they are.
  Result<TuneReport> tune(const std::vector<Value>& inputs, const TuneOptions& options = {});

  // The graph inputs that are not initializers, in order; the outputs.
  std::vector<IoInfo> inputs() const;
  std::vector<IoInfo> outputs() const;
  // metadata_props, in the model's order (kiln records its version, passes and choices here).
  const std::vector<std::pair<std::string, std::string>>& metadata() const;
  std::string producer_name() const;
  std::string producer_version() const;
  std::string graph_name() const;
  std::string domain() const;
  std::string description() const;  // the model's doc_string
  int64_t model_version() const;
  std::map<std::string, int64_t> opsets() const;  // domain ("" for ai.onnx) -> version
  int64_t ir_version() const;
  ModelSummary summary(int64_t batch = 1, int64_t seq = 128) const;
  // Whether `kiln optimize` (or Model::optimize) produced it: loading it then runs it as it is.
  bool optimized() const;

  // The IR, for kiln's own tools and tests (src/ir/graph.h defines it).
  const ir::Model& ir() const { return *ir_; }
  // Shared with a Session, which runs it as it is; a later optimize() or tune() copies it first.
  std::shared_ptr<const ir::Model> share() const { return ir_; }
  // Wraps an IR model (kiln's tools and tests).
  explicit Model(std::shared_ptr<ir::Model> ir) : ir_(std::move(ir)) {}

 private:
  friend class Session;     // Session::load takes a freshly loaded IR over without a copy
  ir::Model& mutable_ir();  // copies the IR first when a session shares it
  std::shared_ptr<ir::Model> ir_;
};

}  // namespace kiln
