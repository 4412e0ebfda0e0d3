// Reading and writing ONNX: models (ModelProto) and run-time values (TensorProto, SequenceProto,
// OptionalProto). Protobuf stays inside src/onnx; the rest of kiln sees only the IR and Values.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"
#include "kiln/model.h"
#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln::onnx_io {

// Subgraphs nested deeper than this are refused (a hostile model could otherwise exhaust the stack).
inline constexpr int kMaxGraphNesting = 32;

// Loads a model file; external data is resolved against the model's folder and must stay in it.
// The file is parsed as a stream and each tensor's data is freed from the proto once it is in the
// IR, so loading peaks near one copy of the weights; external data is read per tensor, straight
// into the tensor.
Result<ir::Model> load_model(const std::string& path);
// Parses serialized ModelProto bytes; `base_dir` resolves external data ("" refuses external data).
Result<ir::Model> parse_model(const std::string& bytes, const std::string& base_dir);

// Serialises a model; every tensor is written inline (raw_data). The bytes are protobuf's.
Result<std::string> serialize_model(const ir::Model& model);

// How save_model stores weights and what it wrote besides the model file (kiln/model.h).
using SaveOptions = kiln::SaveOptions;
using SaveReport = kiln::SaveReport;

// Writes the data file (complete, then renamed into place) before the model file, so a crash
// never leaves a model that points at missing data. Never overwrites the model file with data.
// The weights are streamed from the tensors to the files; saving makes no copy of them.
Status save_model(const ir::Model& model, const std::string& path, const SaveOptions& options = {},
                  SaveReport* report = nullptr);

// A value file (input_0.pb, output_0.pb) parsed as the proto its type calls for.
Result<Value> parse_value(const std::string& bytes, const ir::TypeInfo& type);

// The model with its default-domain opset raised to `version` by ONNX's version converter
// (opset_upgrade.cc); an error naming what the converter could not convert.
Result<ir::Model> convert_opset(const ir::Model& model, int64_t version);
Result<std::string> serialize_value(const Value& value, const std::string& name);

Result<std::string> read_file(const std::string& path);
Status write_file(const std::string& path, const std::string& bytes);

}  // namespace kiln::onnx_io
