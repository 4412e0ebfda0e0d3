#include "runtime/intermediate_outputs.h"

#include <set>
#include <string>

#include "ir/shape_inference.h"

namespace kiln::runtime {

ir::Model with_intermediate_outputs(const ir::Model& m) {
  ir::Model out = m;  // shares m's weights (Tensor copies share storage)
  // Best effort: a value whose type stays unknown is still added, and checked when it arrives.
  (void)ir::infer_shapes(out);
  std::set<std::string> listed;
  for (const auto& o : out.graph.outputs) listed.insert(o.name);
  for (const ir::Node& n : m.graph.nodes)
    for (const auto& name : n.outputs) {
      if (name.empty() || !listed.insert(name).second) continue;
      const ir::ValueInfo* vi = out.graph.find_value_info(name);
      if (vi && vi->type.kind != ir::TypeInfo::Kind::kTensor &&
          vi->type.kind != ir::TypeInfo::Kind::kUnknown)
        continue;
      out.graph.outputs.push_back(ir::ValueInfo{name, vi ? vi->type : ir::TypeInfo{}, ""});
    }
  return out;
}

}  // namespace kiln::runtime
