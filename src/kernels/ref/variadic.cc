// Reference kernels for the variadic elementwise ops Sum, Mean, Max and Min: any number of
// same-typed inputs, numpy-broadcast together.
#include <cmath>
#include <type_traits>

#include "kernels/ref/elementwise_util.h"

namespace kiln {
namespace {

enum class Fold { kSum, kMean, kMax, kMin };

template <typename T>
T combine(Fold op, T acc, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    // Max/Min propagate NaN, as numpy.maximum/minimum do.
    if (op == Fold::kMax || op == Fold::kMin) {
      if (std::isnan(acc) || std::isnan(v)) return std::isnan(acc) ? acc : v;
    }
  }
  switch (op) {
    case Fold::kMax:
      return v > acc ? v : acc;
    case Fold::kMin:
      return v < acc ? v : acc;
    default:
      if constexpr (std::is_integral_v<T>) {
        // Wraps on overflow instead of being undefined.
        using W = std::conditional_t<sizeof(T) <= 4, uint32_t, uint64_t>;
        return static_cast<T>(static_cast<W>(acc) + static_cast<W>(v));
      } else {
        return acc + v;
      }
  }
}

// Folds every input into `acc` (already of the output shape) with `load(k, offset)` reading
// element `offset` of input k as T.
template <typename T, typename Load>
void fold_inputs(const KernelContext& ctx, Fold op, const Shape& out_shape, T* acc, Load load) {
  for (size_t k = 0; k < ctx.num_inputs(); ++k) {
    const std::array<const Shape*, 1> in = {&ctx.input(k).shape()};
    ew::for_each_broadcast(out_shape, in, [&](int64_t i, const std::array<int64_t, 1>& o) {
      const T v = load(k, o[0]);
      acc[i] = k == 0 ? v : combine(op, acc[i], v);
    });
  }
}

Status variadic(KernelContext& ctx, Fold op) {
  if (ctx.num_inputs() == 0) return ctx.error("expected at least one input");
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, ctx.num_inputs(), ctx.num_inputs()));
  const DType t = ctx.input(0).dtype();
  std::vector<Shape> shapes;
  for (size_t k = 0; k < ctx.num_inputs(); ++k) {
    if (k > 0) KILN_RETURN_IF_ERROR(ew::check_same_dtype(ctx, 0, k));
    shapes.push_back(ctx.input(k).shape());
  }
  if (!ew::accepts(ew::Accept::kNumeric, t))
    return ctx.error(std::string("unsupported input type ") + dtype_name(t));
  auto shape = broadcast_shapes(shapes);
  if (!shape) return ctx.error(shape.status().message());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, t, *shape));
  const double count = static_cast<double>(ctx.num_inputs());
  if (ew::is_half_float(t)) {
    KILN_ASSIGN_OR_RETURN(Tensor acc, Tensor::make(DType::kFloat32, *shape));
    float* a = acc.data<float>();
    fold_inputs<float>(ctx, op, *shape, a, [&](size_t k, int64_t off) {
      return static_cast<float>(load_as_double(t, ctx.input(k).raw_data(), off));
    });
    for (int64_t i = 0; i < acc.numel(); ++i) {
      const double v = op == Fold::kMean ? a[i] / count : a[i];
      store_from_double(t, y->raw_data(), i, v);
    }
    return Status::ok();
  }
  return visit_numeric(t, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T* out = y->data<T>();
    fold_inputs<T>(ctx, op, *shape, out,
                   [&](size_t k, int64_t off) { return ctx.input(k).data<T>()[off]; });
    if (op == Fold::kMean) {
      for (int64_t i = 0; i < y->numel(); ++i) {
        if constexpr (std::is_floating_point_v<T>) {
          out[i] = static_cast<T>(out[i] / static_cast<T>(count));
        } else {
          out[i] = ew::from_double<T>(static_cast<double>(out[i]) / count);
        }
      }
    }
    return Status::ok();
  });
}

Status sum_op(KernelContext& ctx) { return variadic(ctx, Fold::kSum); }
Status mean_op(KernelContext& ctx) { return variadic(ctx, Fold::kMean); }
Status max_op(KernelContext& ctx) { return variadic(ctx, Fold::kMax); }
Status min_op(KernelContext& ctx) { return variadic(ctx, Fold::kMin); }

}  // namespace

KILN_REGISTER_KERNEL("", "Sum", sum_op);
KILN_REGISTER_KERNEL("", "Mean", mean_op);
KILN_REGISTER_KERNEL("", "Max", max_op);
KILN_REGISTER_KERNEL("", "Min", min_op);

}  // namespace kiln
