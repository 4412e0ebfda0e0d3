// Reference kernel for Where: picks X or Y by a bool condition, all three broadcast together; a
// flat loop when each operand is the whole output or one element.
#include <algorithm>
#include <array>
#include <type_traits>

#include "kernels/fast_path.h"
#include "kernels/ref/elementwise_util.h"

namespace kiln {
namespace {

Status where_op(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(ew::check_inputs(ctx, 3, 3));
  const Tensor& cond = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  if (cond.dtype() != DType::kBool)
    return ctx.error(std::string("condition must be bool, got ") + dtype_name(cond.dtype()));
  KILN_RETURN_IF_ERROR(ew::check_same_dtype(ctx, 1, 2));
  // Pairwise, not through a std::vector of the three shapes: no allocation.
  auto shape = broadcast_shapes(cond.shape(), x.shape());
  if (shape) shape = broadcast_shapes(*shape, y.shape());
  if (!shape) return ctx.error(shape.status().message());
  KILN_ASSIGN_OR_RETURN(Tensor * out, ctx.make_output_for_overwrite(0, x.dtype(), *shape));
  const std::array<const Shape*, 3> in = {&cond.shape(), &x.shape(), &y.shape()};
  const uint8_t* c = cond.data<uint8_t>();
  return visit_any(x.dtype(), [&](auto tag) -> Status {
    using T0 = typename decltype(tag)::type;
    // Bools are copied as bytes.
    using T = std::conditional_t<std::is_same_v<T0, bool>, uint8_t, T0>;
    const T* xv = x.data<T>();
    const T* yv = y.data<T>();
    T* ov = out->data<T>();
    // Each operand the whole output or one element: a flat loop.
    const int64_t n = out->numel();
    auto flat = [n](const Tensor& t) { return t.numel() == n || t.numel() == 1; };
    if (n > 1 && flat(cond) && flat(x) && flat(y)) {
      // The strides (0 or 1) as constants and both values loaded before the choice (a load the
      // condition guards cannot be hoisted), so that the loop vectorizes to a blend.
      auto loop = [&](auto sc, auto sx, auto sy) {
        for (int64_t i = 0; i < n; ++i) {
          const T a = xv[i * sx()], b = yv[i * sy()];
          ov[i] = c[i * sc()] != 0 ? a : b;
        }
      };
      auto stride = [n](const Tensor& t, auto&& next) {
        if (t.numel() == n) next(std::integral_constant<int64_t, 1>{});
        else next(std::integral_constant<int64_t, 0>{});
      };
      stride(cond, [&](auto sc) { stride(x, [&](auto sx) { stride(y, [&](auto sy) { loop(sc, sx, sy); }); }); });
      return Status::ok();
    }
    ew::for_each_broadcast(*shape, in, [&](int64_t i, const std::array<int64_t, 3>& o) {
      ov[i] = c[o[0]] != 0 ? xv[o[1]] : yv[o[2]];
    });
    return Status::ok();
  });
}

}  // namespace

KILN_REGISTER_KERNEL("", "Where", where_op);

namespace {
// The flat loop: every operand's shape known, each the output's size or one element.
bool runs_flat(const FastPathQuery& q) {
  int64_t most = 0;
  std::array<int64_t, 3> sizes{};
  for (size_t i = 0; i < 3; ++i) {
    sizes[i] = q.numel(i);
    if (sizes[i] < 0) return false;
    most = std::max(most, sizes[i]);
  }
  for (int64_t n : sizes)
    if (n != most && n != 1) return false;
  return true;
}
}  // namespace

KILN_REGISTER_FAST_PATH("", "Where", runs_flat);

}  // namespace kiln
