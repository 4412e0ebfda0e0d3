// ai.onnx.ml TreeEnsembleClassifier and TreeEnsembleRegressor (opsets 1 and 3): the trees are
// compiled once when the graph is (tree_forest.h), then every run walks them over the pool. The
// scores are aggregated, offset by base_values and transformed as ONNX Runtime does, binary
// classifiers' special cases included, so that models exported by onnxmltools and skl2onnx
// (LightGBM, XGBoost, scikit-learn forests) give ONNX Runtime's labels and probabilities.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ref/ml_post_transform.h"
#include "kernels/cpu/ml/tree_forest.h"
#include "kernels/fast_path.h"
#include "kernels/kernel_util.h"

namespace kiln {
namespace {

// A numeric list attribute: `name` (floats) or `name_as_tensor` (opset 3, a double tensor).
std::vector<double> numbers(const ir::Node& node, const std::string& name) {
  std::vector<double> out;
  if (const ir::Attribute* t = node.attr(name + "_as_tensor"); t && t->type == ir::Attribute::Type::kTensor) {
    if (t->t.dtype() == DType::kFloat64 || t->t.dtype() == DType::kFloat32)
      for (int64_t i = 0; i < t->t.numel(); ++i) out.push_back(load_as_double(t->t.dtype(), t->t.raw_data(), i));
    return out;
  }
  for (float f : node.attr_floats(name)) out.push_back(f);
  return out;
}

// The nodes_* attributes and the leaf weights under `prefix` ("class" or "target").
TreeForestSpec read_spec(const ir::Node& node, const std::string& prefix, int64_t targets) {
  TreeForestSpec s;
  s.node_tree = node.attr_ints("nodes_treeids");
  s.node_id = node.attr_ints("nodes_nodeids");
  s.node_feature = node.attr_ints("nodes_featureids");
  s.node_true = node.attr_ints("nodes_truenodeids");
  s.node_false = node.attr_ints("nodes_falsenodeids");
  s.node_missing_true = node.attr_ints("nodes_missing_value_tracks_true");
  s.node_mode = node.attr_strings("nodes_modes");
  s.node_threshold = numbers(node, "nodes_values");
  s.weight_tree = node.attr_ints(prefix + "_treeids");
  s.weight_node = node.attr_ints(prefix + "_nodeids");
  s.weight_target = node.attr_ints(prefix + "_ids");
  s.weight_value = numbers(node, prefix + "_weights");
  s.targets = targets;
  return s;
}

class TreeEnsembleKernel : public Kernel {
 public:
  TreeEnsembleKernel(TreeForest forest, bool classifier, ForestAggregate agg, bool average,
                     std::vector<double> base, PostTransform post)
      : forest_(std::move(forest)), classifier_(classifier), agg_(agg), average_(average),
        base_(std::move(base)), post_(post) {}

  // Classifier only: the labels, and what ONNX Runtime does with two classes.
  Tensor labels;
  bool binary_case = false;        // two classes, and every weight is for the same one
  bool weights_positive = true;    // no weight is negative

