// Conversions between ONNX protobuf messages and kiln's IR types, shared by import and export.
#pragma once

#include <onnx/onnx_pb.h>  // defines ONNX_API before including onnx-ml.pb.h
#include <onnx/onnx-data_pb.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/value.h"
#include "onnx/model_io.h"

namespace google::protobuf::io {
class ZeroCopyInputStream;
}

namespace kiln::onnx_io {

// Takes one initializer of the main graph as it is read; an error stops the reading.
using InitializerSink = std::function<Status(onnx::TensorProto&)>;
// Parses `size` bytes of ModelProto from `stream` into `model`, except the main graph's
// initializers: each is parsed alone, given to `on_initializer` and dropped before the next is
// read, so they are never all held as protos. Hostile lengths are bounded by `size`.
Status read_model_proto(google::protobuf::io::ZeroCopyInputStream* stream, int64_t size,
                        onnx::ModelProto* model, const InitializerSink& on_initializer);

// `base_dir` is where external data may be read from ("" forbids external data).
Result<Tensor> tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir);
Result<Tensor> sparse_to_dense(const onnx::SparseTensorProto& p, const std::string& base_dir);
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);
// The pieces of tensor_to_proto, for writers that stream the data instead of copying it into the
// proto: the header (name, type, dims; nothing numbered past raw_data), whether the data goes in
// raw_data (all but strings), and int4/uint4 packed two to a byte as raw_data holds them.
void tensor_header_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);
bool tensor_has_raw_data(const Tensor& t);
bool tensor_is_4bit(const Tensor& t);
std::string pack_4bit(const Tensor& t);

Result<ir::TypeInfo> type_from_proto(const onnx::TypeProto& p, int depth = 0);
void type_to_proto(const ir::TypeInfo& t, onnx::TypeProto* p);

Result<Value> value_from_sequence_proto(const onnx::SequenceProto& p);
Result<Value> value_from_optional_proto(const onnx::OptionalProto& p);
void value_to_sequence_proto(const Value& v, const std::string& name, onnx::SequenceProto* p);
void value_to_optional_proto(const Value& v, const std::string& name, onnx::OptionalProto* p);

// One external data file being written: each tensor's bytes at the next offset aligned to
// `alignment`, the proto pointed at them under `location`. The file is written whole to a
// temporary name (created at the first append, so nothing is written when no tensor qualifies);
// finish() syncs it and renames it into place. Without finish() the temporary file is removed.
class ExternalDataWriter {
 public:
  ExternalDataWriter(std::string data_path, std::string location, size_t alignment);
  ~ExternalDataWriter();
  ExternalDataWriter(const ExternalDataWriter&) = delete;
  ExternalDataWriter& operator=(const ExternalDataWriter&) = delete;

  // Writes `size` bytes and makes `t` (a header without data) point at them.
  Status append(const void* bytes, uint64_t size, onnx::TensorProto* t);
  // Moves the raw data of every initializer of `g` and of its subgraphs with at least
  // `size_threshold` bytes into the file, freeing each as it is written. Attribute tensors stay.
  Status append_initializers(onnx::GraphProto* g, size_t size_threshold);
  Status finish();
  // What was written; data_path is set once finish() has put the file in place.
  const SaveReport& report() const { return report_; }

 private:
  std::string what() const;

  std::string data_path_, tmp_path_, location_;
  uint64_t alignment_;
  std::FILE* file_ = nullptr;
  bool opened_ = false, finished_ = false;
  uint64_t end_ = 0;  // bytes written so far
  SaveReport report_;
};

// The whole model as a proto; the main graph's initializers only `with_initializers`.
void model_to_proto(const ir::Model& m, onnx::ModelProto& p, bool with_initializers = true);

// A model being written out: everything but the main graph's initializers is converted up front;
// those are streamed from the tensors' own storage by write(), so saving holds no second copy of
// the weights. The bytes are exactly what serializing model_to_proto's ModelProto would give.
class ModelWriter {
 public:
  using Sink = std::function<bool(const char* data, size_t size)>;  // false: stop, it failed

  explicit ModelWriter(const ir::Model& model);  // `model` must outlive the writer

  // The number of bytes write() will produce, as things stand.
  uint64_t size() const;
  // Moves initializers (the main graph's and subgraphs') of at least `size_threshold` bytes to
  // the external data file; the model then points at them.
  Status externalize(ExternalDataWriter& data, size_t size_threshold);
  Status write(const Sink& sink) const;

 private:
  enum class Data { kRaw, kInHeader, kExternal };
  struct Initializer {
    const Tensor* tensor = nullptr;
    onnx::TensorProto header;  // everything but raw data (strings are in it whole)
    Data data = Data::kRaw;
  };
  static uint64_t raw_bytes(const Initializer& e);
  static uint64_t entry_size(const Initializer& e);
  uint64_t graph_size() const;

  // The ModelProto's fields before and after `graph`, the graph's before and after `initializer`.
  onnx::ModelProto model_head_, model_tail_;
  onnx::GraphProto graph_head_, graph_tail_;
  std::vector<Initializer> inits_;
};

// Reads `length` bytes at `offset` of `location` inside base_dir, refusing paths that leave it.
Result<std::string> read_external_data(const std::string& base_dir, const std::string& location,
                                       int64_t offset, int64_t length);
// The same checks without reading, so a caller can allocate only for data that is there ...
Status check_external_data(const std::string& base_dir, const std::string& location, int64_t offset,
                           int64_t length);
// ... and then read `length` bytes straight into `out` (a tensor's storage), with no copy between.
Status read_external_data_into(const std::string& base_dir, const std::string& location,
                               int64_t offset, int64_t length, void* out);

}  // namespace kiln::onnx_io
