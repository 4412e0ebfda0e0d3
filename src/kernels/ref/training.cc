// Reference optimizer steps of the "ai.onnx.preview.training" domain: Adagrad, Adam, Momentum.
// Each updates any number of tensors: inputs R, T, then X_1..X_n, G_1..G_n and the state tensors.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"

namespace kiln {
namespace {

// Checks the inputs of an optimizer with `groups` tensor groups per variable (X, G, states...)
// and returns the number of variables n. Every tensor of a variable must have X's shape.
Result<int64_t> check_optimizer(KernelContext& ctx, int groups, int outputs_per_var) {
  if (ctx.num_inputs() < 2 + static_cast<size_t>(groups) || (ctx.num_inputs() - 2) % groups != 0)
    return ctx.error("expected R, T and " + std::to_string(groups) + " tensors per variable, got " +
                     std::to_string(ctx.num_inputs()) + " inputs");
  const int64_t n = static_cast<int64_t>(ctx.num_inputs() - 2) / groups;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is missing");
  if (ctx.num_outputs() > static_cast<size_t>(n * outputs_per_var))
    return ctx.error("too many outputs: " + std::to_string(ctx.num_outputs()));
  if (ctx.input(0).numel() != 1 || ctx.input(1).numel() != 1) return ctx.error("R and T must be scalars");
  if (ctx.input(1).dtype() != DType::kInt64) return ctx.error("T must be int64");
  for (int64_t v = 0; v < n; ++v) {
    const Tensor& x = ctx.input(2 + v);
    if (x.dtype() != DType::kFloat32 && x.dtype() != DType::kFloat64)
      return ctx.error(std::string("optimized tensors must be float or double, got ") + dtype_name(x.dtype()));
    for (int g = 1; g < groups; ++g) {
      const Tensor& t = ctx.input(2 + g * n + v);
      if (t.dtype() != x.dtype() || t.shape() != x.shape())
        return ctx.error("input " + std::to_string(2 + g * n + v) + " must match X_" + std::to_string(v + 1) + ": " +
                         shape_str(x.shape()) + " vs " + shape_str(t.shape()));
    }
  }
  return n;
}

double at(const Tensor& t, int64_t i) { return load_as_double(t.dtype(), t.raw_data(), i); }

// Output k*n + v, allocated like X_v, or nullptr when the graph does not want it.
Result<Tensor*> output_like(KernelContext& ctx, size_t index, const Tensor& x) {
  if (!ctx.wants_output(index)) return static_cast<Tensor*>(nullptr);
  return ctx.make_output(index, x.dtype(), x.shape());
}

void put(Tensor* t, int64_t i, double v) {
  if (t) store_from_double(t->dtype(), t->raw_data(), i, v);
}

Status adagrad(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t n, check_optimizer(ctx, 3, 2));
  KILN_ASSIGN_OR_RETURN(double rate, read_scalar(ctx.input(0)));
  KILN_ASSIGN_OR_RETURN(double step, read_scalar(ctx.input(1)));
  const double norm = ctx.node.attr_float("norm_coefficient", 0.0f);
  const double decay = ctx.node.attr_float("decay_factor", 0.0f);
  const double eps = ctx.node.attr_float("epsilon", 1e-6f);
  const double r = rate / (1.0 + step * decay);
  for (int64_t v = 0; v < n; ++v) {
    const Tensor& x = ctx.input(2 + v);
    const Tensor& g = ctx.input(2 + n + v);
    const Tensor& h = ctx.input(2 + 2 * n + v);
    KILN_ASSIGN_OR_RETURN(Tensor* x_new, output_like(ctx, v, x));
    KILN_ASSIGN_OR_RETURN(Tensor* h_new, output_like(ctx, n + v, x));
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double gr = norm * at(x, i) + at(g, i);
      const double hn = at(h, i) + gr * gr;
      put(h_new, i, hn);
      put(x_new, i, at(x, i) - r * gr / (std::sqrt(hn) + eps));
    }
  }
  return Status::ok();
}

