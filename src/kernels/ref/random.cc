// Reference random generators: RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial.
// A std::mt19937 seeded with the `seed` attribute when given (same output on every run), from
// std::random_device otherwise. Values follow the distributions; bit-exact agreement with other
// runtimes is not a goal (the ONNX spec says these ops may differ between implementations).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

std::mt19937 make_rng(const ir::Node& node) {
  if (node.has_attr("seed")) {
    const float seed = node.attr_float("seed", 0.0f);
    const auto s = std::isfinite(seed) ? static_cast<uint32_t>(static_cast<int64_t>(seed)) : 0u;
    return std::mt19937(s);
  }
  std::random_device rd;
  return std::mt19937(rd());
}

// Uniform in [0, 1); some standard libraries' generate_canonical can return exactly 1.
double canonical(std::mt19937& rng) {
  const double u = std::generate_canonical<double, 53>(rng);
  return u < 1.0 ? u : std::nextafter(1.0, 0.0);
}

// The output type: the dtype attribute, else `fallback`; must be a float type.
Result<DType> float_dtype(const KernelContext& ctx, DType fallback) {
  DType dt = fallback;
  if (ctx.node.has_attr("dtype")) {
    const int64_t v = ctx.node.attr_int("dtype", 1);
    if (!dtype_is_valid(static_cast<int32_t>(v))) return ctx.error("invalid dtype " + std::to_string(v));
    dt = static_cast<DType>(v);
  }
  if (!dtype_is_compute_float(dt)) return ctx.error(std::string("output type must be a float type, got ") + dtype_name(dt));
  return dt;
}

Result<Shape> shape_attr(const KernelContext& ctx) {
  if (!ctx.node.has_attr("shape")) return ctx.error("attribute shape is required");
  Shape shape = ctx.node.attr_ints("shape");
  for (int64_t d : shape)
    if (d < 0) return ctx.error("shape has a negative dim: " + shape_str(shape));
  return shape;
}

template <typename Dist>
Status fill(KernelContext& ctx, DType dt, const Shape& shape, Dist dist) {
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, dt, shape));
  std::mt19937 rng = make_rng(ctx.node);
  for (int64_t i = 0; i < y->numel(); ++i) store_from_double(dt, y->raw_data(), i, dist(rng));
  return Status::ok();
}

Status uniform(KernelContext& ctx, DType dt, const Shape& shape) {
  const double low = ctx.node.attr_float("low", 0.0f);
  const double high = ctx.node.attr_float("high", 1.0f);
  if (!(low <= high)) return ctx.error("low must not exceed high");
  return fill(ctx, dt, shape, [&](std::mt19937& rng) {
    return low + (high - low) * canonical(rng);
  });
}

Status normal(KernelContext& ctx, DType dt, const Shape& shape) {
  const double mean = ctx.node.attr_float("mean", 0.0f);
  const double scale = ctx.node.attr_float("scale", 1.0f);
  if (!(scale >= 0)) return ctx.error("scale must be non-negative");
  std::normal_distribution<double> dist(mean, scale);
  return fill(ctx, dt, shape, [&](std::mt19937& rng) { return scale == 0 ? mean : dist(rng); });
}

Status random_uniform(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DType dt, float_dtype(ctx, DType::kFloat32));
  KILN_ASSIGN_OR_RETURN(Shape shape, shape_attr(ctx));
  return uniform(ctx, dt, shape);
}

Status random_normal(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DType dt, float_dtype(ctx, DType::kFloat32));
  KILN_ASSIGN_OR_RETURN(Shape shape, shape_attr(ctx));
  return normal(ctx, dt, shape);
}

Status random_uniform_like(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("input is required");
  KILN_ASSIGN_OR_RETURN(DType dt, float_dtype(ctx, ctx.input(0).dtype()));
  return uniform(ctx, dt, ctx.input(0).shape());
}

Status random_normal_like(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("input is required");
  KILN_ASSIGN_OR_RETURN(DType dt, float_dtype(ctx, ctx.input(0).dtype()));
  return normal(ctx, dt, ctx.input(0).shape());
}

