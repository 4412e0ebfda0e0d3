// Reference kernels for GridSample (2-D and N-D; nearest/linear/cubic; zeros/border/reflection
// padding; align_corners) and AffineGrid (2-D and 3-D).
#include <algorithm>
#include <cmath>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

double cubic_kernel(double x) {
  constexpr double a = -0.75;
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// Folds x back into [lo, hi] by mirroring at the borders as often as needed.
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const double n = std::floor(dx / range);
    const double r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const double n = std::floor(dx / range);
    const double r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? hi - r : lo + r;
  }
  return x;
}


enum class Pad { kZeros, kBorder, kReflection };
enum class Mode { kNearest, kLinear, kCubic };

Status grid_sample(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("expected inputs 'X' and 'grid'");
  const Tensor& x = ctx.input(0);
  const Tensor& grid = ctx.input(1);
  if (!dtype_is_compute_float(x.dtype()) &&
      (!dtype_is_integer(x.dtype()) || x.dtype() == DType::kInt4 || x.dtype() == DType::kUInt4))
    return ctx.error(std::string("unsupported X element type ") + dtype_name(x.dtype()));
  if (!dtype_is_compute_float(grid.dtype())) return ctx.error("grid must be a float tensor");
  const int64_t r = x.rank();
  const int64_t nd = r - 2;
  if (r < 3) return ctx.error("X must have rank >= 3, got " + shape_str(x.shape()));
  if (ctx.opset < 20 && r != 4)
    return ctx.error("GridSample before opset 20 needs 4-D X, got " + shape_str(x.shape()));
  if (grid.rank() != r || grid.dim(0) != x.dim(0) || grid.dim(r - 1) != nd)
    return ctx.error("grid shape " + shape_str(grid.shape()) + " does not match X shape " +
                     shape_str(x.shape()) + " (expected [N, spatial..., " + std::to_string(nd) +
                     "])");

  const std::string ms = ctx.node.attr_string("mode", ctx.opset >= 20 ? "linear" : "bilinear");
  Mode mode;
  if (ms == "nearest")
    mode = Mode::kNearest;
  else if (ms == "linear" || ms == "bilinear")
    mode = Mode::kLinear;
  else if (ms == "cubic" || ms == "bicubic")
    mode = Mode::kCubic;
  else
    return ctx.error("unknown mode '" + ms + "'");
  if (mode == Mode::kCubic && nd != 2 && ctx.opset < 20)
    return ctx.error("cubic mode needs 4-D input");
  const std::string ps = ctx.node.attr_string("padding_mode", "zeros");
  Pad pad;
  if (ps == "zeros")
    pad = Pad::kZeros;
  else if (ps == "border")
    pad = Pad::kBorder;
  else if (ps == "reflection")
    pad = Pad::kReflection;
  else
    return ctx.error("unknown padding_mode '" + ps + "'");
  const bool align = ctx.node.attr_int("align_corners", 0) != 0;

  const int64_t n_batch = x.dim(0), channels = x.dim(1);
  Shape out_shape = {n_batch, channels};
  for (int64_t i = 1; i < r - 1; ++i) out_shape.push_back(grid.dim(i));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out_shape));
  if (y->numel() == 0) return Status::ok();
  for (int64_t d = 0; d < nd; ++d)
    if (x.dim(2 + d) == 0) return ctx.error("X has an empty spatial dim " + shape_str(x.shape()));

  std::vector<int64_t> dims(x.shape().begin() + 2, x.shape().end());
  const Shape xstr = strides_of(Shape(dims.begin(), dims.end()));
  int64_t in_plane = 1, out_plane = 1;
  for (int64_t d : dims) in_plane *= d;
  for (int64_t i = 2; i < r; ++i) out_plane *= out_shape[i];
  const int taps = mode == Mode::kNearest ? 1 : mode == Mode::kLinear ? 2 : 4;

  std::vector<std::vector<int64_t>> tidx(nd, std::vector<int64_t>(taps));
  std::vector<std::vector<double>> tw(nd, std::vector<double>(taps));
  std::vector<std::vector<char>> tvalid(nd, std::vector<char>(taps));
  const bool is_int = dtype_is_integer(x.dtype());
  std::vector<int> k(nd, 0);  // tap counter per spatial dim

  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t p = 0; p < out_plane; ++p) {
      // Taps per spatial dim. grid's last axis lists (x, y, z...): the innermost dim first.
      for (int64_t d = 0; d < nd; ++d) {
        const double g =
            load_as_double(grid.dtype(), grid.raw_data(), (n * out_plane + p) * nd + (nd - 1 - d));
        const double len = static_cast<double>(dims[d]);
        double c = align ? (g + 1) / 2 * (len - 1) : ((g + 1) * len - 1) / 2;
        const double lo = align ? 0 : -0.5, hi = align ? len - 1 : len - 0.5;
        if (mode == Mode::kNearest) c = std::nearbyint(c);
        if (!std::isfinite(c)) c = 0;  // NaN grid: sample something deterministic instead of UB
        if (c < lo || c > hi) {
          if (pad == Pad::kBorder)
            c = std::clamp(c, 0.0, len - 1);
          else if (pad == Pad::kReflection)
            c = reflect(c, lo, hi);
        }
        const double base = mode == Mode::kNearest ? c : std::floor(c) - (taps == 4 ? 1 : 0);
        const double t = c - std::floor(c);
        for (int k = 0; k < taps; ++k) {
          int64_t i = static_cast<int64_t>(std::clamp(base + k, -1e15, 1e15));
          double w = 1;
          if (mode == Mode::kLinear) w = k == 0 ? 1 - t : t;
          if (mode == Mode::kCubic) w = cubic_kernel(static_cast<double>(k - 1) - t);
          bool valid = true;
          if (i < 0 || i >= dims[d]) {
            if (pad == Pad::kZeros)
              valid = false;
            else if (pad == Pad::kBorder)
              i = std::clamp<int64_t>(i, 0, dims[d] - 1);
            else
              i = std::clamp<int64_t>(static_cast<int64_t>(reflect(static_cast<double>(i), lo, hi)),
                                      0, dims[d] - 1);
          }
          tidx[d][k] = i;
          tw[d][k] = w;
          tvalid[d][k] = valid;
        }
      }
      for (int64_t ch = 0; ch < channels; ++ch) {
        const int64_t in_base = (n * channels + ch) * in_plane;
        double acc = 0;
        std::fill(k.begin(), k.end(), 0);
        while (true) {
          double w = 1;
          bool valid = true;
          int64_t off = 0;
          for (int64_t d = 0; d < nd; ++d) {
            w *= tw[d][k[d]];
            valid = valid && tvalid[d][k[d]];
            off += tidx[d][k[d]] * xstr[d];
          }
          if (valid && w != 0) acc += w * load_as_double(x.dtype(), x.raw_data(), in_base + off);
          int64_t d = nd - 1;
          while (d >= 0 && ++k[d] == taps) k[d--] = 0;
          if (d < 0) break;
        }
        if (is_int) acc = clamp_to_dtype_range(x.dtype(), std::trunc(acc));
        store_from_double(x.dtype(), y->raw_data(), (n * channels + ch) * out_plane + p, acc);
      }
    }
  }
  return Status::ok();
}

