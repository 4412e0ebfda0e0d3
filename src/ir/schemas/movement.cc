// Schemas of data movement: reshapes, transposes, concat/split, slicing, gathers and scatters,
// Expand/Tile/Pad, Shape and Size (which also carry shape values forward for later Reshapes).
#include <algorithm>
#include <limits>

#include "ir/schemas/common.h"

namespace kiln::ir::schemas::movement {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

// The -1 of a Reshape: what is left of the input once equal dims on both sides cancel out.
Dim infer_minus_one(const Dims& in, const Dims& out_others) {
  Dims rest = in, extra;
  for (const Dim& d : out_others) {
    auto it = std::find_if(rest.begin(), rest.end(), [&](const Dim& x) { return same_dim(x, d); });
    if (it != rest.end()) rest.erase(it);
    else extra.push_back(d);
  }
  if (extra.empty() && rest.size() == 1) return rest[0];
  int64_t num = 1, den = 1;
  for (const Dim& d : rest) {
    if (!d.known()) return unknown_dim();
    num *= d.value;
  }
  for (const Dim& d : extra) {
    if (!d.known()) return unknown_dim();
    den *= d.value;
  }
  if (den <= 0 || num % den != 0) return unknown_dim();
  return known_dim(num / den);
}

Outputs infer_reshape(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  std::optional<Dims> sv;
  if (ctx.opset < 5) {
    if (const Attribute* a = ctx.node.attr("shape")) sv = known_dims(a->ints);
  } else {
    sv = ctx.dims_value(1);
  }
  if (auto xv = ctx.dims_value(0)) ctx.set_output_value(0, *xv);
  if (!sv) {
    const TypeInfo& s = ctx.input(1);
    if (has_rank(s) && s.shape.size() == 1 && s.shape[0].known())
      return one(shaped_like(x, unknown_dims(s.shape[0].value)));
    return one(tensor_type_unranked(x.dtype));
  }
  const bool allow_zero = ctx.node.attr_int("allowzero", 0) != 0;
  Dims out;
  std::optional<size_t> minus_one;
  for (size_t i = 0; i < sv->size(); ++i) {
    const Dim& v = (*sv)[i];
    if (v.known() && v.value == 0 && !allow_zero) {
      if (has_rank(x) && i < x.shape.size()) out.push_back(x.shape[i]);
      else if (has_rank(x)) return ctx.error("shape copies dim " + std::to_string(i) + " of a rank " +
                                             std::to_string(x.shape.size()) + " input");
      else out.push_back(unknown_dim());
    } else if (v.known() || !v.symbol.empty()) {
      out.push_back(v);
    } else {
      out.push_back(unknown_dim());
    }
  }
  // A literal -1 arrives as a Dim with value -1 and no symbol: tell it apart from "unknown".
  for (size_t i = 0; i < sv->size(); ++i) {
    const Dim& v = (*sv)[i];
    const bool literal = v.value == -1 && v.symbol.empty() && ctx.int_values(ctx.opset < 5 ? 99 : 1).has_value();
    const bool from_attr = ctx.opset < 5 && v.value == -1;
    if (literal || from_attr) {
      if (minus_one) return ctx.error("shape has more than one -1");
      minus_one = i;
    }
  }
  // One dim left unknown is fixed by the element count, which Reshape keeps: a literal -1, or
  // a value computed at run time (torch's dynamo exporter writes [-1, Shape(x)[-2], 32], whose
  // -1 no constant shows). With two unknowns neither is fixed.
  std::vector<size_t> open;
  for (size_t i = 0; i < out.size(); ++i)
    if (!out[i].known() && out[i].symbol.empty()) open.push_back(i);
  if (open.size() == 1 && has_rank(x)) {
    Dims others;
    for (size_t i = 0; i < out.size(); ++i)
      if (i != open[0]) others.push_back(out[i]);
    out[open[0]] = infer_minus_one(x.shape, others);
  }
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_flatten(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(shaped_like(x, unknown_dims(2)));
  const int64_t r = x.shape.size();
  int64_t axis = ctx.node.attr_int("axis", 1);
  if (axis < -r || axis > r) return ctx.error("axis " + std::to_string(axis) + " out of range");
  if (axis < 0) axis += r;
  Dim a = known_dim(1), b = known_dim(1);
  for (int64_t i = 0; i < r; ++i) (i < axis ? a : b) = dim_mul(i < axis ? a : b, x.shape[i]);
  return one(shaped_like(x, {a, b}));
}

Outputs infer_transpose(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  const size_t r = x.shape.size();
  std::vector<int64_t> perm = ctx.node.attr_ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(r - 1 - i);
  if (perm.size() != r) return ctx.error("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(r));
  Dims out;
  for (int64_t p : perm) {
    KILN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(p, r, ctx.node));
    out.push_back(x.shape[a]);
  }
  return one(shaped_like(x, std::move(out)));
}

std::optional<std::vector<int64_t>> axes_of(InferContext& ctx, size_t input, bool& given) {
  if (ctx.opset < 13 || (ctx.node.op_type != "Squeeze" && ctx.node.op_type != "Unsqueeze" && ctx.opset < 18)) {
    given = ctx.node.has_attr("axes");
    return ctx.node.attr_ints("axes");
  }
  given = ctx.has_input(input);
  if (!given) return std::vector<int64_t>{};
  return ctx.int_values(input);
}

Outputs infer_squeeze(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (auto v = ctx.dims_value(0)) ctx.set_output_value(0, *v);
  bool given = false;
  auto axes = axes_of(ctx, 1, given);
  if (!has_rank(x) || !axes) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size();
  std::vector<bool> drop(r, false);
  if (!given) {
    for (int64_t i = 0; i < r; ++i) {
      if (!x.shape[i].known()) return one(tensor_type_unranked(x.dtype));
      drop[i] = x.shape[i].value == 1;
    }
  }
  for (int64_t a : *axes) {
    KILN_ASSIGN_OR_RETURN(int64_t k, normalize_axis(a, r, ctx.node));
    if (x.shape[k].known() && x.shape[k].value != 1)
      return ctx.error("cannot squeeze dim " + std::to_string(k) + " of shape " + dims_str(x.shape));
    drop[k] = true;
  }
  Dims out;
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) out.push_back(x.shape[i]);
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_unsqueeze(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (auto v = ctx.dims_value(0)) ctx.set_output_value(0, *v);
  bool given = false;
  auto axes = axes_of(ctx, 1, given);
  if (!has_rank(x) || !axes) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size() + axes->size();
  std::vector<bool> added(r, false);
  for (int64_t a : *axes) {
    KILN_ASSIGN_OR_RETURN(int64_t k, normalize_axis(a, r, ctx.node));
    if (added[k]) return ctx.error("axis " + std::to_string(a) + " repeated");
    added[k] = true;
  }
  Dims out;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) out.push_back(added[i] ? known_dim(1) : x.shape[j++]);
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_concat(InferContext& ctx) {
  DType dt = DType::kUndefined;
  int64_t r = -1;
  bool all_values = true;
  Dims values;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TypeInfo& t = ctx.input(i);
    if (dt == DType::kUndefined) dt = t.dtype;
    if (has_rank(t)) r = t.shape.size();
    auto v = ctx.dims_value(i);
    if (v) values.insert(values.end(), v->begin(), v->end());
    else all_values = false;
  }
  if (all_values && dtype_is_integer(dt)) ctx.set_output_value(0, values);
  if (r < 0) return one(tensor_type_unranked(dt));
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), r, ctx.node));
  Dims out(r, unknown_dim());
  Dim sum = known_dim(0);
  bool first = true;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TypeInfo& t = ctx.input(i);
    if (!has_rank(t)) {
      sum = unknown_dim();
      continue;
    }
    if (static_cast<int64_t>(t.shape.size()) != r) return ctx.error("inputs of different ranks");
    for (int64_t k = 0; k < r; ++k) {
      if (k == axis) continue;
      if (!first && out[k].known() && t.shape[k].known() && out[k].value != t.shape[k].value)
        return ctx.error("input " + std::to_string(i) + " has shape " + dims_str(t.shape) + ", others " + dims_str(out));
      out[k] = first ? t.shape[k] : dim_merge(out[k], t.shape[k]);
    }
    first = false;
    sum = (sum.known() || sum.symbol.size()) ? dim_add(sum, t.shape[axis]) : unknown_dim();
  }
  out[axis] = sum;
  return one(tensor_type(dt, std::move(out)));
}

