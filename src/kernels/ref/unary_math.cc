// Reference kernels for one-input math ops: Abs, Neg, Sign, rounding, exp/log, trigonometric and
// hyperbolic functions, Erf, Not, BitwiseNot, IsInf, IsNaN.
#include <cmath>
#include <type_traits>

#include "kernels/fast_path.h"
#include "kernels/ref/elementwise_util.h"

namespace kiln {
namespace {

// Integer negation with two's complement wrap-around (so -INT_MIN is INT_MIN, not UB).
template <typename T>
T wrap_neg(T v) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U{0} - static_cast<U>(v));
}

Status abs_op(KernelContext& ctx) {
  return ew::map_unary(ctx, ew::Accept::kNumeric, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      return std::fabs(v);
    } else if constexpr (std::is_unsigned_v<T>) {
      return v;
    } else {
      return v < 0 ? wrap_neg(v) : v;
    }
  });
}

Status neg_op(KernelContext& ctx) {
  return ew::map_unary(ctx, ew::Accept::kSigned, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      return -v;
    } else {
      return wrap_neg(v);
    }
  });
}

Status sign_op(KernelContext& ctx) {
  return ew::map_unary(ctx, ew::Accept::kNumeric, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(v)) return v;
    }
    return v > T(0) ? T(1) : (v < T(0) ? static_cast<T>(-1) : T(0));
  });
}

// Float-only ops: the lambda receives float or double.
#define KILN_FLOAT_UNARY(name, expr)                                                           \
  Status name(KernelContext& ctx) {                                                            \
    return ew::map_unary(ctx, ew::Accept::kFloat, [](auto v) -> decltype(v) { return expr; }); \
  }

KILN_FLOAT_UNARY(ceil_op, std::ceil(v))
KILN_FLOAT_UNARY(floor_op, std::floor(v))
// Round half to even: nearbyint under the default rounding mode.
KILN_FLOAT_UNARY(round_op, std::nearbyint(v))
KILN_FLOAT_UNARY(reciprocal_op, decltype(v)(1) / v)
KILN_FLOAT_UNARY(sqrt_op, std::sqrt(v))
// Exp, Erf and Tanh: float32 on 8 lanes (vec_math_avx2.h, a few ulp), other types below.
#define KILN_FLOAT_UNARY_LANES(name, lanes, expr)                                                  \
  Status name(KernelContext& ctx) {                                                                \
    KILN_ASSIGN_OR_RETURN(bool done, ew::map_unary_f32_lanes(ctx, [](__m256 v) { return lanes; })); \
    if (done) return Status::ok();                                                                 \
    return ew::map_unary(ctx, ew::Accept::kFloat, [](auto v) -> decltype(v) { return expr; });     \
  }
KILN_FLOAT_UNARY_LANES(exp_op, vec::exp_avx2(v), std::exp(v))
KILN_FLOAT_UNARY_LANES(erf_op, vec::erf_avx2(v), std::erf(v))
KILN_FLOAT_UNARY_LANES(tanh_op, vec::tanh_avx2(v), std::tanh(v))
#undef KILN_FLOAT_UNARY_LANES
KILN_FLOAT_UNARY(log_op, std::log(v))
KILN_FLOAT_UNARY(sin_op, std::sin(v))
KILN_FLOAT_UNARY(cos_op, std::cos(v))
KILN_FLOAT_UNARY(tan_op, std::tan(v))
KILN_FLOAT_UNARY(asin_op, std::asin(v))
KILN_FLOAT_UNARY(acos_op, std::acos(v))
KILN_FLOAT_UNARY(atan_op, std::atan(v))
KILN_FLOAT_UNARY(sinh_op, std::sinh(v))
KILN_FLOAT_UNARY(cosh_op, std::cosh(v))
KILN_FLOAT_UNARY(asinh_op, std::asinh(v))
KILN_FLOAT_UNARY(acosh_op, std::acosh(v))
KILN_FLOAT_UNARY(atanh_op, std::atanh(v))

#undef KILN_FLOAT_UNARY

Status not_op(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 1, 1));
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kBool)
    return ctx.error(std::string("Not expects a bool input, got ") + dtype_name(x.dtype()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kBool, x.shape()));
  uint8_t* out = y->data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = ew::bool_at(x, i) ? 0 : 1;
  return Status::ok();
}

