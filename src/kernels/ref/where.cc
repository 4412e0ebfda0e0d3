// Reference kernel for Where: picks X or Y by a bool condition, all three broadcast together.
#include <type_traits>

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
  KILN_ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, x.dtype(), *shape));
  const std::array<const Shape*, 3> in = {&cond.shape(), &x.shape(), &y.shape()};
  const uint8_t* c = cond.data<uint8_t>();
  return visit_any(x.dtype(), [&](auto tag) -> Status {
    using T0 = typename decltype(tag)::type;
    // Bools are copied as bytes.
    using T = std::conditional_t<std::is_same_v<T0, bool>, uint8_t, T0>;
    const T* xv = x.data<T>();
    const T* yv = y.data<T>();
    T* ov = out->data<T>();
    ew::for_each_broadcast(*shape, in, [&](int64_t i, const std::array<int64_t, 3>& o) {
      ov[i] = c[o[0]] != 0 ? xv[o[1]] : yv[o[2]];
    });
    return Status::ok();
  });
}

}  // namespace

KILN_REGISTER_KERNEL("", "Where", where_op);

}  // namespace kiln
