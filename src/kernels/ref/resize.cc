// Reference kernels for Resize (opset 10 to 19+: nearest/linear/cubic, every coordinate transform,
// antialias, axes, keep_aspect_ratio_policy) and Upsample. Separable: one axis at a time, in
// double; float32 nearest and linear resizes of the last two axes (images) run in float, both
// axes at once. Also ai.kiln.BlockedResize, the same resize of the H and W of a blocked
// [N, C/8, H, W, 8] tensor: each pixel is then 8 lanes resampled together.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/thread_pool.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

struct ResizeParams {
  std::string mode = "nearest";                     // nearest, linear, cubic
  std::string coord = "half_pixel";                 // coordinate_transformation_mode
  std::string nearest_mode = "round_prefer_floor";  // or "simple" for Upsample / Resize-10
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  bool antialias = false;
};

// For each output position along one axis: the input indices and weights it combines.
struct AxisPlan {
  int64_t taps = 0;
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<char> extrapolated;
};

double cubic_kernel(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// Maps output coordinate `y` to the input coordinate under the node's transformation mode.
double source_coord(const ResizeParams& p, double y, double scale, int64_t in_len, int64_t out_len,
                    double roi_start, double roi_end) {
  const double out_len_f = scale * static_cast<double>(in_len);
  const std::string& m = p.coord;
  if (m == "align_corners") return out_len_f == 1 ? 0.0 : y * (in_len - 1) / (out_len_f - 1);
  if (m == "asymmetric") return y / scale;
  if (m == "tf_crop_and_resize") {
    double x = out_len_f == 1 ? (roi_end - roi_start) * (in_len - 1) / 2
                              : y * (roi_end - roi_start) * (in_len - 1) / (out_len_f - 1);
    return x + roi_start * (in_len - 1);
  }
  if (m == "tf_half_pixel_for_nn") return (y + 0.5) / scale;  // opset 11-12 only
  if (m == "pytorch_half_pixel") return out_len_f == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
  if (m == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out_len) / out_len_f;
    const double offset = static_cast<double>(in_len) / 2 * (1 - adjustment);
    return offset + (y + 0.5) / scale - 0.5;
  }
  return (y + 0.5) / scale - 0.5;  // half_pixel
}

int64_t nearest_index(const ResizeParams& p, double x, double scale) {
  const double fl = std::floor(x);
  if (x == fl) return static_cast<int64_t>(fl);
  const double t = x - fl;
  const std::string& m = p.nearest_mode;
  bool up;
  if (m == "round_prefer_ceil")
    up = t >= 0.5;
  else if (m == "floor")
    up = false;
  else if (m == "ceil")
    up = true;
  else if (m == "simple")
    up = scale < 1;  // Upsample / Resize-10: floor, ceil when downsampling
  else
    up = t > 0.5;  // round_prefer_floor
  return static_cast<int64_t>(fl) + (up ? 1 : 0);
}

