// Reads a ModelProto from a stream one initializer at a time: the main graph's initializers are
// parsed each on its own and handed over (to become IR tensors) before the next is read, so the
// weights are never all held as protos. Every other field is collected as bytes and parsed at the
// end, with protobuf's usual merge rules, into the same ModelProto a whole-message parse gives.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <climits>

#include "onnx/proto_convert.h"

namespace kiln::onnx_io {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::StringOutputStream;

constexpr uint32_t kGraphTag =
    WireFormatLite::MakeTag(7, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kInitializerTag =
    WireFormatLite::MakeTag(5, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
// Protobuf's default (100) would stop a deep If nest with a vague "parse failed"; let it through
// far enough for the importer to name the problem (each subgraph level is 3 messages deep).
constexpr int kRecursionLimit = 1024;

Status parse_failed() {
  return Status::error(
      "not a valid ONNX model: protobuf parsing failed (corrupt or truncated file, or nesting too "
      "deep)");
}

// Runs `body` on the next length-delimited field's payload, which it must consume exactly.
template <typename Body>
bool within_length(CodedInputStream& in, Body body) {
  uint32_t length = 0;
  if (!in.ReadVarint32(&length) || length > INT_MAX) return false;
  const auto limit = in.PushLimit(static_cast<int>(length));
  // A stream that ends early on a field boundary also reads as a clean end; the count catches it.
  const bool ok = body() && in.BytesUntilLimit() == 0;
  in.PopLimit(limit);
  return ok;
}

// The fields of a message body up to the current limit: `on_field(tag, &handled)` takes the
// fields it wants (false on bad bytes); the rest are copied, tag and all, to `rest`.
template <typename OnField>
bool scan_fields(CodedInputStream& in, CodedOutputStream& rest, OnField on_field) {
  while (const uint32_t tag = in.ReadTag()) {
    bool handled = false;
    if (!on_field(tag, &handled)) return false;
    if (!handled && !WireFormatLite::SkipField(&in, tag, &rest)) return false;
  }
  return in.ConsumedEntireMessage();  // ended at the limit, not at a stray 0 or end-group tag
}

bool parse_bytes(const std::string& bytes, google::protobuf::MessageLite* m) {
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  in.SetRecursionLimit(kRecursionLimit);
  return m->MergePartialFromCodedStream(&in) && in.ConsumedEntireMessage();
}

}  // namespace

Status read_model_proto(google::protobuf::io::ZeroCopyInputStream* stream, int64_t size,
                        onnx::ModelProto* model, const InitializerSink& on_initializer) {
  if (size > INT_MAX)
    return Status::error("model file is over 2 GiB; store weights as external data");
  std::string model_rest, graph_rest;
  bool saw_graph = false;
  Status sink_status;  // an error from on_initializer, which stops the scan
  {
    CodedInputStream in(stream);
    // The limit is the real size, so a corrupt length prefix cannot make protobuf reserve more
    // than the stream holds (protobuf reserves a string's length up front only within the limit).
    in.SetTotalBytesLimit(static_cast<int>(size));
    in.SetRecursionLimit(kRecursionLimit);
    StringOutputStream model_bytes(&model_rest), graph_bytes(&graph_rest);
    CodedOutputStream model_out(&model_bytes), graph_out(&graph_bytes);
    auto on_graph_field = [&](uint32_t tag, bool* handled) {
      if (tag != kInitializerTag) return true;
      *handled = true;
      onnx::TensorProto t;
      if (!within_length(
              in, [&] { return t.MergePartialFromCodedStream(&in) && in.ConsumedEntireMessage(); }))
        return false;
      sink_status = on_initializer(t);
      return sink_status.is_ok();
    };
    auto on_model_field = [&](uint32_t tag, bool* handled) {
      if (tag != kGraphTag) return true;
      *handled = saw_graph = true;
      return within_length(in, [&] { return scan_fields(in, graph_out, on_graph_field); });
    };
    const auto whole = in.PushLimit(static_cast<int>(size));
    const bool ok = scan_fields(in, model_out, on_model_field) && in.BytesUntilLimit() == 0;
    in.PopLimit(whole);
    if (!sink_status.is_ok()) return sink_status;
    if (!ok) return parse_failed();
  }  // the output streams flush into model_rest and graph_rest here
  if (!parse_bytes(model_rest, model)) return parse_failed();
  if (saw_graph && !parse_bytes(graph_rest, model->mutable_graph())) return parse_failed();
  return Status::ok();
}

}  // namespace kiln::onnx_io
