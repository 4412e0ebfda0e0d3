// Lowering one node into several (a contrib op into ops kiln has kernels for): a builder of the
// nodes that take its place, and the sweep that puts them there. Used by contrib-qlinear and
// contrib-transformer.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/graph_index.h"

namespace kiln::passes {

class NodeLowering {
 public:
  // `index`: of g as it was before any lowering; `taken`: the names lowerings of this graph gave so
  // far (not yet in it).
  NodeLowering(ir::Model& model, ir::Graph& g, const GraphIndex& index, const ir::Node& n, std::set<std::string>& taken)
      : model(model), graph(g), index(index), node(n), taken_(taken) {}

  ir::Model& model;
  ir::Graph& graph;
  const GraphIndex& index;
  const ir::Node& node;  // the node lowered
  std::vector<ir::Node> nodes;  // what replaces it, in running order

  // A fresh value name for `what`, after the node's first output.
  std::string value(const std::string& what);
  // Adds a node of `op` reading `inputs` and writing `out` (a fresh value when ""); returns `out`.
  std::string add(std::string op, std::vector<std::string> inputs, std::string out = "",
                  std::vector<ir::Attribute> attrs = {}, std::string domain = "");
  // A new initializer holding `t`; returns its name.
  std::string constant(Tensor t, const std::string& what);
  // Whether anything reads the node's output i (a node, a subgraph, the graph's outputs).
  bool output_read(size_t i) const { return i < node.outputs.size() && index.use_count(node.outputs[i]) > 0; }
  // Input i of the node, "" when absent.
  std::string input(size_t i) const { return node.has_input(i) ? node.inputs[i] : ""; }
  // The node's attributes, less those named in `drop`.
  std::vector<ir::Attribute> attrs_except(std::initializer_list<std::string_view> drop) const;

 private:
  std::set<std::string>& taken_;
};

// Offers every node of the model's graphs to `lower`, which returns true when it has built the
// node's replacement in the NodeLowering (else what it built is dropped); the replacements then
// take the nodes' places. Returns how many nodes were lowered.
int64_t lower_nodes(ir::Model& model, const std::function<bool(NodeLowering&)>& lower);

}  // namespace kiln::passes
