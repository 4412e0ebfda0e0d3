// A read-only index of one graph for pattern matching: who produces each value and who reads
// it. Build it after the last edit; it is not updated by edits.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

class GraphIndex {
 public:
  explicit GraphIndex(const ir::Graph& g);

  // The node producing `value`, or nullptr for graph inputs, initializers and outer values.
  const ir::Node* producer(const std::string& value) const;
  // Nodes reading `value` as an input (subgraph reads are counted in use_count only).
  const std::vector<const ir::Node*>& consumers(const std::string& value) const;
  // All reads of `value`: node inputs, subgraph reads and graph outputs.
  int use_count(const std::string& value) const;
  // True when `value` is read exactly once and is not a graph output: a fusion may absorb it.
  bool single_use(const std::string& value) const { return use_count(value) == 1; }
  // The fixed value of an initializer (not overridable by a graph input), or nullptr.
  const Tensor* constant(const std::string& value) const;

 private:
  const ir::Graph& g_;
  std::map<std::string, const ir::Node*> producer_;
  std::map<std::string, std::vector<const ir::Node*>> consumers_;
  std::map<std::string, int> uses_;
};

}  // namespace kiln::passes
