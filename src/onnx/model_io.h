// Reading and writing ONNX: models (ModelProto) and run-time values (TensorProto, SequenceProto,
// OptionalProto). Protobuf stays inside src/onnx; the rest of kiln sees only the IR and Values.
#pragma once

#include <string>

#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln::onnx_io {

// Subgraphs nested deeper than this are refused (a hostile model could otherwise exhaust the stack).
inline constexpr int kMaxGraphNesting = 32;

// Loads a model file; external data is resolved against the model's folder and must stay in it.
Result<ir::Model> load_model(const std::string& path);
// Parses serialized ModelProto bytes; `base_dir` resolves external data ("" refuses external data).
Result<ir::Model> parse_model(const std::string& bytes, const std::string& base_dir);

// Serialises a model; every tensor is written inline (raw_data).
Result<std::string> serialize_model(const ir::Model& model);
Status save_model(const ir::Model& model, const std::string& path);

// A value file (input_0.pb, output_0.pb) parsed as the proto its type calls for.
Result<Value> parse_value(const std::string& bytes, const ir::TypeInfo& type);
Result<std::string> serialize_value(const Value& value, const std::string& name);

Result<std::string> read_file(const std::string& path);
Status write_file(const std::string& path, const std::string& bytes);

}  // namespace kiln::onnx_io
