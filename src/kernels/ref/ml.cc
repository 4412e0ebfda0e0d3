// Reference kernels of the "ai.onnx.ml" domain: ArrayFeatureExtractor, Binarizer, LabelEncoder
// (opset 1 classes_*, opset 2+ keys_*/values_*, opset 4 tensor attributes) and TreeEnsemble (opset 5).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kernels/kernel_util.h"
#include "kernels/ref/ml_post_transform.h"

namespace kiln {
namespace {

// ---- ArrayFeatureExtractor ----

Status array_feature_extractor(KernelContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1)) return ctx.error("X and Y are required");
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  if (idx.dtype() != DType::kInt64) return ctx.error(std::string("Y must be int64, got ") + dtype_name(idx.dtype()));
  if (x.rank() < 1) return ctx.error("X must have rank >= 1");
  const int64_t last = x.dim(x.rank() - 1);
  const int64_t n = idx.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = idx.data<int64_t>()[i];
    if (v < 0 || v >= last)
      return ctx.error("index " + std::to_string(v) + " outside [0, " + std::to_string(last) + ")");
  }
  Shape shape;
  if (x.rank() == 1) {
    shape = {1, n};
  } else {
    shape.assign(x.shape().begin(), x.shape().end() - 1);
    shape.push_back(n);
  }
  KILN_ASSIGN_OR_RETURN(Tensor* z, ctx.make_output(0, x.dtype(), shape));
  const int64_t rows = last == 0 ? 0 : x.numel() / last;
  return visit_any(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = z->data<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) out[r * n + i] = in[r * last + idx.data<int64_t>()[i]];
    return Status::ok();
  });
}

// ---- Binarizer ----

Status binarizer(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("X is required");
  const Tensor& x = ctx.input(0);
  const double threshold = ctx.node.attr_float("threshold", 0.0f);
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, x.dtype(), x.shape()));
  return visit_numeric(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < x.numel(); ++i)
      y->data<T>()[i] = static_cast<double>(x.data<T>()[i]) > threshold ? T(1) : T(0);
    return Status::ok();
  });
}

// ---- LabelEncoder ----

enum class KeyKind { kString, kInt, kFloat };

struct KeyIndex {
  KeyKind kind = KeyKind::kString;
  std::map<std::string, int64_t> strings;
  std::map<int64_t, int64_t> ints;
  std::map<double, int64_t> floats;  // NaN kept apart: it does not order
  int64_t nan_index = -1;

  void add(const std::string& s, int64_t i) { strings[s] = i; }  // later keys win
  void add(int64_t v, int64_t i) { ints[v] = i; }
  void add(double v, int64_t i) {
    if (std::isnan(v)) nan_index = i;
    else floats[v] = i;
  }
};

bool is_int_type(DType t) {
  return t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64;
}
bool is_float_type(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

Result<Tensor> tensor_of_strings(const std::vector<std::string>& v) {
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(DType::kString, {static_cast<int64_t>(v.size())}));
  std::copy(v.begin(), v.end(), t.data<std::string>());
  return t;
}
Result<Tensor> tensor_of_ints(const std::vector<int64_t>& v) {
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(DType::kInt64, {static_cast<int64_t>(v.size())}));
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}
Result<Tensor> tensor_of_floats(const std::vector<float>& v) {
  KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(DType::kFloat32, {static_cast<int64_t>(v.size())}));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