AxisPlan plan_axis(const ResizeParams& p, int64_t in_len, int64_t out_len, double scale,
                   double roi_start, double roi_end) {
  AxisPlan a;
  a.extrapolated.assign(static_cast<size_t>(out_len), 0);
  const bool nearest = p.mode == "nearest";
  const double support = p.mode == "cubic" ? 2.0 : 1.0;
  // Antialiasing widens the filter by 1/scale when downsampling.
  const double fs = (!nearest && p.antialias) ? std::min(scale, 1.0) : 1.0;
  const int64_t start = nearest ? 0 : static_cast<int64_t>(std::floor(-support / fs)) + 1;
  a.taps = nearest ? 1 : 2 - 2 * start;
  a.idx.resize(static_cast<size_t>(out_len * a.taps));
  a.w.resize(static_cast<size_t>(out_len * a.taps));
  for (int64_t o = 0; o < out_len; ++o) {
    double x = source_coord(p, static_cast<double>(o), scale, in_len, out_len, roi_start, roi_end);
    if (p.coord == "tf_crop_and_resize" && (x < 0 || x > static_cast<double>(in_len - 1)))
      a.extrapolated[o] = 1;
    // Far-out or NaN coordinates (hostile scales/roi) only ever reach the clamped edge samples.
    x = std::isnan(x) ? 0.0 : std::clamp(x, -1e15, 1e15);
    int64_t* idx = &a.idx[o * a.taps];
    double* w = &a.w[o * a.taps];
    if (nearest) {
      idx[0] = std::clamp<int64_t>(nearest_index(p, x, scale), 0, in_len - 1);
      w[0] = 1;
      continue;
    }
    // Integer coordinates count as the right end of the previous cell, as the spec's reference
    // does; the weights come out the same either way.
    double base = std::floor(x);
    if (base == x) base -= 1;
    double sum = 0;
    for (int64_t k = 0; k < a.taps; ++k) {
      const int64_t i = static_cast<int64_t>(base) + start + k;
      const double d = (static_cast<double>(i) - x) * fs;
      double wk = p.mode == "cubic" ? cubic_kernel(d, p.cubic_a) : std::max(0.0, 1 - std::fabs(d));
      if (p.exclude_outside && (i < 0 || i >= in_len)) wk = 0;
      idx[k] = std::clamp<int64_t>(i, 0, in_len - 1);
      w[k] = wk;
      sum += wk;
    }
    if ((p.antialias || p.exclude_outside) && sum != 0)
      for (int64_t k = 0; k < a.taps; ++k) w[k] /= sum;
  }
  return a;
}

// float32 nearest or linear over two axes only, the last two or (lanes 8: a blocked tensor, the
// only other count) the two before the last (an image's H and W; every other axis kept): each
// output row blends at most two input rows resampled along W, with the axis plans' weights in
// float. Planes split over the pool.
bool resize_2d_f32_fits(const ResizeParams& p, const Tensor& x, const Shape& out_shape, int64_t lanes = 1) {
  const int64_t h_axis = x.rank() - (lanes > 1 ? 3 : 2);
  if (x.dtype() != DType::kFloat32 || h_axis < 0 || p.antialias || p.coord == "tf_crop_and_resize") return false;
  if (p.mode != "nearest" && p.mode != "linear") return false;
  for (int64_t i = 0; i < x.rank(); ++i)
    if ((i < h_axis || i > h_axis + 1) && out_shape[i] != x.dim(i)) return false;
  return true;
}

// One W-resampled row of a plane: dst[ox] = sum over taps of wx * src[idx], each a pixel of
// kLanes floats (1, or 8 for a blocked tensor).
template <int kLanes>
void resample_row(const float* __restrict src, const AxisPlan& px, const float* wx, int64_t ow,
                  float* __restrict dst) {
  const int64_t tx = px.taps;
  for (int64_t ox = 0; ox < ow; ++ox) {
    float v[kLanes] = {};
    for (int64_t kx = 0; kx < tx; ++kx) {
      const float wk = wx[ox * tx + kx];
      const float* s = src + px.idx[ox * tx + kx] * kLanes;
      for (int l = 0; l < kLanes; ++l) v[l] += wk * s[l];
    }
    for (int l = 0; l < kLanes; ++l) dst[ox * kLanes + l] = v[l];
  }
}

