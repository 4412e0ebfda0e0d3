// Kernels of ai.kiln.Gelu (approximate "none": 0.5x(1+erf(x/sqrt 2)); "tanh":
// 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))) and ai.kiln.BiasGelu (Gelu(X + bias), numpy
// broadcast): float32 on 8 lanes with the GEMM epilogue's Gelu (a few ulp from the double
// formula), other float types through the double reference loop.
#include <algorithm>
#include <array>
#include <cmath>

#include "kernels/cpu/gemm/epilogue.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/elementwise_util.h"

namespace kiln {
namespace {

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2)); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// Gelu of (input 0 + input 1 when `with_bias`), elementwise after broadcasting.
Status run_gelu(KernelContext& ctx, bool with_bias) {
  const char* op = with_bias ? "BiasGelu" : "Gelu";
  const size_t n_in = with_bias ? 2 : 1;
  for (size_t i = 0; i < n_in; ++i) {
    if (!ctx.has_input(i) || !ctx.input(i).defined())
      return ctx.error(std::string(op) + " input " + std::to_string(i) + " is missing");
    if (!dtype_is_compute_float(ctx.input(i).dtype()))
      return ctx.error(std::string(op) + " input " + std::to_string(i) + " must be a float tensor, got " +
                       dtype_name(ctx.input(i).dtype()));
  }
  const std::string approx = ctx.node.attr_string("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return ctx.error(std::string(op) + " approximate must be \"none\" or \"tanh\", got \"" + approx + "\"");
  double (*f)(double) = approx == "tanh" ? gelu_tanh : gelu_erf;
  const Tensor& x = ctx.input(0);
  Shape shape = x.shape();
  if (with_bias) {
    auto s = broadcast_shapes(x.shape(), ctx.input(1).shape());
    if (!s) return ctx.error(std::string(op) + ": " + s.status().message());
    shape = *s;
  }
  const std::array<const Shape*, 2> in = {&x.shape(),
                                          with_bias ? &ctx.input(1).shape() : &x.shape()};
  if (x.dtype() == DType::kFloat32 && (!with_bias || ctx.input(1).dtype() == DType::kFloat32)) {
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, shape));
    float* yd = y->data<float>();
    const float* xd = x.data<float>();
    if (with_bias) {  // the sum rounded to float first, as the unfused Add would
      const float* bd = ctx.input(1).data<float>();
      ew::for_each_broadcast_row(shape, in, [&](int64_t i, const std::array<int64_t, 2>& o, int64_t len,
                                                const std::array<int64_t, 2>& step) {
        ew::binary_row(xd + o[0], step[0], bd + o[1], step[1], yd + i, len,
                       [](float a, float b) { return a + b; });
      });
    } else {
      std::copy_n(xd, x.numel(), yd);
    }
    gemm::Epilogue e;
    e.activation = approx == "tanh" ? gemm::Epilogue::Activation::kGeluTanh : gemm::Epilogue::Activation::kGelu;
    ew::run_range(ctx, y->numel(), [&](int64_t b, int64_t end) { gemm::apply_epilogue(e, yd + b, 0, 0, 0, 1, end - b); });
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(Tensor xf, to_float32(x));
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::make(DType::kFloat32, shape));
  Tensor bf;
  if (with_bias) {
    KILN_ASSIGN_OR_RETURN(bf, to_float32(ctx.input(1)));
  }
  // Offsets walked with strides (no per-element offset table): a run allocates nothing.
  const float* xd = xf.data<float>();
  const float* bd = with_bias ? bf.data<float>() : nullptr;
  float* yd = y.data<float>();
  ew::for_each_broadcast(shape, in, [&](int64_t i, const std::array<int64_t, 2>& o) {
    // The sum is rounded to float first, as the unfused Add would.
    float v = xd[o[0]];
    if (bd) v += bd[o[1]];
    yd[i] = static_cast<float>(f(v));
  });
  KILN_ASSIGN_OR_RETURN(Tensor out, cast_float_to(y, x.dtype()));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

Status gelu(KernelContext& ctx) { return run_gelu(ctx, false); }
Status bias_gelu(KernelContext& ctx) { return run_gelu(ctx, true); }

}  // namespace

KILN_REGISTER_KERNEL("ai.kiln", "Gelu", gelu);
KILN_REGISTER_KERNEL("ai.kiln", "BiasGelu", bias_gelu);
KILN_REGISTER_FAST_PATH("ai.kiln", "Gelu", float32_input);
KILN_REGISTER_FAST_PATH("ai.kiln", "BiasGelu", [](const FastPathQuery& q) {
  return q.input_is(0, DType::kFloat32) && q.input_is(1, DType::kFloat32);
});

}  // namespace kiln
