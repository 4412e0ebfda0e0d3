// Reference kernels for two-input elementwise ops with numpy broadcasting: arithmetic (Add, Sub,
// Mul, Div, Pow, Mod), bit ops (BitShift, Bitwise*), logic (And, Or, Xor) and comparisons.
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/fast_path.h"
#include "kernels/ref/elementwise_util.h"

namespace kiln {
namespace {

using ew::Accept;
using Offsets = std::array<int64_t, 2>;

struct Operands {
  Tensor a, b;
  Shape out;
};

// Reads both inputs and the broadcast output shape. Before opset 7 binary ops broadcast only
// when `broadcast` is set, aligning B with A at `axis` (suffix by default); B is reshaped so that
// numpy broadcasting then gives the same result.
Result<Operands> operands(const KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 2, 2));
  Operands p{ctx.input(0), ctx.input(1), {}};
  if (ctx.opset < 7 && ctx.node.attr_int("broadcast", 0) != 0 && ctx.node.has_attr("axis")) {
    const int64_t ra = p.a.rank(), rb = p.b.rank();
    auto axis = normalize_axis(ctx.node.attr_int("axis", 0), ra);
    if (!axis) return ctx.error(axis.status().message());
    if (*axis + rb > ra)
      return ctx.error("B of shape " + shape_str(p.b.shape()) + " does not fit A of shape " +
                       shape_str(p.a.shape()) + " at axis " + std::to_string(*axis));
    Shape s = p.b.shape();
    s.resize(ra - *axis, 1);
    p.b = p.b.reshaped(s);
  }
  auto out = broadcast_shapes(p.a.shape(), p.b.shape());
  if (!out) return ctx.error(out.status().message());
  p.out = std::move(out).value();
  return p;
}

Status unsupported(const KernelContext& ctx, DType t) {
  return ctx.error(std::string("unsupported input type ") + dtype_name(t));
}

// Integer arithmetic in an unsigned type at least as wide as int, so that overflow wraps
// (two's complement) instead of being undefined.
template <typename T>
using Wide = std::conditional_t<sizeof(T) <= 4, uint32_t, uint64_t>;

// Elementwise op whose output has the inputs' type. f is a generic lambda (T, T) -> T called
// with float for float16/bfloat16.
template <typename F>
Status arith(KernelContext& ctx, Accept accept, F f) {
  KILN_ASSIGN_OR_RETURN(Operands p, operands(ctx));
  KILN_RETURN_IF_ERROR(ew::check_same_dtype(ctx, 0, 1));
  const DType t = p.a.dtype();
  if (!ew::accepts(accept, t)) return unsupported(ctx, t);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, t, p.out));
  const std::array<const Shape*, 2> in = {&p.a.shape(), &p.b.shape()};
  if (ew::is_half_float(t)) {
    ew::for_each_broadcast(p.out, in, [&](int64_t i, const Offsets& o) {
      const float va = static_cast<float>(load_as_double(t, p.a.raw_data(), o[0]));
      const float vb = static_cast<float>(load_as_double(t, p.b.raw_data(), o[1]));
      store_from_double(t, y->raw_data(), i, static_cast<double>(f(va, vb)));
    });
    return Status::ok();
  }
  const int64_t n = y->numel();
  // Same-size operands (their layouts are then the same) and one-element ones: flat loops the
  // compiler vectorizes, over the pool when large; any other broadcast a row at a time.
  const bool a_flat = p.a.numel() == n, b_flat = p.b.numel() == n;
  const bool flat = (a_flat || p.a.numel() == 1) && (b_flat || p.b.numel() == 1);
  return visit_numeric(t, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* av = p.a.data<T>();
    const T* bv = p.b.data<T>();
    T* out = y->data<T>();
    if (flat) {
      ew::run_range(ctx, n, [&](int64_t b, int64_t e) {
        if (a_flat && b_flat)
          for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(f(av[i], bv[i]));
        else if (a_flat)
          for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(f(av[i], bv[0]));
        else if (b_flat)
          for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(f(av[0], bv[i]));
        else
          for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(f(av[0], bv[0]));
      });
      return Status::ok();
    }
    ew::for_each_broadcast_row(p.out, in, [&](int64_t i, const Offsets& o, int64_t len, const Offsets& step) {
      ew::binary_row(av + o[0], step[0], bv + o[1], step[1], out + i, len,
                     [&](T x, T z) { return static_cast<T>(f(x, z)); });
    });
    return Status::ok();
  });
}

Status add_op(KernelContext& ctx) {
  return arith(ctx, Accept::kNumeric, [](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    } else {
      return a + b;
    }
  });
}

Status sub_op(KernelContext& ctx) {
  return arith(ctx, Accept::kNumeric, [](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b));
    } else {
      return a - b;
    }
  });
}

