// Producer and consumer maps of one graph.
#include "passes/graph_index.h"

#include "passes/graph_edit.h"

namespace kiln::passes {

GraphIndex::GraphIndex(const ir::Graph& g) : g_(g), uses_(use_counts(g)) {
  for (const auto& n : g.nodes) {
    for (const auto& o : n.outputs)
      if (!o.empty()) producer_[o] = &n;
    for (const auto& i : n.inputs)
      if (!i.empty()) consumers_[i].push_back(&n);
  }
}

const ir::Node* GraphIndex::producer(const std::string& value) const {
  auto it = producer_.find(value);
  return it == producer_.end() ? nullptr : it->second;
}

const std::vector<const ir::Node*>& GraphIndex::consumers(const std::string& value) const {
  static const std::vector<const ir::Node*> kNone;
  auto it = consumers_.find(value);
  return it == consumers_.end() ? kNone : it->second;
}

int GraphIndex::use_count(const std::string& value) const {
  auto it = uses_.find(value);
  return it == uses_.end() ? 0 : it->second;
}

const Tensor* GraphIndex::constant(const std::string& value) const {
  return constant_value(g_, value);
}

int64_t rewrite_until_done(
    ir::Graph& g, const std::function<bool(const GraphIndex&, const ir::Node&)>& try_rewrite) {
  int64_t rewrites = 0;
  for (bool again = true; again;) {
    again = false;
    const GraphIndex idx(g);
    for (const auto& n : g.nodes)
      if (try_rewrite(idx, n)) {
        ++rewrites;
        again = true;
        break;
      }
  }
  return rewrites;
}

}  // namespace kiln::passes
