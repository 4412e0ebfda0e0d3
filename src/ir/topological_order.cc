#include "ir/topological_order.h"

#include <functional>
#include <queue>
#include <unordered_map>

namespace kiln::ir {

std::vector<std::string> node_dependencies(const Node& n) {
  std::vector<std::string> deps;
  for (const auto& i : n.inputs)
    if (!i.empty()) deps.push_back(i);
  for (const auto& a : n.attrs) {
    if (a.g)
      for (const auto& name : free_names(*a.g)) deps.push_back(name);
    for (const auto& sg : a.graphs)
      for (const auto& name : free_names(*sg)) deps.push_back(name);
  }
  return deps;
}

Result<std::vector<size_t>> topological_order(const Graph& g, const std::set<std::string>& outer) {
  std::set<std::string> available;  // defined before any node runs
  for (const auto& v : g.inputs) available.insert(v.name);
  for (const auto& [name, t] : g.initializers) available.insert(name);
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) {
      if (o.empty()) continue;
      if (available.count(o) || !producer.emplace(o, i).second)
        return Status::error("value '" + o + "' is produced more than once (second time by " +
                             g.nodes[i].describe() + ")");
    }
  std::vector<std::vector<size_t>> users(g.nodes.size());
  std::vector<int> pending(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& dep : node_dependencies(g.nodes[i])) {
      auto it = producer.find(dep);
      if (it != producer.end()) {
        users[it->second].push_back(i);
        ++pending[i];
      } else if (!available.count(dep) && !outer.count(dep)) {
        return Status::error(g.nodes[i].describe() + " reads '" + dep +
                             "', which no node, input or initializer of the graph defines");
      }
    }
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<size_t> order;
  order.reserve(g.nodes.size());
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (pending[i] > 0)
      return Status::error("the graph has a cycle through " + g.nodes[i].describe());
  return order;
}

Status sort_topologically(Graph& g, const std::set<std::string>& outer) {
  KILN_ASSIGN_OR_RETURN(std::vector<size_t> order, topological_order(g, outer));
  // What subgraphs of g may read: everything g can see.
  std::set<std::string> inner = outer;
  for (const auto& v : g.inputs) inner.insert(v.name);
  for (const auto& [name, t] : g.initializers) inner.insert(name);
  for (const auto& n : g.nodes) inner.insert(n.outputs.begin(), n.outputs.end());
  std::vector<Node> sorted;
  sorted.reserve(g.nodes.size());
  for (size_t i : order) sorted.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(sorted);
  for (auto& n : g.nodes)
    for (auto& a : n.attrs) {
      if (a.g) KILN_RETURN_IF_ERROR(sort_topologically(*a.g, inner).with_context(n.describe()));
      for (auto& sg : a.graphs)
        if (sg) KILN_RETURN_IF_ERROR(sort_topologically(*sg, inner).with_context(n.describe()));
    }
  return Status::ok();
}

}  // namespace kiln::ir
