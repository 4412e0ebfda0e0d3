// Common subexpression elimination: two nodes with the same op, domain, inputs and attributes
// compute the same outputs, so the later one is dropped and its readers read the first. Random
// ops and nodes with subgraphs are never merged. Identical small initializers merge too.
#include <algorithm>
#include <cstring>

#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

const std::set<std::string> kNondeterministic = {
    "RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli",
    "Multinomial",   "Dropout"};

// Initializers up to this size are compared by content; larger ones are left alone.
constexpr size_t kMaxComparedBytes = 1 << 16;

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DType::kString) {
    const auto* x = a.data<std::string>();
    const auto* y = b.data<std::string>();
    for (int64_t i = 0; i < a.numel(); ++i)
      if (x[i] != y[i]) return false;
    return true;
  }
  return a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

bool same_attr(const ir::Attribute& a, const ir::Attribute& b) {
  if (a.name != b.name || a.type != b.type || a.ref_attr_name != b.ref_attr_name) return false;
  if (a.g || b.g || !a.graphs.empty() || !b.graphs.empty()) return false;
  // Floats compare by bits so that NaN attributes (rare) still merge and -0 stays apart from 0.
  if (std::memcmp(&a.f, &b.f, sizeof(float)) != 0 || a.i != b.i || a.s != b.s) return false;
  if (a.ints != b.ints || a.strings != b.strings || a.floats.size() != b.floats.size())
    return false;
  if (!a.floats.empty() &&
      std::memcmp(a.floats.data(), b.floats.data(), a.floats.size() * sizeof(float)) != 0)
    return false;
  if (a.t.defined() != b.t.defined() || (a.t.defined() && !same_tensor(a.t, b.t))) return false;
  if (a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i)
    if (!same_tensor(a.tensors[i], b.tensors[i])) return false;
  // Type attributes (Cast-like ops in functions) are rare; they never merge.
  return a.type != ir::Attribute::Type::kTypeProto && a.type != ir::Attribute::Type::kTypeProtos;
}

bool same_node(const ir::Node& a, const ir::Node& b) {
  if (a.op_type != b.op_type || a.domain != b.domain || a.inputs != b.inputs) return false;
  if (a.attrs.size() != b.attrs.size() || a.outputs.size() != b.outputs.size()) return false;
  for (const auto& x : a.attrs) {
    const ir::Attribute* y = b.attr(x.name);
    if (!y || !same_attr(x, *y)) return false;
  }
  // The later node's outputs must all exist on the earlier one.
  for (size_t i = 0; i < a.outputs.size(); ++i)
    if (a.outputs[i].empty() && !b.outputs[i].empty()) return false;
  return true;
}

bool mergeable(const ir::Node& n) {
  // Ops of other domains (custom ops, model-local functions) may keep state: never merged.
  if (n.domain != "" && n.domain != "ai.onnx.ml" && n.domain != "ai.kiln") return false;
  if (kNondeterministic.count(n.op_type) || n.outputs.empty()) return false;
  for (const auto& a : n.attrs)
    if (a.g || !a.graphs.empty()) return false;
  return true;
}

std::string node_key(const ir::Node& n) {
  std::string key = n.domain + "|" + n.op_type;
  for (const auto& i : n.inputs) key += "|" + i;
  return key;
}

class CommonSubexpressionElimination : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t merged = 0;
    for_each_graph(model.graph,
                   [&](ir::Graph& g) { merged += merge_initializers(g) + merge_nodes(g); });
    return merged;
  }

 private:
  static int64_t merge_initializers(ir::Graph& g) {
    std::map<std::string, std::vector<std::string>> by_shape;  // "dtype|shape" -> names
    std::vector<std::pair<std::string, std::string>> renames;
    for (const auto& [name, t] : g.initializers) {
      if (is_graph_input(g, name) || is_graph_output(g, name) || t.nbytes() > kMaxComparedBytes)
        continue;
      auto& seen =
          by_shape[std::to_string(static_cast<int>(t.dtype())) + "|" + shape_str(t.shape())];
      bool dup = false;
      for (const auto& other : seen)
        if (same_tensor(g.initializers.at(other), t)) {
          renames.emplace_back(name, other);
          dup = true;
          break;
        }
      if (!dup) seen.push_back(name);
    }
    for (const auto& [from, to] : renames) rename_uses(g, from, to);
    return static_cast<int64_t>(renames.size());
  }

  static int64_t merge_nodes(ir::Graph& g) {
    std::map<std::string, std::vector<size_t>> seen;  // key -> indices of kept nodes
    std::map<std::string, std::string> renamed;
    std::vector<std::pair<std::string, std::string>> renames;
    std::vector<bool> drop(g.nodes.size(), false);
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      ir::Node& n = g.nodes[k];
      for (auto& in : n.inputs) {
        auto it = renamed.find(in);
        if (it != renamed.end()) in = it->second;
      }
      if (!mergeable(n)) continue;
      bool is_output = false;
      for (const auto& o : n.outputs) is_output |= !o.empty() && is_graph_output(g, o);
      auto& candidates = seen[node_key(n)];
      if (!is_output) {
        for (size_t c : candidates) {
          if (!same_node(n, g.nodes[c])) continue;
          for (size_t i = 0; i < n.outputs.size(); ++i)
            if (!n.outputs[i].empty()) {
              renamed[n.outputs[i]] = g.nodes[c].outputs[i];
              renames.emplace_back(n.outputs[i], g.nodes[c].outputs[i]);
            }
          drop[k] = true;
          break;
        }
      }
      if (!drop[k]) candidates.push_back(k);
    }
    if (renames.empty()) return 0;
    std::vector<ir::Node> kept;
    for (size_t k = 0; k < g.nodes.size(); ++k)
      if (!drop[k]) kept.push_back(std::move(g.nodes[k]));
    g.nodes = std::move(kept);
    for (const auto& [from, to] : renames) rename_uses(g, from, to);  // subgraph reads
    return static_cast<int64_t>(std::count(drop.begin(), drop.end(), true));
  }
};

}  // namespace

KILN_REGISTER_PASS(CommonSubexpressionElimination, "cse", 1, kSimplify, 40, true);
}  // namespace kiln::passes
