// Value-use bookkeeping over a graph and its subgraphs, and the node replacement of a sweep.
#include "passes/graph_edit.h"

#include <algorithm>

namespace kiln::passes {

std::map<std::string, int> use_counts(const ir::Graph& g) {
  std::map<std::string, int> uses;
  for (const auto& n : g.nodes) {
    for (const auto& i : n.inputs)
      if (!i.empty()) ++uses[i];
    for (const auto& a : n.attrs) {
      if (a.g)
        for (const auto& name : ir::free_names(*a.g)) ++uses[name];
      for (const auto& sg : a.graphs)
        for (const auto& name : ir::free_names(*sg)) ++uses[name];
    }
  }
  for (const auto& o : g.outputs) ++uses[o.name];
  return uses;
}

bool is_graph_output(const ir::Graph& g, const std::string& name) {
  for (const auto& o : g.outputs)
    if (o.name == name) return true;
  return false;
}

bool is_graph_input(const ir::Graph& g, const std::string& name) {
  for (const auto& i : g.inputs)
    if (i.name == name) return true;
  return false;
}

const Tensor* constant_value(const ir::Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || is_graph_input(g, name)) return nullptr;
  return &it->second;
}

namespace {
// Renames reads of `from` inside a subgraph, unless the subgraph defines its own `from`.
void rename_free(ir::Graph& g, const std::string& from, const std::string& to) {
  if (is_graph_input(g, from) || g.initializers.count(from)) return;
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs)
      if (o == from) return;
  rename_uses(g, from, to);
  for (auto& o : g.outputs)
    if (o.name == from) o.name = to;
}
}  // namespace

void rename_uses(ir::Graph& g, const std::string& from, const std::string& to) {
  for (auto& n : g.nodes) {
    for (auto& i : n.inputs)
      if (i == from) i = to;
    for (auto& a : n.attrs) {
      if (a.g) rename_free(*a.g, from, to);
      for (auto& sg : a.graphs) rename_free(*sg, from, to);
    }
  }
}

void for_each_graph(ir::Graph& g, const std::function<void(ir::Graph&)>& fn) {
  for (auto& n : g.nodes)
    for (auto& a : n.attrs) {
      if (a.g) for_each_graph(*a.g, fn);
      for (auto& sg : a.graphs) for_each_graph(*sg, fn);
    }
  fn(g);
}

int64_t count_nodes(const ir::Graph& g) {
  int64_t n = static_cast<int64_t>(g.nodes.size());
  for (const auto& node : g.nodes)
    for (const auto& a : node.attrs) {
      if (a.g) n += count_nodes(*a.g);
      for (const auto& sg : a.graphs) n += count_nodes(*sg);
    }
  return n;
}

ir::Node make_node(std::string name, std::string op_type, std::vector<std::string> inputs,
                   std::vector<std::string> outputs, std::string domain) {
  ir::Node n;
  n.name = std::move(name);
  n.op_type = std::move(op_type);
  n.domain = std::move(domain);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

std::string fresh_name(const ir::Graph& g, const std::string& base) {
  std::set<std::string> names = ir::free_names(g);
  for (const auto& n : g.nodes) names.insert(n.outputs.begin(), n.outputs.end());
  for (const auto& vi : g.inputs) names.insert(vi.name);
  for (const auto& vi : g.value_info) names.insert(vi.name);
  for (const auto& kv : g.initializers) names.insert(kv.first);
  std::string name = base;
  for (int i = 1; names.count(name); ++i) name = base + "_" + std::to_string(i);
  return name;
}

void forget_value_info(ir::Graph& g, const std::set<std::string>& names) {
  std::erase_if(g.value_info, [&](const ir::ValueInfo& vi) { return names.count(vi.name) > 0; });
}

void drop_unread_initializers(ir::Graph& g, const std::set<std::string>& names) {
  const auto uses = use_counts(g);
  for (const std::string& v : names)
    if (!uses.count(v) && !is_graph_input(g, v)) g.initializers.erase(v);
}

void replace_nodes(ir::Graph& g, std::vector<NodeReplacement>& found) {
  std::map<const ir::Node*, size_t> pos;
  for (size_t i = 0; i < g.nodes.size(); ++i) pos[&g.nodes[i]] = i;
  std::map<size_t, std::vector<ir::Node>*> at;  // by the position of each replacement's latest node
  std::set<const ir::Node*> removed;
  for (NodeReplacement& r : found) {
    size_t last = 0;
    for (const ir::Node* n : r.remove) last = std::max(last, pos.at(n));
    at[last] = &r.put;
    removed.insert(r.remove.begin(), r.remove.end());
  }
  std::vector<ir::Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto it = at.find(i); it != at.end()) {
      for (ir::Node& p : *it->second) kept.push_back(std::move(p));
    } else if (!removed.count(&g.nodes[i])) {
      kept.push_back(std::move(g.nodes[i]));
    }
  }
  g.nodes = std::move(kept);
}

}  // namespace kiln::passes
