// Small accessors of the IR.
#include "ir/graph.h"

#include <set>

namespace kiln::ir {

TypeInfo TypeInfo::tensor(DType dtype, const Shape& shape) {
  TypeInfo t = tensor(dtype);
  t.has_shape = true;
  for (int64_t d : shape) t.shape.push_back(Dim{d, ""});
  return t;
}

std::optional<Shape> TypeInfo::static_shape() const {
  if (kind != Kind::kTensor || !has_shape) return std::nullopt;
  Shape s;
  for (const Dim& d : shape) {
    if (!d.known()) return std::nullopt;
    s.push_back(d.value);
  }
  return s;
}

namespace {
Attribute named(std::string name, Attribute::Type type) {
  Attribute a;
  a.name = std::move(name);
  a.type = type;
  return a;
}
}  // namespace

Attribute Attribute::of_int(std::string name, int64_t v) {
  Attribute a = named(std::move(name), Type::kInt);
  a.i = v;
  return a;
}
Attribute Attribute::of_float(std::string name, float v) {
  Attribute a = named(std::move(name), Type::kFloat);
  a.f = v;
  return a;
}
Attribute Attribute::of_string(std::string name, std::string v) {
  Attribute a = named(std::move(name), Type::kString);
  a.s = std::move(v);
  return a;
}
Attribute Attribute::of_ints(std::string name, std::vector<int64_t> v) {
  Attribute a = named(std::move(name), Type::kInts);
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::of_floats(std::string name, std::vector<float> v) {
  Attribute a = named(std::move(name), Type::kFloats);
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::of_strings(std::string name, std::vector<std::string> v) {
  Attribute a = named(std::move(name), Type::kStrings);
  a.strings = std::move(v);
  return a;
}
Attribute Attribute::of_tensor(std::string name, Tensor v) {
  Attribute a = named(std::move(name), Type::kTensor);
  a.t = std::move(v);
  return a;
}

const Attribute* Node::attr(std::string_view n) const {
  for (const Attribute& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

int64_t Node::attr_int(std::string_view n, int64_t fallback) const {
  const Attribute* a = attr(n);
  return a ? a->i : fallback;
}

float Node::attr_float(std::string_view n, float fallback) const {
  const Attribute* a = attr(n);
  return a ? a->f : fallback;
}

std::string Node::attr_string(std::string_view n, const std::string& fallback) const {
  const Attribute* a = attr(n);
  return a ? a->s : fallback;
}

std::vector<int64_t> Node::attr_ints(std::string_view n) const {
  const Attribute* a = attr(n);
  return a ? a->ints : std::vector<int64_t>{};
}

std::vector<float> Node::attr_floats(std::string_view n) const {
  const Attribute* a = attr(n);
  return a ? a->floats : std::vector<float>{};
}

std::vector<std::string> Node::attr_strings(std::string_view n) const {
  const Attribute* a = attr(n);
  return a ? a->strings : std::vector<std::string>{};
}

std::string Node::describe() const {
  return "node '" + (name.empty() ? (outputs.empty() ? std::string("?") : outputs[0]) : name) +
         "' (" + op_type + ")";
}

const ValueInfo* Graph::find_value_info(const std::string& n) const {
  for (const auto* list : {&inputs, &outputs, &value_info})
    for (const ValueInfo& v : *list)
      if (v.name == n) return &v;
  return nullptr;
}

int64_t Model::opset(const std::string& domain_name) const {
  auto it = opsets.find(normalize_domain(domain_name));
  return it == opsets.end() ? 0 : it->second;
}

namespace {
void collect_free_names(const Graph& g, std::set<std::string>& out) {
  std::set<std::string> defined;
  for (const auto& v : g.inputs) defined.insert(v.name);
  for (const auto& [name, t] : g.initializers) defined.insert(name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) defined.insert(o);
  auto use = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name)) out.insert(name);
  };
  for (const auto& n : g.nodes) {
    for (const auto& i : n.inputs) use(i);
    for (const auto& a : n.attrs) {
      std::set<std::string> inner;
      if (a.g) collect_free_names(*a.g, inner);
      for (const auto& sg : a.graphs) collect_free_names(*sg, inner);
      for (const auto& name : inner) use(name);
    }
  }
  for (const auto& o : g.outputs) use(o.name);
}

}  // namespace

void deep_copy_subgraphs(Graph& g) {
  for (Node& n : g.nodes)
    for (Attribute& a : n.attrs) {
      if (a.g) {
        a.g = std::make_shared<Graph>(*a.g);
        deep_copy_subgraphs(*a.g);
      }
      for (auto& sg : a.graphs) {
        sg = std::make_shared<Graph>(*sg);
        deep_copy_subgraphs(*sg);
      }
    }
}

std::set<std::string> free_names(const Graph& graph) {
  std::set<std::string> out;
  collect_free_names(graph, out);
  return out;
}

std::string normalize_domain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

}  // namespace kiln::ir
