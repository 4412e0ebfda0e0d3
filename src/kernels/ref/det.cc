// Reference Det: determinant of each trailing M x M matrix by LU with partial pivoting in double.
#include <cmath>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

Status det(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("Det needs input X");
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype()))
    return ctx.error(std::string("Det does not support ") + dtype_name(x.dtype()));
  if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2))
    return ctx.error("Det needs a [..., M, M] input, got " + shape_str(x.shape()));
  const int64_t m = x.dim(x.rank() - 1);
  const Shape out_shape(x.shape().begin(), x.shape().end() - 2);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out_shape));
  const int64_t count = y->numel();
  std::vector<double> a(m * m);
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m * m; ++i)
      a[i] = load_as_double(x.dtype(), x.raw_data(), b * m * m + i);
    double d = 1.0;
    for (int64_t col = 0; col < m && d != 0.0; ++col) {
      int64_t piv = col;
      for (int64_t r = col + 1; r < m; ++r)
        if (std::fabs(a[r * m + col]) > std::fabs(a[piv * m + col])) piv = r;
      if (a[piv * m + col] == 0.0) {
        d = 0.0;
        break;
      }
      if (piv != col) {
        for (int64_t k = 0; k < m; ++k) std::swap(a[piv * m + k], a[col * m + k]);
        d = -d;
      }
      const double p = a[col * m + col];
      d *= p;
      for (int64_t r = col + 1; r < m; ++r) {
        const double f = a[r * m + col] / p;
        for (int64_t k = col; k < m; ++k) a[r * m + k] -= f * a[col * m + k];
      }
    }
    store_from_double(x.dtype(), y->raw_data(), b, d);
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "Det", det);

}  // namespace kiln
