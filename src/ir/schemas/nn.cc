// Schemas of neural-network layers: convolutions, pooling, normalisations, softmax and losses.
#include <cmath>

#include "ir/schemas/common.h"

namespace kiln::ir::schemas::nn {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

std::vector<int64_t> ints_or(const Node& n, const char* name, size_t count, int64_t fallback) {
  std::vector<int64_t> v = n.attr_ints(name);
  if (v.empty()) v.assign(count, fallback);
  return v;
}

// floor((d + b) / s) of a named dim d, as a name: "W" for d + 0, "W-2" at stride 1, "(W+1)//2"
// at stride 2. Sweeps that compute the same thing from the same dim get the same name, so their
// outputs are provably the same size (a ResNet's 3x3 stride-2 conv and its 1x1 stride-2
// shortcut, padded 1 and 0: both (W+1)//2), and what adds them stays fusable when W is dynamic.
Dim swept_dim(const Dim& d, int64_t b, int64_t s) {
  if (s == 1 && b == 0) return d;
  std::string name;  // built by appends: GCC 12 warns (-Wrestrict) on "(" + symbol here
  if (s != 1) name += '(';
  name += d.symbol;
  if (b > 0) name += '+';
  if (b != 0) name += std::to_string(b);
  if (s != 1) name += ")//" + std::to_string(s);
  return Dim{-1, name};
}

// Spatial output dims of a convolution or pooling window sweep.
Result<Dims> window_dims(const InferContext& ctx, const Dims& in, const std::vector<int64_t>& kernel,
                         bool ceil_mode) {
  const size_t n = in.size();
  if (kernel.size() != n) return ctx.error("kernel has " + std::to_string(kernel.size()) + " dims for " + std::to_string(n) + " spatial dims");
  const auto strides = ints_or(ctx.node, "strides", n, 1);
  const auto dil = ints_or(ctx.node, "dilations", n, 1);
  const auto pads = ints_or(ctx.node, "pads", 2 * n, 0);
  if (strides.size() != n || dil.size() != n || pads.size() != 2 * n) return ctx.error("strides, dilations or pads have the wrong length");
  const std::string ap = ctx.node.attr_string("auto_pad", "NOTSET");
  Dims out;
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = strides[i], ek = (kernel[i] - 1) * dil[i] + 1;
    if (s <= 0) return ctx.error("stride must be positive");
    if (!in[i].known()) {
      // floor((d + b) / s) for the modes below; ceil_mode's last-window rule has no such form.
      const bool same = ap == "SAME_UPPER" || ap == "SAME_LOWER";
      const int64_t b = same ? s - 1 : ap == "VALID" ? s - ek : pads[i] + pads[i + n] - ek + s;
      out.push_back(in[i].symbol.empty() || ceil_mode ? unknown_dim() : swept_dim(in[i], b, s));
      continue;
    }
    const int64_t d = in[i].value;
    int64_t o;
    if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      o = (d + s - 1) / s;
    } else if (ap == "VALID") {
      o = (d - ek) / s + 1;
    } else {
      const int64_t span = d + pads[i] + pads[i + n] - ek;
      if (ceil_mode) {
        o = (span + s - 1) / s + 1;
        if ((o - 1) * s >= d + pads[i]) --o;  // the last window must start inside the input
      } else {
        o = span >= 0 ? span / s + 1 : 0;
      }
    }
    if (o < 0) return ctx.error("window larger than the padded input");
    out.push_back(known_dim(o));
  }
  return out;
}

std::vector<int64_t> kernel_of(const InferContext& ctx, const TypeInfo& w, size_t spatial) {
  std::vector<int64_t> k = ctx.node.attr_ints("kernel_shape");
  if (!k.empty() || !has_rank(w)) return k;
  for (size_t i = 2; i < w.shape.size(); ++i) {
    if (!w.shape[i].known()) return {};
    k.push_back(w.shape[i].value);
  }
  return k.size() == spatial ? k : std::vector<int64_t>{};
}

Outputs infer_conv(InferContext& ctx) {
  const std::string& op = ctx.node.op_type;
  const size_t xi = op == "QLinearConv" ? 0 : 0, wi = op == "QLinearConv" ? 3 : 1;
  const TypeInfo& x = ctx.input(xi);
  const TypeInfo& w = ctx.input(wi);
  DType dt = x.dtype;
  if (op == "ConvInteger") dt = DType::kInt32;
  if (op == "QLinearConv") dt = ctx.input(7).dtype != DType::kUndefined ? ctx.input(7).dtype : x.dtype;
  if (!has_rank(x)) return one(tensor_type_unranked(dt));
  if (x.shape.size() < 3) return ctx.error("input must have rank 3 or more, got " + dims_str(x.shape));
  const size_t n = x.shape.size() - 2;
  Dims out{x.shape[0], has_rank(w) && !w.shape.empty() ? w.shape[0] : unknown_dim()};
  const auto k = kernel_of(ctx, w, n);
  if (k.empty()) {
    Dims u = unknown_dims(n);
    out.insert(out.end(), u.begin(), u.end());
    return one(tensor_type(dt, std::move(out)));
  }
  KILN_ASSIGN_OR_RETURN(Dims sp, window_dims(ctx, Dims(x.shape.begin() + 2, x.shape.end()), k, false));
  out.insert(out.end(), sp.begin(), sp.end());
  return one(tensor_type(dt, std::move(out)));
}

