#include "passes/node_lowering.h"

#include <algorithm>

#include "passes/graph_edit.h"

namespace kiln::passes {

std::string NodeLowering::value(const std::string& what) {
  std::string name = fresh_name(graph, node.outputs[0] + "_" + what);
  while (taken_.count(name)) name += "_";
  taken_.insert(name);
  return name;
}

std::string NodeLowering::add(std::string op, std::vector<std::string> inputs, std::string out,
                              std::vector<ir::Attribute> attrs, std::string domain) {
  if (out.empty()) out = value(op);
  ir::Node n = make_node(node.name + "_" + op + std::to_string(nodes.size()), std::move(op), std::move(inputs), {out},
                         std::move(domain));
  n.attrs = std::move(attrs);
  nodes.push_back(std::move(n));
  return out;
}

std::string NodeLowering::constant(Tensor t, const std::string& what) {
  const std::string name = value(what);
  graph.initializers[name] = std::move(t);
  return name;
}

std::vector<ir::Attribute> NodeLowering::attrs_except(std::initializer_list<std::string_view> drop) const {
  std::vector<ir::Attribute> out;
  for (const ir::Attribute& a : node.attrs)
    if (std::find(drop.begin(), drop.end(), a.name) == drop.end()) out.push_back(a);
  return out;
}

int64_t lower_nodes(ir::Model& model, const std::function<bool(NodeLowering&)>& lower) {
  int64_t lowered = 0;
  for_each_graph(model.graph, [&](ir::Graph& g) {
    // Lowered first, on the whole graph (fresh names look at its nodes), then put in place.
    std::set<std::string> taken;
    const GraphIndex index(g);  // the lowerings add initializers only until they are put in place
    std::vector<std::vector<ir::Node>> lowerings(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (g.nodes[i].outputs.empty()) continue;
      NodeLowering l(model, g, index, g.nodes[i], taken);
      if (!lower(l) || l.nodes.empty()) continue;
      ++lowered;
      lowerings[i] = std::move(l.nodes);
    }
    std::vector<ir::Node> out;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (lowerings[i].empty()) out.push_back(std::move(g.nodes[i]));
      for (ir::Node& m : lowerings[i]) out.push_back(std::move(m));
    }
    g.nodes = std::move(out);
  });
  return lowered;
}

}  // namespace kiln::passes
