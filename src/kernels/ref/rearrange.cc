// Reference kernels that rearrange elements between axes: DepthToSpace, SpaceToDepth,
// ReverseSequence, CenterCropPad and Col2Im (the inverse of im2col, summing overlaps).
#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

Status depth_to_space(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  if (x.rank() != 4)
    return ctx.error("input must be 4-D [N,C,H,W], got shape " + shape_str(x.shape()));
  const int64_t b = ctx.node.attr_int("blocksize", 0);
  if (b <= 0 || b > 65536) return ctx.error("blocksize must be positive, got " + std::to_string(b));
  const bool crd = ctx.opset >= 11 && ctx.node.attr_string("mode", "DCR") == "CRD";
  const std::string mode = ctx.node.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return ctx.error("unknown mode '" + mode + "'");
  const int64_t c = x.dim(1);
  if (c % (b * b) != 0)
    return ctx.error("channels " + std::to_string(c) +
                     " are not divisible by blocksize^2 = " + std::to_string(b * b));
  const int64_t oc = c / (b * b), h = x.dim(2), w = x.dim(3);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), {x.dim(0), oc, h * b, w * b}));
  return gather_by_index(x, y, [&](const Shape& idx) {
    const int64_t bi = idx[2] % b, bj = idx[3] % b;
    const int64_t ch = crd ? idx[1] * b * b + bi * b + bj : (bi * b + bj) * oc + idx[1];
    return ((idx[0] * c + ch) * h + idx[2] / b) * w + idx[3] / b;
  });
}

Status space_to_depth(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 1));
  const Tensor& x = ctx.input(0);
  if (x.rank() != 4)
    return ctx.error("input must be 4-D [N,C,H,W], got shape " + shape_str(x.shape()));
  const int64_t b = ctx.node.attr_int("blocksize", 0);
  if (b <= 0 || b > 65536) return ctx.error("blocksize must be positive, got " + std::to_string(b));
  const int64_t c = x.dim(1), h = x.dim(2), w = x.dim(3);
  if (h % b != 0 || w % b != 0)
    return ctx.error("spatial dims of " + shape_str(x.shape()) +
                     " are not divisible by blocksize " + std::to_string(b));
  KILN_ASSIGN_OR_RETURN(Tensor * y,
                        ctx.make_output(0, x.dtype(), {x.dim(0), c * b * b, h / b, w / b}));
  return gather_by_index(x, y, [&](const Shape& idx) {
    const int64_t blk = idx[1] / c, ch = idx[1] % c;
    const int64_t bi = blk / b, bj = blk % b;
    return ((idx[0] * c + ch) * h + idx[2] * b + bi) * w + idx[3] * b + bj;
  });
}

Status reverse_sequence(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2)
    return ctx.error("input must have rank >= 2, got shape " + shape_str(x.shape()));
  const int64_t batch_axis = ctx.node.attr_int("batch_axis", 1),
                time_axis = ctx.node.attr_int("time_axis", 0);
  if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0)))
    return ctx.error("batch_axis and time_axis must be 0 and 1 in some order");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lens, read_ints(ctx, 1, "sequence_lens"));
  const int64_t batch = x.dim(batch_axis), time = x.dim(time_axis);
  if (static_cast<int64_t>(lens.size()) != batch)
    return ctx.error("sequence_lens has " + std::to_string(lens.size()) +
                     " values for batch size " + std::to_string(batch));
  for (int64_t l : lens)
    if (l < 0 || l > time)
      return ctx.error("sequence length " + std::to_string(l) + " is out of range [0, " +
                       std::to_string(time) + "]");
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), x.shape()));
  const Shape strides = strides_of(x.shape());
  return gather_by_index(x, y, [&](const Shape& idx) {
    int64_t off = 0;
    const int64_t len = lens[idx[batch_axis]];
    for (size_t d = 0; d < idx.size(); ++d) {
      int64_t i = idx[d];
      if (static_cast<int64_t>(d) == time_axis && i < len) i = len - 1 - i;
      off += i * strides[d];
    }
    return off;
  });
}

Status center_crop_pad(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> target, read_ints(ctx, 1, "shape"));
  std::vector<int64_t> axes;
  if (ctx.node.has_attr("axes")) {
    KILN_ASSIGN_OR_RETURN(axes, axes_of(ctx, ctx.node.attr_ints("axes"), r));
  } else {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  if (target.size() != axes.size())
    return ctx.error("shape " + shape_str(target) + " must have one value per axis (" +
                     std::to_string(axes.size()) + ")");
  Shape out = x.shape();
  std::vector<int64_t> shift(r, 0);  // source index = output index + shift
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i], d = x.dim(a), s = target[i];
    if (s < 0) return ctx.error("shape " + shape_str(target) + " has a negative dim");
    out[a] = s;
    shift[a] = d >= s ? (d - s) / 2 : -((s - d) / 2);
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out));
  const Shape strides = strides_of(x.shape());
  return gather_by_index(x, y, [&](const Shape& idx) -> int64_t {
    int64_t off = 0;
    for (int64_t d = 0; d < r; ++d) {
      const int64_t i = idx[d] + shift[d];
      if (i < 0 || i >= x.dim(d)) return -1;
      off += i * strides[d];
    }
    return off;
  });
}

