// Reference kernels for activation functions: Relu and its variants, sigmoid-like functions,
// Gelu, Mish, Softplus, Softsign, Shrink, PRelu and Clip.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/fast_path.h"
#include "kernels/ref/elementwise_util.h"

namespace kiln {
namespace {

using ew::Accept;

// A float activation computed in double: fn maps double -> double; float16, bfloat16, float and
// double inputs are accepted.
template <typename Fn>
Status float_activation(KernelContext& ctx, Fn fn) {
  return ew::map_unary(ctx, Accept::kFloat, [&](auto v) {
    using T = decltype(v);
    return static_cast<T>(fn(static_cast<double>(v)));
  });
}

Status relu_op(KernelContext& ctx) {
  // max(0, x) with x second, so that NaN passes through (numpy's maximum).
  KILN_ASSIGN_OR_RETURN(bool done,
                        ew::map_unary_f32_lanes(ctx, [](__m256 v) { return _mm256_max_ps(_mm256_setzero_ps(), v); }));
  if (done) return Status::ok();
  return ew::map_unary(ctx, Accept::kSigned, [](auto v) {
    using T = decltype(v);
    return v > T(0) ? v : T(0);
  });
}

Status leaky_relu_op(KernelContext& ctx) {
  const float alpha_f = ctx.node.attr_float("alpha", 0.01f);
  // float32 on 8 lanes, the same bits as the double loop below: a product of two floats is
  // exact in double, so rounding it to float is the float product.
  const __m256 alpha_v = _mm256_set1_ps(alpha_f);
  KILN_ASSIGN_OR_RETURN(bool done, ew::map_unary_f32_lanes(ctx, [alpha_v](__m256 v) {
                          const __m256 keep = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
                          return _mm256_blendv_ps(_mm256_mul_ps(v, alpha_v), v, keep);
                        }));
  if (done) return Status::ok();
  const double alpha = alpha_f;
  return float_activation(ctx, [&](double x) { return x >= 0 ? x : alpha * x; });
}

Status thresholded_relu_op(KernelContext& ctx) {
  const double alpha = ctx.node.attr_float("alpha", 1.0f);
  return float_activation(ctx, [&](double x) { return x > alpha ? x : 0.0; });
}

Status elu_op(KernelContext& ctx) {
  const double alpha = ctx.node.attr_float("alpha", 1.0f);
  return float_activation(ctx, [&](double x) { return x >= 0 ? x : alpha * std::expm1(x); });
}

Status selu_op(KernelContext& ctx) {
  const double alpha = ctx.node.attr_float("alpha", 1.67326319217681884765625f);
  const double gamma = ctx.node.attr_float("gamma", 1.05070102214813232421875f);
  return float_activation(ctx,
                          [&](double x) { return gamma * (x > 0 ? x : alpha * std::expm1(x)); });
}

Status celu_op(KernelContext& ctx) {
  const double alpha = ctx.node.attr_float("alpha", 1.0f);
  if (alpha == 0) return ctx.error("Celu alpha must not be 0");
  return float_activation(ctx, [&](double x) {
    return std::max(0.0, x) + std::min(0.0, alpha * std::expm1(x / alpha));
  });
}

double sigmoid(double x) {
  // Written so that exp never overflows.
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

Status sigmoid_op(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(bool done, ew::map_unary_f32_lanes(ctx, [](__m256 v) { return vec::sigmoid_avx2(v); }));
  return done ? Status::ok() : float_activation(ctx, sigmoid);
}

Status hard_sigmoid_op(KernelContext& ctx) {
  const double alpha = ctx.node.attr_float("alpha", 0.2f);
  const double beta = ctx.node.attr_float("beta", 0.5f);
  return float_activation(ctx,
                          [&](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); });
}

Status hard_swish_op(KernelContext& ctx) {
  return float_activation(ctx,
                          [](double x) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); });
}

Status gelu_op(KernelContext& ctx) {
  const std::string approx = ctx.node.attr_string("approximate", "none");
  if (approx == "tanh") {
    return float_activation(ctx, [](double x) {
      const double k = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    });
  }
  if (approx != "none")
    return ctx.error("Gelu approximate must be 'none' or 'tanh', got '" + approx + "'");
  return float_activation(ctx, [](double x) { return 0.5 * x * (1.0 + std::erf(x / M_SQRT2)); });
}

