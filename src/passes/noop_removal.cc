// Removes nodes that pass their input through unchanged: Identity, and Dropout whose mask no one
// reads, in inference (no training_mode input, or a constant false) or with a constant ratio of
// 0 (torchvision's Swin exports training_mode true and ratio 0 on its attention: 11 % of its
// run building masks). Readers of the output read the input instead.
#include <optional>

#include "core/float_convert.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// The value of a constant with one element, or nullopt.
std::optional<double> constant_scalar(const ir::Graph& g, const std::string& name) {
  const Tensor* t = name.empty() ? nullptr : constant_value(g, name);
  if (t == nullptr || t->numel() != 1) return std::nullopt;
  return load_as_double(t->dtype(), t->raw_data(), 0);
}

bool is_noop(const ir::Graph& g, const ir::Node& n, const std::map<std::string, int>& uses) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0].empty() || n.outputs.empty()) return false;
  if (n.op_type == "Identity") return true;
  if (n.op_type == "Dropout") {
    const bool mask_read = n.outputs.size() > 1 && !n.outputs[1].empty() && uses.count(n.outputs[1]);
    if (mask_read || n.attr_int("is_test", 1) == 0) return false;
    const std::string none;
    const std::string& ratio = n.inputs.size() > 1 ? n.inputs[1] : none;
    const std::string& training = n.inputs.size() > 2 ? n.inputs[2] : none;
    const std::optional<double> r = constant_scalar(g, ratio), t = constant_scalar(g, training);
    return training.empty() || (t && *t == 0.0) || (r && *r == 0.0);
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
      const std::map<std::string, int> uses = use_counts(g);
      for (auto& n : g.nodes) {
        if (is_noop(g, n, uses) && !is_graph_output(g, n.outputs[0])) {
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
