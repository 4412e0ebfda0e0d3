// Reference kernel for CumSum: running sums along an axis, optionally exclusive and/or reversed.
// Integers wrap around; float16/bfloat16 accumulate in double and round each output.
#include <type_traits>

#include "kernels/ref/movement_util.h"

namespace kiln {
namespace {

using namespace movement;

template <typename T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

Status cumsum(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(require_inputs(ctx, 2));
  const Tensor& x = ctx.input(0);
  if (x.rank() == 0) return ctx.error("input must have rank >= 1");
  if (ctx.input(1).rank() > 1)
    return ctx.error("axis must be a scalar, got shape " + shape_str(ctx.input(1).shape()));
  KILN_ASSIGN_OR_RETURN(int64_t raw_axis, read_int(ctx, 1, "axis"));
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_of(ctx, raw_axis, x.rank()));
  const bool exclusive = ctx.node.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.node.attr_int("reverse", 0) != 0;
  const int64_t n = x.dim(axis);
  const int64_t outer = product(x.shape(), 0, axis), inner = product(x.shape(), axis + 1, x.rank());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), x.shape()));
  // Visits each line's element offsets in summation order and hands (offset, running sum) pairs on.
  auto scan = [&](auto zero, auto load, auto store) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto acc = zero;
        for (int64_t s = 0; s < n; ++s) {
          const int64_t j = reverse ? n - 1 - s : s;
          const int64_t off = (o * n + j) * inner + i;
          const auto v = load(off);
          if (exclusive) {
            store(off, acc);
            acc = add(acc, v);
          } else {
            acc = add(acc, v);
            store(off, acc);
          }
        }
      }
  };
  const DType t = x.dtype();
  if (t == DType::kFloat16 || t == DType::kBFloat16) {
    scan(
        0.0, [&](int64_t off) { return load_as_double(t, x.raw_data(), off); },
        [&](int64_t off, double v) { store_from_double(t, y->raw_data(), off, v); });
    return Status::ok();
  }
  Status st = visit_numeric(t, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y->data<T>();
    scan(
        T(0), [&](int64_t off) { return in[off]; }, [&](int64_t off, T v) { out[off] = v; });
    return Status::ok();
  });
  if (!st) return ctx.error(st.message());
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "CumSum", cumsum);

}  // namespace kiln