Status mish_op(KernelContext& ctx) {
  return float_activation(ctx, [](double x) { return x * std::tanh(softplus(x)); });
}

Status softplus_op(KernelContext& ctx) { return float_activation(ctx, softplus); }

Status softsign_op(KernelContext& ctx) {
  return float_activation(ctx, [](double x) { return x / (1.0 + std::fabs(x)); });
}

Status shrink_op(KernelContext& ctx) {
  const double lambd = ctx.node.attr_float("lambd", 0.5f);
  const double bias = ctx.node.attr_float("bias", 0.0f);
  return ew::map_unary(ctx, Accept::kNumeric, [&](auto v) {
    using T = decltype(v);
    const double x = static_cast<double>(v);
    double y = 0;
    if (x < -lambd) {
      y = x + bias;
    } else if (x > lambd) {
      y = x - bias;
    }
    return ew::from_double<T>(y);
  });
}

// PRelu: y = x < 0 ? slope * x : x, with slope broadcast to x.
Status prelu_op(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 2, 2));
  KILN_RETURN_IF_ERROR(ew::check_same_dtype(ctx, 0, 1));
  const Tensor& x = ctx.input(0);
  Tensor slope = ctx.input(1);
  // Before opset 7 a 1-D slope of X's channel count applies per channel (axis 1).
  if (ctx.opset < 7 && slope.rank() == 1 && x.rank() >= 2 && slope.dim(0) == x.dim(1) &&
      slope.dim(0) != 1) {
    Shape s(x.rank() - 1, 1);
    s[0] = slope.dim(0);
    slope = slope.reshaped(s);
  }
  if (!ew::accepts(Accept::kNumeric, x.dtype()))
    return ctx.error(std::string("unsupported input type ") + dtype_name(x.dtype()));
  auto shape = broadcast_shapes(x.shape(), slope.shape());
  if (!shape) return ctx.error("slope does not broadcast to X: " + shape.status().message());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), *shape));
  const std::array<const Shape*, 2> in = {&x.shape(), &slope.shape()};
  if (ew::is_half_float(x.dtype())) {
    const DType t = x.dtype();
    ew::for_each_broadcast(*shape, in, [&](int64_t i, const std::array<int64_t, 2>& o) {
      const float v = static_cast<float>(load_as_double(t, x.raw_data(), o[0]));
      const float s = static_cast<float>(load_as_double(t, slope.raw_data(), o[1]));
      store_from_double(t, y->raw_data(), i, v < 0 ? s * v : v);
    });
    return Status::ok();
  }
  return visit_numeric(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* xv = x.data<T>();
    const T* sv = slope.data<T>();
    T* out = y->data<T>();
    ew::for_each_broadcast(*shape, in, [&](int64_t i, const std::array<int64_t, 2>& o) {
      const T v = xv[o[0]];
      // Multiply in the unsigned domain for integers: wraps instead of overflowing.
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        out[i] = v < T(0) ? static_cast<T>(static_cast<U>(sv[o[1]]) * static_cast<U>(v)) : v;
      } else {
        out[i] = v < T(0) ? sv[o[1]] * v : v;
      }
    });
    return Status::ok();
  });
}

// A Clip bound in every representation the typed loop may need.
struct Bound {
  bool given = false;
  double d = 0;
  int64_t i = 0;
  uint64_t u = 0;

  template <typename T>
  T as(T fallback) const {
    if (!given) return fallback;
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(d);
    } else if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(i);
    } else {
      return static_cast<T>(u);
    }
  }
};