Status resize_2d_f32(KernelContext& ctx, const ResizeParams& p, const Tensor& x, const Shape& out_shape,
                     const std::vector<double>& scales, Tensor* y, int64_t lanes = 1) {
  const int64_t ha = x.rank() - (lanes > 1 ? 3 : 2);  // the H axis
  const int64_t h = x.dim(ha), w = x.dim(ha + 1), oh = out_shape[ha], ow = out_shape[ha + 1];
  if (y->numel() == 0) return Status::ok();
  const AxisPlan py = plan_axis(p, h, oh, scales[ha], 0.0, 1.0);
  const AxisPlan px = plan_axis(p, w, ow, scales[ha + 1], 0.0, 1.0);
  const std::vector<float> wx(px.w.begin(), px.w.end());
  const int64_t planes = x.numel() / (h * w * lanes), ty = py.taps, row = ow * lanes;
  const float* xd = x.data<float>();
  float* yd = y->data<float>();
  // Plane by plane: each input row is resampled along W once (upsampling reads it for several
  // output rows), kept in a small cache of the rows last used, and the output rows blend them.
  auto run_planes = [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> cache;
    thread_local std::vector<int64_t> cached_row;
    cache.resize(static_cast<size_t>(ty * row));
    cached_row.assign(static_cast<size_t>(ty), -1);
    for (int64_t plane = p0; plane < p1; ++plane) {
      std::fill(cached_row.begin(), cached_row.end(), -1);
      // The W-resampled input row `iy`, from the cache slot it lands in.
      auto resampled = [&](int64_t iy) -> const float* {
        const int64_t slot = iy % ty;
        float* dst = cache.data() + slot * row;
        if (cached_row[slot] != iy) {
          const float* src = xd + (plane * h + iy) * w * lanes;
          if (lanes == 8) resample_row<8>(src, px, wx.data(), ow, dst);
          else resample_row<1>(src, px, wx.data(), ow, dst);
          cached_row[slot] = iy;
        }
        return dst;
      };
      for (int64_t oy = 0; oy < oh; ++oy) {
        float* __restrict out = yd + (plane * oh + oy) * row;
        std::fill(out, out + row, 0.0f);
        for (int64_t ky = 0; ky < ty; ++ky) {
          const float wy = static_cast<float>(py.w[oy * ty + ky]);
          if (wy == 0) continue;
          const float* __restrict in = resampled(py.idx[oy * ty + ky]);
          for (int64_t i = 0; i < row; ++i) out[i] += wy * in[i];
        }
      }
    }
  };
  if (ctx.pool != nullptr && planes > 1 && y->numel() > (1 << 15)) ctx.pool->parallel_for(planes, 1, run_planes);
  else run_planes(0, planes);
  return Status::ok();
}

// Nearest mode of any element type, no point extrapolated: a gather, each output element one
// input element (8-bit and integer tensors, which the float path does not take: an int8 model's
// upsampling). The output rows (last axis) split over the pool.
bool resize_nearest_fits(const ResizeParams& p, const Tensor& x) {
  return p.mode == "nearest" && p.coord != "tf_crop_and_resize" && x.rank() >= 1 && dtype_size(x.dtype()) > 0;
}

Status resize_nearest(KernelContext& ctx, const ResizeParams& p, const Tensor& x, const Shape& out_shape,
                      const std::vector<double>& scales, Tensor* y) {
  const int64_t r = x.rank();
  if (y->numel() == 0) return Status::ok();
  // The input offset (in elements) of each output index along each axis.
  std::vector<std::vector<int64_t>> offset(static_cast<size_t>(r));
  int64_t stride = 1;
  for (int64_t ax = r - 1; ax >= 0; --ax) {
    const AxisPlan plan = plan_axis(p, x.dim(ax), out_shape[ax], scales[ax], 0.0, 1.0);
    offset[ax].resize(static_cast<size_t>(out_shape[ax]));
    for (int64_t o = 0; o < out_shape[ax]; ++o) offset[ax][o] = plan.idx[o] * stride;
    stride *= x.dim(ax);
  }
  const int64_t ow = out_shape[r - 1], rows = y->numel() / ow;
  const size_t es = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(y->raw_data());
  const std::vector<int64_t>& last = offset[r - 1];
  auto run_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t base = 0, rest = row;  // the input offset of the output row's leading indices
      for (int64_t ax = r - 2; ax >= 0; --ax) {
        base += offset[ax][rest % out_shape[ax]];
        rest /= out_shape[ax];
      }
      const char* in = src + base * static_cast<int64_t>(es);
      char* out = dst + row * ow * static_cast<int64_t>(es);
      switch (es) {
        case 1: for (int64_t o = 0; o < ow; ++o) out[o] = in[last[o]]; break;
        case 2: for (int64_t o = 0; o < ow; ++o) std::memcpy(out + 2 * o, in + 2 * last[o], 2); break;
        case 4: for (int64_t o = 0; o < ow; ++o) std::memcpy(out + 4 * o, in + 4 * last[o], 4); break;
        default: for (int64_t o = 0; o < ow; ++o) std::memcpy(out + es * o, in + es * last[o], es);
      }
    }
  };
  if (ctx.pool != nullptr && rows > 1 && y->numel() * static_cast<int64_t>(es) > (1 << 15))
    ctx.pool->parallel_for(rows, 1, run_rows);
  else run_rows(0, rows);
  return Status::ok();
}