Cost cost_conv(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  const TypeInfo& w = ctx.input(ctx.node.op_type == "QLinearConv" ? 3 : 1);
  double per = 1;
  if (auto s = w.static_shape())
    for (size_t i = 1; i < s->size(); ++i) per *= static_cast<double>((*s)[i]);
  return Cost{2 * numel_or_zero(outs[0]) * per, io_bytes(ctx, outs), 0};
}

Outputs infer_conv_transpose(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& w = ctx.input(1);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  if (x.shape.size() < 3) return ctx.error("input must have rank 3 or more");
  const size_t n = x.shape.size() - 2;
  const int64_t group = ctx.node.attr_int("group", 1);
  Dims out{x.shape[0], has_rank(w) && w.shape.size() > 1 ? dim_mul(w.shape[1], known_dim(group)) : unknown_dim()};
  std::vector<int64_t> os = ctx.node.attr_ints("output_shape");
  if (!os.empty()) {
    if (os.size() == n + 2) os.erase(os.begin(), os.begin() + 2);
    if (os.size() != n) return ctx.error("output_shape has the wrong length");
    for (int64_t v : os) out.push_back(known_dim(v));
    return one(shaped_like(x, std::move(out)));
  }
  const auto k = kernel_of(ctx, w, n);
  const auto strides = ints_or(ctx.node, "strides", n, 1);
  const auto dil = ints_or(ctx.node, "dilations", n, 1);
  const auto pads = ints_or(ctx.node, "pads", 2 * n, 0);
  const auto opad = ints_or(ctx.node, "output_padding", n, 0);
  const std::string ap = ctx.node.attr_string("auto_pad", "NOTSET");
  for (size_t i = 0; i < n; ++i) {
    const Dim& d = x.shape[i + 2];
    if (!d.known() || k.size() != n || strides.size() != n || pads.size() != 2 * n || opad.size() != n || dil.size() != n) {
      out.push_back(unknown_dim());
      continue;
    }
    if (ap == "SAME_UPPER" || ap == "SAME_LOWER") out.push_back(known_dim(d.value * strides[i]));
    else
      out.push_back(known_dim(strides[i] * (d.value - 1) + opad[i] + (k[i] - 1) * dil[i] + 1 -
                              (ap == "VALID" ? 0 : pads[i] + pads[i + n])));
  }
  return one(shaped_like(x, std::move(out)));
}

Cost cost_conv_transpose(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  double per = 1;
  if (auto s = ctx.input(1).static_shape())
    for (size_t i = 1; i < s->size(); ++i) per *= static_cast<double>((*s)[i]);
  return Cost{2 * numel_or_zero(ctx.input(0)) * per, io_bytes(ctx, outs), 0};
}

Outputs infer_pool(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const bool two = ctx.node.op_type == "MaxPool" && ctx.node.outputs.size() > 1;
  auto result = [&](TypeInfo t) -> Outputs {
    if (!two) return one(t);
    return std::vector<TypeInfo>{t, with_dtype(t, DType::kInt64)};
  };
  if (!has_rank(x)) return result(tensor_type_unranked(x.dtype));
  if (x.shape.size() < 3) return ctx.error("input must have rank 3 or more");
  const std::vector<int64_t> k = ctx.node.attr_ints("kernel_shape");
  KILN_ASSIGN_OR_RETURN(Dims sp, window_dims(ctx, Dims(x.shape.begin() + 2, x.shape.end()), k,
                                             ctx.node.attr_int("ceil_mode", 0) != 0));
  Dims out{x.shape[0], x.shape[1]};
  out.insert(out.end(), sp.begin(), sp.end());
  return result(shaped_like(x, std::move(out)));
}

Cost cost_pool(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  double per = 1;
  for (int64_t k : ctx.node.attr_ints("kernel_shape")) per *= static_cast<double>(k);
  return Cost{numel_or_zero(outs[0]) * per, io_bytes(ctx, outs), 0};
}

