// 8-bit ops that are a table of X's 256 codes: ai.kiln.QLinearLookup(X, table) (the qlinear-lookup
// fusion's, docs/ops.md: y = table[x's byte]) and com.microsoft.QLinearSigmoid (ONNX Runtime's
// contrib op; qdq-fusion writes it for Q(Sigmoid(DQ(x)))), 8-bit X to 8-bit Y of its type:
//   y = saturate(round_half_even(sigmoid((x - xz) * xs) / ys) + yz)
// with the dequantized value in float, the sigmoid in double rounded to float, and QuantizeLinear's
// division. An 8-bit input has 256 values, so the table holds every answer; it is built once
// when the parameters are constants (prepare), else at each run.
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/lookup_table.h"
#include "kernels/kernel_util.h"
#include "kernels/ref/elementwise_util.h"
#include "kernels/ref/quantize.h"

namespace kiln {

namespace {

// y[i] = table[byte of x[i]] (u8 as is, s8 as its two's complement byte), over the pool.
void look_up(KernelContext& ctx, const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
  ew::run_range(ctx, n, [&](int64_t b, int64_t e) { look_up_bytes(table, x + b, y + b, e - b); });
}

class QLinearSigmoid : public Kernel {
 public:
  Status prepare(const std::vector<const Tensor*>& constants, std::vector<bool>&) override {
    // The parameters all constant (or absent zero points): the table now. X's type is that of its
    // zero point, when given; else it waits for the run.
    const Tensor* xz = constants.size() > 2 ? constants[2] : nullptr;
    if (!xz) return Status::ok();
    auto t = table(constants, xz->dtype());
    if (t) table_ = std::move(t).value(), type_ = xz->dtype();
    return Status::ok();
  }

  Status run(KernelContext& ctx) override {
    if (ctx.num_inputs() < 4 || !ctx.has_input(0)) return ctx.error("needs X, X_scale, X_zero_point, Y_scale[, Y_zero_point]");
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kUInt8 && x.dtype() != DType::kInt8)
      return ctx.error(std::string("X must be uint8 or int8, got ") + dtype_name(x.dtype()));
    std::vector<uint8_t> local;
    const uint8_t* lut = table_.data();
    if (table_.empty() || type_ != x.dtype()) {
      std::vector<const Tensor*> in;
      for (size_t i = 0; i < ctx.num_inputs(); ++i) in.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
      auto t = table(in, x.dtype());
      if (!t) return ctx.error(t.status().message());
      local = std::move(t).value();
      lut = local.data();
    }
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, x.dtype(), x.shape()));
    look_up(ctx, lut, static_cast<const uint8_t*>(x.raw_data()), static_cast<uint8_t*>(y->raw_data()), x.numel());
    return Status::ok();
  }

 private:
  // table[byte of code c] = the byte of y's code for x = c.
  static Result<std::vector<uint8_t>> table(const std::vector<const Tensor*>& in, DType type) {
    auto at = [&](size_t i) { return i < in.size() ? in[i] : nullptr; };
    KILN_ASSIGN_OR_RETURN(float xs, per_tensor_parameter(at(1), 1, true, type));
    KILN_ASSIGN_OR_RETURN(float xz, per_tensor_parameter(at(2), 2, false, type));
    KILN_ASSIGN_OR_RETURN(float ys, per_tensor_parameter(at(3), 3, true, type));
    KILN_ASSIGN_OR_RETURN(float yz, per_tensor_parameter(at(4), 4, false, type));
    const bool is_signed = type == DType::kInt8;
    const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
    std::vector<uint8_t> t(256);
    for (int c = static_cast<int>(lo); c <= static_cast<int>(hi); ++c) {
      const float x = (static_cast<float>(c) - xz) * xs;
      const float s = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
      const float q = std::min(hi, std::max(lo, std::nearbyint(s / ys) + yz));
      t[static_cast<size_t>(c & 0xff)] = static_cast<uint8_t>(static_cast<int>(q) & 0xff);  // two's complement bytes
    }
    return t;
  }

  std::vector<uint8_t> table_;
  DType type_ = DType::kUndefined;
};

Status qlinear_lookup(KernelContext& ctx) {
  if (ctx.num_inputs() < 2 || !ctx.has_input(0) || !ctx.has_input(1)) return ctx.error("needs X and table");
  const Tensor &x = ctx.input(0), &table = ctx.input(1);
  if (!dtype_is_8bit_integer(x.dtype()) || !dtype_is_8bit_integer(table.dtype()) || table.numel() != 256)
    return ctx.error(std::string("needs 8-bit X and a table of 256 8-bit values, got X ") + dtype_name(x.dtype()) +
                     ", table " + dtype_name(table.dtype()) + " " + shape_str(table.shape()));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, table.dtype(), x.shape()));
  look_up(ctx, static_cast<const uint8_t*>(table.raw_data()), static_cast<const uint8_t*>(x.raw_data()),
          static_cast<uint8_t*>(y->raw_data()), x.numel());
  return Status::ok();
}

KILN_REGISTER_TYPED_KERNEL("ai.kiln", "QLinearLookup", qlinear_lookup,
                           {{0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kUInt8, DType::kInt8}}});

const KernelRegistrar kQLinearSigmoid(
    "com.microsoft", "QLinearSigmoid", "lookup",
    [](const ir::Node&, int64_t) { return Result<std::unique_ptr<Kernel>>(std::unique_ptr<Kernel>(std::make_unique<QLinearSigmoid>())); },
    {{0, {DType::kUInt8, DType::kInt8}}, {1, {DType::kFloat32}}, {3, {DType::kFloat32}}});

}  // namespace
}  // namespace kiln