Status label_encoder(KernelContext& ctx) {
  const ir::Node& node = ctx.node;
  if (!ctx.has_input(0)) return ctx.error("X is required");
  const Tensor& x = ctx.input(0);
  KeyIndex index;
  Tensor values, fallback;  // 1-D values of the output type, and a 1-element default
  int64_t n_keys = 0;

  if (ctx.opset < 2) {
    // Opset 1: classes_strings; string -> int64 (its position) or int64 -> string.
    const std::vector<std::string> classes = node.attr_strings("classes_strings");
    std::vector<int64_t> pos(classes.size());
    for (size_t i = 0; i < classes.size(); ++i) pos[i] = static_cast<int64_t>(i);
    n_keys = static_cast<int64_t>(classes.size());
    if (x.dtype() == DType::kString) {
      for (size_t i = 0; i < classes.size(); ++i)
        if (!index.strings.count(classes[i])) index.strings[classes[i]] = static_cast<int64_t>(i);
      KILN_ASSIGN_OR_RETURN(values, tensor_of_ints(pos));
      KILN_ASSIGN_OR_RETURN(fallback, tensor_of_ints({node.attr_int("default_int64", -1)}));
    } else if (x.dtype() == DType::kInt64) {
      index.kind = KeyKind::kInt;
      for (size_t i = 0; i < classes.size(); ++i) index.add(static_cast<int64_t>(i), static_cast<int64_t>(i));
      KILN_ASSIGN_OR_RETURN(values, tensor_of_strings(classes));
      KILN_ASSIGN_OR_RETURN(fallback, tensor_of_strings({node.attr_string("default_string", "_Unused")}));
    } else {
      return ctx.error(std::string("X must be string or int64, got ") + dtype_name(x.dtype()));
    }
  } else {
    // Keys.
    const ir::Attribute* kt = node.attr("keys_tensor");
    if (node.has_attr("keys_strings") || (kt && kt->t.dtype() == DType::kString)) {
      if (x.dtype() != DType::kString) return ctx.error("string keys need a string X");
      std::vector<std::string> keys = node.has_attr("keys_strings") ? node.attr_strings("keys_strings")
                                                                      : std::vector<std::string>(kt->t.data<std::string>(), kt->t.data<std::string>() + kt->t.numel());
      for (size_t i = 0; i < keys.size(); ++i) index.add(keys[i], static_cast<int64_t>(i));
      n_keys = static_cast<int64_t>(keys.size());
    } else if (node.has_attr("keys_int64s") || (kt && is_int_type(kt->t.dtype()))) {
      if (!is_int_type(x.dtype())) return ctx.error("integer keys need an integer X");
      index.kind = KeyKind::kInt;
      std::vector<int64_t> keys = node.attr_ints("keys_int64s");
      if (!node.has_attr("keys_int64s"))
        for (int64_t i = 0; i < kt->t.numel(); ++i) keys.push_back(static_cast<int64_t>(load_as_double(kt->t.dtype(), kt->t.raw_data(), i)));
      for (size_t i = 0; i < keys.size(); ++i) index.add(keys[i], static_cast<int64_t>(i));
      n_keys = static_cast<int64_t>(keys.size());
    } else if (node.has_attr("keys_floats") || (kt && is_float_type(kt->t.dtype()))) {
      if (!is_float_type(x.dtype())) return ctx.error("float keys need a float X");
      index.kind = KeyKind::kFloat;
      std::vector<double> keys;
      for (float f : node.attr_floats("keys_floats")) keys.push_back(f);
      if (!node.has_attr("keys_floats"))
        for (int64_t i = 0; i < kt->t.numel(); ++i) keys.push_back(load_as_double(kt->t.dtype(), kt->t.raw_data(), i));
      for (size_t i = 0; i < keys.size(); ++i) index.add(keys[i], static_cast<int64_t>(i));
      n_keys = static_cast<int64_t>(keys.size());
    } else {
      return ctx.error("one of keys_strings, keys_int64s, keys_floats, keys_tensor must be set");
    }
    // Values and the default that matches them.
    const ir::Attribute* vt = node.attr("values_tensor");
    if (vt) {
      values = vt->t;
      const ir::Attribute* dt = node.attr("default_tensor");
      if (dt) {
        if (dt->t.dtype() != values.dtype() || dt->t.numel() != 1)
          return ctx.error("default_tensor must be one element of values_tensor's type");
        fallback = dt->t;
      } else {
        KILN_ASSIGN_OR_RETURN(fallback, Tensor::make(values.dtype(), {1}));
        if (values.dtype() == DType::kString) fallback.data<std::string>()[0] = "_Unused";
        else if (is_float_type(values.dtype())) store_from_double(values.dtype(), fallback.raw_data(), 0, -0.0);
        else if (values.dtype() != DType::kString) store_from_double(values.dtype(), fallback.raw_data(), 0, -1.0);
      }
    } else if (node.has_attr("values_strings")) {
      KILN_ASSIGN_OR_RETURN(values, tensor_of_strings(node.attr_strings("values_strings")));
      KILN_ASSIGN_OR_RETURN(fallback, tensor_of_strings({node.attr_string("default_string", "_Unused")}));
    } else if (node.has_attr("values_int64s")) {
      KILN_ASSIGN_OR_RETURN(values, tensor_of_ints(node.attr_ints("values_int64s")));
      KILN_ASSIGN_OR_RETURN(fallback, tensor_of_ints({node.attr_int("default_int64", -1)}));
    } else if (node.has_attr("values_floats")) {
      KILN_ASSIGN_OR_RETURN(values, tensor_of_floats(node.attr_floats("values_floats")));
      KILN_ASSIGN_OR_RETURN(fallback, tensor_of_floats({node.attr_float("default_float", -0.0f)}));
    } else {
      return ctx.error("one of values_strings, values_int64s, values_floats, values_tensor must be set");
    }
  }
  if (values.numel() != n_keys)
    return ctx.error("keys and values differ in length: " + std::to_string(n_keys) + " vs " + std::to_string(values.numel()));

  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, values.dtype(), x.shape()));
  auto lookup = [&](int64_t i) -> int64_t {
    if (index.kind == KeyKind::kString) {
      auto it = index.strings.find(x.data<std::string>()[i]);
      return it == index.strings.end() ? -1 : it->second;
    }
    if (index.kind == KeyKind::kInt) {
      const auto v = static_cast<int64_t>(x.dtype() == DType::kInt64 ? x.data<int64_t>()[i]
                                                                     : load_as_double(x.dtype(), x.raw_data(), i));
      auto it = index.ints.find(v);
      return it == index.ints.end() ? -1 : it->second;
    }
    const double v = load_as_double(x.dtype(), x.raw_data(), i);
    if (std::isnan(v)) return index.nan_index;
    auto it = index.floats.find(v);
    return it == index.floats.end() ? -1 : it->second;
  };
  if (x.dtype() == DType::kString && index.kind != KeyKind::kString) return ctx.error("X type does not match the keys");
  return visit_any(values.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t j = lookup(i);
      y->data<T>()[i] = j < 0 ? fallback.data<T>()[0] : values.data<T>()[j];
    }
    return Status::ok();
  });
}

