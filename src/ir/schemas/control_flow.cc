// Schemas of control flow: If, Loop, Scan and SequenceMap, inferred from their body graphs.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas::control_flow {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

Result<const Graph*> body_of(const InferContext& ctx, const char* name) {
  const Attribute* a = ctx.node.attr(name);
  if (!a || !a->g) return ctx.error(std::string("has no '") + name + "' graph");
  return a->g.get();
}

Outputs infer_if(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Graph* then_g, body_of(ctx, "then_branch"));
  KILN_ASSIGN_OR_RETURN(const Graph* else_g, body_of(ctx, "else_branch"));
  KILN_ASSIGN_OR_RETURN(SubgraphResult t, ctx.subgraph(*then_g, {}));
  KILN_ASSIGN_OR_RETURN(SubgraphResult e, ctx.subgraph(*else_g, {}));
  if (t.outputs.size() != e.outputs.size() || t.outputs.size() != ctx.node.outputs.size())
    return ctx.error("branches have " + std::to_string(t.outputs.size()) + " and " + std::to_string(e.outputs.size()) +
                     " outputs, the node " + std::to_string(ctx.node.outputs.size()));
  std::vector<TypeInfo> outs;
  for (size_t i = 0; i < t.outputs.size(); ++i) outs.push_back(type_union(t.outputs[i], e.outputs[i]));
  ctx.subgraph_cost = t.cost.flops >= e.cost.flops ? t.cost : e.cost;
  return outs;
}

bool same_type(const TypeInfo& a, const TypeInfo& b) {
  if (a.kind != b.kind || a.dtype != b.dtype || a.has_shape != b.has_shape || a.shape.size() != b.shape.size()) return false;
  for (size_t i = 0; i < a.shape.size(); ++i)
    if (!same_dim(a.shape[i], b.shape[i]) && (a.shape[i].known() || b.shape[i].known() || !a.shape[i].symbol.empty())) return false;
  if (a.elem && b.elem) return same_type(*a.elem, *b.elem);
  return !a.elem && !b.elem;
}

Outputs infer_loop(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Graph* body, body_of(ctx, "body"));
  const size_t n_carried = ctx.num_inputs() >= 2 ? ctx.num_inputs() - 2 : 0;
  if (body->inputs.size() != n_carried + 2) return ctx.error("body takes " + std::to_string(body->inputs.size()) + " inputs, expected " + std::to_string(n_carried + 2));
  std::vector<TypeInfo> in{tensor_type(DType::kInt64, {}), tensor_type(DType::kBool, {})};
  for (size_t i = 0; i < n_carried; ++i) in.push_back(ctx.input(i + 2));
  SubgraphResult r;
  // Carried values may change shape from one iteration to the next: widen until stable.
  for (int pass = 0;; ++pass) {
    KILN_ASSIGN_OR_RETURN(r, ctx.subgraph(*body, in));
    if (r.outputs.size() < n_carried + 1) return ctx.error("body has too few outputs");
    bool stable = true;
    for (size_t i = 0; i < n_carried; ++i) {
      TypeInfo u = type_union(in[i + 2], r.outputs[i + 1]);
      if (!same_type(u, in[i + 2])) stable = false;
      in[i + 2] = u;
    }
    if (stable || pass == 3) break;
  }
  std::optional<int64_t> trips;
  auto m = ctx.has_input(0) ? ctx.int_values(0) : std::nullopt;
  const Tensor* cond = ctx.constant(1);
  const bool cond_fixed = !ctx.has_input(1) || (cond && cond->dtype() == DType::kBool && cond->numel() == 1 &&
                                                *cond->data<bool>() && body->outputs[0].name == body->inputs[1].name);
  if (m && m->size() == 1 && cond_fixed) trips = (*m)[0];
  std::vector<TypeInfo> outs;
  for (size_t i = 0; i < n_carried; ++i) outs.push_back(trips && *trips > 0 ? r.outputs[i + 1] : in[i + 2]);
  for (size_t k = n_carried + 1; k < r.outputs.size(); ++k) {
    const TypeInfo& e = r.outputs[k];
    if (!has_rank(e)) {
      outs.push_back(tensor_type_unranked(e.dtype));
      continue;
    }
    Dims s{trips ? known_dim(*trips) : unknown_dim()};
    s.insert(s.end(), e.shape.begin(), e.shape.end());
    outs.push_back(tensor_type(e.dtype, std::move(s)));
  }
  ctx.subgraph_cost = r.cost;
  ctx.subgraph_cost.flops *= trips ? static_cast<double>(*trips) : 1.0;
  ctx.subgraph_cost.bytes *= trips ? static_cast<double>(*trips) : 1.0;
  return outs;
}

