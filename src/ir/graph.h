// kiln's one IR: a Model holds a Graph of Nodes connected by named values, with typed, shaped
// value infos (dims may be symbolic), initializers, attributes and subgraphs (If, Loop, Scan).
// Edges are names, as in ONNX: a node input names a graph input, an initializer or another
// node's output ("" marks an omitted optional input). Subgraphs may name values of outer graphs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::ir {

struct Dim {
  int64_t value = -1;  // >= 0 when known
  std::string symbol;  // "batch", "seq"; empty when anonymous or known
  bool known() const { return value >= 0; }
};

struct TypeInfo {
  enum class Kind : uint8_t { kUnknown, kTensor, kSequence, kOptional, kMap, kSparseTensor };
  Kind kind = Kind::kUnknown;
  DType dtype = DType::kUndefined;  // kTensor, kSparseTensor; key type for kMap
  bool has_shape = false;
  std::vector<Dim> shape;
  std::shared_ptr<TypeInfo> elem;  // kSequence / kOptional element; kMap value

  static TypeInfo tensor(DType dtype) {
    TypeInfo t;
    t.kind = Kind::kTensor;
    t.dtype = dtype;
    return t;
  }
  static TypeInfo tensor(DType dtype, const Shape& shape);
  // The shape with every dim known, if it is.
  std::optional<Shape> static_shape() const;
};

struct ValueInfo {
  std::string name;
  TypeInfo type;
  std::string doc;
};

struct Graph;

struct Attribute {
  // Numbered as ONNX's AttributeProto.AttributeType.
  enum class Type : int32_t {
    kUndefined = 0, kFloat = 1, kInt = 2, kString = 3, kTensor = 4, kGraph = 5,
    kFloats = 6, kInts = 7, kStrings = 8, kTensors = 9, kGraphs = 10,
    kSparseTensor = 11, kSparseTensors = 12, kTypeProto = 13, kTypeProtos = 14,
  };
  std::string name;
  Type type = Type::kUndefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  TypeInfo tp;
  std::vector<TypeInfo> tps;
  std::string ref_attr_name;  // inside a function body: refers to the caller's attribute
  std::string doc;

  // An attribute of one kind and its value, as passes build nodes.
  static Attribute of_int(std::string name, int64_t v);
  static Attribute of_float(std::string name, float v);
  static Attribute of_string(std::string name, std::string v);
  static Attribute of_ints(std::string name, std::vector<int64_t> v);
  static Attribute of_floats(std::string name, std::vector<float> v);
  static Attribute of_strings(std::string name, std::vector<std::string> v);
  static Attribute of_tensor(std::string name, Tensor v);
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" is the default ONNX domain ("ai.onnx" is normalised to "")
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<Attribute> attrs;
  std::string doc;

  const Attribute* attr(std::string_view n) const;
  bool has_attr(std::string_view n) const { return attr(n) != nullptr; }
  int64_t attr_int(std::string_view n, int64_t fallback) const;
  float attr_float(std::string_view n, float fallback) const;
  std::string attr_string(std::string_view n, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(std::string_view n) const;  // empty when absent
  std::vector<float> attr_floats(std::string_view n) const;
  std::vector<std::string> attr_strings(std::string_view n) const;
  // True when input i is present (named and not "").
  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  // "node 'name' (OpType)" for error messages.
  std::string describe() const;
};

struct Graph {
  std::string name;
  std::string doc;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;
  std::vector<ValueInfo> outputs;
  std::vector<ValueInfo> value_info;
  std::map<std::string, Tensor> initializers;

  const ValueInfo* find_value_info(const std::string& n) const;
};

// A model-local function (ONNX FunctionProto): called like an op of (domain, name).
struct Function {
  std::string name;
  std::string domain;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> attributes;  // attribute names (libonnx 1.12 has no attribute defaults)
  std::vector<Node> nodes;
  std::map<std::string, int64_t> opsets;
  std::string doc;
};

struct Model {
  int64_t ir_version = 8;
  std::map<std::string, int64_t> opsets;  // domain ("" for ai.onnx) -> version
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string doc;
  std::vector<std::pair<std::string, std::string>> metadata;
  Graph graph;
  std::vector<Function> functions;
  // Set by the importer when some tensor came from an external data file; saving keeps such a
  // model's weights external by default (onnx_io::SaveOptions::ExternalData::kAuto).
  bool external_data = false;

  int64_t opset(const std::string& domain_name) const;  // 0 when not imported
};

// Names a graph reads from enclosing graphs: used but not defined inside (recursively).
std::set<std::string> free_names(const Graph& graph);

// Subgraphs are shared_ptrs: a copy of a model (or graph) shares them until this gives the copy
// its own, recursively, so that editing them leaves the original as it was.
void deep_copy_subgraphs(Graph& g);

// "" for "ai.onnx", the name as given otherwise.
std::string normalize_domain(const std::string& domain);

}  // namespace kiln::ir
