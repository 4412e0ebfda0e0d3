// The shape inference walk: a scope of known values per graph, each node's schema asked in turn.
#include "ir/shape_inference.h"

#include <deque>

namespace kiln::ir {

namespace {

struct ValueState {
  TypeInfo type;
  const Tensor* constant = nullptr;
  std::optional<Dims> value;
};

struct Scope {
  const Scope* parent = nullptr;
  std::map<std::string, ValueState> values;
  const ValueState* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->values.find(name);
      if (it != s->values.end()) return &it->second;
    }
    return nullptr;
  }
};

// Combines what a model declares with what inference found: element types must agree; a declared
// shape fills what inference left open.
Result<TypeInfo> merge_types(const TypeInfo& declared, const TypeInfo& inferred, const std::string& what) {
  if (inferred.kind == TypeInfo::Kind::kUnknown) return declared;
  if (declared.kind == TypeInfo::Kind::kUnknown) return inferred;
  if (declared.kind != inferred.kind) return inferred;
  TypeInfo t = inferred;
  if (declared.dtype != DType::kUndefined) {
    if (inferred.dtype != DType::kUndefined && inferred.dtype != declared.dtype)
      return Status::error(what + ": inferred type " + dtype_name(inferred.dtype) + ", declared " +
                           dtype_name(declared.dtype));
    t.dtype = declared.dtype;
  }
  if (declared.elem) {
    if (!inferred.elem) {
      t.elem = declared.elem;
    } else {
      KILN_ASSIGN_OR_RETURN(TypeInfo e, merge_types(*declared.elem, *inferred.elem, what));
      t.elem = std::make_shared<TypeInfo>(std::move(e));
    }
  }
  if (declared.has_shape) {
    // A declared shape that contradicts inference (another rank, another fixed size) is dropped
    // for the inferred one, as ONNX Runtime's lenient merge does: exporters write wrong output
    // shapes (ddddocr's CRNN declares [1,seqlen] for a [20,1,8210] output), and one such hint
    // must not cost the whole graph its shapes.
    bool agree = !inferred.has_shape || declared.shape.size() == inferred.shape.size();
    for (size_t i = 0; agree && inferred.has_shape && i < t.shape.size(); ++i)
      agree = !(declared.shape[i].known() && t.shape[i].known() && declared.shape[i].value != t.shape[i].value);
    if (!inferred.has_shape) {
      t.has_shape = true;
      t.shape = declared.shape;
    } else if (agree) {
      for (size_t i = 0; i < t.shape.size(); ++i) {
        const Dim& d = declared.shape[i];
        Dim& o = t.shape[i];
        if (!o.known() && (d.known() || (o.symbol.empty() && !d.symbol.empty()))) o = d;
      }
    }
  }
  return t;
}

// Inputs of a subgraph: what the node passes, completed by what the body declares.
TypeInfo refine(const TypeInfo& given, const TypeInfo& declared) {
  if (given.kind == TypeInfo::Kind::kUnknown) return declared;
  if (declared.kind != given.kind) return given;
  TypeInfo t = given;
  if (t.dtype == DType::kUndefined) t.dtype = declared.dtype;
  if (!t.elem && declared.elem) t.elem = declared.elem;
  if (!t.has_shape && declared.has_shape) {
    t.has_shape = true;
    t.shape = declared.shape;
  } else if (t.has_shape && declared.has_shape && t.shape.size() == declared.shape.size()) {
    for (size_t i = 0; i < t.shape.size(); ++i)
      if (!t.shape[i].known() && t.shape[i].symbol.empty()) t.shape[i] = declared.shape[i];
  }
  return t;
}

bool is_static_tensor_or_other(const TypeInfo& t) {
  return t.kind != TypeInfo::Kind::kTensor || t.static_shape().has_value();
}

class Inferencer {
 public:
  explicit Inferencer(const Model& model, std::map<std::string, Dims>* top_values = nullptr)
      : model_(model), top_values_(top_values) {}

  Result<SubgraphResult> infer_graph(Graph& g, const Scope* parent, const std::vector<TypeInfo>* given,
                                     bool top) {
    if (++depth_ > 64) return Status::error("subgraphs nested too deeply");
    // A body inferred again (Loop widening its carried types) starts from what the model declared,
    // not from the previous pass's results.
    auto [orig, first_time] = originals_.try_emplace(&g, std::make_pair(g.value_info, g.outputs));
    if (!first_time) {
      g.value_info = orig->second.first;
      g.outputs = orig->second.second;
    }
    Scope scope;
    scope.parent = parent;
    for (const auto& [name, t] : g.initializers) {
      ValueState& s = scope.values[name];
      s.type = TypeInfo::tensor(t.dtype(), t.shape());
      s.constant = &t;
    }
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      ValueInfo& vi = g.inputs[i];
      ValueState& s = scope.values[vi.name];
      if (given && i < given->size()) {
        s.type = refine((*given)[i], vi.type);
      } else if (!s.constant) {
        s.type = vi.type;
      }
    }
    std::map<std::string, size_t> declared_vi, declared_out;
    for (size_t i = 0; i < g.value_info.size(); ++i) declared_vi[g.value_info[i].name] = i;
    for (size_t i = 0; i < g.outputs.size(); ++i) declared_out[g.outputs[i].name] = i;

