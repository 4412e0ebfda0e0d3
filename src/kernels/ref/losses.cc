// Reference kernels for the loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
// (class weights, ignore_index, none/sum/mean reduction, optional log_prob output).
#include <cmath>
#include <limits>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

// The negative log-likelihood of log-probabilities `lp` (N, C, D flattened) at `target` (N, D),
// written to output 0 with the node's reduction. Shared by both ops.
Status nll(KernelContext& ctx, const std::vector<double>& lp, const Shape& in_shape,
           const Tensor& target, const Tensor* weight, DType out_dtype) {
  const int64_t n = in_shape[0], c = in_shape[1];
  int64_t d = 1;
  for (size_t i = 2; i < in_shape.size(); ++i) d *= in_shape[i];

  Shape expect_target(in_shape.begin(), in_shape.end());
  expect_target.erase(expect_target.begin() + 1);
  if (target.shape() != expect_target)
    return ctx.error("target shape " + shape_str(target.shape()) + " does not match input shape " +
                     shape_str(in_shape) + " (expected " + shape_str(expect_target) + ")");
  auto tr = read_int64s(target);
  if (!tr.is_ok()) return ctx.error("target: " + tr.status().message());
  const std::vector<int64_t>& t = *tr;
  if (weight) {
    if (weight->shape() != Shape{c})
      return ctx.error("weight must have shape [" + std::to_string(c) + "], got " +
                       shape_str(weight->shape()));
    if (!dtype_is_compute_float(weight->dtype())) return ctx.error("weight must be a float tensor");
  }

  const std::string reduction = ctx.node.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return ctx.error("reduction must be none, sum or mean, got '" + reduction + "'");
  const bool has_ii = ctx.node.has_attr("ignore_index");
  const int64_t ii = ctx.node.attr_int("ignore_index", 0);

  std::vector<double> loss(static_cast<size_t>(n * d));
  double loss_sum = 0, weight_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const int64_t k = t[i * d + j];
      double l = 0, w = 0;
      if (!(has_ii && k == ii)) {
        if (k < 0 || k >= c)
          return ctx.error("target value " + std::to_string(k) + " is out of range [0, " +
                           std::to_string(c) + ")");
        w = weight ? load_as_double(weight->dtype(), weight->raw_data(), k) : 1.0;
        l = -lp[(i * c + k) * d + j] * w;
      }
      loss[i * d + j] = l;
      loss_sum += l;
      weight_sum += w;
    }
  }

  if (reduction == "none") {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, out_dtype, expect_target));
    for (size_t i = 0; i < loss.size(); ++i)
      store_from_double(out_dtype, y->raw_data(), i, loss[i]);
  } else {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, out_dtype, {}));
    store_from_double(out_dtype, y->raw_data(), 0,
                      reduction == "sum" ? loss_sum : loss_sum / weight_sum);
  }
  return Status::ok();
}

Status check_inputs(KernelContext& ctx, const char* what) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1))
    return ctx.error(std::string("expected inputs '") + what + "' and 'target'");
  const Tensor& x = ctx.input(0);
  if (!dtype_is_compute_float(x.dtype()))
    return ctx.error(std::string("input '") + what + "' must be a float tensor");
  if (x.rank() < 2)
    return ctx.error(std::string("input '") + what + "' must have rank >= 2, got " +
                     shape_str(x.shape()));
  return Status::ok();
}

Status negative_log_likelihood_loss(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, "input"));
  const Tensor& x = ctx.input(0);
  std::vector<double> lp(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) lp[i] = load_as_double(x.dtype(), x.raw_data(), i);
  const Tensor* w = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  return nll(ctx, lp, x.shape(), ctx.input(1), w, x.dtype());
}

Status softmax_cross_entropy_loss(KernelContext& ctx) {
  KILN_RETURN_IF_ERROR(check_inputs(ctx, "scores"));
  const Tensor& x = ctx.input(0);
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t d = n * c == 0 ? 0 : x.numel() / (n * c);
  // log_softmax over the class axis.
  std::vector<double> lp(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < c; ++k)
        m = std::max(m, load_as_double(x.dtype(), x.raw_data(), (i * c + k) * d + j));
      double s = 0;
      for (int64_t k = 0; k < c; ++k)
        s += std::exp(load_as_double(x.dtype(), x.raw_data(), (i * c + k) * d + j) - m);
      const double ls = std::log(s);
      for (int64_t k = 0; k < c; ++k) {
        const int64_t o = (i * c + k) * d + j;
        lp[o] = load_as_double(x.dtype(), x.raw_data(), o) - m - ls;
      }
    }
  }
  const Tensor* w = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  KILN_RETURN_IF_ERROR(nll(ctx, lp, x.shape(), ctx.input(1), w, x.dtype()));
  if (ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(1, x.dtype(), x.shape()));
    for (size_t i = 0; i < lp.size(); ++i) store_from_double(x.dtype(), y->raw_data(), i, lp[i]);
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "NegativeLogLikelihoodLoss", negative_log_likelihood_loss);
KILN_REGISTER_KERNEL("", "SoftmaxCrossEntropyLoss", softmax_cross_entropy_loss);

}  // namespace kiln