Outputs infer_global_pool(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  Dims out = x.shape;
  for (size_t i = 2; i < out.size(); ++i) out[i] = known_dim(1);
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_max_unpool(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  const size_t n = x.shape.size() - 2;
  if (ctx.has_input(2)) {
    if (auto v = ctx.int_values(2)) return one(shaped_like(x, known_dims(*v)));
    return one(shaped_like(x, unknown_dims(x.shape.size())));
  }
  const auto k = ctx.node.attr_ints("kernel_shape");
  const auto strides = ints_or(ctx.node, "strides", n, 1);
  const auto pads = ints_or(ctx.node, "pads", 2 * n, 0);
  Dims out{x.shape[0], x.shape[1]};
  for (size_t i = 0; i < n; ++i) {
    const Dim& d = x.shape[i + 2];
    out.push_back(d.known() && k.size() == n ? known_dim((d.value - 1) * strides[i] + k[i] - pads[i] - pads[i + n]) : unknown_dim());
  }
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_batch_norm(InferContext& ctx) {
  TypeInfo y = ctx.input(0);
  if (y.kind == TypeInfo::Kind::kUnknown) y = tensor_type_unranked(DType::kUndefined);
  std::vector<TypeInfo> outs{y};
  for (size_t i = 1; i < ctx.node.outputs.size(); ++i) {
    const TypeInfo& stat = ctx.input(i < 3 ? i + 2 : 1);  // running mean/var; saved stats are per channel too
    outs.push_back(stat.kind == TypeInfo::Kind::kTensor ? stat : tensor_type_unranked(y.dtype));
  }
  return outs;
}

Outputs infer_same(InferContext& ctx) {
  TypeInfo y = ctx.input(0);
  if (y.kind == TypeInfo::Kind::kUnknown) y = tensor_type_unranked(DType::kUndefined);
  return one(y);
}

Outputs infer_layer_norm(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const DType stash = attr_dtype(ctx.node, "stash_type", DType::kFloat32);
  std::vector<TypeInfo> outs{x.kind == TypeInfo::Kind::kTensor ? x : tensor_type_unranked(DType::kUndefined)};
  if (ctx.node.outputs.size() > 1) {
    TypeInfo stat = tensor_type_unranked(stash);
    if (has_rank(x)) {
      KILN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node.attr_int("axis", -1), x.shape.size(), ctx.node));
      Dims s = x.shape;
      for (size_t i = axis; i < s.size(); ++i) s[i] = known_dim(1);
      stat = tensor_type(stash, std::move(s));
    }
    outs.push_back(stat);
    outs.push_back(stat);
  }
  return outs;
}

Outputs infer_loss(InferContext& ctx) {
  const TypeInfo& scores = ctx.input(0);
  const TypeInfo& target = ctx.input(1);
  const std::string red = ctx.node.attr_string("reduction", "mean");
  TypeInfo loss = red == "none" ? (has_rank(target) ? tensor_type(scores.dtype, target.shape) : tensor_type_unranked(scores.dtype))
                                : tensor_type(scores.dtype, {});
  std::vector<TypeInfo> outs{loss};
  if (ctx.node.outputs.size() > 1) outs.push_back(scores.kind == TypeInfo::Kind::kTensor ? scores : tensor_type_unranked(DType::kUndefined));
  return outs;
}

Cost cost_norm(const InferContext& ctx, const std::vector<TypeInfo>& outs) { return cost_per_input(ctx, outs, 5); }

#define NN(fn, cost_fn) (OpSchema{.infer = fn, .cost = cost_fn})
KILN_REGISTER_OP_SCHEMA("", NN(infer_conv, cost_conv), "Conv", "ConvInteger", "QLinearConv", "DeformConv");
KILN_REGISTER_OP_SCHEMA("", NN(infer_conv_transpose, cost_conv_transpose), "ConvTranspose");
KILN_REGISTER_OP_SCHEMA("", NN(infer_pool, cost_pool), "MaxPool", "AveragePool", "LpPool");
KILN_REGISTER_OP_SCHEMA("", NN(infer_global_pool, cost_norm), "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool");
KILN_REGISTER_OP_SCHEMA("", NN(infer_max_unpool, nullptr), "MaxUnpool");
KILN_REGISTER_OP_SCHEMA("", NN(infer_batch_norm, cost_norm), "BatchNormalization");
KILN_REGISTER_OP_SCHEMA("", NN(infer_same, cost_norm), "InstanceNormalization", "GroupNormalization",
                        "MeanVarianceNormalization", "LRN", "Softmax", "LogSoftmax", "Hardmax");
KILN_REGISTER_OP_SCHEMA("", NN(infer_layer_norm, cost_norm), "LayerNormalization");
KILN_REGISTER_OP_SCHEMA("", NN(infer_loss, cost_norm), "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss");
#undef NN

}  // namespace kiln::ir::schemas::nn
