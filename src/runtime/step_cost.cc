// Cost of a step from the actual types it saw: the schema's CostFn over an InferContext built from
// them (cost rules read only types and attributes, never input values).
#include "runtime/step_cost.h"

#include <cmath>

#include "ir/op_schema.h"

namespace kiln::runtime {

int64_t step_flops(const StepRecord& r) {
  const ir::OpSchema* schema = ir::OpSchemaRegistry::global().find(r.node->domain, r.node->op_type);
  if (!schema) return -1;
  ir::InferContext ctx(*r.node, r.opset);
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const ir::TypeInfo& t = r.inputs[i];
    if (r.node->has_input(i) && t.kind != ir::TypeInfo::Kind::kTensor) return -1;
    ctx.inputs.push_back(t);
    ctx.constants.push_back(nullptr);
    ctx.values.push_back(std::nullopt);
  }
  for (size_t i = 0; i < r.outputs.size(); ++i)
    if (i < r.node->outputs.size() && !r.node->outputs[i].empty() &&
        r.outputs[i].kind != ir::TypeInfo::Kind::kTensor)
      return -1;
  const ir::Cost c =
      schema->cost ? schema->cost(ctx, r.outputs) : ir::default_cost(*schema, ctx, r.outputs);
  return static_cast<int64_t>(std::llround(c.flops));
}

std::string shapes_str(const std::vector<ir::TypeInfo>& types) {
  std::string s;
  for (const ir::TypeInfo& t : types) {
    if (!s.empty()) s += ' ';
    if (t.kind == ir::TypeInfo::Kind::kUnknown) {
      s += '-';
    } else if (t.kind != ir::TypeInfo::Kind::kTensor || !t.has_shape) {
      s += '?';
    } else {
      s += ir::dims_str(t.shape);
    }
  }
  return s;
}

}  // namespace kiln::runtime