// Resizes `x` (any numeric or float type) to `out_shape` with per-axis scales and roi.
Status resize_core(KernelContext& ctx, const ResizeParams& p, const Tensor& x,
                   const Shape& out_shape, const std::vector<double>& scales,
                   const std::vector<double>& roi) {
  const int64_t r = x.rank();
  const DType dt = x.dtype();
  if (dt == DType::kString || dt == DType::kBool || dt == DType::kUndefined ||
      dt == DType::kComplex64 || dt == DType::kComplex128)
    return ctx.error(std::string("unsupported element type ") + dtype_name(dt));
  for (int64_t i = 0; i < r; ++i) {
    if (out_shape[i] < 0) return ctx.error("negative output size " + shape_str(out_shape));
    if (x.dim(i) == 0 && out_shape[i] > 0)
      return ctx.error("cannot resize an empty axis to a non-empty one");
    if (!(scales[i] > 0) && out_shape[i] > 0) return ctx.error("scales must be positive");
  }
  if (resize_2d_f32_fits(p, x, out_shape)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, dt, out_shape));
    return resize_2d_f32(ctx, p, x, out_shape, scales, y);
  }
  if (resize_nearest_fits(p, x)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, dt, out_shape));
    return resize_nearest(ctx, p, x, out_shape, scales, y);
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, dt, out_shape));
  KILN_ASSIGN_OR_RETURN(Tensor cur, Tensor::make(DType::kFloat64, x.shape()));
  for (int64_t i = 0; i < x.numel(); ++i)
    cur.data<double>()[i] = load_as_double(dt, x.raw_data(), i);

  for (int64_t ax = 0; ax < r; ++ax) {
    const int64_t in_len = cur.dim(ax), out_len = out_shape[ax];
    const double rs = roi.empty() ? 0.0 : roi[ax], re = roi.empty() ? 1.0 : roi[ax + r];
    const bool full_roi =
        p.coord != "tf_crop_and_resize" || (std::fabs(rs) < 1e-9 && std::fabs(re - 1) < 1e-9);
    if (scales[ax] == 1.0 && in_len == out_len && full_roi) continue;
    Shape next_shape = cur.shape();
    next_shape[ax] = out_len;
    KILN_ASSIGN_OR_RETURN(Tensor next, Tensor::make(DType::kFloat64, next_shape));
    if (next.numel() > 0) {
      const double support = p.mode == "cubic" ? 4.0 : 2.0;
      const double taps = p.antialias && scales[ax] < 1 ? support / scales[ax] + 2 : support;
      if (static_cast<double>(out_len) * taps > 1e9)
        return ctx.error("resize filter too large for scale " + std::to_string(scales[ax]));
      const AxisPlan plan = plan_axis(p, in_len, out_len, scales[ax], rs, re);
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < ax; ++i) outer *= next_shape[i];
      for (int64_t i = ax + 1; i < r; ++i) inner *= next_shape[i];
      const double* src = cur.data<double>();
      double* dst = next.data<double>();
      for (int64_t b = 0; b < outer; ++b) {
        for (int64_t o = 0; o < out_len; ++o) {
          double* d = dst + (b * out_len + o) * inner;
          if (plan.extrapolated[o]) {
            std::fill(d, d + inner, p.extrapolation);
            continue;
          }
          for (int64_t k = 0; k < plan.taps; ++k) {
            const double w = plan.w[o * plan.taps + k];
            if (w == 0) continue;
            const double* s = src + (b * in_len + plan.idx[o * plan.taps + k]) * inner;
            for (int64_t i = 0; i < inner; ++i) d[i] += w * s[i];
          }
        }
      }
    }
    cur = next;
  }

  const bool is_int = dtype_is_integer(dt);
  for (int64_t i = 0; i < y->numel(); ++i) {
    double v = cur.data<double>()[i];
    if (is_int) {
      v = clamp_to_dtype_range(dt, std::nearbyint(v));
    }
    store_from_double(dt, y->raw_data(), i, v);
  }
  return Status::ok();
}

