// Reference Dropout: the identity (mask all true) in inference; in training mode (opset 12+
// `training_mode` input, or opset < 7 with is_test = 0) drops elements with probability `ratio`
// and scales the rest by 1 / (1 - ratio), using a generator seeded from the `seed` attribute.
#include <random>

#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

Status dropout(KernelContext& ctx) {
  if (ctx.num_inputs() < 1 || !ctx.has_input(0)) return ctx.error("Dropout needs input data");
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype()))
    return ctx.error(std::string("Dropout does not support ") + dtype_name(x.dtype()));
  double ratio = ctx.node.attr_float("ratio", 0.5f);
  bool training = ctx.opset < 7 && ctx.node.attr_int("is_test", 0) == 0;
  if (ctx.opset >= 12) {
    if (ctx.has_input(1) && ctx.input(1).defined()) {
      auto r = read_scalar(ctx.input(1));
      if (!r) return ctx.error("ratio: " + r.status().message());
      ratio = *r;
    }
    training = false;
    if (ctx.has_input(2) && ctx.input(2).defined()) {
      auto t = read_scalar(ctx.input(2));
      if (!t) return ctx.error("training_mode: " + t.status().message());
      training = *t != 0;
    }
  }
  if (!(ratio >= 0.0 && ratio < 1.0))
    return ctx.error("ratio must be in [0, 1), got " + std::to_string(ratio));
  // Opset 10+ masks are bool; opset 7-9 used the data type.
  const DType mask_t = ctx.opset >= 10 ? DType::kBool : x.dtype();
  if (!training || ratio == 0.0) {
    ctx.outputs[0] = ctx.value(0);
    if (ctx.wants_output(1)) {
      KILN_ASSIGN_OR_RETURN(Tensor * m, ctx.make_output(1, mask_t, x.shape()));
      for (int64_t i = 0; i < x.numel(); ++i) store_from_double(mask_t, m->raw_data(), i, 1.0);
    }
    return Status::ok();
  }
  const int64_t seed = ctx.node.attr_int("seed", 0);
  // std::mt19937 seeded with an integer and two draws per 53-bit double reproduce numpy's
  // RandomState(seed).uniform, which the ONNX test data was made with.
  std::mt19937 gen(ctx.node.has_attr("seed") ? static_cast<uint32_t>(seed)
                                             : std::random_device{}());
  auto uni = [&gen]() {
    const double a = static_cast<double>(gen() >> 5), b = static_cast<double>(gen() >> 6);
    return (a * 67108864.0 + b) / 9007199254740992.0;
  };
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), x.shape()));
  Tensor* m = nullptr;
  if (ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(m, ctx.make_output(1, mask_t, x.shape()));
  }
  const double scale = 1.0 / (1.0 - ratio);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = uni() >= ratio;
    store_from_double(x.dtype(), y->raw_data(), i,
                      keep ? load_as_double(x.dtype(), x.raw_data(), i) * scale : 0.0);
    if (m) store_from_double(mask_t, m->raw_data(), i, keep ? 1.0 : 0.0);
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("", "Dropout", dropout);

KILN_REGISTER_FAST_PATH("", "Dropout", always_fast);  // inference: the identity

}  // namespace kiln
