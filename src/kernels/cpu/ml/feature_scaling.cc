// ai.onnx.ml Normalizer (each row divided by its MAX, L1 or L2 norm) and Scaler ((x - offset) *
// scale per column, one value for all columns or one per column), in float out.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

bool numeric_input(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt64 || t == DType::kInt32;
}

enum class Norm { kMax, kL1, kL2 };

// Each row of x [rows, c] divided by its norm (a zero norm leaves the row as it is), the norm
// chosen once per call and summed in double, contiguous loops the compiler vectorizes.
template <Norm kNorm>
void normalize_rows_as(const float* x, int64_t rows, int64_t c, float* y) {
  for (int64_t r = 0; r < rows; ++r, x += c, y += c) {
    double d = kNorm == Norm::kMax ? -INFINITY : 0.0;
    for (int64_t i = 0; i < c; ++i) {
      if constexpr (kNorm == Norm::kMax) d = std::max(d, static_cast<double>(x[i]));
      if constexpr (kNorm == Norm::kL1) d += std::fabs(static_cast<double>(x[i]));
      if constexpr (kNorm == Norm::kL2) d += static_cast<double>(x[i]) * x[i];
    }
    if constexpr (kNorm == Norm::kL2) d = std::sqrt(d);
    if (d == 0) d = 1;
    for (int64_t i = 0; i < c; ++i) y[i] = static_cast<float>(x[i] / d);
  }
}

void normalize_rows(Norm norm, const float* x, int64_t rows, int64_t c, float* y) {
  if (norm == Norm::kMax) return normalize_rows_as<Norm::kMax>(x, rows, c, y);
  if (norm == Norm::kL1) return normalize_rows_as<Norm::kL1>(x, rows, c, y);
  normalize_rows_as<Norm::kL2>(x, rows, c, y);
}

Status normalizer(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("X is required");
  const Tensor& x = ctx.input(0);
  if (!numeric_input(x.dtype())) return ctx.error(std::string("X must be float, double, int64 or int32, got ") + dtype_name(x.dtype()));
  if (x.rank() < 1 || x.rank() > 2) return ctx.error("X must have shape [N, C] or [C], got " + shape_str(x.shape()));
  const std::string norm = ctx.node.attr_string("norm", "MAX");
  if (norm != "MAX" && norm != "L1" && norm != "L2") return ctx.error("norm '" + norm + "' is not one of MAX, L1, L2");
  const int64_t c = x.dim(x.rank() - 1), rows = c == 0 ? 0 : x.numel() / c;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, x.shape()));
  if (x.dtype() == DType::kFloat32) {
    normalize_rows(norm == "MAX" ? Norm::kMax : norm == "L1" ? Norm::kL1 : Norm::kL2, x.data<float>(), rows, c,
                   y->data<float>());
    return Status::ok();
  }
  std::vector<float> xf(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) xf[i] = static_cast<float>(load_as_double(x.dtype(), x.raw_data(), i));
  normalize_rows(norm == "MAX" ? Norm::kMax : norm == "L1" ? Norm::kL1 : Norm::kL2, xf.data(), rows, c,
                 y->data<float>());
  return Status::ok();
}

Status scaler(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("X is required");
  const Tensor& x = ctx.input(0);
  if (!numeric_input(x.dtype())) return ctx.error(std::string("X must be float, double, int64 or int32, got ") + dtype_name(x.dtype()));
  const std::vector<float> offset = ctx.node.attr_floats("offset"), scale = ctx.node.attr_floats("scale");
  const int64_t c = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
  for (const auto* v : {&offset, &scale})
    if (v->size() > 1 && static_cast<int64_t>(v->size()) != c)
      return ctx.error("offset and scale must have one value or one per column (" + std::to_string(c) + ")");
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.make_output_for_overwrite(0, DType::kFloat32, x.shape()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t col = c == 0 ? 0 : i % c;
    const double o = offset.empty() ? 0.0 : offset[offset.size() == 1 ? 0 : col];
    const double s = scale.empty() ? 1.0 : scale[scale.size() == 1 ? 0 : col];
    y->data<float>()[i] = static_cast<float>((load_as_double(x.dtype(), x.raw_data(), i) - o) * s);
  }
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.onnx.ml", "Normalizer", normalizer);
// Every input type runs normalize_rows: float rows as they are, others converted in one pass first.
KILN_REGISTER_FAST_PATH("ai.onnx.ml", "Normalizer", always_fast);
KILN_REGISTER_KERNEL("ai.onnx.ml", "Scaler", scaler);

}  // namespace kiln