Status mul_op(KernelContext& ctx) {
  return arith(ctx, Accept::kNumeric, [](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    } else {
      return a * b;
    }
  });
}

// Integer division truncates toward zero. Division by zero gives 0 and MIN / -1 wraps to MIN,
// rather than trapping.
Status div_op(KernelContext& ctx) {
  return arith(ctx, Accept::kNumeric, [](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return static_cast<T>(Wide<T>(0) - static_cast<Wide<T>>(a));
      }
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  });
}

// Mod: fmod=0 takes the divisor's sign (Python / numpy.mod), fmod=1 the dividend's (C fmod).
Status mod_op(KernelContext& ctx) {
  const bool c_style = ctx.node.attr_int("fmod", 0) != 0;
  return arith(ctx, Accept::kNumeric, [c_style](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      if (!c_style && r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    } else {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
        T r = static_cast<T>(a % b);
        if (!c_style && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
        return r;
      } else {
        return static_cast<T>(a % b);
      }
    }
  });
}

// Integer power by squaring, wrapping on overflow. Negative exponents give the truncated
// reciprocal: 0 except for bases 1 and -1.
template <typename T>
T int_pow(T base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>) {
      if (base == -1) return (e % 2 == 0) ? T(1) : T(-1);
    }
    return 0;
  }
  using W = Wide<T>;
  W result = 1, b = static_cast<W>(base);
  uint64_t n = static_cast<uint64_t>(e);
  while (n > 0) {
    if (n & 1) result *= b;
    b *= b;
    n >>= 1;
  }
  return static_cast<T>(result);
}

// Pow: the output has the base's type; the exponent may be any numeric type.
Status pow_op(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operands p, operands(ctx));
  const DType ta = p.a.dtype(), tb = p.b.dtype();
  if (!ew::accepts(Accept::kNumeric, ta)) return unsupported(ctx, ta);
  if (!ew::accepts(Accept::kNumeric, tb)) return unsupported(ctx, tb);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, ta, p.out));
  // x^2 (variances, power spectra) as one multiply: a float's square is exact in double, so
  // rounding x * x once is what rounding pow(x, 2) gives.
  if (ta == DType::kFloat32 && p.b.numel() == 1 && p.out == p.a.shape() && load_as_double(tb, p.b.raw_data(), 0) == 2.0) {
    const float* x = p.a.data<float>();
    float* out = y->data<float>();
    ew::run_range(ctx, y->numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = x[i] * x[i];
    });
    return Status::ok();
  }
  const std::array<const Shape*, 2> in = {&p.a.shape(), &p.b.shape()};
  const bool int_exp = dtype_is_integer(tb);
  if (ew::is_half_float(ta)) {
    ew::for_each_broadcast(p.out, in, [&](int64_t i, const Offsets& o) {
      const double va = load_as_double(ta, p.a.raw_data(), o[0]);
      const double vb = load_as_double(tb, p.b.raw_data(), o[1]);
      store_from_double(ta, y->raw_data(), i, std::pow(va, vb));
    });
    return Status::ok();
  }
  return visit_numeric(ta, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* av = p.a.data<T>();
    T* out = y->data<T>();
    if constexpr (std::is_integral_v<T>) {
      if (int_exp) {
        // Exact integer power; the exponent is read exactly for 64-bit types.
        return visit_numeric(tb, [&](auto etag) -> Status {
          using E = typename decltype(etag)::type;
          if constexpr (std::is_integral_v<E>) {
            const E* bv = p.b.data<E>();
            ew::for_each_broadcast(p.out, in, [&](int64_t i, const Offsets& o) {
              const E e = bv[o[1]];
              // Exponents past int64 range only matter for bases 0, 1, -1: clamp keeps parity.
              int64_t e64 = static_cast<int64_t>(e);
              if constexpr (std::is_unsigned_v<E>) {
                if (e > static_cast<E>(INT64_MAX))
                  e64 = INT64_MAX - 1 + static_cast<int64_t>(e & 1);
              }
              out[i] = int_pow<T>(av[o[0]], e64);
            });
          }
          return Status::ok();
        });
      }
    }
    ew::for_each_broadcast(p.out, in, [&](int64_t i, const Offsets& o) {
      const double r =
          std::pow(static_cast<double>(av[o[0]]), load_as_double(tb, p.b.raw_data(), o[1]));
      out[i] = ew::from_double<T>(r);
    });
    return Status::ok();
  });
}

