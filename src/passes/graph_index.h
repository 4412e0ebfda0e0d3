// A read-only index of one graph for pattern matching: who produces each value and who reads
// it. Build it after the last edit; it is not updated by edits.
#pragma once

#include <functional>
#include <map>
#include <optional>
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
  // The one node reading `value` when it is single-use, else nullptr.
  const ir::Node* sole_consumer(const std::string& value) const {
    return single_use(value) && consumers(value).size() == 1 ? consumers(value)[0] : nullptr;
  }
  // The fixed value of an initializer (not overridable by a graph input), or nullptr.
  const Tensor* constant(const std::string& value) const;

 private:
  const ir::Graph& g_;
  std::map<std::string, const ir::Node*> producer_;
  std::map<std::string, std::vector<const ir::Node*>> consumers_;
  std::map<std::string, int> uses_;
};

// Calls `try_rewrite` on each node of `g` with an index of the graph as it is. A call that
// rewrites returns true, which leaves node references stale, so the sweep starts over with a new
// index; it ends when a whole sweep rewrites nothing. Returns the number of rewrites.
int64_t rewrite_until_done(
    ir::Graph& g, const std::function<bool(const GraphIndex&, const ir::Node&)>& try_rewrite);

// Whether `n` exists and is the standard ONNX op `op` (default domain).
inline bool is_onnx_op(const ir::Node* n, const char* op) {
  return n && n->domain.empty() && n->op_type == op;
}

// The operand of binary node `n` that is not `v`; nullopt when `v` is not one of its two inputs.
inline std::optional<std::string> other_operand(const ir::Node& n, const std::string& v) {
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return std::nullopt;
}

}  // namespace kiln::passes