Outputs infer_split(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const size_t n = ctx.node.outputs.size();
  std::vector<TypeInfo> outs(n, tensor_type_unranked(x.dtype));
  if (!has_rank(x)) return outs;
  const int64_t r = x.shape.size();
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), r, ctx.node));
  std::optional<std::vector<int64_t>> sizes;
  if (ctx.opset >= 13) {
    if (ctx.has_input(1)) sizes = ctx.int_values(1);
  } else if (ctx.node.has_attr("split")) {
    sizes = ctx.node.attr_ints("split");
  } else if (ctx.has_input(1)) {
    sizes = ctx.int_values(1);
  }
  const bool explicit_sizes = (ctx.opset >= 13 && ctx.has_input(1)) || (ctx.opset < 13 && (ctx.node.has_attr("split") || ctx.has_input(1)));
  const Dim d = x.shape[axis];
  if (!explicit_sizes && d.known()) {
    sizes = std::vector<int64_t>();
    const int64_t parts = ctx.node.attr_int("num_outputs", static_cast<int64_t>(n));
    if (parts <= 0) return ctx.error("num_outputs must be positive");
    const int64_t each = ctx.node.has_attr("num_outputs") ? (d.value + parts - 1) / parts : d.value / parts;
    int64_t left = d.value;
    for (size_t i = 0; i < n; ++i) {
      const int64_t s = i + 1 == n ? left : std::min(each, left);
      sizes->push_back(s);
      left -= s;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Dims s = x.shape;
    s[axis] = sizes && i < sizes->size() ? known_dim((*sizes)[i]) : unknown_dim();
    outs[i] = shaped_like(x, std::move(s));
  }
  return outs;
}

