// Gather before elementwise ops on constants: Gather(f(A, B, ...), I, axis) becomes
// f(Gather(A, I, axis), Gather(B, I, axis), ...), so that a table computed from constants (a
// quantized embedding dequantized by Cast and Mul, too large for constant folding to expand) is
// computed only for the rows the indices pick. An operand is gathered when it spans the gathered
// axis at the table's extent, and read as it is when it broadcasts over that axis and the ones
// before it; any other operand leaves the node alone. Repeats until the Gather reaches the
// constants. Exact: elementwise ops commute with picking elements. Top-level graph only.
#include "ir/op_schema.h"
#include "kernels/kernel_util.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// The shape of a value computed from constants by elementwise nodes only, or nullopt.
std::optional<Shape> constant_elementwise_shape(const GraphIndex& idx, const std::string& v, int depth = 0) {
  if (const Tensor* t = idx.constant(v)) return t->shape();
  const ir::Node* p = idx.producer(v);
  if (!p || depth > 16 || p->outputs.size() != 1) return std::nullopt;
  const ir::OpSchema* schema = ir::OpSchemaRegistry::global().find(p->domain, p->op_type);
  if (!schema || !schema->elementwise) return std::nullopt;
  std::vector<Shape> shapes;
  for (const std::string& in : p->inputs) {
    if (in.empty()) continue;
    auto s = constant_elementwise_shape(idx, in, depth + 1);
    if (!s) return std::nullopt;
    shapes.push_back(*s);
  }
  auto out = kiln::broadcast_shapes(shapes);
  return out ? std::optional<Shape>(*out) : std::nullopt;
}

bool try_rewrite(ir::Graph& g, const GraphIndex& idx, const ir::Node& gather) {
  if (!is_onnx_op(&gather, "Gather") || gather.inputs.size() != 2 || gather.outputs.size() != 1) return false;
  const std::string& data = gather.inputs[0];
  const ir::Node* f = idx.producer(data);
  if (!f || !idx.single_use(data) || idx.constant(data)) return false;
  const auto table = constant_elementwise_shape(idx, data);
  if (!table || table->empty()) return false;
  const int64_t rank = static_cast<int64_t>(table->size());
  int64_t axis = gather.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;

  // Each operand: gathered (it spans the axis at the table's extent) or read as it is (it only
  // covers dims after the axis, which the Gather keeps as the last ones).
  std::vector<bool> gathered;
  for (const std::string& in : f->inputs) {
    if (in.empty()) {
      gathered.push_back(false);
      continue;
    }
    const Shape s = *constant_elementwise_shape(idx, in);
    const int64_t r = static_cast<int64_t>(s.size());
    if (r == rank && s[axis] == (*table)[axis]) gathered.push_back(true);
    else if (r <= rank - 1 - axis) gathered.push_back(false);
    else return false;
  }
  ir::Node moved = *f;
  moved.name = fresh_name(g, f->name + "_after_gather");
  moved.outputs = gather.outputs;
  std::vector<ir::Node> added;
  for (size_t i = 0; i < moved.inputs.size(); ++i) {
    if (!gathered[i]) continue;
    ir::Node pick = gather;
    pick.name = fresh_name(g, gather.name + "_" + std::to_string(i));
    pick.inputs[0] = moved.inputs[i];
    pick.outputs = {fresh_name(g, moved.inputs[i] + "_gathered")};
    moved.inputs[i] = pick.outputs[0];
    added.push_back(std::move(pick));
  }
  added.push_back(std::move(moved));
  forget_value_info(g, {gather.outputs[0], data});
  // The new nodes take the Gather's place (their inputs, the Gather's and f's, are all defined
  // before it); f goes, being read only by the Gather.
  size_t at = 0, f_at = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (&g.nodes[i] == &gather) at = i;
    if (&g.nodes[i] == f) f_at = i;
  }
  g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(at));
  g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(at), added.begin(), added.end());
  g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(f_at));
  return true;
}

class GatherElementwise : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    ir::Graph& g = model.graph;
    return rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& n) { return try_rewrite(g, idx, n); });
  }
};

}  // namespace

KILN_REGISTER_PASS(GatherElementwise, "gather-elementwise", 1, kSimplify, 15, true);

}  // namespace kiln::passes
