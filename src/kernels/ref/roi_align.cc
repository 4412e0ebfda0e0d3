// Reference kernel for RoiAlign (avg/max pooling of bilinear samples; half_pixel and
// output_half_pixel coordinates, the latter being the only behaviour before opset 16).
#include <algorithm>
#include <cmath>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

// One bilinear sample: four input positions (within a channel plane) and their weights.
struct Sample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Sample bilinear_sample(double y, double x, int64_t height, int64_t width) {
  Sample s;
  if (y < -1.0 || y > static_cast<double>(height) || x < -1.0 || x > static_cast<double>(width))
    return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y_lo = static_cast<int64_t>(y), x_lo = static_cast<int64_t>(x), y_hi, x_hi;
  if (y_lo >= height - 1) {
    y_hi = y_lo = height - 1;
    y = static_cast<double>(y_lo);
  } else {
    y_hi = y_lo + 1;
  }
  if (x_lo >= width - 1) {
    x_hi = x_lo = width - 1;
    x = static_cast<double>(x_lo);
  } else {
    x_hi = x_lo + 1;
  }
  const double ly = y - static_cast<double>(y_lo), lx = x - static_cast<double>(x_lo);
  const double hy = 1 - ly, hx = 1 - lx;
  s.pos[0] = y_lo * width + x_lo;
  s.pos[1] = y_lo * width + x_hi;
  s.pos[2] = y_hi * width + x_lo;
  s.pos[3] = y_hi * width + x_hi;
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  return s;
}

Status roi_align(KernelContext& ctx) {
  if (ctx.num_inputs() < 3 || !ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2))
    return ctx.error("expected inputs 'X', 'rois' and 'batch_indices'");
  const Tensor& x = ctx.input(0);
  const Tensor& rois = ctx.input(1);
  if (!dtype_is_compute_float(x.dtype()) || !dtype_is_compute_float(rois.dtype()))
    return ctx.error("X and rois must be float tensors");
  if (x.rank() != 4) return ctx.error("X must be 4-D, got " + shape_str(x.shape()));
  auto bi = read_int64s(ctx.input(2));
  if (!bi.is_ok()) return ctx.error("batch_indices: " + bi.status().message());
  const int64_t num_rois = static_cast<int64_t>(bi->size());
  if (rois.rank() != 2 || rois.dim(1) != 4 || rois.dim(0) != num_rois)
    return ctx.error("rois must have shape [" + std::to_string(num_rois) + ",4], got " +
                     shape_str(rois.shape()));

  const std::string mode = ctx.node.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max")
    return ctx.error("mode must be avg or max, got '" + mode + "'");
  const std::string ctm = ctx.opset >= 16
                              ? ctx.node.attr_string("coordinate_transformation_mode", "half_pixel")
                              : "output_half_pixel";
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    return ctx.error(
        "coordinate_transformation_mode must be half_pixel or output_half_pixel, got '" + ctm +
        "'");
  const bool half_pixel = ctm == "half_pixel";
  const int64_t out_h = ctx.node.attr_int("output_height", 1),
                out_w = ctx.node.attr_int("output_width", 1);
  const int64_t sampling_ratio = ctx.node.attr_int("sampling_ratio", 0);
  const double spatial_scale = ctx.node.attr_float("spatial_scale", 1.0f);
  if (out_h <= 0 || out_w <= 0) return ctx.error("output_height and output_width must be positive");
  if (sampling_ratio < 0) return ctx.error("sampling_ratio must be >= 0");

  const int64_t batch = x.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
  for (int64_t b : *bi)
    if (b < 0 || b >= batch)
      return ctx.error("batch index " + std::to_string(b) + " is out of range [0, " +
                       std::to_string(batch) + ")");
  KILN_ASSIGN_OR_RETURN(Tensor * y,
                        ctx.make_output(0, x.dtype(), {num_rois, channels, out_h, out_w}));
  if (y->numel() == 0) return Status::ok();
  if (height == 0 || width == 0)
    return ctx.error("X has an empty spatial dim " + shape_str(x.shape()));

  const double offset = half_pixel ? 0.5 : 0.0;
  std::vector<Sample> samples;
  for (int64_t n = 0; n < num_rois; ++n) {
    auto roi = [&](int64_t k) {
      return load_as_double(rois.dtype(), rois.raw_data(), n * 4 + k) * spatial_scale - offset;
    };
    const double start_w = roi(0), start_h = roi(1), end_w = roi(2), end_h = roi(3);
    double roi_w = end_w - start_w, roi_h = end_h - start_h;
    if (!half_pixel) {
      roi_w = std::max(roi_w, 1.0);
      roi_h = std::max(roi_h, 1.0);
    }
    if (!std::isfinite(roi_w) || !std::isfinite(roi_h))
      return ctx.error("roi " + std::to_string(n) + " is not finite");
    const double bin_h = roi_h / static_cast<double>(out_h),
                 bin_w = roi_w / static_cast<double>(out_w);
    // Guard against a huge sample grid from a hostile roi.
    // A negative-size roi (possible with half_pixel) samples nothing and pools to 0.
    const double gh =
        std::max(0.0, sampling_ratio > 0 ? static_cast<double>(sampling_ratio) : std::ceil(bin_h));
    const double gw =
        std::max(0.0, sampling_ratio > 0 ? static_cast<double>(sampling_ratio) : std::ceil(bin_w));
    if (gh * gw > 1e7)
      return ctx.error("roi " + std::to_string(n) + " needs too many samples per bin");
    const int64_t grid_h = static_cast<int64_t>(gh), grid_w = static_cast<int64_t>(gw);
    const double count = static_cast<double>(std::max<int64_t>(grid_h * grid_w, 1));

    for (int64_t ph = 0; ph < out_h; ++ph) {
      for (int64_t pw = 0; pw < out_w; ++pw) {
        samples.clear();
        for (int64_t iy = 0; iy < grid_h; ++iy) {
          const double yy = start_h + ph * bin_h + (iy + 0.5) * bin_h / static_cast<double>(grid_h);
          for (int64_t ix = 0; ix < grid_w; ++ix) {
            const double xx =
                start_w + pw * bin_w + (ix + 0.5) * bin_w / static_cast<double>(grid_w);
            samples.push_back(bilinear_sample(yy, xx, height, width));
          }
        }
        for (int64_t c = 0; c < channels; ++c) {
          const int64_t base = ((*bi)[n] * channels + c) * height * width;
          auto at = [&](int64_t pos) {
            return load_as_double(x.dtype(), x.raw_data(), base + pos);
          };
          double v = 0;
          bool first = true;
          for (const Sample& s : samples) {
            if (mode == "avg") {
              for (int k = 0; k < 4; ++k) v += s.w[k] * at(s.pos[k]);
            } else {
              // Max of the weighted corners, as the spec's reference and onnxruntime do.
              double m = s.w[0] * at(s.pos[0]);
              for (int k = 1; k < 4; ++k) m = std::max(m, s.w[k] * at(s.pos[k]));
              v = first ? m : std::max(v, m);
              first = false;
            }
          }
          if (mode == "avg") v /= count;
          store_from_double(x.dtype(), y->raw_data(),
                            ((n * channels + c) * out_h + ph) * out_w + pw, v);
        }
      }
    }
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "RoiAlign", roi_align);

}  // namespace kiln
