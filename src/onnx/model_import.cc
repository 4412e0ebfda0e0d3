// ModelProto -> ir::Model. Every field is validated as it is read, so that the rest of kiln can
// trust the IR: known dtypes, consistent tensor data, bounded subgraph nesting. A file is read as
// a stream, the main graph's initializers one at a time (model_proto_stream.cc), and each tensor's
// bytes leave the proto as they enter the IR, so loading holds one copy of the weights, not three
// (file bytes, proto, IR).
#include <fcntl.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>

#include "onnx/model_io.h"
#include "onnx/proto_convert.h"

namespace kiln::onnx_io {
namespace {

struct Importer {
  std::string base_dir;
  bool saw_external_data = false;  // becomes ir::Model::external_data
  // The main graph's initializers, converted while the file was read (read_model_proto).
  std::vector<std::pair<std::string, Tensor>> main_initializers;

  Status add_main_initializer(onnx::TensorProto& p) {
    auto x = tensor(p);
    if (!x) return x.status().with_context("initializer '" + p.name() + "'");
    main_initializers.emplace_back(p.name(), std::move(x).value());
    return Status::ok();
  }

  // The proto's data is released once it is in the IR: the proto and the IR never both hold
  // all the weights.
  Result<Tensor> tensor(onnx::TensorProto& p) {
    saw_external_data |= p.data_location() == onnx::TensorProto::EXTERNAL;
    auto t = tensor_from_proto(p, base_dir);
    release_data(p);
    return t;
  }

  Result<Tensor> sparse_tensor(onnx::SparseTensorProto& p) {
    saw_external_data |= p.values().data_location() == onnx::TensorProto::EXTERNAL ||
                         p.indices().data_location() == onnx::TensorProto::EXTERNAL;
    auto t = sparse_to_dense(p, base_dir);
    release_data(*p.mutable_values());
    release_data(*p.mutable_indices());
    return t;
  }

  // clear_raw_data() and Clear() on a repeated field keep the capacity; these free it now.
  template <typename Field>
  static void free_field(Field* f) {
    Field().Swap(f);
  }
  static void release_data(onnx::TensorProto& p) {
    if (p.has_raw_data()) std::unique_ptr<std::string>(p.release_raw_data());
    free_field(p.mutable_float_data());
    free_field(p.mutable_int32_data());
    free_field(p.mutable_int64_data());
    free_field(p.mutable_double_data());
    free_field(p.mutable_uint64_data());
    free_field(p.mutable_string_data());
  }

  Result<ir::ValueInfo> value_info(const onnx::ValueInfoProto& p) {
    ir::ValueInfo v;
    v.name = p.name();
    v.doc = p.doc_string();
    if (p.has_type()) {
      auto t = type_from_proto(p.type());
      if (!t) return t.status().with_context("value '" + p.name() + "'");
      v.type = std::move(t).value();
    }
    return v;
  }