Status clip_op(KernelContext& ctx) {
  Bound lo, hi;
  if (ctx.opset < 11) {
    KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 1, 1));
    lo.given = hi.given = true;
    lo.d = ctx.node.attr_float("min", std::numeric_limits<float>::lowest());
    hi.d = ctx.node.attr_float("max", std::numeric_limits<float>::max());
  } else {
    KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 1, 3));
    for (size_t k = 1; k <= 2; ++k) {
      if (!ctx.has_input(k)) continue;
      const Tensor& t = ctx.input(k);
      if (t.dtype() != ctx.input(0).dtype())
        return ctx.error("Clip bound (input " + std::to_string(k) +
                         ") must have the type of X, got " + dtype_name(t.dtype()) + " vs " +
                         dtype_name(ctx.input(0).dtype()));
      if (t.numel() != 1)
        return ctx.error("Clip bound (input " + std::to_string(k) +
                         ") must be a single value, got shape " + shape_str(t.shape()));
      Bound& b = k == 1 ? lo : hi;
      b.given = true;
      b.d = load_as_double(t.dtype(), t.raw_data(), 0);
      // Integers are read exactly: int64/uint64 bounds may not fit a double.
      Status st = visit_numeric(t.dtype(), [&](auto tag) -> Status {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_integral_v<T>) {
          const T v = t.data<T>()[0];
          b.i = static_cast<int64_t>(v);
          b.u = static_cast<uint64_t>(v);
        }
        return Status::ok();
      });
      (void)st;  // float16/bfloat16 bounds are not numeric-visitable; `d` covers them.
    }
  }
  // float32 on 8 lanes: max_ps/min_ps return their second operand when either is NaN, so x
  // second lets NaN through and ties keep x's zero sign, as std::max/std::min below do.
  const __m256 lo_v = _mm256_set1_ps(lo.as<float>(-std::numeric_limits<float>::infinity()));
  const __m256 hi_v = _mm256_set1_ps(hi.as<float>(std::numeric_limits<float>::infinity()));
  KILN_ASSIGN_OR_RETURN(bool done, ew::map_unary_f32_lanes(ctx, [lo_v, hi_v](__m256 v) {
                          return _mm256_min_ps(hi_v, _mm256_max_ps(lo_v, v));
                        }, 3));
  if (done) return Status::ok();
  return ew::map_unary(
      ctx, Accept::kNumeric,
      [&](auto v) {
        using T = decltype(v);
        T l, h;
        if constexpr (std::is_floating_point_v<T>) {
          l = lo.as<T>(-std::numeric_limits<T>::infinity());
          h = hi.as<T>(std::numeric_limits<T>::infinity());
        } else {
          l = lo.as<T>(std::numeric_limits<T>::lowest());
          h = hi.as<T>(std::numeric_limits<T>::max());
        }
        // max then min, as numpy: NaN passes through and min > max gives max.
        return std::min(std::max(v, l), h);
      },
      3);
}

}  // namespace

KILN_REGISTER_KERNEL("", "Relu", relu_op);
KILN_REGISTER_KERNEL("", "LeakyRelu", leaky_relu_op);
KILN_REGISTER_KERNEL("", "ThresholdedRelu", thresholded_relu_op);
KILN_REGISTER_KERNEL("", "Elu", elu_op);
KILN_REGISTER_KERNEL("", "Selu", selu_op);
KILN_REGISTER_KERNEL("", "Celu", celu_op);
KILN_REGISTER_KERNEL("", "Sigmoid", sigmoid_op);
KILN_REGISTER_KERNEL("", "HardSigmoid", hard_sigmoid_op);
KILN_REGISTER_KERNEL("", "HardSwish", hard_swish_op);
KILN_REGISTER_KERNEL("", "Gelu", gelu_op);
KILN_REGISTER_KERNEL("", "Mish", mish_op);
KILN_REGISTER_KERNEL("", "Softplus", softplus_op);
KILN_REGISTER_KERNEL("", "Softsign", softsign_op);
KILN_REGISTER_KERNEL("", "Shrink", shrink_op);
KILN_REGISTER_KERNEL("", "PRelu", prelu_op);
KILN_REGISTER_KERNEL("", "Clip", clip_op);

// float32 on 8 lanes.
KILN_REGISTER_FAST_PATH("", "Relu", float32_input);
KILN_REGISTER_FAST_PATH("", "Sigmoid", float32_input);
KILN_REGISTER_FAST_PATH("", "LeakyRelu", float32_input);
KILN_REGISTER_FAST_PATH("", "Clip", float32_input);

}  // namespace kiln
