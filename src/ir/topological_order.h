// The order a graph's nodes can run in, and the structural checks that make one exist: every
// value produced once, every read defined somewhere, no cycle. The runtime compiles graphs in this
// order; the optimizer sorts models into it before any pass walks producer-to-consumer chains.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::ir {

// What a node needs before it runs: its inputs and the values its subgraphs read from outside.
std::vector<std::string> node_dependencies(const Node& n);

// Indices of g's nodes with every node after the producers of its dependencies (Kahn's algorithm,
// keeping the model's order among ready nodes). `outer` names what enclosing graphs define. The
// error names the problem: a value produced twice (or also an input or initializer), a read of a
// value nothing defines, or a cycle.
Result<std::vector<size_t>> topological_order(const Graph& g, const std::set<std::string>& outer);

// Puts the nodes of g and of all its subgraphs in topological order; errors as above.
Status sort_topologically(Graph& g, const std::set<std::string>& outer = {});

}  // namespace kiln::ir
