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

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
