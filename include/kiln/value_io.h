// Values as ONNX files hold them: TensorProto, SequenceProto, OptionalProto (the input_0.pb /
// output_0.pb of the ONNX test data and of `kiln run`), and files read and written whole.
#pragma once

#include <string>

#include "kiln/io_info.h"
#include "kiln/status.h"
#include "kiln/value.h"

namespace kiln {

// Serialized proto bytes as the value `io` describes (a tensor, a sequence, an optional).
Result<Value> parse_value(const std::string& bytes, const IoInfo& io);
// The proto of `value`, named `name`.
Result<std::string> serialize_value(const Value& value, const std::string& name);

Result<std::string> read_file(const std::string& path);
Status write_file(const std::string& path, const std::string& bytes);

}  // namespace kiln