Status adam(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t n, check_optimizer(ctx, 4, 3));
  KILN_ASSIGN_OR_RETURN(double rate, read_scalar(ctx.input(0)));
  KILN_ASSIGN_OR_RETURN(double step, read_scalar(ctx.input(1)));
  const double alpha = ctx.node.attr_float("alpha", 0.9f);
  const double beta = ctx.node.attr_float("beta", 0.999f);
  const double norm = ctx.node.attr_float("norm_coefficient", 0.0f);
  const double norm_post = ctx.node.attr_float("norm_coefficient_post", 0.0f);
  const double eps = ctx.node.attr_float("epsilon", 1e-6f);
  const double r = step > 0 ? rate * std::sqrt(1.0 - std::pow(beta, step)) / (1.0 - std::pow(alpha, step)) : rate;
  for (int64_t v = 0; v < n; ++v) {
    const Tensor& x = ctx.input(2 + v);
    const Tensor& g = ctx.input(2 + n + v);
    const Tensor& m = ctx.input(2 + 2 * n + v);
    const Tensor& h = ctx.input(2 + 3 * n + v);
    KILN_ASSIGN_OR_RETURN(Tensor* x_new, output_like(ctx, v, x));
    KILN_ASSIGN_OR_RETURN(Tensor* v_new, output_like(ctx, n + v, x));
    KILN_ASSIGN_OR_RETURN(Tensor* h_new, output_like(ctx, 2 * n + v, x));
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double gr = norm * at(x, i) + at(g, i);
      const double vn = alpha * at(m, i) + (1.0 - alpha) * gr;
      const double hn = beta * at(h, i) + (1.0 - beta) * gr * gr;
      put(v_new, i, vn);
      put(h_new, i, hn);
      put(x_new, i, (1.0 - norm_post) * (at(x, i) - r * vn / (std::sqrt(hn) + eps)));
    }
  }
  return Status::ok();
}

Status momentum(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(int64_t n, check_optimizer(ctx, 3, 2));
  KILN_ASSIGN_OR_RETURN(double rate, read_scalar(ctx.input(0)));
  KILN_ASSIGN_OR_RETURN(double step, read_scalar(ctx.input(1)));
  const ir::Node& node = ctx.node;
  if (!node.has_attr("alpha") || !node.has_attr("beta") || !node.has_attr("norm_coefficient") || !node.has_attr("mode"))
    return ctx.error("alpha, beta, norm_coefficient and mode are required");
  const double alpha = node.attr_float("alpha", 0.0f);
  const double beta = step > 0 ? node.attr_float("beta", 0.0f) : 1.0;
  const double norm = node.attr_float("norm_coefficient", 0.0f);
  const std::string mode = node.attr_string("mode", "");
  if (mode != "standard" && mode != "nesterov") return ctx.error("mode must be standard or nesterov, got '" + mode + "'");
  for (int64_t v = 0; v < n; ++v) {
    const Tensor& x = ctx.input(2 + v);
    const Tensor& g = ctx.input(2 + n + v);
    const Tensor& m = ctx.input(2 + 2 * n + v);
    KILN_ASSIGN_OR_RETURN(Tensor* x_new, output_like(ctx, v, x));
    KILN_ASSIGN_OR_RETURN(Tensor* v_new, output_like(ctx, n + v, x));
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double gr = norm * at(x, i) + at(g, i);
      const double vn = alpha * at(m, i) + beta * gr;
      put(v_new, i, vn);
      put(x_new, i, mode == "standard" ? at(x, i) - rate * vn : at(x, i) - rate * (gr + alpha * vn));
    }
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.onnx.preview.training", "Adagrad", adagrad);
KILN_REGISTER_KERNEL("ai.onnx.preview.training", "Adam", adam);
KILN_REGISTER_KERNEL("ai.onnx.preview.training", "Momentum", momentum);

}  // namespace kiln