    SubgraphResult result;
    for (const Node& n : g.nodes) {
      int64_t opset = model_.opset(n.domain);
      if (opset == 0 && n.domain.empty()) opset = 1;
      InferContext ctx(n, opset);
      for (const auto& in : n.inputs) {
        const ValueState* s = in.empty() ? nullptr : scope.find(in);
        ctx.inputs.push_back(s ? s->type : TypeInfo{});
        ctx.constants.push_back(s ? s->constant : nullptr);
        ctx.values.push_back(s ? s->value : std::nullopt);
      }
      ctx.subgraph = [this, &scope](const Graph& body, const std::vector<TypeInfo>& types) {
        return infer_graph(const_cast<Graph&>(body), &scope, &types, false);
      };
      std::vector<TypeInfo> outs;
      const OpSchema* schema = OpSchemaRegistry::global().find(n.domain, n.op_type);
      if (schema && schema->infer) {
        auto r = schema->infer(ctx);
        if (!r) {
          const Status st = r.status();  // a copy: message() refers into it
          return st.message().rfind("node '", 0) == 0 ? st : st.with_context(n.describe());
        }
        outs = std::move(r).value();
      }
      outs.resize(n.outputs.size());
      // Cost, when every shape is known (a node with no outputs computes nothing to count).
      bool known = schema != nullptr && !outs.empty();
      for (size_t i = 0; i < ctx.inputs.size() && known; ++i)
        if (n.has_input(i) && !is_static_tensor_or_other(ctx.inputs[i])) known = false;
      for (size_t i = 0; i < outs.size() && known; ++i)
        if (!n.outputs[i].empty() && (outs[i].kind == TypeInfo::Kind::kUnknown || !is_static_tensor_or_other(outs[i])))
          known = false;
      if (known) {
        result.cost += schema->cost ? schema->cost(ctx, outs) : default_cost(*schema, ctx, outs);
      } else {
        result.cost.unknown_nodes += 1;
      }
      result.cost += ctx.subgraph_cost;

      for (size_t i = 0; i < n.outputs.size(); ++i) {
        const std::string& name = n.outputs[i];
        if (name.empty()) continue;
        ValueState s;
        TypeInfo declared;
        auto vi = declared_vi.find(name);
        if (vi != declared_vi.end()) declared = g.value_info[vi->second].type;
        auto go = declared_out.find(name);
        if (go != declared_out.end()) declared = g.outputs[go->second].type;
        auto merged = merge_types(declared, outs[i], n.describe() + " output '" + name + "'");
        if (!merged) return merged.status();
        s.type = std::move(merged).value();
        if (i < ctx.output_constants.size() && ctx.output_constants[i].defined()) {
          owned_.push_back(ctx.output_constants[i]);
          s.constant = &owned_.back();
        }
        if (i < ctx.output_values.size()) s.value = ctx.output_values[i];
        if (go != declared_out.end()) {
          g.outputs[go->second].type = s.type;
        } else if (vi != declared_vi.end()) {
          g.value_info[vi->second].type = s.type;
        } else if (s.type.kind != TypeInfo::Kind::kUnknown) {
          declared_vi[name] = g.value_info.size();
          g.value_info.push_back(ValueInfo{name, s.type, ""});
        }
        scope.values[name] = std::move(s);
      }
    }
    for (ValueInfo& o : g.outputs) {
      const ValueState* s = scope.find(o.name);
      if (s && scope.values.count(o.name) == 0) {
        // An output passed straight through from an outer scope.
        auto merged = merge_types(o.type, s->type, "graph output '" + o.name + "'");
        if (!merged) return merged.status();
        o.type = std::move(merged).value();
      } else if (s && !declared_vi.count(o.name) && o.type.kind == TypeInfo::Kind::kUnknown) {
        o.type = s->type;  // a graph input or initializer returned as is
      }
      result.outputs.push_back(o.type);
    }
    if (top && top_values_)
      for (const auto& [name, s] : scope.values)
        if (s.value) (*top_values_)[name] = *s.value;
    --depth_;
    return result;
  }

 private:
  const Model& model_;
  std::map<std::string, Dims>* top_values_;
  std::deque<Tensor> owned_;  // constants made during inference (Constant's value_ints, ...)
  std::map<const Graph*, std::pair<std::vector<ValueInfo>, std::vector<ValueInfo>>> originals_;
  int depth_ = 0;
};

}  // namespace

Status infer_shapes(Model& model) { return infer_shapes(model, nullptr); }

Status infer_shapes(Model& model, std::map<std::string, Dims>* values) {
  Inferencer inf(model, values);
  auto r = inf.infer_graph(model.graph, nullptr, nullptr, true);
  return r.status();
}

Result<Cost> estimate_cost(const Model& model, const std::map<std::string, int64_t>& dim_bindings) {
  Model copy = model;
  deep_copy_subgraphs(copy.graph);
  for (ValueInfo& in : copy.graph.inputs)
    for (Dim& d : in.type.shape) {
      auto it = d.known() ? dim_bindings.end() : dim_bindings.find(d.symbol);
      if (it != dim_bindings.end()) d = Dim{it->second, ""};
    }
  Inferencer inf(copy);
  KILN_ASSIGN_OR_RETURN(SubgraphResult r, inf.infer_graph(copy.graph, nullptr, nullptr, true));
  return r.cost;
}

}  // namespace kiln::ir