  Result<ir::Attribute> attribute(onnx::AttributeProto& p, int depth) {
    ir::Attribute a;
    a.name = p.name();
    a.doc = p.doc_string();
    a.ref_attr_name = p.ref_attr_name();
    a.type = static_cast<ir::Attribute::Type>(p.type());
    a.f = p.f();
    a.i = p.i();
    a.s = p.s();
    a.floats.assign(p.floats().begin(), p.floats().end());
    a.ints.assign(p.ints().begin(), p.ints().end());
    a.strings.assign(p.strings().begin(), p.strings().end());
    if (p.has_t()) {
      KILN_ASSIGN_OR_RETURN(a.t, tensor(*p.mutable_t()));
    }
    if (p.has_sparse_tensor()) {
      KILN_ASSIGN_OR_RETURN(a.t, sparse_tensor(*p.mutable_sparse_tensor()));
    }
    for (auto& t : *p.mutable_tensors()) {
      KILN_ASSIGN_OR_RETURN(Tensor x, tensor(t));
      a.tensors.push_back(std::move(x));
    }
    if (p.has_g()) {
      KILN_ASSIGN_OR_RETURN(ir::Graph g, graph(*p.mutable_g(), depth + 1));
      a.g = std::make_shared<ir::Graph>(std::move(g));
    }
    for (auto& gp : *p.mutable_graphs()) {
      KILN_ASSIGN_OR_RETURN(ir::Graph g, graph(gp, depth + 1));
      a.graphs.push_back(std::make_shared<ir::Graph>(std::move(g)));
    }
    if (p.has_tp()) {
      KILN_ASSIGN_OR_RETURN(a.tp, type_from_proto(p.tp()));
    }
    for (const auto& tp : p.type_protos()) {
      KILN_ASSIGN_OR_RETURN(ir::TypeInfo t, type_from_proto(tp));
      a.tps.push_back(std::move(t));
    }
    // A graph or tensor attribute without its value would reach kernels as a null graph or an
    // undefined tensor; refuse it here (a function body's reference attribute has no value).
    using T = ir::Attribute::Type;
    if (a.ref_attr_name.empty() &&
        ((a.type == T::kGraph && !a.g) || (a.type == T::kTensor && !p.has_t()) ||
         (a.type == T::kSparseTensor && !p.has_sparse_tensor())))
      return Status::error("attribute of type " + onnx::AttributeProto::AttributeType_Name(p.type()) +
                           " has no value");
    // Older writers leave `type` unset; infer it from the one field that is filled.
    if (a.type == ir::Attribute::Type::kUndefined) {
      if (p.has_f()) a.type = ir::Attribute::Type::kFloat;
      else if (p.has_i()) a.type = ir::Attribute::Type::kInt;
      else if (p.has_s()) a.type = ir::Attribute::Type::kString;
      else if (p.has_t()) a.type = ir::Attribute::Type::kTensor;
      else if (p.has_g()) a.type = ir::Attribute::Type::kGraph;
      else if (!a.floats.empty()) a.type = ir::Attribute::Type::kFloats;
      else if (!a.ints.empty()) a.type = ir::Attribute::Type::kInts;
      else if (!a.strings.empty()) a.type = ir::Attribute::Type::kStrings;
    }
    return a;
  }

  Result<ir::Node> node(onnx::NodeProto& p, int depth) {
    ir::Node n;
    n.name = p.name();
    n.op_type = p.op_type();
    n.domain = ir::normalize_domain(p.domain());
    n.doc = p.doc_string();
    n.inputs.assign(p.input().begin(), p.input().end());
    n.outputs.assign(p.output().begin(), p.output().end());
    for (auto& ap : *p.mutable_attribute()) {
      auto a = attribute(ap, depth);
      if (!a) return a.status().with_context(n.describe() + ", attribute '" + ap.name() + "'");
      n.attrs.push_back(std::move(a).value());
    }
    if (n.op_type.empty()) return Status::error(n.describe() + ": node has no op_type");
    // Every operator has an output; kernels write output 0 without asking (the fuzzer's
    // SequenceConstruct with none wrote past its output list).
    if (n.outputs.empty()) return Status::error(n.describe() + ": node has no outputs");
    return n;
  }

  Result<ir::Graph> graph(onnx::GraphProto& p, int depth) {
    if (depth > kMaxGraphNesting)
      return Status::error("subgraphs are nested more than " + std::to_string(kMaxGraphNesting) +
                           " levels deep in graph '" + p.name() + "'");
    ir::Graph g;
    g.name = p.name();
    g.doc = p.doc_string();
    if (depth == 0) {
      for (auto& [name, t] : main_initializers) g.initializers[name] = std::move(t);
      main_initializers.clear();
    }
    for (auto& t : *p.mutable_initializer()) {
      auto x = tensor(t);
      if (!x) return x.status().with_context("initializer '" + t.name() + "'");
      g.initializers[t.name()] = std::move(x).value();
    }
    for (auto& t : *p.mutable_sparse_initializer()) {
      auto x = sparse_tensor(t);
      if (!x) return x.status().with_context("sparse initializer '" + t.values().name() + "'");
      g.initializers[t.values().name()] = std::move(x).value();
    }
    for (const auto& v : p.input()) {
      KILN_ASSIGN_OR_RETURN(ir::ValueInfo vi, value_info(v));
      g.inputs.push_back(std::move(vi));
    }
    for (const auto& v : p.output()) {
      KILN_ASSIGN_OR_RETURN(ir::ValueInfo vi, value_info(v));
      g.outputs.push_back(std::move(vi));
    }
    for (const auto& v : p.value_info()) {
      KILN_ASSIGN_OR_RETURN(ir::ValueInfo vi, value_info(v));
      g.value_info.push_back(std::move(vi));
    }
    for (auto& np : *p.mutable_node()) {
      KILN_ASSIGN_OR_RETURN(ir::Node n, node(np, depth));
      g.nodes.push_back(std::move(n));
    }
    return g;
  }