Result<std::vector<double>> read_doubles(const Tensor& t) {
  if (!dtype_is_float(t.dtype()))
    return Status::error(std::string("expected a float tensor, got ") + dtype_name(t.dtype()));
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load_as_double(t.dtype(), t.raw_data(), i);
  return v;
}

// What a Resize node asks of an input of shape x_shape: the parameters, the output shape, and the
// scales and roi of every axis.
struct ResizeCall {
  ResizeParams p;
  Shape out_shape;
  std::vector<double> scales, roi;
};

Result<ResizeCall> read_resize(KernelContext& ctx, const Shape& x_shape, int64_t opset) {
  const int64_t r = static_cast<int64_t>(x_shape.size());
  ResizeParams p;
  p.mode = ctx.node.attr_string("mode", "nearest");
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic")
    return ctx.error("mode must be nearest, linear or cubic, got '" + p.mode + "'");
  if (opset < 11 && p.mode == "cubic") return ctx.error("mode 'cubic' needs opset 11");

  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  bool have_scales = false, have_sizes = false;
  if (opset < 11) {
    p.coord = "asymmetric";
    p.nearest_mode = "simple";
    if (!ctx.has_input(1)) return ctx.error("expected input 'scales'");
    KILN_ASSIGN_OR_RETURN(scales, read_doubles(ctx.input(1)));
    have_scales = true;
  } else {
    p.coord = ctx.node.attr_string("coordinate_transformation_mode", "half_pixel");
    p.nearest_mode = ctx.node.attr_string("nearest_mode", "round_prefer_floor");
    p.cubic_a = ctx.node.attr_float("cubic_coeff_a", -0.75f);
    p.exclude_outside = ctx.node.attr_int("exclude_outside", 0) != 0;
    p.extrapolation = ctx.node.attr_float("extrapolation_value", 0.0f);
    p.antialias = ctx.node.attr_int("antialias", 0) != 0;
    static const char* kModes[] = {
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",  "align_corners",
        "asymmetric", "tf_crop_and_resize",   "tf_half_pixel_for_nn"};
    if (std::find(std::begin(kModes), std::end(kModes), p.coord) == std::end(kModes))
      return ctx.error("unknown coordinate_transformation_mode '" + p.coord + "'");
    static const char* kNearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    if (std::find(std::begin(kNearest), std::end(kNearest), p.nearest_mode) == std::end(kNearest))
      return ctx.error("unknown nearest_mode '" + p.nearest_mode + "'");
    if (ctx.has_input(1) && ctx.input(1).numel() > 0) {
      KILN_ASSIGN_OR_RETURN(roi, read_doubles(ctx.input(1)));
    }
    if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
      KILN_ASSIGN_OR_RETURN(scales, read_doubles(ctx.input(2)));
      have_scales = true;
    }
    if (ctx.has_input(3) && ctx.input(3).numel() > 0) {
      auto s = read_int64s(ctx.input(3));
      if (!s.is_ok()) return ctx.error("sizes: " + s.status().message());
      sizes = *s;
      have_sizes = true;
    }
    if (have_scales == have_sizes)
      return ctx.error("exactly one of 'scales' and 'sizes' must be given");
  }

  // Axes (opset 18+) let scales/sizes/roi cover a subset of dims.
  std::vector<int64_t> axes;
  if (opset >= 18 && ctx.node.has_attr("axes")) {
    for (int64_t a : ctx.node.attr_ints("axes")) {
      auto n = normalize_axis(a, r);
      if (!n.is_ok()) return ctx.error("axes: " + n.status().message());
      if (std::find(axes.begin(), axes.end(), *n) != axes.end())
        return ctx.error("axes has a repeated axis");
      axes.push_back(*n);
    }
  } else {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  const size_t na = axes.size();
  if (have_scales && scales.size() != na)
    return ctx.error("scales has " + std::to_string(scales.size()) + " values, expected " +
                     std::to_string(na));
  if (have_sizes && sizes.size() != na)
    return ctx.error("sizes has " + std::to_string(sizes.size()) + " values, expected " +
                     std::to_string(na));
  if (!roi.empty() && roi.size() != 2 * na)
    return ctx.error("roi has " + std::to_string(roi.size()) + " values, expected " +
                     std::to_string(2 * na));

  std::vector<double> full_scales(static_cast<size_t>(r), 1.0), full_roi;
  Shape out_shape = x_shape;
  if (!roi.empty()) {
    full_roi.assign(static_cast<size_t>(2 * r), 0.0);
    for (int64_t i = 0; i < r; ++i) full_roi[r + i] = 1.0;
    for (size_t i = 0; i < na; ++i) {
      full_roi[axes[i]] = roi[i];
      full_roi[r + axes[i]] = roi[na + i];
    }
  }
  if (have_scales) {
    for (size_t i = 0; i < na; ++i) {
      if (!(scales[i] > 0) || !std::isfinite(scales[i]))
        return ctx.error("scales must be positive and finite");
      full_scales[axes[i]] = scales[i];
      // floor(dim * scale): the roi does not shrink the output, as in ONNX shape inference and the
      // reference implementation (the spec text's roi factor is not what either does).
      const double len = static_cast<double>(x_shape[axes[i]]) * scales[i];
      if (!(len >= 0) || len > 9.0e18) return ctx.error("output size out of range");
      out_shape[axes[i]] = static_cast<int64_t>(std::floor(len));
    }
  } else {
    for (size_t i = 0; i < na; ++i) {
      if (sizes[i] < 0) return ctx.error("sizes must be non-negative");
      if (x_shape[axes[i]] == 0) return ctx.error("cannot resize an empty axis by sizes");
      full_scales[axes[i]] = static_cast<double>(sizes[i]) / static_cast<double>(x_shape[axes[i]]);
      out_shape[axes[i]] = sizes[i];
    }
    const std::string policy =
        opset >= 18 ? ctx.node.attr_string("keep_aspect_ratio_policy", "stretch") : "stretch";
    if (policy == "not_larger" || policy == "not_smaller") {
      double s = full_scales[axes[0]];
      for (size_t i = 1; i < na; ++i)
        s = policy == "not_larger" ? std::min(s, full_scales[axes[i]])
                                   : std::max(s, full_scales[axes[i]]);
      for (size_t i = 0; i < na; ++i) {
        full_scales[axes[i]] = s;
        out_shape[axes[i]] = static_cast<int64_t>(s * static_cast<double>(x_shape[axes[i]]) + 0.5);
      }
    } else if (policy != "stretch") {
      return ctx.error("unknown keep_aspect_ratio_policy '" + policy + "'");
    }
  }
  return ResizeCall{p, out_shape, full_scales, full_roi};
}

