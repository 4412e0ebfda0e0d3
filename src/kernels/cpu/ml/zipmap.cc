// ai.onnx.ml ZipMap: each row of class scores becomes a map from the class labels to the scores,
// the probabilities output of scikit-learn and LightGBM classifiers converted by skl2onnx and
// onnxmltools. The labels tensor is made once and shared by every row's map.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

class ZipMapKernel : public Kernel {
 public:
  explicit ZipMapKernel(Tensor labels) : labels_(std::move(labels)) {}

  Status run(KernelContext& ctx) override {
    if (!ctx.has_input(0)) return ctx.error("X is required");
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat32) return ctx.error(std::string("X must be float, got ") + dtype_name(x.dtype()));
    if (x.rank() < 1 || x.rank() > 2) return ctx.error("X must have shape [N, C] or [C], got " + shape_str(x.shape()));
    const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, c = x.dim(x.rank() - 1);
    if (c != labels_.numel())
      return ctx.error("X has " + std::to_string(c) + " columns for " + std::to_string(labels_.numel()) + " class labels");
    std::vector<Tensor> keys(static_cast<size_t>(rows), labels_), values;
    values.reserve(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      KILN_ASSIGN_OR_RETURN(Tensor v, Tensor::make_for_overwrite(DType::kFloat32, {c}));
      std::memcpy(v.raw_data(), x.data<float>() + r * c, static_cast<size_t>(c) * sizeof(float));
      values.push_back(std::move(v));
    }
    if (!ctx.outputs.empty()) ctx.outputs[0] = Value::of_map_sequence(std::move(keys), std::move(values), DType::kFloat32);
    return Status::ok();
  }

 private:
  Tensor labels_;
};

Result<std::unique_ptr<Kernel>> create(const ir::Node& node, int64_t) {
  const std::vector<int64_t> ints = node.attr_ints("classlabels_int64s");
  const std::vector<std::string> strs = node.attr_strings("classlabels_strings");
  if (ints.empty() == strs.empty()) return Status::error("exactly one of classlabels_int64s and classlabels_strings must be given");
  const int64_t n = static_cast<int64_t>(ints.empty() ? strs.size() : ints.size());
  KILN_ASSIGN_OR_RETURN(Tensor labels, Tensor::make(ints.empty() ? DType::kString : DType::kInt64, {n}));
  if (ints.empty()) std::copy(strs.begin(), strs.end(), labels.data<std::string>());
  else std::copy(ints.begin(), ints.end(), labels.data<int64_t>());
  return std::unique_ptr<Kernel>(std::make_unique<ZipMapKernel>(std::move(labels)));
}

const KernelRegistrar kZipMap("ai.onnx.ml", "ZipMap", "rows", create);

}  // namespace

KILN_REGISTER_FAST_PATH("ai.onnx.ml", "ZipMap", always_fast);

}  // namespace kiln