Outputs infer_scan(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Graph* body, body_of(ctx, "body"));
  const bool v8 = ctx.opset < 9;
  const size_t first = v8 ? 1 : 0;
  const int64_t m = ctx.node.attr_int("num_scan_inputs", 0);
  if (ctx.num_inputs() < first + m) return ctx.error("fewer inputs than num_scan_inputs");
  const size_t n = ctx.num_inputs() - first - m;
  std::vector<int64_t> in_axes = ctx.node.attr_ints("scan_input_axes");
  in_axes.resize(m, 0);
  std::vector<TypeInfo> in;
  Dim batch = unknown_dim();
  for (size_t i = 0; i < n; ++i) {
    TypeInfo t = ctx.input(first + i);
    if (v8 && has_rank(t) && !t.shape.empty()) {
      batch = dim_merge(batch, t.shape[0]);
      t.shape.erase(t.shape.begin());
    }
    in.push_back(t);
  }
  Dim seq = unknown_dim();
  for (int64_t j = 0; j < m; ++j) {
    TypeInfo t = ctx.input(first + n + j);
    if (has_rank(t)) {
      if (v8 && !t.shape.empty()) {
        batch = dim_merge(batch, t.shape[0]);
        t.shape.erase(t.shape.begin());
      }
      KILN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(v8 ? 0 : in_axes[j], t.shape.size(), ctx.node));
      seq = dim_merge(seq, t.shape[a]);
      t.shape.erase(t.shape.begin() + a);
    }
    in.push_back(t);
  }
  KILN_ASSIGN_OR_RETURN(SubgraphResult r, ctx.subgraph(*body, in));
  if (r.outputs.size() < n) return ctx.error("body has too few outputs");
  std::vector<int64_t> out_axes = ctx.node.attr_ints("scan_output_axes");
  out_axes.resize(r.outputs.size() - n, 0);
  std::vector<TypeInfo> outs;
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    TypeInfo t = r.outputs[i];
    if (has_rank(t)) {
      if (i >= n) {
        const int64_t rank = t.shape.size() + 1;
        KILN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(v8 ? 0 : out_axes[i - n], rank, ctx.node));
        t.shape.insert(t.shape.begin() + a, seq);
      }
      if (v8) t.shape.insert(t.shape.begin(), batch);
    }
    outs.push_back(t);
  }
  ctx.subgraph_cost = r.cost;
  if (seq.known()) {
    ctx.subgraph_cost.flops *= static_cast<double>(seq.value);
    ctx.subgraph_cost.bytes *= static_cast<double>(seq.value);
  }
  return outs;
}

Outputs infer_sequence_map(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Graph* body, body_of(ctx, "body"));
  std::vector<TypeInfo> in;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TypeInfo& t = ctx.input(i);
    in.push_back(t.kind == TypeInfo::Kind::kSequence && t.elem ? *t.elem : t);
  }
  KILN_ASSIGN_OR_RETURN(SubgraphResult r, ctx.subgraph(*body, in));
  std::vector<TypeInfo> outs;
  for (const TypeInfo& t : r.outputs) outs.push_back(sequence_type(t));
  ctx.subgraph_cost = r.cost;
  return outs;
}

KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_if}), "If");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_loop}), "Loop");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_scan}), "Scan");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_sequence_map}), "SequenceMap");

}  // namespace kiln::ir::schemas::control_flow