// Length of a slice of a dim of known extent, by ONNX's clamping rules.
int64_t slice_len(int64_t d, int64_t s, int64_t e, int64_t k) {
  if (s < 0) s += d;
  if (e < 0) e += d;
  if (k > 0) {
    s = std::clamp<int64_t>(s, 0, d);
    e = std::clamp<int64_t>(e, 0, d);
    return e > s ? (e - s + k - 1) / k : 0;
  }
  s = std::clamp<int64_t>(s, 0, d - 1);
  e = std::clamp<int64_t>(e, -1, d - 1);
  return s > e ? (s - e + (-k) - 1) / (-k) : 0;
}

Outputs infer_slice(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (ctx.opset < 10) {
    starts = ctx.node.attr_ints("starts");
    ends = ctx.node.attr_ints("ends");
    axes = ctx.node.attr_ints("axes");
  } else {
    starts = ctx.int_values(1);
    ends = ctx.int_values(2);
    axes = ctx.has_input(3) ? ctx.int_values(3) : std::vector<int64_t>{};
    steps = ctx.has_input(4) ? ctx.int_values(4) : std::vector<int64_t>{};
  }
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size();
  if (!axes) return one(shaped_like(x, unknown_dims(r)));
  if (axes->empty())
    for (int64_t i = 0; starts && i < static_cast<int64_t>(starts->size()); ++i) axes->push_back(i);
  Dims out = x.shape;
  if (!starts || !ends || !steps) {
    if (axes->empty()) return one(shaped_like(x, unknown_dims(r)));
    for (int64_t a : *axes) {
      KILN_ASSIGN_OR_RETURN(int64_t k, normalize_axis(a, r, ctx.node));
      out[k] = unknown_dim();
    }
    return one(shaped_like(x, std::move(out)));
  }
  if (starts->size() != ends->size() || axes->size() != starts->size() ||
      (!steps->empty() && steps->size() != starts->size()))
    return ctx.error("starts, ends, axes and steps differ in length");
  auto xv = ctx.dims_value(0);
  for (size_t i = 0; i < axes->size(); ++i) {
    KILN_ASSIGN_OR_RETURN(int64_t k, normalize_axis((*axes)[i], r, ctx.node));
    const int64_t step = steps->empty() ? 1 : (*steps)[i];
    if (step == 0) return ctx.error("step is 0");
    const int64_t s = (*starts)[i], e = (*ends)[i];
    if (out[k].known()) {
      out[k] = known_dim(slice_len(out[k].value, s, e, step));
    } else if (!(s == 0 && step == 1 && e >= std::numeric_limits<int32_t>::max())) {
      out[k] = unknown_dim();
    }
    if (xv && r == 1 && out[0].known() && static_cast<int64_t>(xv->size()) == x.shape[0].value) {
      Dims v;
      const int64_t d = xv->size();
      int64_t b = s < 0 ? s + d : s;
      b = step > 0 ? std::clamp<int64_t>(b, 0, d) : std::clamp<int64_t>(b, 0, d - 1);
      for (int64_t j = 0; j < out[0].value; ++j) v.push_back((*xv)[b + j * step]);
      ctx.set_output_value(0, std::move(v));
    }
  }
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_gather(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& idx = ctx.input(1);
  if (!has_rank(x) || !has_rank(idx)) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size();
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), r, ctx.node));
  Dims out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  auto xv = ctx.dims_value(0);
  auto iv = ctx.int_values(1);
  if (xv && iv && r == 1 && idx.shape.size() <= 1) {
    Dims v;
    const int64_t n = xv->size();
    for (int64_t i : *iv) {
      if (i < -n || i >= n) return ctx.error("index " + std::to_string(i) + " out of range for " + std::to_string(n));
      v.push_back((*xv)[i < 0 ? i + n : i]);
    }
    ctx.set_output_value(0, std::move(v));
  }
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_gather_elements(InferContext& ctx) {
  const TypeInfo& idx = ctx.input(1);
  if (!has_rank(idx)) return one(tensor_type_unranked(ctx.input(0).dtype));
  return one(shaped_like(ctx.input(0), idx.shape));
}