Status bernoulli(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("input is required");
  const Tensor& p = ctx.input(0);
  if (!dtype_is_compute_float(p.dtype())) return ctx.error(std::string("input must be float, got ") + dtype_name(p.dtype()));
  DType dt = p.dtype();
  if (ctx.node.has_attr("dtype")) {
    const int64_t v = ctx.node.attr_int("dtype", 1);
    if (!dtype_is_valid(static_cast<int32_t>(v))) return ctx.error("invalid dtype " + std::to_string(v));
    dt = static_cast<DType>(v);
    if (!(dtype_is_compute_float(dt) || dt == DType::kBool || (dtype_is_integer(dt) && dt != DType::kInt4 && dt != DType::kUInt4)))
      return ctx.error(std::string("unsupported output type ") + dtype_name(dt));
  }
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, dt, p.shape()));
  std::mt19937 rng = make_rng(ctx.node);
  for (int64_t i = 0; i < p.numel(); ++i) {
    const double prob = load_as_double(p.dtype(), p.raw_data(), i);
    if (!(prob >= 0 && prob <= 1)) return ctx.error("probability " + std::to_string(prob) + " outside [0, 1]");
    const bool one = canonical(rng) < prob;
    if (dt == DType::kBool) y->data<bool>()[i] = one;
    else store_from_double(dt, y->raw_data(), i, one ? 1.0 : 0.0);
  }
  return Status::ok();
}

// Input [batch, classes] of unnormalized log-probabilities; samples class indices per row.
Status multinomial(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("input is required");
  const Tensor& x = ctx.input(0);
  if (!dtype_is_compute_float(x.dtype())) return ctx.error(std::string("input must be float, got ") + dtype_name(x.dtype()));
  if (x.rank() != 2) return ctx.error("input must have shape [batch, classes], got " + shape_str(x.shape()));
  const int64_t dt_attr = ctx.node.attr_int("dtype", static_cast<int64_t>(DType::kInt32));
  if (dt_attr != static_cast<int64_t>(DType::kInt32) && dt_attr != static_cast<int64_t>(DType::kInt64))
    return ctx.error("dtype must be int32 or int64, got " + std::to_string(dt_attr));
  const auto dt = static_cast<DType>(dt_attr);
  const int64_t samples = ctx.node.attr_int("sample_size", 1);
  if (samples < 0) return ctx.error("sample_size must be non-negative");
  const int64_t batch = x.dim(0), classes = x.dim(1);
  if (classes < 1 && samples > 0 && batch > 0) return ctx.error("input has no classes to sample");
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, dt, {batch, samples}));
  std::mt19937 rng = make_rng(ctx.node);
  std::vector<double> cdf(static_cast<size_t>(classes));
  for (int64_t b = 0; b < batch; ++b) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, load_as_double(x.dtype(), x.raw_data(), b * classes + c));
    double total = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const double v = load_as_double(x.dtype(), x.raw_data(), b * classes + c);
      total += std::isfinite(mx) ? std::exp(v - mx) : 1.0;
      cdf[c] = total;
    }
    for (int64_t s = 0; s < samples; ++s) {
      const double u = canonical(rng) * total;
      int64_t pick = classes - 1;
      for (int64_t c = 0; c < classes; ++c) {
        if (u < cdf[c]) {
          pick = c;
          break;
        }
      }
      store_from_double(dt, y->raw_data(), b * samples + s, static_cast<double>(pick));
    }
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "RandomUniform", random_uniform);
KILN_REGISTER_KERNEL("", "RandomNormal", random_normal);
KILN_REGISTER_KERNEL("", "RandomUniformLike", random_uniform_like);
KILN_REGISTER_KERNEL("", "RandomNormalLike", random_normal_like);
KILN_REGISTER_KERNEL("", "Bernoulli", bernoulli);
KILN_REGISTER_KERNEL("", "Multinomial", multinomial);

}  // namespace kiln