Status bitshift_op(KernelContext& ctx) {
  const std::string dir = ctx.node.attr_string("direction", "");
  if (dir != "LEFT" && dir != "RIGHT")
    return ctx.error("BitShift direction must be 'LEFT' or 'RIGHT', got '" + dir + "'");
  const bool left = dir == "LEFT";
  const DType t =
      ctx.num_inputs() > 0 && ctx.has_input(0) ? ctx.input(0).dtype() : DType::kUndefined;
  if (t != DType::kUInt8 && t != DType::kUInt16 && t != DType::kUInt32 && t != DType::kUInt64)
    return ctx.error(std::string("BitShift expects unsigned integers, got ") + dtype_name(t));
  return arith(ctx, Accept::kNumeric, [left](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      // Shifting by the width or more is undefined in C++; every bit is shifted out.
      if (b >= sizeof(T) * 8) return T(0);
      return left ? static_cast<T>(static_cast<Wide<T>>(a) << b) : static_cast<T>(a >> b);
    } else {
      return a;
    }
  });
}

template <typename F>
Status bitwise(KernelContext& ctx, F f) {
  if (ctx.num_inputs() > 0 && ctx.has_input(0) && ctx.value(0).is_tensor() &&
      !dtype_is_integer(ctx.input(0).dtype()))
    return ctx.error(std::string("expected integer inputs, got ") +
                     dtype_name(ctx.input(0).dtype()));
  return arith(ctx, Accept::kNumeric, [f](auto a, auto b) {
    using T = decltype(a);
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(f(a, b));
    } else {
      return a;
    }
  });
}

Status bitwise_and_op(KernelContext& ctx) {
  return bitwise(ctx, [](auto a, auto b) { return a & b; });
}
Status bitwise_or_op(KernelContext& ctx) {
  return bitwise(ctx, [](auto a, auto b) { return a | b; });
}
Status bitwise_xor_op(KernelContext& ctx) {
  return bitwise(ctx, [](auto a, auto b) { return a ^ b; });
}

// And / Or / Xor on bool tensors.
template <typename F>
Status logical(KernelContext& ctx, F f) {
  KILN_ASSIGN_OR_RETURN(Operands p, operands(ctx));
  if (p.a.dtype() != DType::kBool || p.b.dtype() != DType::kBool)
    return ctx.error(std::string("expected bool inputs, got ") + dtype_name(p.a.dtype()) + " and " +
                     dtype_name(p.b.dtype()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kBool, p.out));
  uint8_t* out = y->data<uint8_t>();
  const std::array<const Shape*, 2> in = {&p.a.shape(), &p.b.shape()};
  ew::for_each_broadcast(p.out, in, [&](int64_t i, const Offsets& o) {
    out[i] = f(ew::bool_at(p.a, o[0]), ew::bool_at(p.b, o[1])) ? 1 : 0;
  });
  return Status::ok();
}

Status and_op(KernelContext& ctx) {
  return logical(ctx, [](bool a, bool b) { return a && b; });
}
Status or_op(KernelContext& ctx) {
  return logical(ctx, [](bool a, bool b) { return a || b; });
}
Status xor_op(KernelContext& ctx) {
  return logical(ctx, [](bool a, bool b) { return a != b; });
}

// Comparisons: bool output. f is a generic (T, T) -> bool; float16/bfloat16 compare as float.
// Bool and string inputs are accepted when `equality_only` (Equal).
template <typename F>
Status compare(KernelContext& ctx, bool equality_only, F f) {
  KILN_ASSIGN_OR_RETURN(Operands p, operands(ctx));
  KILN_RETURN_IF_ERROR(ew::check_same_dtype(ctx, 0, 1));
  const DType t = p.a.dtype();
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, DType::kBool, p.out));
  uint8_t* out = y->data<uint8_t>();
  const std::array<const Shape*, 2> in = {&p.a.shape(), &p.b.shape()};
  if (t == DType::kBool && equality_only) {
    ew::for_each_broadcast(p.out, in, [&](int64_t i, const Offsets& o) {
      out[i] = ew::bool_at(p.a, o[0]) == ew::bool_at(p.b, o[1]) ? 1 : 0;
    });
    return Status::ok();
  }
  if (t == DType::kString && equality_only) {
    const std::string* av = p.a.data<std::string>();
    const std::string* bv = p.b.data<std::string>();
    ew::for_each_broadcast(
        p.out, in, [&](int64_t i, const Offsets& o) { out[i] = av[o[0]] == bv[o[1]] ? 1 : 0; });
    return Status::ok();
  }
  if (!ew::accepts(Accept::kNumeric, t)) return unsupported(ctx, t);
  if (ew::is_half_float(t)) {
    ew::for_each_broadcast(p.out, in, [&](int64_t i, const Offsets& o) {
      const float va = static_cast<float>(load_as_double(t, p.a.raw_data(), o[0]));
      const float vb = static_cast<float>(load_as_double(t, p.b.raw_data(), o[1]));
      out[i] = f(va, vb) ? 1 : 0;
    });
    return Status::ok();
  }
  return visit_numeric(t, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* av = p.a.data<T>();
    const T* bv = p.b.data<T>();
    ew::for_each_broadcast_row(p.out, in, [&](int64_t i, const Offsets& o, int64_t len, const Offsets& step) {
      ew::binary_row(av + o[0], step[0], bv + o[1], step[1], out + i, len,
                     [&](T x, T z) { return static_cast<uint8_t>(f(x, z) ? 1 : 0); });
    });
    return Status::ok();
  });
}

