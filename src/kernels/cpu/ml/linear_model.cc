// ai.onnx.ml LinearClassifier and LinearRegressor: scores = X W^T + b per row (W one row of
// coefficients per class or target), then the post_transform; the classifier's label is the
// class of the highest raw score, or, with one score column and two labels, its sign, the
// scores then (1 - p, p) (what ONNX Runtime does for scikit-learn's binary models).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ref/ml_post_transform.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

class LinearModelKernel : public Kernel {
 public:
  LinearModelKernel(bool classifier, std::vector<float> coefficients, std::vector<float> intercepts, int64_t scores,
                    PostTransform post, Tensor labels)
      : classifier_(classifier), w_(std::move(coefficients)), b_(std::move(intercepts)), scores_(scores), post_(post),
        labels_(std::move(labels)) {}

  Status run(KernelContext& ctx) override {
    if (!ctx.has_input(0)) return ctx.error("X is required");
    const Tensor& x = ctx.input(0);
    const DType dt = x.dtype();
    if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kInt64 && dt != DType::kInt32)
      return ctx.error(std::string("X must be float, double, int64 or int32, got ") + dtype_name(dt));
    if (x.rank() < 1 || x.rank() > 2) return ctx.error("X must have shape [N, F] or [F], got " + shape_str(x.shape()));
    const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, f = x.dim(x.rank() - 1);
    if (f * scores_ != static_cast<int64_t>(w_.size()))
      return ctx.error("X has " + std::to_string(f) + " features; the model has " + std::to_string(w_.size()) +
                       " coefficients for " + std::to_string(scores_) + " score columns");
    const bool binary = classifier_ && scores_ == 1 && labels_.numel() == 2;
    const int64_t cols = binary ? 2 : scores_;
    KILN_ASSIGN_OR_RETURN(Tensor * z, ctx.make_output_for_overwrite(classifier_ ? 1 : 0, DType::kFloat32, {rows, cols}));
    Tensor* y = nullptr;
    if (classifier_) {
      KILN_ASSIGN_OR_RETURN(y, ctx.make_output(0, labels_.dtype(), {rows}));
    }
    auto do_rows = [&](int64_t r0, int64_t r1) {
      std::vector<double> s(static_cast<size_t>(scores_) + 1);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = 0; c < scores_; ++c) {
          double acc = b_.empty() ? 0.0 : b_[c];
          const float* w = w_.data() + c * f;
          for (int64_t i = 0; i < f; ++i) acc += load_as_double(dt, x.raw_data(), r * f + i) * w[i];
          s[c] = acc;
        }
        int64_t label = 0;
        if (binary) {
          // One score p for the second class (its logistic for LOGISTIC): the row is (1 - p, p).
          label = s[0] > 0 ? 1 : 0;
          s[1] = post_ == PostTransform::kLogistic ? logistic(s[0]) : s[0];
          s[0] = 1.0 - s[1];
        } else {
          label = std::max_element(s.begin(), s.begin() + scores_) - s.begin();
          apply_post_transform(post_, s.data(), scores_);
        }
        for (int64_t c = 0; c < cols; ++c) z->data<float>()[r * cols + c] = static_cast<float>(s[c]);
        if (!y) continue;
        if (label >= labels_.numel()) label = labels_.numel() - 1;
        if (labels_.dtype() == DType::kString) y->data<std::string>()[r] = labels_.data<std::string>()[label];
        else y->data<int64_t>()[r] = labels_.data<int64_t>()[label];
      }
    };
    if (ctx.pool && rows * f * scores_ >= (1 << 16)) ctx.pool->parallel_for(rows, 16, do_rows);
    else do_rows(0, rows);
    return Status::ok();
  }

 private:
  bool classifier_;
  std::vector<float> w_, b_;
  int64_t scores_;
  PostTransform post_;
  Tensor labels_;
};

Result<std::unique_ptr<Kernel>> create(const ir::Node& node, bool classifier) {
  std::vector<float> w = node.attr_floats("coefficients");
  std::vector<float> b = node.attr_floats("intercepts");
  KILN_ASSIGN_OR_RETURN(PostTransform post, parse_post_transform(node.attr_string("post_transform", "NONE")));
  Tensor labels;
  int64_t scores = 0;
  if (classifier) {
    const std::vector<int64_t> ints = node.attr_ints("classlabels_ints");
    const std::vector<std::string> strs = node.attr_strings("classlabels_strings");
    if (ints.empty() == strs.empty()) return Status::error("exactly one of classlabels_ints and classlabels_strings must be given");
    const int64_t n = static_cast<int64_t>(ints.empty() ? strs.size() : ints.size());
    KILN_ASSIGN_OR_RETURN(labels, Tensor::make(ints.empty() ? DType::kString : DType::kInt64, {n}));
    if (ints.empty()) std::copy(strs.begin(), strs.end(), labels.data<std::string>());
    else std::copy(ints.begin(), ints.end(), labels.data<int64_t>());
    scores = b.empty() ? n : static_cast<int64_t>(b.size());
  } else {
    scores = node.attr_int("targets", 1);
  }
  if (scores < 1 || w.empty() || w.size() % static_cast<size_t>(scores) != 0)
    return Status::error("coefficients has " + std::to_string(w.size()) + " entries, not a multiple of the " +
                         std::to_string(scores) + " score columns");
  if (!b.empty() && static_cast<int64_t>(b.size()) != scores)
    return Status::error("intercepts has " + std::to_string(b.size()) + " entries for " + std::to_string(scores) + " score columns");
  return std::unique_ptr<Kernel>(std::make_unique<LinearModelKernel>(classifier, std::move(w), std::move(b), scores, post, std::move(labels)));
}

const KernelRegistrar kClassifier("ai.onnx.ml", "LinearClassifier", "rows",
                                  [](const ir::Node& n, int64_t) { return create(n, true); });
const KernelRegistrar kRegressor("ai.onnx.ml", "LinearRegressor", "rows",
                                 [](const ir::Node& n, int64_t) { return create(n, false); });

}  // namespace

KILN_REGISTER_FAST_PATH("ai.onnx.ml", "LinearClassifier", always_fast);
KILN_REGISTER_FAST_PATH("ai.onnx.ml", "LinearRegressor", always_fast);

}  // namespace kiln
