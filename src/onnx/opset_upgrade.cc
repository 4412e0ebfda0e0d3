// Raising a model's default-domain opset with ONNX's own version converter (libonnx's
// onnx::version_conversion::ConvertVersion, which rewrites the ops whose definitions changed on
// the way: Squeeze's and ReduceSum's axes becoming inputs, Softmax's axis semantics, ...).
#include <onnx/onnx_pb.h>
#include <onnx/version_converter/convert.h>

#include <exception>

#include "onnx/model_io.h"

namespace kiln::onnx_io {

Result<ir::Model> convert_opset(const ir::Model& model, int64_t version) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, serialize_model(model));
  ::onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) return Status::error("the model did not serialize for the opset converter");
  std::string converted;
  try {
    ::onnx::ModelProto out = ::onnx::version_conversion::ConvertVersion(proto, static_cast<int>(version));
    if (!out.SerializeToString(&converted)) return Status::error("the converted model did not serialize");
  } catch (const std::exception& e) {
    return Status::error(std::string("ONNX's version converter could not take the model to opset ") +
                         std::to_string(version) + ": " + e.what());
  }
  return parse_model(converted, "");
}

}  // namespace kiln::onnx_io
