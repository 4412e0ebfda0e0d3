// Removes nodes that pass their input through unchanged: Identity, and Dropout in inference
// (no mask read, no training_mode input). Readers of the output read the input instead.
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

bool is_noop(const ir::Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0].empty() || n.outputs.empty()) return false;
  if (n.op_type == "Identity") return true;
  if (n.op_type == "Dropout") {
    const bool training = n.inputs.size() > 2 && !n.inputs[2].empty();
    const bool mask_read = n.outputs.size() > 1 && !n.outputs[1].empty();
    return !training && !mask_read && n.attr_int("is_test", 1) != 0;
  }
  return false;
}

class NoopRemoval : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t removed = 0;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      // A graph output keeps its name, so a no-op producing one stays (its input may be a graph
      // input or an outer value that cannot be renamed).
      std::vector<std::pair<std::string, std::string>> renames;
      std::vector<ir::Node> kept;
      for (auto& n : g.nodes) {
        if (is_noop(n) && !is_graph_output(g, n.outputs[0])) {
          renames.emplace_back(n.outputs[0], n.inputs[0]);
          continue;
        }
        kept.push_back(std::move(n));
      }
      g.nodes = std::move(kept);
      // A chain Identity(Identity(x)): the second rename must point at x, not the removed value.
      for (size_t i = 0; i < renames.size(); ++i) {
        rename_uses(g, renames[i].first, renames[i].second);
        for (size_t j = i + 1; j < renames.size(); ++j)
          if (renames[j].second == renames[i].first) renames[j].second = renames[i].second;
      }
      removed += static_cast<int64_t>(renames.size());
    });
    return removed;
  }
};

}  // namespace

KILN_REGISTER_PASS(NoopRemoval, "noop-removal", 1, kSimplify, 20, true);

}  // namespace kiln::passes
