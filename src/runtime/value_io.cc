// kiln/value_io.h over src/onnx, which keeps protobuf to itself.
#include "kiln/value_io.h"

#include "onnx/model_io.h"

namespace kiln {

Result<Value> parse_value(const std::string& bytes, const IoInfo& io) {
  ir::TypeInfo type;
  type.kind = io.kind == Value::Kind::kSequence   ? ir::TypeInfo::Kind::kSequence
              : io.kind == Value::Kind::kOptional ? ir::TypeInfo::Kind::kOptional
                                                  : ir::TypeInfo::Kind::kTensor;
  return onnx_io::parse_value(bytes, type);
}

Result<std::string> serialize_value(const Value& value, const std::string& name) {
  return onnx_io::serialize_value(value, name);
}

Result<std::string> read_file(const std::string& path) { return onnx_io::read_file(path); }

Status write_file(const std::string& path, const std::string& bytes) {
  return onnx_io::write_file(path, bytes);
}

}  // namespace kiln