  Status run(KernelContext& ctx) override {
    if (!ctx.has_input(0)) return ctx.error("X is required");
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DType::kFloat32 && x.dtype() != DType::kFloat64)
      return ctx.error(std::string("X must be float or double here, got ") + dtype_name(x.dtype()));
    if (x.rank() > 2) return ctx.error("X must have shape [N, F] or [F], got " + shape_str(x.shape()));
    const int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
    const int64_t features = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
    if (features < forest_.features_needed())
      return ctx.error("X has " + std::to_string(features) + " features; the trees read feature " +
                       std::to_string(forest_.features_needed() - 1));
    // The output first: its allocation checks a hostile size before the scores take about twice it.
    const int64_t c = forest_.targets();
    KILN_ASSIGN_OR_RETURN(Tensor* z, ctx.make_output(classifier_ ? 1 : 0, DType::kFloat32, {rows, c}));
    ForestScores scores;
    forest_.evaluate(x.raw_data(), x.dtype() == DType::kFloat64, rows, features, agg_, ctx.pool, scores);
    if (!classifier_) {
      for (int64_t r = 0; r < rows; ++r) regress_row(scores.score.data() + r * c, scores.has.data() + r * c, z->data<float>() + r * c);
      return Status::ok();
    }
    KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, labels.dtype(), {rows}));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t k = classify_row(scores.score.data() + r * c, scores.has.data() + r * c, z->data<float>() + r * c);
      if (labels.dtype() == DType::kString) y->data<std::string>()[r] = labels.data<std::string>()[k];
      else y->data<int64_t>()[r] = labels.data<int64_t>()[k];
    }
    return Status::ok();
  }

 private:
  // ONNX Runtime writes a score no leaf gave a weight to as 0, except with a single target,
  // where it is the base value.
  void regress_row(double* s, const uint8_t* has, float* z) const {
    const int64_t n = forest_.targets();
    const bool use_base = static_cast<int64_t>(base_.size()) == n;
    for (int64_t t = 0; t < n; ++t) {
      double v = s[t];
      if (average_) v /= static_cast<double>(forest_.trees());
      v += use_base ? base_[t] : 0.0;
      s[t] = has[t] || n == 1 ? v : 0.0;
    }
    apply_post_transform(post_, s, n);
    for (int64_t t = 0; t < n; ++t) z[t] = static_cast<float>(s[t]);
  }

  // The label's index; writes the row's scores. A class no leaf gave a weight to scores 0.
  int64_t classify_row(double* s, const uint8_t* has, float* z) const {
    const int64_t n = forest_.targets();
    if (n != 2) {
      int64_t best = -1;
      for (int64_t k = 0; k < n; ++k) {
        const bool in_base = k < static_cast<int64_t>(base_.size());
        const bool h = has[k] || in_base;
        s[k] = h ? s[k] + (in_base ? base_[k] : 0.0) : 0.0;
        if (h && (best < 0 || s[k] > s[best])) best = k;
      }
      apply_post_transform(post_, s, n);
      for (int64_t k = 0; k < n; ++k) z[k] = static_cast<float>(s[k]);
      return std::max<int64_t>(best, 0);
    }
    return classify_binary(s[0], s[1], has[0] != 0, has[1] != 0, z);
  }

  // Two classes, as ONNX Runtime scores them: with two base values and a second-class score,
  // p1 = base1 + s0 and p0 = -p1; with fewer base values and no second-class score, one score
  // p is kept and the row written as (1 - p, p) when every weight is positive, else as
  // (-p, p), both after the logistic for LOGISTIC, or (p, 0) when the weights are for both.
  int64_t classify_binary(double s0, double s1, bool h0, bool h1, float* z) const {
    bool two = true;  // both scores are kept
    int second = -1;  // with one: 0/1 = (1 - p, p), 2/3 = (-p, p), -1 = (p, 0)
    if (base_.size() == 2) {
      if (h1) {
        s1 = base_[1] + s0;
        s0 = -s1;
      } else {
        s0 += base_[0];
        s1 += base_[1];
      }
    } else {
      if (base_.size() == 1) s0 += base_[0];
      else second = 3;
      two = h1;
    }
    const double pos = two && h1 ? s1 : (h0 ? s0 : 0.0);
    bool positive = pos > 0;
    if (binary_case) {
      positive = weights_positive ? pos > 0.5 : pos > 0;
      second = weights_positive ? (positive ? 0 : 1) : (positive ? 2 : 3);
    }
    double row[2] = {h0 ? s0 : 0.0, h1 ? s1 : 0.0};
    if (two) {
      apply_post_transform(post_, row, 2);
    } else if (post_ == PostTransform::kProbit) {
      row[0] = probit(row[0]);
      row[1] = 0;
    } else if (second >= 0) {
      const double p = post_ == PostTransform::kLogistic ? logistic(row[0]) : row[0];
      row[1] = p;
      row[0] = second <= 1 ? 1.0 - p : (post_ == PostTransform::kLogistic ? logistic(-row[0]) : -p);
    } else {
      row[1] = 0;
    }
    z[0] = static_cast<float>(row[0]);
    z[1] = static_cast<float>(row[1]);
    return positive ? 1 : 0;
  }

  TreeForest forest_;
  bool classifier_;
  ForestAggregate agg_;
  bool average_;
  std::vector<double> base_;
  PostTransform post_;
};

