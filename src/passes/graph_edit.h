// Small edits passes share: who uses a value, renaming uses, removing and replacing nodes.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

// How often each value is read: by node inputs, by subgraphs (names they read from outside) and
// as a graph output (each graph output counts once).
std::map<std::string, int> use_counts(const ir::Graph& g);

bool is_graph_output(const ir::Graph& g, const std::string& name);
bool is_graph_input(const ir::Graph& g, const std::string& name);
// An initializer that no graph input overrides: its value is fixed.
const Tensor* constant_value(const ir::Graph& g, const std::string& name);

// Makes every reader of `from` (node inputs, and subgraphs reading it from outside) read `to`.
void rename_uses(ir::Graph& g, const std::string& from, const std::string& to);

// Calls fn on `g` and on every subgraph below it, innermost first.
void for_each_graph(ir::Graph& g, const std::function<void(ir::Graph&)>& fn);

int64_t count_nodes(const ir::Graph& g);  // subgraphs included

// A node of `op_type` (in `domain`) reading `inputs` and writing `outputs`, named `name`.
ir::Node make_node(std::string name, std::string op_type, std::vector<std::string> inputs,
                   std::vector<std::string> outputs, std::string domain = "");

// `base`, or `base_N`, whichever is first not yet a value name in `g` (inputs, initializers, node
// outputs, value infos, or names its subgraphs read from outside).
std::string fresh_name(const ir::Graph& g, const std::string& base);

// One rewrite of a sweep: the nodes `remove` go, and `put` (in order) takes the place of the
// latest of them in the graph's order, so that every input it reads is ready there.
struct NodeReplacement {
  std::vector<const ir::Node*> remove;
  std::vector<ir::Node> put;
};
// Applies non-overlapping replacements of nodes of `g` in one pass over its node list.
void replace_nodes(ir::Graph& g, std::vector<NodeReplacement>& found);

// Drops the value infos of `names`: for values whose shape a rewrite changed.
void forget_value_info(ir::Graph& g, const std::set<std::string>& names);

// Drops those of the initializers `names` (constants a rewrite replaced) that nothing reads any
// more and no graph input overrides.
void drop_unread_initializers(ir::Graph& g, const std::set<std::string>& names);

}  // namespace kiln::passes
