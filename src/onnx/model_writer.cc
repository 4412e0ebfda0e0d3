// Streams an ir::Model out as ModelProto bytes without building the main graph's initializers as
// protos: each tensor's bytes go from its storage to the file (or the external data file), so
// saving needs no second copy of the weights. The bytes are the ones protobuf would write for the
// whole ModelProto (fields in number order), which model_writer_test checks.
#include <google/protobuf/io/coded_stream.h>

#include "onnx/proto_convert.h"

namespace kiln::onnx_io {
namespace {

using google::protobuf::io::CodedOutputStream;

// The tag byte of a length-delimited field (wire type 2); every field written by hand here has a
// number below 16, so its tag is one byte.
constexpr char length_delimited_tag(int field) { return static_cast<char>((field << 3) | 2); }
constexpr int kModelGraph = 7;        // ModelProto.graph
constexpr int kGraphInitializer = 5;  // GraphProto.initializer
constexpr int kTensorRawData = 9;     // TensorProto.raw_data

uint64_t field_size(uint64_t payload) {
  return 1 + CodedOutputStream::VarintSize64(payload) + payload;
}

// Moves the fields of `from` numbered below `number` into `to`, which must be empty; `from`
// keeps the rest. Reflection keeps this right whatever fields a newer onnx.proto adds.
void move_fields_below(google::protobuf::Message* from, google::protobuf::Message* to, int number) {
  const auto* d = from->GetDescriptor();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  for (int i = 0; i < d->field_count(); ++i)
    if (d->field(i)->number() < number) fields.push_back(d->field(i));
  from->GetReflection()->SwapFields(from, to, fields);
}

}  // namespace

ModelWriter::ModelWriter(const ir::Model& model) {
  onnx::ModelProto p;
  model_to_proto(model, p, /*with_initializers=*/false);
  graph_tail_ = std::move(*p.mutable_graph());
  p.clear_graph();
  move_fields_below(&p, &model_head_, kModelGraph);
  model_tail_ = std::move(p);
  move_fields_below(&graph_tail_, &graph_head_, kGraphInitializer);
  inits_.reserve(model.graph.initializers.size());
  for (const auto& [name, t] : model.graph.initializers) {
    Initializer& e = inits_.emplace_back();
    e.tensor = &t;
    if (tensor_has_raw_data(t)) {
      tensor_header_to_proto(t, name, &e.header);
      e.data = Data::kRaw;
    } else {
      tensor_to_proto(t, name, &e.header);  // strings: small, and not raw bytes
      e.data = Data::kInHeader;
    }
  }
}

uint64_t ModelWriter::raw_bytes(const Initializer& e) {
  const Tensor& t = *e.tensor;
  return tensor_is_4bit(t) ? static_cast<uint64_t>(t.numel() + 1) / 2 : t.nbytes();
}

uint64_t ModelWriter::entry_size(const Initializer& e) {
  const uint64_t header = e.header.ByteSizeLong();
  return e.data == Data::kRaw ? header + field_size(raw_bytes(e)) : header;
}

uint64_t ModelWriter::graph_size() const {
  uint64_t n = graph_head_.ByteSizeLong() + graph_tail_.ByteSizeLong();
  for (const Initializer& e : inits_) n += field_size(entry_size(e));
  return n;
}

uint64_t ModelWriter::size() const {
  return model_head_.ByteSizeLong() + field_size(graph_size()) + model_tail_.ByteSizeLong();
}

Status ModelWriter::externalize(ExternalDataWriter& data, size_t size_threshold) {
  for (Initializer& e : inits_) {
    const uint64_t n = raw_bytes(e);
    if (e.data != Data::kRaw || n < size_threshold || n == 0) continue;
    std::string packed;
    const void* bytes = e.tensor->raw_data();
    if (tensor_is_4bit(*e.tensor)) {
      packed = pack_4bit(*e.tensor);
      bytes = packed.data();
    }
    KILN_RETURN_IF_ERROR(data.append(bytes, n, &e.header));
    e.data = Data::kExternal;
  }
  // Subgraphs' initializers sit in the nodes, which are in graph_head_.
  return data.append_initializers(&graph_head_, size_threshold);
}

Status ModelWriter::write(const Sink& sink) const {
  bool ok = true;
  auto put = [&](const void* p, size_t n) {
    ok = ok && (n == 0 || sink(static_cast<const char*>(p), n));
  };
  auto put_message = [&](const google::protobuf::Message& m) {
    std::string bytes;
    if (!m.SerializeToString(&bytes)) ok = false;
    put(bytes.data(), bytes.size());
  };
  auto put_field_head = [&](int field, uint64_t payload) {
    uint8_t buf[1 + 10];
    buf[0] = static_cast<uint8_t>(length_delimited_tag(field));
    const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(payload, buf + 1);
    put(buf, static_cast<size_t>(end - buf));
  };
  put_message(model_head_);
  put_field_head(kModelGraph, graph_size());
  put_message(graph_head_);
  for (const Initializer& e : inits_) {
    put_field_head(kGraphInitializer, entry_size(e));
    put_message(e.header);  // every header field is numbered below raw_data, so it comes first
    if (e.data != Data::kRaw) continue;
    put_field_head(kTensorRawData, raw_bytes(e));
    if (tensor_is_4bit(*e.tensor)) {
      const std::string packed = pack_4bit(*e.tensor);
      put(packed.data(), packed.size());
    } else {
      put(e.tensor->raw_data(), raw_bytes(e));
    }
  }
  put_message(graph_tail_);
  put_message(model_tail_);
  if (!ok) return Status::error("writing the model failed");
  return Status::ok();
}

}  // namespace kiln::onnx_io