// ---- TreeEnsemble (ai.onnx.ml opset 5) ----

std::vector<double> attr_numbers(const ir::Node& node, const std::string& name) {
  std::vector<double> out;
  const ir::Attribute* a = node.attr(name);
  if (!a) return out;
  if (a->type == ir::Attribute::Type::kTensor) {
    for (int64_t i = 0; i < a->t.numel(); ++i)
      out.push_back(a->t.dtype() == DType::kString ? 0.0 : load_as_double(a->t.dtype(), a->t.raw_data(), i));
  } else if (a->type == ir::Attribute::Type::kFloats) {
    for (float f : a->floats) out.push_back(f);
  } else if (a->type == ir::Attribute::Type::kInts) {
    for (int64_t v : a->ints) out.push_back(static_cast<double>(v));
  }
  return out;
}

Status tree_ensemble(KernelContext& ctx) {
  const ir::Node& node = ctx.node;
  if (!ctx.has_input(0)) return ctx.error("X is required");
  const Tensor& x = ctx.input(0);
  const DType dt = x.dtype();
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kFloat16)
    return ctx.error(std::string("X must be float, double or float16, got ") + dtype_name(dt));
  if (x.rank() != 2) return ctx.error("X must have shape [N, F], got " + shape_str(x.shape()));
  const int64_t rows = x.dim(0), features = x.dim(1);

  const std::vector<double> splits = attr_numbers(node, "nodes_splits");
  const std::vector<int64_t> feature_ids = node.attr_ints("nodes_featureids");
  const std::vector<double> modes = attr_numbers(node, "nodes_modes");
  const std::vector<int64_t> true_ids = node.attr_ints("nodes_truenodeids");
  const std::vector<int64_t> false_ids = node.attr_ints("nodes_falsenodeids");
  const std::vector<int64_t> true_leaf = node.attr_ints("nodes_trueleafs");
  const std::vector<int64_t> false_leaf = node.attr_ints("nodes_falseleafs");
  const std::vector<int64_t> missing_true = node.attr_ints("nodes_missing_value_tracks_true");
  const std::vector<int64_t> leaf_targets = node.attr_ints("leaf_targetids");
  const std::vector<double> leaf_weights = attr_numbers(node, "leaf_weights");
  const std::vector<int64_t> roots = node.attr_ints("tree_roots");
  const std::vector<double> members = attr_numbers(node, "membership_values");
  const int64_t n_targets = node.attr_int("n_targets", 0);
  const int64_t aggregate = node.attr_int("aggregate_function", 1);
  const int64_t post = node.attr_int("post_transform", 0);

  const size_t n_nodes = feature_ids.size();
  if (modes.size() != n_nodes || true_ids.size() != n_nodes || false_ids.size() != n_nodes ||
      true_leaf.size() != n_nodes || false_leaf.size() != n_nodes ||
      (!missing_true.empty() && missing_true.size() != n_nodes))
    return ctx.error("nodes_* attributes differ in length");
  if (leaf_targets.size() != leaf_weights.size()) return ctx.error("leaf_* attributes differ in length");
  if (n_targets < 1 || n_targets > (int64_t{1} << 24)) return ctx.error("n_targets must be positive");
  if (aggregate < 0 || aggregate > 3) return ctx.error("aggregate_function must be 0..3");
  if (post < 0 || post > 4) return ctx.error("post_transform must be 0..4");
  for (int64_t t : leaf_targets)
    if (t < 0 || t >= n_targets) return ctx.error("leaf_targetids value " + std::to_string(t) + " outside [0, n_targets)");

  // Membership sets, in node order, NaN-delimited.
  std::vector<std::vector<double>> sets(n_nodes);
  size_t m = 0;
  for (size_t i = 0; i < n_nodes; ++i) {
    if (static_cast<int64_t>(modes[i]) != 6) continue;
    if (m >= members.size()) return ctx.error("a BRANCH_MEMBER node has no set in membership_values");
    while (m < members.size() && !std::isnan(members[m])) sets[i].push_back(members[m++]);
    ++m;  // the NaN delimiter
  }
  for (size_t i = 0; i < n_nodes; ++i) {
    if (modes[i] < 0 || modes[i] > 6) return ctx.error("nodes_modes value outside 0..6");
    if (feature_ids[i] < 0 || feature_ids[i] >= features)
      return ctx.error("nodes_featureids value " + std::to_string(feature_ids[i]) + " outside [0, " + std::to_string(features) + ")");
    if (static_cast<int64_t>(modes[i]) != 6 && i >= splits.size()) return ctx.error("nodes_splits too short");
    const int64_t limit_t = true_leaf[i] ? static_cast<int64_t>(leaf_weights.size()) : static_cast<int64_t>(n_nodes);
    const int64_t limit_f = false_leaf[i] ? static_cast<int64_t>(leaf_weights.size()) : static_cast<int64_t>(n_nodes);
    if (true_ids[i] < 0 || true_ids[i] >= limit_t || false_ids[i] < 0 || false_ids[i] >= limit_f)
      return ctx.error("node " + std::to_string(i) + " branches to an index out of range");
  }
  for (int64_t r : roots)
    if (r < 0 || r >= static_cast<int64_t>(n_nodes)) return ctx.error("tree_roots value out of range");

  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::make(DType::kFloat64, {rows, n_targets}));
  double* res = out.data<double>();
  const double lowest = dt == DType::kFloat64 ? std::numeric_limits<double>::lowest()
                        : dt == DType::kFloat16 ? -65504.0 : std::numeric_limits<float>::lowest();
  const double init = aggregate == 2 ? -lowest : aggregate == 3 ? lowest : 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < n_targets; ++t) res[r * n_targets + t] = init;
    for (int64_t root : roots) {
      int64_t cur = root;
      bool leaf = false;
      // A single-leaf tree: both branches name the same leaf.
      if (true_leaf[cur] && false_leaf[cur] && true_ids[cur] == false_ids[cur]) {
        cur = true_ids[cur];
        leaf = true;
      }
      size_t steps = 0;
      while (!leaf) {
        if (++steps > n_nodes) return ctx.error("tree has a cycle");
        const double v = load_as_double(dt, x.raw_data(), r * features + feature_ids[cur]);
        const double s = static_cast<int64_t>(modes[cur]) == 6 ? 0.0 : splits[cur];
        bool go;
        switch (static_cast<int64_t>(modes[cur])) {
          case 0: go = v <= s; break;
          case 1: go = v < s; break;
          case 2: go = v >= s; break;
          case 3: go = v > s; break;
          case 4: go = v == s; break;
          case 5: go = v != s; break;
          default: go = std::find(sets[cur].begin(), sets[cur].end(), v) != sets[cur].end(); break;
        }
        if (std::isnan(v) && !missing_true.empty() && missing_true[cur]) go = true;
        leaf = go ? true_leaf[cur] != 0 : false_leaf[cur] != 0;
        cur = go ? true_ids[cur] : false_ids[cur];
      }
      double& slot = res[r * n_targets + leaf_targets[cur]];
      const double w = leaf_weights[cur];
      if (aggregate == 0) slot += w / static_cast<double>(roots.size());
      else if (aggregate == 1) slot += w;
      else if (aggregate == 2) slot = std::min(slot, w);
      else slot = std::max(slot, w);
    }
    // post_transform 0..4: NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT.
    constexpr PostTransform kPost[] = {PostTransform::kNone, PostTransform::kSoftmax, PostTransform::kLogistic,
                                       PostTransform::kSoftmaxZero, PostTransform::kProbit};
    apply_post_transform(kPost[post], res + r * n_targets, n_targets);
  }
  KILN_ASSIGN_OR_RETURN(Tensor* y, ctx.make_output(0, dt, {rows, n_targets}));
  for (int64_t i = 0; i < out.numel(); ++i) store_from_double(dt, y->raw_data(), i, res[i]);
  return Status::ok();
}

}  // namespace

KILN_REGISTER_KERNEL("ai.onnx.ml", "ArrayFeatureExtractor", array_feature_extractor);
KILN_REGISTER_KERNEL("ai.onnx.ml", "Binarizer", binarizer);
KILN_REGISTER_KERNEL("ai.onnx.ml", "LabelEncoder", label_encoder);
KILN_REGISTER_KERNEL("ai.onnx.ml", "TreeEnsemble", tree_ensemble);

}  // namespace kiln