  Result<ir::Function> function(onnx::FunctionProto& p) {
    ir::Function f;
    f.name = p.name();
    f.domain = ir::normalize_domain(p.domain());
    f.doc = p.doc_string();
    f.inputs.assign(p.input().begin(), p.input().end());
    f.outputs.assign(p.output().begin(), p.output().end());
    f.attributes.assign(p.attribute().begin(), p.attribute().end());
    for (auto& np : *p.mutable_node()) {
      KILN_ASSIGN_OR_RETURN(ir::Node n, node(np, 1));
      f.nodes.push_back(std::move(n));
    }
    for (const auto& o : p.opset_import()) f.opsets[ir::normalize_domain(o.domain())] = o.version();
    return f;
  }
};

// Reads and converts a model of `size` bytes from `stream`. The main graph's initializers become
// tensors as they are read, each freed from its proto at once: the weights are never held twice.
Result<ir::Model> import_stream(google::protobuf::io::ZeroCopyInputStream* stream, int64_t size,
                                const std::string& base_dir) {
  Importer imp;
  imp.base_dir = base_dir;
  onnx::ModelProto proto;
  KILN_RETURN_IF_ERROR(read_model_proto(stream, size, &proto,
                                        [&](onnx::TensorProto& t) { return imp.add_main_initializer(t); }));
  if (!proto.has_graph()) return Status::error("not a valid ONNX model: it has no graph");
  ir::Model m;
  m.ir_version = proto.ir_version();
  m.producer_name = proto.producer_name();
  m.producer_version = proto.producer_version();
  m.domain = proto.domain();
  m.model_version = proto.model_version();
  m.doc = proto.doc_string();
  for (const auto& o : proto.opset_import()) m.opsets[ir::normalize_domain(o.domain())] = o.version();
  if (m.opsets.empty()) m.opsets[""] = 1;  // IR version 2 models predate opset_import
  for (const auto& kv : proto.metadata_props()) m.metadata.emplace_back(kv.key(), kv.value());
  KILN_ASSIGN_OR_RETURN(m.graph, imp.graph(*proto.mutable_graph(), 0));
  for (auto& fp : *proto.mutable_functions()) {
    KILN_ASSIGN_OR_RETURN(ir::Function f, imp.function(fp));
    m.functions.push_back(std::move(f));
  }
  m.external_data = imp.saw_external_data;
  return m;
}

// Closes the descriptor on every path.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<ir::Model> parse_model(const std::string& bytes, const std::string& base_dir) {
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(std::min<size_t>(bytes.size(), INT_MAX)));
  return import_stream(&raw, static_cast<int64_t>(bytes.size()), base_dir);
}

Result<ir::Model> load_model(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Status::error("'" + path + "' is a folder, not a model file");
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) return Status::error("cannot open '" + path + "': " + std::strerror(errno));
  const off_t size = ::lseek(file.fd, 0, SEEK_END);
  if (size < 0 || ::lseek(file.fd, 0, SEEK_SET) != 0) return Status::error("cannot read '" + path + "'");
  if (size > static_cast<off_t>(INT_MAX))
    return Status::error("'" + path + "' is over 2 GiB; store weights as external data");
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  // Read in large blocks: the file's bytes are never held whole.
  google::protobuf::io::FileInputStream stream(file.fd, 1 << 20);
  auto m = import_stream(&stream, size, dir);
  if (stream.GetErrno() != 0)
    return Status::error("error reading '" + path + "': " + std::strerror(stream.GetErrno()));
  if (!m) return m.status().with_context(path);
  return m;
}

}  // namespace kiln::onnx_io
