// Schemas of generators and the rest: Constant, ConstantOfShape, Range, EyeLike, OneHot, random
// ops, data-dependent ops (NonZero, Unique, NonMaxSuppression), strings, signal processing.
#include <cmath>

#include "ir/schemas/common.h"

namespace kiln::ir::schemas::misc {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

Outputs infer_constant(InferContext& ctx) {
  const Node& n = ctx.node;
  Tensor t;
  if (const Attribute* a = n.attr("value")) t = a->t;
  else if (const Attribute* a = n.attr("value_float")) t = Tensor::scalar<float>(DType::kFloat32, a->f);
  else if (const Attribute* a = n.attr("value_int")) t = Tensor::scalar<int64_t>(DType::kInt64, a->i);
  else if (const Attribute* a = n.attr("value_floats")) {
    KILN_ASSIGN_OR_RETURN(t, Tensor::make(DType::kFloat32, {static_cast<int64_t>(a->floats.size())}));
    for (size_t i = 0; i < a->floats.size(); ++i) t.data<float>()[i] = a->floats[i];
  } else if (const Attribute* a = n.attr("value_ints")) {
    KILN_ASSIGN_OR_RETURN(t, Tensor::make(DType::kInt64, {static_cast<int64_t>(a->ints.size())}));
    for (size_t i = 0; i < a->ints.size(); ++i) t.data<int64_t>()[i] = a->ints[i];
  } else if (n.has_attr("value_string")) {
    return one(tensor_type(DType::kString, {}));
  } else if (const Attribute* a = n.attr("value_strings")) {
    return one(tensor_type(DType::kString, {known_dim(static_cast<int64_t>(a->strings.size()))}));
  } else {
    return one(tensor_type_unranked(DType::kUndefined));  // sparse_value: kiln keeps no sparse types
  }
  if (!t.defined()) return ctx.error("value is empty");
  ctx.output_constants = {t};
  return one(TypeInfo::tensor(t.dtype(), t.shape()));
}

Outputs infer_constant_of_shape(InferContext& ctx) {
  const Attribute* a = ctx.node.attr("value");
  const DType dt = a && a->t.defined() ? a->t.dtype() : DType::kFloat32;
  if (auto v = ctx.dims_value(0)) {
    for (const Dim& d : *v)
      if (d.known() && d.value < 0) return ctx.error("negative dim in shape " + dims_str(*v));
    // A small integer fill (the 1s of a reduced shape) is a shape value later ops may use.
    if (v->size() == 1 && (*v)[0].known() && (*v)[0].value <= 64 && (dt == DType::kInt64 || dt == DType::kInt32)) {
      const int64_t fill = a && a->t.defined() && a->t.numel() == 1
                               ? (dt == DType::kInt64 ? a->t.data<int64_t>()[0] : a->t.data<int32_t>()[0]) : 0;
      ctx.set_output_value(0, Dims(static_cast<size_t>((*v)[0].value), known_dim(fill)));
    }
    return one(tensor_type(dt, *v));
  }
  const TypeInfo& s = ctx.input(0);
  if (has_rank(s) && s.shape.size() == 1 && s.shape[0].known()) return one(tensor_type(dt, unknown_dims(s.shape[0].value)));
  return one(tensor_type_unranked(dt));
}

Outputs infer_range(InferContext& ctx) {
  const DType dt = ctx.input(0).dtype;
  auto start = ctx.scalar_value(0), limit = ctx.scalar_value(1), delta = ctx.scalar_value(2);
  if (!start || !limit || !delta) return one(tensor_type(dt, {unknown_dim()}));
  if (*delta == 0) return ctx.error("delta is 0");
  double n = std::ceil((*limit - *start) / *delta);
  if (dtype_is_integer(dt)) {
    const int64_t s = static_cast<int64_t>(*start), l = static_cast<int64_t>(*limit), d = static_cast<int64_t>(*delta);
    n = static_cast<double>(d > 0 ? (l - s + d - 1) / d : (s - l + (-d) - 1) / (-d));
  }
  const int64_t len = std::max<int64_t>(0, static_cast<int64_t>(n));
  if (dtype_is_integer(dt) && len <= 64) {
    Dims v;
    for (int64_t i = 0; i < len; ++i) v.push_back(known_dim(static_cast<int64_t>(*start) + i * static_cast<int64_t>(*delta)));
    ctx.set_output_value(0, std::move(v));
  }
  return one(tensor_type(dt, {known_dim(len)}));
}

Outputs infer_like_with_dtype(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  return one(with_dtype(x, attr_dtype(ctx.node, "dtype", x.dtype)));
}

Outputs infer_one_hot(InferContext& ctx) {
  const TypeInfo& idx = ctx.input(0);
  const DType dt = ctx.input(2).dtype;
  if (!has_rank(idx)) return one(tensor_type_unranked(dt));
  const int64_t r = idx.shape.size() + 1;
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", -1), r, ctx.node));
  Dims out = idx.shape;
  auto depth = ctx.scalar_value(1);
  out.insert(out.begin() + axis, depth ? known_dim(static_cast<int64_t>(*depth)) : unknown_dim());
  return one(tensor_type(dt, std::move(out)));
}

Outputs infer_non_zero(InferContext& ctx) {
  const int64_t r = rank_of(ctx.input(0));
  return one(tensor_type(DType::kInt64, {r >= 0 ? known_dim(r) : unknown_dim(), unknown_dim()}));
}

Outputs infer_unique(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo u = tensor_type(DType::kInt64, {unknown_dim()});
  if (!ctx.node.has_attr("axis")) {
    auto n = type_numel(x);
    return std::vector<TypeInfo>{tensor_type(x.dtype, {unknown_dim()}), u,
                                 tensor_type(DType::kInt64, {n ? known_dim(*n) : unknown_dim()}), u};
  }
  if (!has_rank(x)) return std::vector<TypeInfo>{tensor_type_unranked(x.dtype), u, u, u};
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), x.shape.size(), ctx.node));
  Dims y = x.shape;
  y[axis] = unknown_dim();
  return std::vector<TypeInfo>{shaped_like(x, y), u, tensor_type(DType::kInt64, {x.shape[axis]}), u};
}