Status resize(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("expected input 'X'");
  const Tensor& x = ctx.input(0);
  KILN_ASSIGN_OR_RETURN(const ResizeCall c, read_resize(ctx, x.shape(), ctx.opset));
  return resize_core(ctx, c.p, x, c.out_shape, c.scales, c.roi);
}

// ai.kiln.BlockedResize: X [N, C/8, H, W, 8]; its inputs and attributes are those of the (opset
// 11+) Resize of the NCHW tensor X stands for, which may change H and W only.
Status blocked_resize(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("expected input 'X'");
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kFloat32 || x.rank() != 5 || x.dim(4) != 8)
    return ctx.error("X must be a blocked float32 [N, C/8, H, W, 8], got " + shape_str(x.shape()));
  const Shape view{x.dim(0), x.dim(1) * 8, x.dim(2), x.dim(3)};
  KILN_ASSIGN_OR_RETURN(const ResizeCall c, read_resize(ctx, view, 13));
  // The channels stay: scales 1, or sizes naming the real channel count within X's blocks.
  const int64_t channels = c.out_shape[1];
  if (c.out_shape[0] != view[0] || channels <= view[1] - 8 || channels > view[1] ||
      std::fabs(c.scales[1] * static_cast<double>(view[1]) - static_cast<double>(channels)) > 1e-6)
    return ctx.error("BlockedResize may resize H and W only, asked for " + shape_str(c.out_shape) +
                     " from " + shape_str(view));
  const Shape out{x.dim(0), x.dim(1), c.out_shape[2], c.out_shape[3], 8};
  const std::vector<double> scales{1, 1, c.scales[2], c.scales[3], 1};
  if (!resize_2d_f32_fits(c.p, x, out, 8))
    return ctx.error("BlockedResize runs nearest and linear modes without antialias or tf_crop_and_resize");
  for (int a = 2; a < 4; ++a)
    if (!(scales[a] > 0) || (x.dim(a) == 0 && out[a] > 0))
      return ctx.error("cannot resize " + shape_str(x.shape()) + " to " + shape_str(out));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, out));
  return resize_2d_f32(ctx, c.p, x, out, scales, y, 8);
}

