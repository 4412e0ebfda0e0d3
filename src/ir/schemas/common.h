// Small helpers the schema files share: result builders, attribute-typed outputs, common costs.
#pragma once

#include "ir/op_schema.h"

namespace kiln::ir::schemas {

using Outputs = Result<std::vector<TypeInfo>>;

inline Outputs one(TypeInfo t) { return std::vector<TypeInfo>{std::move(t)}; }

// `in` with another element type (shape kept); a rankless tensor when `in` is unknown.
inline TypeInfo with_dtype(const TypeInfo& in, DType dt) {
  if (in.kind != TypeInfo::Kind::kTensor) return tensor_type_unranked(dt);
  TypeInfo t = in;
  t.dtype = dt;
  return t;
}

// A tensor type with the dtype of `in` and the given shape.
inline TypeInfo shaped_like(const TypeInfo& in, Dims shape) { return tensor_type(in.dtype, std::move(shape)); }

inline DType attr_dtype(const Node& n, const char* name, DType fallback) {
  const Attribute* a = n.attr(name);
  return a ? static_cast<DType>(a->i) : fallback;
}

inline Dims known_dims(const std::vector<int64_t>& v) {
  Dims d;
  for (int64_t x : v) d.push_back(known_dim(x));
  return d;
}

inline Dims unknown_dims(int64_t rank) { return Dims(static_cast<size_t>(rank), unknown_dim()); }

inline double numel_or_zero(const TypeInfo& t) {
  auto n = type_numel(t);
  return n ? static_cast<double>(*n) : 0.0;
}

// Flops proportional to the first input's size (reductions, normalisations, softmax).
inline Cost cost_per_input(const InferContext& ctx, const std::vector<TypeInfo>& outputs, double k) {
  return Cost{k * numel_or_zero(ctx.input(0)), io_bytes(ctx, outputs), 0};
}

}  // namespace kiln::ir::schemas