Outputs infer_nms(InferContext& ctx) { return one(tensor_type(DType::kInt64, {unknown_dim(), known_dim(3)})); }

Outputs infer_tfidf(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  int64_t width = 0;
  for (int64_t i : ctx.node.attr_ints("ngram_indexes")) width = std::max(width, i + 1);
  // A scalar X (TfIdfVectorizer wants 1-D or 2-D) is left to the kernel to report.
  if (!has_rank(x) || x.shape.empty()) return one(tensor_type_unranked(DType::kFloat32));
  if (x.shape.size() == 1) return one(tensor_type(DType::kFloat32, {known_dim(width)}));
  return one(tensor_type(DType::kFloat32, {x.shape[0], known_dim(width)}));
}

Outputs infer_string_normalizer(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(DType::kString));
  Dims out = x.shape;
  if (!ctx.node.attr_strings("stopwords").empty()) out.back() = unknown_dim();
  return one(tensor_type(DType::kString, std::move(out)));
}

Outputs infer_string_concat(InferContext& ctx) {
  auto b = broadcast_shapes({&ctx.inputs[0], &ctx.inputs[1]});
  if (!b) return ctx.error(b.status().message());
  if (!b->has_value()) return one(tensor_type_unranked(DType::kString));
  return one(tensor_type(DType::kString, **b));
}

Outputs infer_string_split(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return std::vector<TypeInfo>{tensor_type_unranked(DType::kString), tensor_type_unranked(DType::kInt64)};
  Dims y = x.shape;
  y.push_back(unknown_dim());
  return std::vector<TypeInfo>{tensor_type(DType::kString, y), tensor_type(DType::kInt64, x.shape)};
}

Outputs infer_regex(InferContext& ctx) { return one(with_dtype(ctx.input(0), DType::kBool)); }

Outputs infer_image_decoder(InferContext& ctx) {
  const std::string fmt = ctx.node.attr_string("pixel_format", "RGB");
  return one(tensor_type(DType::kUInt8, {unknown_dim(), unknown_dim(), known_dim(fmt == "Grayscale" ? 1 : 3)}));
}