Status affine_grid(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error("expected inputs 'theta' and 'size'");
  const Tensor& theta = ctx.input(0);
  if (!dtype_is_compute_float(theta.dtype())) return ctx.error("theta must be a float tensor");
  auto sr = read_int64s(ctx.input(1));
  if (!sr.is_ok()) return ctx.error("size: " + sr.status().message());
  const std::vector<int64_t>& size = *sr;
  if (size.size() != 4 && size.size() != 5)
    return ctx.error("size must have 4 or 5 values, got " + std::to_string(size.size()));
  const int64_t nd = static_cast<int64_t>(size.size()) - 2;
  const int64_t n_batch = size[0];
  if (theta.rank() != 3 || theta.dim(0) != n_batch || theta.dim(1) != nd || theta.dim(2) != nd + 1)
    return ctx.error("theta shape " + shape_str(theta.shape()) +
                     " does not match size (expected [" + std::to_string(n_batch) + "," +
                     std::to_string(nd) + "," + std::to_string(nd + 1) + "])");
  const bool align = ctx.node.attr_int("align_corners", 0) != 0;
  Shape out_shape = {n_batch};
  for (int64_t d = 0; d < nd; ++d) {
    if (size[2 + d] < 0) return ctx.error("size has a negative dim");
    out_shape.push_back(size[2 + d]);
  }
  out_shape.push_back(nd);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, theta.dtype(), out_shape));
  if (y->numel() == 0) return Status::ok();

  auto base = [&](int64_t i, int64_t len) -> double {
    if (align)
      return len == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(len - 1);
    return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(len);
  };
  int64_t plane = 1;
  for (int64_t d = 0; d < nd; ++d) plane *= size[2 + d];
  std::vector<int64_t> idx(nd, 0);
  std::vector<double> h(nd + 1, 1.0);
  for (int64_t p = 0; p < plane; ++p) {
    // Homogeneous point (x, y[, z], 1): x follows the innermost dim.
    for (int64_t d = 0; d < nd; ++d) h[nd - 1 - d] = base(idx[d], size[2 + d]);
    h[nd] = 1.0;
    for (int64_t n = 0; n < n_batch; ++n) {
      for (int64_t row = 0; row < nd; ++row) {
        double v = 0;
        for (int64_t col = 0; col <= nd; ++col)
          v += load_as_double(theta.dtype(), theta.raw_data(), (n * nd + row) * (nd + 1) + col) *
               h[col];
        store_from_double(theta.dtype(), y->raw_data(), (n * plane + p) * nd + row, v);
      }
    }
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < size[2 + d]) break;
      idx[d] = 0;
    }
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "GridSample", grid_sample);
KILN_REGISTER_KERNEL("", "AffineGrid", affine_grid);

}  // namespace kiln
