// ir::Model -> ModelProto, the inverse of model_import.cc: import -> export -> import is lossless.
// save_model also decides where the weights go: inline, or an external data file beside the model,
// and streams them there through ModelWriter (model_writer.cc) rather than copying them first.
#include <filesystem>
#include <fstream>

#include "onnx/model_io.h"
#include "onnx/proto_convert.h"

namespace kiln::onnx_io {
namespace {

void graph_to_proto(const ir::Graph& g, onnx::GraphProto* p, bool with_initializers = true);

void value_info_to_proto(const ir::ValueInfo& v, onnx::ValueInfoProto* p) {
  p->set_name(v.name);
  if (!v.doc.empty()) p->set_doc_string(v.doc);
  if (v.type.kind != ir::TypeInfo::Kind::kUnknown) type_to_proto(v.type, p->mutable_type());
}

void attribute_to_proto(const ir::Attribute& a, onnx::AttributeProto* p) {
  using T = ir::Attribute::Type;
  p->set_name(a.name);
  p->set_type(static_cast<onnx::AttributeProto::AttributeType>(a.type));
  if (!a.doc.empty()) p->set_doc_string(a.doc);
  if (!a.ref_attr_name.empty()) p->set_ref_attr_name(a.ref_attr_name);
  switch (a.type) {
    case T::kFloat: p->set_f(a.f); break;
    case T::kInt: p->set_i(a.i); break;
    case T::kString: p->set_s(a.s); break;
    case T::kTensor:
    case T::kSparseTensor:  // sparse attributes were made dense on import
      p->set_type(onnx::AttributeProto::TENSOR);
      tensor_to_proto(a.t, "", p->mutable_t());
      break;
    case T::kGraph: if (a.g) graph_to_proto(*a.g, p->mutable_g()); break;
    case T::kFloats: for (float f : a.floats) p->add_floats(f); break;
    case T::kInts: for (int64_t i : a.ints) p->add_ints(i); break;
    case T::kStrings: for (const auto& s : a.strings) p->add_strings(s); break;
    case T::kTensors:
    case T::kSparseTensors:
      p->set_type(onnx::AttributeProto::TENSORS);
      for (const Tensor& t : a.tensors) tensor_to_proto(t, "", p->add_tensors());
      break;
    case T::kGraphs: for (const auto& g : a.graphs) graph_to_proto(*g, p->add_graphs()); break;
    case T::kTypeProto: type_to_proto(a.tp, p->mutable_tp()); break;
    case T::kTypeProtos: for (const auto& t : a.tps) type_to_proto(t, p->add_type_protos()); break;
    case T::kUndefined: break;
  }
}

void node_to_proto(const ir::Node& n, onnx::NodeProto* p) {
  if (!n.name.empty()) p->set_name(n.name);
  p->set_op_type(n.op_type);
  if (!n.domain.empty()) p->set_domain(n.domain);
  if (!n.doc.empty()) p->set_doc_string(n.doc);
  for (const auto& i : n.inputs) p->add_input(i);
  for (const auto& o : n.outputs) p->add_output(o);
  for (const auto& a : n.attrs) attribute_to_proto(a, p->add_attribute());
}

void graph_to_proto(const ir::Graph& g, onnx::GraphProto* p, bool with_initializers) {
  p->set_name(g.name);
  if (!g.doc.empty()) p->set_doc_string(g.doc);
  if (with_initializers)
    for (const auto& [name, t] : g.initializers) tensor_to_proto(t, name, p->add_initializer());
  for (const auto& v : g.inputs) value_info_to_proto(v, p->add_input());
  for (const auto& v : g.outputs) value_info_to_proto(v, p->add_output());
  for (const auto& v : g.value_info) value_info_to_proto(v, p->add_value_info());
  for (const auto& n : g.nodes) node_to_proto(n, p->add_node());
}

}  // namespace

void model_to_proto(const ir::Model& m, onnx::ModelProto& p, bool with_initializers) {
  p.set_ir_version(m.ir_version);
  if (!m.producer_name.empty()) p.set_producer_name(m.producer_name);
  if (!m.producer_version.empty()) p.set_producer_version(m.producer_version);
  if (!m.domain.empty()) p.set_domain(m.domain);
  if (m.model_version) p.set_model_version(m.model_version);
  if (!m.doc.empty()) p.set_doc_string(m.doc);
  for (const auto& [domain, version] : m.opsets) {
    auto* o = p.add_opset_import();
    o->set_domain(domain);
    o->set_version(version);
  }
  for (const auto& [k, v] : m.metadata) {
    auto* kv = p.add_metadata_props();
    kv->set_key(k);
    kv->set_value(v);
  }
  graph_to_proto(m.graph, p.mutable_graph(), with_initializers);
  for (const auto& f : m.functions) {
    auto* fp = p.add_functions();
    fp->set_name(f.name);
    fp->set_domain(f.domain);
    if (!f.doc.empty()) fp->set_doc_string(f.doc);
    for (const auto& i : f.inputs) fp->add_input(i);
    for (const auto& o : f.outputs) fp->add_output(o);
    for (const auto& a : f.attributes) fp->add_attribute(a);
    for (const auto& n : f.nodes) node_to_proto(n, fp->add_node());
    for (const auto& [domain, version] : f.opsets) {
      auto* o = fp->add_opset_import();
      o->set_domain(domain);
      o->set_version(version);
    }
  }
}

namespace {

Status check_fits_inline(const ModelWriter& w) {
  if (w.size() > static_cast<uint64_t>(INT32_MAX))
    return Status::error("model is over 2 GiB; it needs external data to be saved");
  return Status::ok();
}

// Where kiln writes external data: one plain file name beside the model, so the pair can be moved
// or copied together and a data file can never land outside the model's folder.
Status check_location(const std::string& location) {
  if (location.empty() || location == "." || location == ".." ||
      location.find_first_of(std::string("/\\\0", 3)) != std::string::npos)
    return Status::error("external data location '" + location +
                         "' must be a plain file name (no folder, no '..'); it is written beside the model");
  return Status::ok();
}

bool wants_external_data(const ir::Model& m, const ModelWriter& w, const SaveOptions& o) {
  switch (o.external_data) {
    case SaveOptions::ExternalData::kAlways: return true;
    case SaveOptions::ExternalData::kNever: return false;
    case SaveOptions::ExternalData::kAuto: break;
  }
  return m.external_data || w.size() > o.max_inline_bytes;
}

// Streams the model into `path`; the bytes are never all in memory at once.
Status write_model_file(const ModelWriter& w, const std::string& path) {
  KILN_RETURN_IF_ERROR(check_fits_inline(w).with_context(path));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Status::error("cannot create '" + path + "'");
  Status st = w.write([&](const char* data, size_t n) {
    f.write(data, static_cast<std::streamsize>(n));
    return static_cast<bool>(f);
  });
  f.close();
  if (!st.is_ok() || !f) return Status::error("error writing '" + path + "'");
  return Status::ok();
}

}  // namespace

Result<std::string> serialize_model(const ir::Model& m) {
  ModelWriter w(m);
  KILN_RETURN_IF_ERROR(check_fits_inline(w));
  std::string out;
  out.reserve(w.size());
  KILN_RETURN_IF_ERROR(w.write([&](const char* data, size_t n) {
    out.append(data, n);
    return true;
  }));
  return out;
}

Status save_model(const ir::Model& model, const std::string& path, const SaveOptions& options,
                  SaveReport* report) {
  namespace fs = std::filesystem;
  if (report) *report = SaveReport{};
  ModelWriter writer(model);
  if (wants_external_data(model, writer, options)) {
    const fs::path model_path(path);
    const std::string model_name = model_path.filename().string();
    if (model_name.empty() || model_name == "." || model_name == "..")
      return Status::error("'" + path + "' is not a model file name");
    const std::string location = options.location.empty() ? model_name + ".data" : options.location;
    KILN_RETURN_IF_ERROR(check_location(location));
    const std::string data_path = (model_path.parent_path() / location).string();
    std::error_code ec;
    if (location == model_name || fs::equivalent(model_path, data_path, ec))
      return Status::error("external data file '" + data_path + "' would overwrite the model '" + path + "'");
    ExternalDataWriter data(data_path, location, options.alignment);
    KILN_RETURN_IF_ERROR(writer.externalize(data, options.size_threshold));
    KILN_RETURN_IF_ERROR(data.finish());
    if (report) *report = data.report();
  }
  return write_model_file(writer, path);
}

}  // namespace kiln::onnx_io
