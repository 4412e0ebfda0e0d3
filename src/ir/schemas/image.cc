// Schemas of image and spatial ops: Resize/Upsample, GridSample, AffineGrid, RoiAlign, Col2Im.
#include <cmath>

#include "ir/schemas/common.h"

namespace kiln::ir::schemas::image {

bool has_rank(const TypeInfo& t) { return t.kind == TypeInfo::Kind::kTensor && t.has_shape; }

std::optional<std::vector<double>> float_values(const InferContext& ctx, size_t i) {
  const Tensor* t = ctx.constant(i);
  if (!ctx.has_input(i) || !t) return std::nullopt;
  std::vector<double> v;
  for (int64_t k = 0; k < t->numel(); ++k) {
    if (t->dtype() == DType::kFloat32) v.push_back(t->data<float>()[k]);
    else if (t->dtype() == DType::kFloat64) v.push_back(t->data<double>()[k]);
    else return std::nullopt;
  }
  return v;
}

bool given(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return false;
  const TypeInfo& t = ctx.input(i);
  // An empty tensor stands for "not given" in Resize.
  return !(has_rank(t) && t.shape.size() == 1 && t.shape[0].known() && t.shape[0].value == 0);
}

Outputs infer_resize(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  if (!has_rank(x)) return one(tensor_type_unranked(x.dtype));
  const int64_t r = x.shape.size();
  std::vector<int64_t> axes = ctx.node.attr_ints("axes");
  for (int64_t& a : axes) {
    KILN_ASSIGN_OR_RETURN(a, normalize_axis(a, r, ctx.node));
  }
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  Dims out = x.shape;
  const bool upsample = ctx.node.op_type == "Upsample";
  const size_t scales_i = (upsample || ctx.opset < 11) ? 1 : 2;
  std::optional<std::vector<double>> scales;
  if (upsample && ctx.opset < 9) {
    std::vector<float> f = ctx.node.attr_floats("scales");
    scales = std::vector<double>(f.begin(), f.end());
  } else if (given(ctx, scales_i)) {
    scales = float_values(ctx, scales_i);
    if (!scales) {
      for (int64_t a : axes) out[a] = unknown_dim();
      return one(shaped_like(x, std::move(out)));
    }
  }
  if (!upsample && ctx.opset >= 11 && given(ctx, 3)) {
    auto sizes = ctx.int_values(3);
    if (!sizes || sizes->size() != axes.size()) {
      for (int64_t a : axes) out[a] = unknown_dim();
      return one(shaped_like(x, std::move(out)));
    }
    const std::string policy = ctx.node.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = known_dim((*sizes)[i]);
      return one(shaped_like(x, std::move(out)));
    }
    double scale = policy == "not_larger" ? 1e300 : 0;
    for (size_t i = 0; i < axes.size(); ++i) {
      if (!x.shape[axes[i]].known()) {
        for (int64_t a : axes) out[a] = unknown_dim();
        return one(shaped_like(x, std::move(out)));
      }
      const double s = static_cast<double>((*sizes)[i]) / static_cast<double>(x.shape[axes[i]].value);
      scale = policy == "not_larger" ? std::min(scale, s) : std::max(scale, s);
    }
    for (int64_t a : axes) out[a] = known_dim(static_cast<int64_t>(std::floor(scale * x.shape[a].value + 0.5)));
    return one(shaped_like(x, std::move(out)));
  }
  if (!scales) return ctx.error("neither scales nor sizes is given");
  if (scales->size() != axes.size()) return ctx.error("scales has " + std::to_string(scales->size()) + " values for " + std::to_string(axes.size()) + " axes");
  std::optional<std::vector<double>> roi;
  if (ctx.node.attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize") roi = float_values(ctx, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    const Dim& d = x.shape[axes[i]];
    if (!d.known()) {
      out[axes[i]] = (*scales)[i] == 1.0 ? d : unknown_dim();
      continue;
    }
    double extent = static_cast<double>(d.value);
    if (ctx.node.attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize") {
      if (!roi || roi->size() != 2 * axes.size()) {
        out[axes[i]] = unknown_dim();
        continue;
      }
      extent *= (*roi)[i + axes.size()] - (*roi)[i];
    }
    out[axes[i]] = known_dim(static_cast<int64_t>(std::floor(extent * (*scales)[i])));
  }
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_grid_sample(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& grid = ctx.input(1);
  if (!has_rank(x) || !has_rank(grid)) return one(tensor_type_unranked(x.dtype));
  Dims out{dim_merge(x.shape[0], grid.shape[0]), x.shape[1]};
  out.insert(out.end(), grid.shape.begin() + 1, grid.shape.end() - 1);
  return one(shaped_like(x, std::move(out)));
}

Outputs infer_affine_grid(InferContext& ctx) {
  const TypeInfo& theta = ctx.input(0);
  auto size = ctx.dims_value(1);
  if (!size) return one(tensor_type_unranked(theta.dtype));
  if (size->size() < 3) return ctx.error("size must have 4 or 5 values");
  Dims out{(*size)[0]};
  out.insert(out.end(), size->begin() + 2, size->end());
  out.push_back(known_dim(static_cast<int64_t>(size->size()) - 2));
  return one(tensor_type(theta.dtype, std::move(out)));
}

Outputs infer_roi_align(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  const TypeInfo& rois = ctx.input(1);
  Dim n = has_rank(rois) && !rois.shape.empty() ? rois.shape[0] : unknown_dim();
  if (has_rank(ctx.input(2)) && ctx.input(2).shape.size() == 1) n = dim_merge(n, ctx.input(2).shape[0]);
  const Dim c = has_rank(x) && x.shape.size() > 1 ? x.shape[1] : unknown_dim();
  return one(tensor_type(x.dtype, {n, c, known_dim(ctx.node.attr_int("output_height", 1)),
                                   known_dim(ctx.node.attr_int("output_width", 1))}));
}

Outputs infer_col2im(InferContext& ctx) {
  const TypeInfo& x = ctx.input(0);
  auto image = ctx.int_values(1);
  auto block = ctx.int_values(2);
  if (!has_rank(x) || !image || !block) return one(tensor_type_unranked(x.dtype));
  if (x.shape.size() != 3) return ctx.error("input must be 3-D");
  double bs = 1;
  for (int64_t b : *block) bs *= static_cast<double>(b);
  Dim c = x.shape[1].known() && bs > 0 ? known_dim(x.shape[1].value / static_cast<int64_t>(bs)) : unknown_dim();
  Dims out{x.shape[0], c};
  for (int64_t v : *image) out.push_back(known_dim(v));
  return one(shaped_like(x, std::move(out)));
}

Cost cost_resize(const InferContext& ctx, const std::vector<TypeInfo>& outs) {
  return Cost{4 * numel_or_zero(outs[0]), io_bytes(ctx, outs), 0};
}

KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_resize, .cost = cost_resize}), "Resize", "Upsample");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_grid_sample, .cost = cost_resize}), "GridSample");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_affine_grid, .cost = cost_resize}), "AffineGrid");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_roi_align, .cost = cost_resize}), "RoiAlign");
KILN_REGISTER_OP_SCHEMA("", (OpSchema{.infer = infer_col2im, .cost = cost_resize}), "Col2Im");

}  // namespace kiln::ir::schemas::image
