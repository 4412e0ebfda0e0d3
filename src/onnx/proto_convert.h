// Conversions between ONNX protobuf messages and kiln's IR types, shared by import and export.
#pragma once

#include <onnx/onnx_pb.h>  // defines ONNX_API before including onnx-ml.pb.h
#include <onnx/onnx-data_pb.h>

#include <string>

#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/value.h"
#include "onnx/model_io.h"

namespace kiln::onnx_io {

// `base_dir` is where external data may be read from ("" forbids external data).
Result<Tensor> tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir);
Result<Tensor> sparse_to_dense(const onnx::SparseTensorProto& p, const std::string& base_dir);
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);

Result<ir::TypeInfo> type_from_proto(const onnx::TypeProto& p, int depth = 0);
void type_to_proto(const ir::TypeInfo& t, onnx::TypeProto* p);

Result<Value> value_from_sequence_proto(const onnx::SequenceProto& p);
Result<Value> value_from_optional_proto(const onnx::OptionalProto& p);
void value_to_sequence_proto(const Value& v, const std::string& name, onnx::SequenceProto* p);
void value_to_optional_proto(const Value& v, const std::string& name, onnx::OptionalProto* p);

// Reads `length` bytes at `offset` of `location` inside base_dir, refusing paths that leave it.
// Moves the raw data of every initializer (subgraphs' too) of at least `size_threshold` bytes
// into the file `data_path`, each at an offset aligned to `alignment`, and points the tensor at it
// as external data under `location`. The file is written whole to a temporary name, synced, then
// renamed into place. Writes no file when no tensor qualifies. Attribute tensors stay inline.
Result<SaveReport> write_external_data(onnx::ModelProto* model, const std::string& data_path,
                                       const std::string& location, size_t size_threshold,
                                       size_t alignment);

Result<std::string> read_external_data(const std::string& base_dir, const std::string& location,
                                       int64_t offset, int64_t length);

}  // namespace kiln::onnx_io
