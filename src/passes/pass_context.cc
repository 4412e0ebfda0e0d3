#include "passes/pass_context.h"

#include "ir/shape_inference.h"
#include "passes/graph_edit.h"

namespace kiln::passes {

const ir::TypeInfo* ValueTypes::find(const std::string& value) const {
  auto it = types.find(value);
  return it == types.end() ? nullptr : &it->second;
}

const ir::TypeInfo* ValueTypes::tensor(const std::string& value) const {
  const ir::TypeInfo* t = find(value);
  return t && t->kind == ir::TypeInfo::Kind::kTensor ? t : nullptr;
}

std::optional<int64_t> ValueTypes::rank(const std::string& value) const {
  const ir::TypeInfo* t = tensor(value);
  if (!t || !t->has_shape) return std::nullopt;
  return static_cast<int64_t>(t->shape.size());
}

namespace {

ValueTypes infer(const ir::Model& model) {
  ValueTypes out;
  ir::Model copy = model;  // tensors share storage
  ir::deep_copy_subgraphs(copy.graph);
  out.inferred = ir::infer_shapes(copy, &out.values).is_ok();
  if (!out.inferred) {
    copy = model;
    ir::deep_copy_subgraphs(copy.graph);
    for_each_graph(copy.graph, [](ir::Graph& g) { g.value_info.clear(); });
    out.values.clear();
    out.inferred = ir::infer_shapes(copy, &out.values).is_ok();
  }
  if (!out.inferred) {  // what the model declares is all there is
    copy = model;
    out.values.clear();
  }
  for_each_graph(copy.graph, [&](ir::Graph& g) {
    for (const auto& [name, t] : g.initializers) out.types[name] = ir::TypeInfo::tensor(t.dtype(), t.shape());
    for (const auto* list : {&g.inputs, &g.value_info, &g.outputs})
      for (const auto& vi : *list)
        if (vi.type.kind != ir::TypeInfo::Kind::kUnknown) out.types[vi.name] = vi.type;
  });
  return out;
}

}  // namespace

const ValueTypes& PassContext::types() {
  if (!types_) {
    types_ = infer(model_);
    ++inferences_;
  }
  return *types_;
}

const GraphIndex& PassContext::index(const ir::Graph& g) {
  CachedIndex& slot = indexes_[&g];
  if (!slot.index || slot.nodes != g.nodes.data() || slot.count != g.nodes.size()) {
    slot.index = std::make_unique<GraphIndex>(g);
    slot.nodes = g.nodes.data();
    slot.count = g.nodes.size();
  }
  return *slot.index;
}

void PassContext::invalidate() {
  types_.reset();
  indexes_.clear();
}

}  // namespace kiln::passes