Result<std::unique_ptr<Kernel>> create_classifier(const ir::Node& node, int64_t) {
  const std::vector<int64_t> int_labels = node.attr_ints("classlabels_int64s");
  const std::vector<std::string> str_labels = node.attr_strings("classlabels_strings");
  if (int_labels.empty() == str_labels.empty())
    return Status::error("exactly one of classlabels_int64s and classlabels_strings must be given");
  const int64_t classes = static_cast<int64_t>(int_labels.empty() ? str_labels.size() : int_labels.size());
  KILN_ASSIGN_OR_RETURN(TreeForest forest, TreeForest::compile(read_spec(node, "class", classes)));
  KILN_ASSIGN_OR_RETURN(PostTransform post, parse_post_transform(node.attr_string("post_transform", "NONE")));
  std::vector<double> base = numbers(node, "base_values");
  if (!base.empty() && static_cast<int64_t>(base.size()) != classes && base.size() != 1)
    return Status::error("base_values has " + std::to_string(base.size()) + " entries for " + std::to_string(classes) + " classes");
  auto k = std::make_unique<TreeEnsembleKernel>(std::move(forest), true, ForestAggregate::kSum, false, std::move(base), post);
  if (int_labels.empty()) {
    KILN_ASSIGN_OR_RETURN(k->labels, Tensor::make(DType::kString, {classes}));
    std::copy(str_labels.begin(), str_labels.end(), k->labels.data<std::string>());
  } else {
    KILN_ASSIGN_OR_RETURN(k->labels, Tensor::make(DType::kInt64, {classes}));
    std::copy(int_labels.begin(), int_labels.end(), k->labels.data<int64_t>());
  }
  const std::vector<int64_t> ids = node.attr_ints("class_ids");
  const std::vector<double> weights = numbers(node, "class_weights");
  k->binary_case = classes == 2 && !ids.empty() && std::all_of(ids.begin(), ids.end(), [&](int64_t i) { return i == ids[0]; });
  k->weights_positive = std::all_of(weights.begin(), weights.end(), [](double w) { return w >= 0; });
  return std::unique_ptr<Kernel>(std::move(k));
}

Result<std::unique_ptr<Kernel>> create_regressor(const ir::Node& node, int64_t) {
  const int64_t targets = node.attr_int("n_targets", 1);
  KILN_ASSIGN_OR_RETURN(TreeForest forest, TreeForest::compile(read_spec(node, "target", targets)));
  KILN_ASSIGN_OR_RETURN(PostTransform post, parse_post_transform(node.attr_string("post_transform", "NONE")));
  const std::string agg = node.attr_string("aggregate_function", "SUM");
  if (agg != "SUM" && agg != "AVERAGE" && agg != "MIN" && agg != "MAX")
    return Status::error("aggregate_function '" + agg + "' is not one of SUM, AVERAGE, MIN, MAX");
  const ForestAggregate a = agg == "MIN" ? ForestAggregate::kMin : agg == "MAX" ? ForestAggregate::kMax : ForestAggregate::kSum;
  // base_values of another length than n_targets are ignored, as ONNX Runtime ignores them.
  std::vector<double> base = numbers(node, "base_values");
  return std::unique_ptr<Kernel>(
      std::make_unique<TreeEnsembleKernel>(std::move(forest), false, a, agg == "AVERAGE", std::move(base), post));
}

const KernelRegistrar kClassifier("ai.onnx.ml", "TreeEnsembleClassifier", "compiled_forest", create_classifier);
const KernelRegistrar kRegressor("ai.onnx.ml", "TreeEnsembleRegressor", "compiled_forest", create_regressor);

}  // namespace

KILN_REGISTER_FAST_PATH("ai.onnx.ml", "TreeEnsembleClassifier", always_fast);
KILN_REGISTER_FAST_PATH("ai.onnx.ml", "TreeEnsembleRegressor", always_fast);

}  // namespace kiln
