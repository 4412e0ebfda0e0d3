// Schemas of sequence and optional ops: SequenceConstruct/Empty/At/Insert/Erase/Length,
// SplitToSequence, ConcatFromSequence, Optional, OptionalGetElement, OptionalHasElement.
#include "ir/schemas/common.h"

namespace kiln::ir::schemas::sequence {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

TypeInfo elem_of(const TypeInfo& t) {
  if ((t.kind == TypeInfo::Kind::kSequence || t.kind == TypeInfo::Kind::kOptional) && t.elem) return *t.elem;
  return TypeInfo{};
}

Outputs infer_construct(InferContext& ctx) {
  TypeInfo e = ctx.input(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i) e = type_union(e, ctx.input(i));
  return one(sequence_type(e));
}

Outputs infer_empty(InferContext& ctx) {
  return one(sequence_type(tensor_type_unranked(attr_dtype(ctx.node, "dtype", DType::kFloat32))));
}

Outputs infer_at(InferContext& ctx) {
  TypeInfo e = elem_of(ctx.input(0));
  if (e.kind == TypeInfo::Kind::kUnknown) e = tensor_type_unranked(DType::kUndefined);
  return one(e);
}

Outputs infer_insert(InferContext& ctx) {
  const TypeInfo& s = ctx.input(0);
  const TypeInfo e = elem_of(s);
  // An empty sequence's element type says nothing of shape: the inserted tensor decides then.
  if (e.kind == TypeInfo::Kind::kUnknown) return one(sequence_type(ctx.input(1)));
  return one(sequence_type(type_union(e, ctx.input(1))));
}

Outputs infer_erase(InferContext& ctx) {
  TypeInfo s = ctx.input(0);
  if (s.kind != TypeInfo::Kind::kSequence) s = sequence_type(TypeInfo{});
  return one(s);
}

Outputs infer_length(InferContext& ctx) { return one(tensor_type(DType::kInt64, {})); }

Outputs infer_split_to_sequence(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(sequence_type(tensor_type_unranked(x.dtype)));
  const int64_t r = x.shape.size();
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), r, ctx.node));
  Dims e = x.shape;
  if (!ctx.has_input(1)) {
    if (ctx.node.attr_int("keepdims", 1) != 0) e[axis] = known_dim(1);
    else e.erase(e.begin() + axis);
    return one(sequence_type(shaped_like(x, e)));
  }
  auto split = ctx.int_values(1);
  const TypeInfo& st = ctx.input(1);
  Dim d = unknown_dim();
  if (split && !split->empty()) {
    bool equal = true;
    for (int64_t v : *split) equal = equal && v == (*split)[0];
    const bool scalar = has_rank(st) && st.shape.empty();
    if (equal && (!scalar || (x.shape[axis].known() && x.shape[axis].value % (*split)[0] == 0))) d = known_dim((*split)[0]);
  }
  e[axis] = d;
  return one(sequence_type(shaped_like(x, e)));
}

Outputs infer_concat_from_sequence(InferContext& ctx) {
  const TypeInfo e = elem_of(ctx.input(0));
  if (!has_rank(e)) return one(tensor_type_unranked(e.dtype));
  const bool new_axis = ctx.node.attr_int("new_axis", 0) != 0;
  const int64_t r = e.shape.size() + (new_axis ? 1 : 0);
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), r, ctx.node));
  Dims out = e.shape;
  if (new_axis) out.insert(out.begin() + axis, unknown_dim());
  else out[axis] = unknown_dim();
  return one(shaped_like(e, std::move(out)));
}

Outputs infer_optional(InferContext& ctx) {
  if (const Attribute* a = ctx.node.attr("type")) return one(optional_type(a->tp));
  return one(optional_type(ctx.input(0)));
}

Outputs infer_optional_get(InferContext& ctx) {
  const TypeInfo& t = ctx.input(0);
  if (t.kind == TypeInfo::Kind::kOptional) return one(elem_of(t));
  return one(t);
}

Outputs infer_optional_has(InferContext& ctx) { return one(tensor_type(DType::kBool, {})); }

KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_construct}), "SequenceConstruct");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_empty}), "SequenceEmpty");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_at}), "SequenceAt");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_insert}), "SequenceInsert");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_erase}), "SequenceErase");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_length}), "SequenceLength");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_split_to_sequence}), "SplitToSequence");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_concat_from_sequence}), "ConcatFromSequence");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_optional}), "Optional");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_optional_get}), "OptionalGetElement");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_optional_has}), "OptionalHasElement");

}  // namespace kiln::ir::schemas::sequence