Status equal_op(KernelContext& ctx) {
  return compare(ctx, true, [](auto a, auto b) { return a == b; });
}
Status greater_op(KernelContext& ctx) {
  return compare(ctx, false, [](auto a, auto b) { return a > b; });
}
Status greater_equal_op(KernelContext& ctx) {
  return compare(ctx, false, [](auto a, auto b) { return a >= b; });
}
Status less_op(KernelContext& ctx) {
  return compare(ctx, false, [](auto a, auto b) { return a < b; });
}
Status less_equal_op(KernelContext& ctx) {
  return compare(ctx, false, [](auto a, auto b) { return a <= b; });
}

}  // namespace

KILN_REGISTER_KERNEL("", "Add", add_op);
KILN_REGISTER_KERNEL("", "Sub", sub_op);
KILN_REGISTER_KERNEL("", "Mul", mul_op);
KILN_REGISTER_KERNEL("", "Div", div_op);
KILN_REGISTER_KERNEL("", "Mod", mod_op);
KILN_REGISTER_KERNEL("", "Pow", pow_op);
KILN_REGISTER_KERNEL("", "BitShift", bitshift_op);
KILN_REGISTER_KERNEL("", "BitwiseAnd", bitwise_and_op);
KILN_REGISTER_KERNEL("", "BitwiseOr", bitwise_or_op);
KILN_REGISTER_KERNEL("", "BitwiseXor", bitwise_xor_op);
KILN_REGISTER_KERNEL("", "And", and_op);
KILN_REGISTER_KERNEL("", "Or", or_op);
KILN_REGISTER_KERNEL("", "Xor", xor_op);
KILN_REGISTER_KERNEL("", "Equal", equal_op);
KILN_REGISTER_KERNEL("", "Greater", greater_op);
KILN_REGISTER_KERNEL("", "GreaterOrEqual", greater_equal_op);
KILN_REGISTER_KERNEL("", "Less", less_op);
KILN_REGISTER_KERNEL("", "LessOrEqual", less_equal_op);

// x^2 in float32 (pow_op's one multiply); any other power runs pow in double.
KILN_REGISTER_FAST_PATH("", "Pow", [](const FastPathQuery& q) {
  const Tensor* e = q.constants.size() > 1 ? q.constants[1] : nullptr;
  return q.input_is(0, DType::kFloat32) && e && e->numel() == 1 && load_as_double(e->dtype(), e->raw_data(), 0) == 2.0;
});

// Add, Sub, Mul and Div whose operands are both the output's size or one element (arith's flat
// loops), as far as the inferred shapes tell.
// Rows at least this long amortize the broadcast's per-row step (for_each_broadcast_row).
constexpr int64_t kMinFastRow = 16;

// Flat operands (equal sizes, or one value), or a broadcast whose output rows are long: both run
// binary_row's vectorized loops. Half floats go element by element through double, and the
// comparisons of bools and strings element by element.
static bool flat_or_long_rows(const FastPathQuery& q) {
  if (q.types.size() != 2) return false;
  const int64_t a = q.numel(0), b = q.numel(1);
  if (a < 0 || b < 0) return false;
  const DType t = q.types[0]->dtype;
  if (ew::is_half_float(t) || t == DType::kBool || t == DType::kString) return false;
  if (a == b || a == 1 || b == 1) return true;
  return std::max(q.last_dim(0), q.last_dim(1)) >= kMinFastRow;
}
KILN_REGISTER_FAST_PATH("", "Add", flat_or_long_rows);
KILN_REGISTER_FAST_PATH("", "Sub", flat_or_long_rows);
KILN_REGISTER_FAST_PATH("", "Mul", flat_or_long_rows);
KILN_REGISTER_FAST_PATH("", "Div", flat_or_long_rows);
KILN_REGISTER_FAST_PATH("", "Equal", flat_or_long_rows);
KILN_REGISTER_FAST_PATH("", "Greater", flat_or_long_rows);
KILN_REGISTER_FAST_PATH("", "GreaterOrEqual", flat_or_long_rows);
KILN_REGISTER_FAST_PATH("", "Less", flat_or_long_rows);
KILN_REGISTER_FAST_PATH("", "LessOrEqual", flat_or_long_rows);

}  // namespace kiln