Outputs infer_dft(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size();
  int64_t axis = ctx.node.attr_int("axis", 1);
  if (ctx.opset >= 20) {
    if (ctx.has_input(2)) {
      auto a = ctx.int_values(2);
      if (!a || a->size() != 1) return one(shaped_like(x, unknown_dims(r)));
      axis = (*a)[0];
    } else {
      axis = -2;
    }
  }
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r - 1) return ctx.error("axis out of range");
  Dims out = x.shape;
  out.back() = known_dim(2);
  Dim n = out[axis];
  if (ctx.has_input(1)) {
    auto len = ctx.int_values(1);
    n = len && len->size() == 1 ? known_dim((*len)[0]) : unknown_dim();
  }
  const bool inverse = ctx.node.attr_int("inverse", 0) != 0;
  if (ctx.node.attr_int("onesided", 0) != 0 && !inverse) n = n.known() ? known_dim(n.value / 2 + 1) : unknown_dim();
  out[axis] = n;
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_stft(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  std::optional<int64_t> frame_len;
  if (ctx.has_input(3)) {
    if (auto v = ctx.int_values(3); v && v->size() == 1) frame_len = (*v)[0];
  } else if (ctx.has_input(2) && has_rank(ctx.input(2)) && ctx.input(2).shape.size() == 1 && ctx.input(2).shape[0].known()) {
    frame_len = ctx.input(2).shape[0].value;
  }
  auto step = ctx.int_values(1);
  Dim batch = unknown_dim(), frames = unknown_dim(), bins = unknown_dim();
  if (has_rank(x) && x.shape.size() == 3) {
    batch = x.shape[0];
    if (x.shape[1].known() && frame_len && step && step->size() == 1 && (*step)[0] > 0)
      frames = known_dim((x.shape[1].value - *frame_len) / (*step)[0] + 1);
  }
  if (frame_len) bins = known_dim(ctx.node.attr_int("onesided", 1) != 0 ? *frame_len / 2 + 1 : *frame_len);
  return one(tensor_type(x.dtype, {batch, frames, bins, known_dim(2)}));
}

Outputs infer_window(InferContext& ctx) {
  const DType dt = attr_dtype(ctx.node, "output_datatype", DType::kFloat32);
  auto n = ctx.scalar_value(0);
  return one(tensor_type(dt, {n ? known_dim(static_cast<int64_t>(*n)) : unknown_dim()}));
}

Outputs infer_mel(InferContext& ctx) {
  const DType dt = attr_dtype(ctx.node, "output_datatype", DType::kFloat32);
  auto bins = ctx.scalar_value(0), dft = ctx.scalar_value(1);
  return one(tensor_type(dt, {dft ? known_dim(static_cast<int64_t>(*dft) / 2 + 1) : unknown_dim(),
                              bins ? known_dim(static_cast<int64_t>(*bins)) : unknown_dim()}));
}

Cost cost_dft(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const double n = numel_or_zero(outs[0]);
  return Cost{5 * n * std::log2(std::max(2.0, n)), io_bytes(ctx, outs), 0};
}

KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_constant}), "Constant");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_constant_of_shape}), "ConstantOfShape");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_range}), "Range");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_like_with_dtype, .elementwise = true}), "EyeLike",
                        "RandomUniformLike", "RandomNormalLike", "Bernoulli");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_one_hot}), "OneHot");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_non_zero}), "NonZero");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_unique}), "Unique");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_nms}), "NonMaxSuppression");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_tfidf}), "TfIdfVectorizer");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_string_normalizer}), "StringNormalizer");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_string_concat, .elementwise = true,
                                      .broadcast = Broadcast::kMultidirectional}), "StringConcat");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_string_split}), "StringSplit");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_regex, .elementwise = true}), "RegexFullMatch");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_image_decoder}), "ImageDecoder");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_dft, .cost = cost_dft}), "DFT");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_stft, .cost = cost_dft}), "STFT");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_window}), "BlackmanWindow", "HammingWindow", "HannWindow");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_mel}), "MelWeightMatrix");

}  // namespace kiln::ir::schemas::misc