Outputs infer_gather_nd(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& idx = ctx.input(1);
  const int64_t b = ctx.node.attr_int("batch_dims", 0);
  if (!has_rank(x) || !has_rank(idx) || idx.shape.empty() || !idx.shape.back().known())
    return one(tensor_type_unranked(x.dtype));
  const int64_t last = idx.shape.back().value;
  if (b + last > static_cast<int64_t>(x.shape.size())) return ctx.error("indices address more dims than data has");
  Dims out(idx.shape.begin(), idx.shape.end() - 1);
  out.insert(out.end(), x.shape.begin() + b + last, x.shape.end());
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_expand(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  auto sv = ctx.dims_value(1);
  if (!sv || !has_rank(x)) {
    const TypeInfo& s = ctx.input(1);
    if (has_rank(x) && has_rank(s) && s.shape.size() == 1 && s.shape[0].known()) {
      // Each target dim is 1 or the input's dim, so an input dim other than 1 survives.
      const size_t r = std::max<size_t>(s.shape[0].value, x.shape.size());
      Dims out = unknown_dims(r);
      for (size_t i = 0; i < x.shape.size(); ++i) {
        const Dim& d = x.shape[x.shape.size() - 1 - i];
        if (d.known() && d.value != 1) out[r - 1 - i] = d;
      }
      return one(shaped_like(x, std::move(out)));
    }
    return one(tensor_type_unranked(x.dtype));
  }
  TypeInfo st = tensor_type(x.dtype, *sv);
  for (Dim& d : st.shape)
    if (!d.known()) d = d.symbol.empty() ? unknown_dim() : d;
  auto b = broadcast_shapes({&x, &st});
  if (!b) return ctx.error(b.status().message());
  return one(shaped_like(x, std::move(**b)));
}

Outputs infer_tile(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  auto reps = ctx.int_values(1);
  if (!reps) return one(shaped_like(x, unknown_dims(x.shape.size())));
  if (reps->size() != x.shape.size()) return ctx.error("repeats has the wrong length");
  Dims out;
  for (size_t i = 0; i < x.shape.size(); ++i) out.push_back(dim_mul(x.shape[i], known_dim((*reps)[i])));
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_pad(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size();
  auto pads = ctx.opset < 11 ? std::optional<std::vector<int64_t>>(ctx.node.attr_ints(ctx.node.has_attr("pads") ? "pads" : "paddings"))
                             : ctx.int_values(1);
  std::optional<std::vector<int64_t>> axes = std::vector<int64_t>{};
  if (ctx.opset >= 18 && ctx.has_input(3)) axes = ctx.int_values(3);
  if (!pads || !axes) return one(shaped_like(x, unknown_dims(r)));
  if (axes->empty())
    for (int64_t i = 0; i < r; ++i) axes->push_back(i);
  if (pads->size() != 2 * axes->size()) return ctx.error("pads has the wrong length");
  Dims out = x.shape;
  const size_t n = axes->size();
  for (size_t i = 0; i < n; ++i) {
    KILN_ASSIGN_OR_RETURN(int64_t k, normalize_axis((*axes)[i], r, ctx.node));
    out[k] = dim_add(out[k], known_dim((*pads)[i] + (*pads)[i + n]));
  }
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_center_crop_pad(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size();
  auto shape = ctx.int_values(1);
  std::vector<int64_t> axes = ctx.node.attr_ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  Dims out = x.shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(int64_t k, normalize_axis(axes[i], r, ctx.node));
    out[k] = shape && i < shape->size() ? known_dim((*shape)[i]) : unknown_dim();
  }
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_depth_space(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  if (x.shape.size() != 4) return ctx.error("expects a rank 4 input, got " + dims_str(x.shape));
  const Dim b = known_dim(ctx.node.attr_int("blocksize", 1));
  const Dim bb = dim_mul(b, b);
  auto div = [](const Dim& d, const Dim& k) { return d.known() && k.known() && k.value > 0 ? known_dim(d.value / k.value) : (k.value == 1 ? d : unknown_dim()); };
  const Dims& s = x.shape;
  if (ctx.node.op_type == "DepthToSpace") return one(shaped_like(x, {s[0], div(s[1], bb), dim_mul(s[2], b), dim_mul(s[3], b)}));
  return one(shaped_like(x, {s[0], dim_mul(s[1], bb), div(s[2], b), div(s[3], b)}));
}

Outputs infer_like_input0(InferContext& ctx) {
  TypeInfo t = ctx.input(0);
  if (t.kind == TypeInfo::Kind::kUnknown) t = tensor_type_unranked(DType::kUndefined);
  return one(t);
}

Outputs infer_shape(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type(DType::kInt64, {unknown_dim()}));
  const int64_t r = x.shape.size();
  int64_t s = ctx.node.attr_int("start", 0), e = ctx.node.attr_int("end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = std::clamp<int64_t>(s, 0, r);
  e = std::clamp<int64_t>(e, 0, r);
  Dims v(x.shape.begin() + s, x.shape.begin() + std::max(s, e));
  ctx.set_output_value(0, v);
  return one(tensor_type(DType::kInt64, {known_dim(static_cast<int64_t>(v.size()))}));
}

Outputs infer_size(InferContext& ctx) {
  if (auto n = type_numel(ctx.input(0))) ctx.set_output_value(0, {known_dim(*n)});
  return one(tensor_type(DType::kInt64, {}));
}

Outputs infer_compress(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!ctx.node.has_attr("axis")) return one(tensor_type(x.dtype, {unknown_dim()}));
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", 0), x.shape.size(), ctx.node));
  Dims out = x.shape;
  out[axis] = unknown_dim();
  return one(shaped_like(x, std::move(out)));
}

#define MOVE(fn) (OpSchema{.infer = fn, .flops_per_element = 0})

KILN_REGISTER_OP_SCHEMA("", MOVE(infer_reshape), "Reshape");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_flatten), "Flatten");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_transpose), "Transpose");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_squeeze), "Squeeze");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_unsqueeze), "Unsqueeze");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_concat), "Concat");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_split), "Split");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_slice), "Slice");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_gather), "Gather");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_gather_elements), "GatherElements");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_gather_nd), "GatherND");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_expand), "Expand");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_tile), "Tile");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_pad), "Pad");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_center_crop_pad), "CenterCropPad");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_depth_space), "DepthToSpace", "SpaceToDepth");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_like_input0), "Scatter", "ScatterElements", "ScatterND", "Trilu",
                        "ReverseSequence");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_shape), "Shape");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_size), "Size");
KILN_REGISTER_OP_SCHEMA("", MOVE(infer_compress), "Compress");
#undef MOVE

}  // namespace kiln::ir::schemas::movement