Status upsample(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("expected input 'X'");
  const Tensor& x = ctx.input(0);
  ResizeParams p;
  p.mode = ctx.node.attr_string("mode", "nearest");
  if (p.mode == "bilinear") p.mode = "linear";
  if (p.mode != "nearest" && p.mode != "linear")
    return ctx.error("mode must be nearest or linear, got '" + p.mode + "'");
  p.coord = "asymmetric";
  p.nearest_mode = "simple";
  std::vector<double> scales;
  if (ctx.opset >= 9) {
    if (!ctx.has_input(1)) return ctx.error("expected input 'scales'");
    KILN_ASSIGN_OR_RETURN(scales, read_doubles(ctx.input(1)));
  } else {
    for (float f : ctx.node.attr_floats("scales")) scales.push_back(f);
  }
  if (static_cast<int64_t>(scales.size()) != x.rank())
    return ctx.error("scales has " + std::to_string(scales.size()) + " values, expected rank " +
                     std::to_string(x.rank()));
  Shape out_shape = x.shape();
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (!(scales[i] > 0) || !std::isfinite(scales[i]))
      return ctx.error("scales must be positive and finite");
    const double len = std::floor(static_cast<double>(x.dim(i)) * scales[i]);
    if (len > 9.0e18) return ctx.error("output size out of range");
    out_shape[i] = static_cast<int64_t>(len);
  }
  return resize_core(ctx, p, x, out_shape, scales, {});
}

}  // namespace

KILN_REGISTER_KERNEL("", "Resize", resize);
KILN_REGISTER_KERNEL("", "Upsample", upsample);
KILN_REGISTER_KERNEL("ai.kiln", "BlockedResize", blocked_resize);
KILN_REGISTER_FAST_PATH("ai.kiln", "BlockedResize", [](const FastPathQuery&) { return true; });

// float32 nearest and linear without antialias (resize_2d_f32_fits also needs the resized axes to
// be the last two, which the scales tell only at run time); nearest of any type (a gather).
KILN_REGISTER_FAST_PATH("", "Resize", [](const FastPathQuery& q) {
  const std::string mode = q.node.attr_string("mode", "nearest");
  const bool gathers = mode == "nearest" && !q.input_is(0, DType::kString) &&
                       q.node.attr_string("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize";
  return gathers || (q.input_is(0, DType::kFloat32) && (mode == "nearest" || mode == "linear") &&
         q.node.attr_int("antialias", 0) == 0 &&
         q.node.attr_string("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize");
});
KILN_REGISTER_FAST_PATH("", "Upsample", [](const FastPathQuery& q) {
  const std::string mode = q.node.attr_string("mode", "nearest");
  return q.input_is(0, DType::kFloat32) && (mode == "nearest" || mode == "linear" || mode == "bilinear");
});

}  // namespace kiln