Status col2im(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 3));
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::kString || x.dtype() == DType::kBool)
    return ctx.error("input must be numeric");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> image, read_ints(ctx, 1, "image_shape"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> block, read_ints(ctx, 2, "block_shape"));
  const size_t nd = image.size();
  if (nd == 0 || block.size() != nd)
    return ctx.error("image_shape " + shape_str(image) + " and block_shape " + shape_str(block) +
                     " must be non-empty and of the same length");
  std::vector<int64_t> dil = ctx.node.attr_ints("dilations"), pads = ctx.node.attr_ints("pads"),
                       strides = ctx.node.attr_ints("strides");
  if (dil.empty()) dil.assign(nd, 1);
  if (strides.empty()) strides.assign(nd, 1);
  if (pads.empty()) pads.assign(2 * nd, 0);
  if (dil.size() != nd || strides.size() != nd || pads.size() != 2 * nd)
    return ctx.error("dilations, strides and pads must match the " + std::to_string(nd) +
                     " spatial dims");
  if (x.rank() != 3)
    return ctx.error("input must be 3-D [N, C*prod(block), L], got " + shape_str(x.shape()));
  int64_t kernel = 1, cols = 1;
  std::vector<int64_t> grid(nd);
  for (size_t d = 0; d < nd; ++d) {
    if (image[d] <= 0 || block[d] <= 0 || dil[d] <= 0 || strides[d] <= 0 || pads[d] < 0 ||
        pads[nd + d] < 0 || image[d] > kMaxTensorBytes || block[d] > kMaxTensorBytes ||
        dil[d] > kMaxTensorBytes || pads[d] > kMaxTensorBytes || pads[nd + d] > kMaxTensorBytes)
      return ctx.error("invalid image_shape, block_shape, dilations, strides or pads");
    const int64_t span = dil[d] * (block[d] - 1) + 1;
    const int64_t padded = image[d] + pads[d] + pads[nd + d];
    if (span > padded)
      return ctx.error("block does not fit the padded image on spatial dim " + std::to_string(d));
    grid[d] = (padded - span) / strides[d] + 1;
    kernel *= block[d];
    cols *= grid[d];
    if (kernel > x.numel() + 1 || cols > x.numel() + 1)
      return ctx.error("block_shape does not match the input");
  }
  if (x.dim(1) % kernel != 0 || x.dim(2) != cols)
    return ctx.error("input " + shape_str(x.shape()) + " does not match block " + shape_str(block) +
                     " and " + std::to_string(cols) + " columns");
  const int64_t n = x.dim(0), c = x.dim(1) / kernel;
  Shape out = {n, c};
  out.insert(out.end(), image.begin(), image.end());
  KILN_ASSIGN_OR_RETURN(Tensor acc, Tensor::make(DType::kFloat64, out));
  double* a = acc.data<double>();
  const int64_t pixels = product(out, 2, out.size());
  const Shape block_shape(block.begin(), block.end()), grid_shape(grid.begin(), grid.end());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      std::vector<int64_t> k(nd, 0);
      int64_t kl = 0;
      do {
        std::vector<int64_t> g(nd, 0);
        int64_t gl = 0;
        do {
          int64_t pix = 0;
          bool inside = true;
          for (size_t d = 0; d < nd && inside; ++d) {
            const int64_t p = g[d] * strides[d] - pads[d] + k[d] * dil[d];
            inside = p >= 0 && p < image[d];
            pix = pix * image[d] + p;
          }
          if (inside)
            a[(b * c + ch) * pixels + pix] +=
                load_as_double(x.dtype(), x.raw_data(), ((b * c + ch) * kernel + kl) * cols + gl);
          ++gl;
        } while (next_index(g, grid_shape));
        ++kl;
      } while (next_index(k, block_shape));
    }
  KILN_ASSIGN_OR_RETURN(Tensor y, cast_float_to(acc, x.dtype()));
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "DepthToSpace", depth_to_space);
KILN_REGISTER_KERNEL("", "SpaceToDepth", space_to_depth);
KILN_REGISTER_KERNEL("", "ReverseSequence", reverse_sequence);
KILN_REGISTER_KERNEL("", "CenterCropPad", center_crop_pad);
KILN_REGISTER_KERNEL("", "Col2Im", col2im);

}  // namespace kiln