Status bitwise_not_op(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 1, 1));
  const Tensor& x = ctx.input(0);
  if (!dtype_is_integer(x.dtype()) || x.dtype() == DType::kInt4 || x.dtype() == DType::kUInt4)
    return ctx.error(std::string("BitwiseNot expects an integer input, got ") +
                     dtype_name(x.dtype()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), x.shape()));
  return visit_numeric(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      for (int64_t i = 0; i < x.numel(); ++i) y->data<T>()[i] = static_cast<T>(~x.data<T>()[i]);
    }
    return Status::ok();
  });
}

// IsInf / IsNaN: any float type in, bool out.
template <typename P>
Status float_predicate(KernelContext& ctx, P pred) {
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 1, 1));
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype()))
    return ctx.error(std::string("expected a float input, got ") + dtype_name(x.dtype()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kBool, x.shape()));
  uint8_t* out = y->data<uint8_t>();
  if (x.dtype() == DType::kFloat32) {  // typed: the masked-softmax NaN guards of exported attention
    const float* xv = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = pred(xv[i]) ? 1 : 0;  // float: vectorizes
    return Status::ok();
  }
  for (int64_t i = 0; i < x.numel(); ++i)
    out[i] = pred(load_as_double(x.dtype(), x.raw_data(), i)) ? 1 : 0;
  return Status::ok();
}

Status isinf_op(KernelContext& ctx) {
  const bool neg = ctx.node.attr_int("detect_negative", 1) != 0;
  const bool pos = ctx.node.attr_int("detect_positive", 1) != 0;
  return float_predicate(
      ctx, [&](auto v) { return std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg)); });
}

Status isnan_op(KernelContext& ctx) {
  return float_predicate(ctx, [](auto v) { return v != v; });  // NaN alone is unequal to itself
}

}  // namespace

KILN_REGISTER_KERNEL("", "Abs", abs_op);
KILN_REGISTER_KERNEL("", "Neg", neg_op);
KILN_REGISTER_KERNEL("", "Sign", sign_op);
KILN_REGISTER_KERNEL("", "Ceil", ceil_op);
KILN_REGISTER_KERNEL("", "Floor", floor_op);
KILN_REGISTER_KERNEL("", "Round", round_op);
KILN_REGISTER_KERNEL("", "Reciprocal", reciprocal_op);
KILN_REGISTER_KERNEL("", "Sqrt", sqrt_op);
KILN_REGISTER_KERNEL("", "Exp", exp_op);
KILN_REGISTER_KERNEL("", "Log", log_op);
KILN_REGISTER_KERNEL("", "Erf", erf_op);
KILN_REGISTER_KERNEL("", "Sin", sin_op);
KILN_REGISTER_KERNEL("", "Cos", cos_op);
KILN_REGISTER_KERNEL("", "Tan", tan_op);
KILN_REGISTER_KERNEL("", "Asin", asin_op);
KILN_REGISTER_KERNEL("", "Acos", acos_op);
KILN_REGISTER_KERNEL("", "Atan", atan_op);
KILN_REGISTER_KERNEL("", "Sinh", sinh_op);
KILN_REGISTER_KERNEL("", "Cosh", cosh_op);
KILN_REGISTER_KERNEL("", "Tanh", tanh_op);
KILN_REGISTER_KERNEL("", "Asinh", asinh_op);
KILN_REGISTER_KERNEL("", "Acosh", acosh_op);
KILN_REGISTER_KERNEL("", "Atanh", atanh_op);
KILN_REGISTER_KERNEL("", "Not", not_op);
KILN_REGISTER_KERNEL("", "BitwiseNot", bitwise_not_op);
KILN_REGISTER_KERNEL("", "IsInf", isinf_op);
KILN_REGISTER_KERNEL("", "IsNaN", isnan_op);

KILN_REGISTER_FAST_PATH("", "Exp", float32_input);
KILN_REGISTER_FAST_PATH("", "IsNaN", float32_input);
KILN_REGISTER_FAST_PATH("", "IsInf", float32_input);
KILN_REGISTER_FAST_PATH("", "Erf", float32_input);
KILN_REGISTER_FAST_PATH("", "Tanh", float32_input);

}  // namespace kiln
