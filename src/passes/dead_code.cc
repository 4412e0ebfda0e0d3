// Removes nodes none of whose outputs is read, and initializers nothing reads, in every graph.
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

class DeadCodeElimination : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t removed = 0;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      for (bool again = true; again;) {  // removing a node can make its producers dead
        again = false;
        const auto uses = use_counts(g);
        std::vector<ir::Node> kept;
        for (auto& n : g.nodes) {
          bool live = false;
          for (const auto& o : n.outputs) live |= !o.empty() && uses.count(o);
          if (live) {
            kept.push_back(std::move(n));
          } else {
            ++removed;
            again = true;
          }
        }
        g.nodes = std::move(kept);
      }
      const auto uses = use_counts(g);
      for (auto it = g.initializers.begin(); it != g.initializers.end();) {
        if (!uses.count(it->first) && !is_graph_input(g, it->first)) {
          it = g.initializers.erase(it);
          ++removed;
        } else {
          ++it;
        }
      }
    });
    return removed;
  }
};

}  // namespace

KILN_REGISTER_PASS(DeadCodeElimination, "dead-code", 1, kSimplify, 90, true);

}  // namespace kiln::passes
