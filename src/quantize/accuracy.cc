// The quantizer's accuracy measurements (quantize_internal.h): the float model and its QDQ form
// run side by side on each held-out sample, every quantized activation of the QDQ model taken
// where its DequantizeLinear gives it, against the float model's value of the same tensor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/session.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

struct Sums {
  double signal = 0, noise = 0, worst_cosine = 1;
  std::vector<double> fxx, fyy, fxy;  // per feature (outputs of rank 3 or more)
};

// The axis indexing an output's features: the smallest of more than one element after the batch
// axis, for ranks of 3 or more; -1 otherwise.
int64_t feature_axis(const Tensor& t) {
  int64_t best = -1;
  for (int64_t i = 1; t.rank() >= 3 && i < t.rank(); ++i)
    if (t.dim(i) > 1 && (best < 0 || t.dim(i) < t.dim(best))) best = i;
  return best;
}

void accumulate_features(const Tensor& ref, const Tensor& got, Sums& s) {
  const int64_t axis = feature_axis(ref);
  if (axis < 0 || ref.dtype() != DType::kFloat32 || got.shape() != ref.shape()) return;
  const int64_t n = ref.dim(axis);
  int64_t inner = 1;
  for (int64_t i = axis + 1; i < ref.rank(); ++i) inner *= ref.dim(i);
  s.fxx.resize(static_cast<size_t>(n)), s.fyy.resize(static_cast<size_t>(n)), s.fxy.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const size_t f = static_cast<size_t>((i / inner) % n);
    const double x = ref.data<float>()[i], y = got.data<float>()[i];
    s.fxx[f] += x * x, s.fyy[f] += y * y, s.fxy[f] += x * y;
  }
}

// x.x, y.y, x.y and |x - y|^2 of two float32 tensors of one size (false where they are not).
bool dot_products(const Tensor& ref, const Tensor& got, double* xx, double* yy, double* xy, double* ee) {
  if (ref.dtype() != DType::kFloat32 || got.dtype() != DType::kFloat32 || ref.numel() != got.numel()) return false;
  *xx = *yy = *xy = *ee = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double x = ref.data<float>()[i], y = got.data<float>()[i];
    *xx += x * x, *yy += y * y, *xy += x * y, *ee += (x - y) * (x - y);
  }
  return true;
}

// 1 where both are zero, 0 where one is.
double cosine_of(double xx, double yy, double xy) {
  return xx == 0 && yy == 0 ? 1.0 : (xx == 0 || yy == 0 ? 0.0 : xy / std::sqrt(xx * yy));
}

void accumulate(const Tensor& ref, const Tensor& got, Sums& s) {
  double xx, yy, xy, ee;
  if (!dot_products(ref, got, &xx, &yy, &xy, &ee)) return;
  s.signal += xx, s.noise += ee;
  s.worst_cosine = std::min(s.worst_cosine, cosine_of(xx, yy, xy));
}

TensorError error_of(const std::string& name, const Sums& s) {
  const double sqnr = s.noise == 0 ? std::numeric_limits<double>::infinity()
                                   : 10 * std::log10(std::max(s.signal, 1e-30) / s.noise);
  double features = 0, sum = 0;
  for (size_t f = 0; f < s.fxx.size(); ++f) {
    if (s.fxx[f] == 0 && s.fyy[f] == 0) continue;  // a feature zero in both: no information
    sum += s.fxx[f] == 0 || s.fyy[f] == 0 ? 0.0 : s.fxy[f] / std::sqrt(s.fxx[f] * s.fyy[f]);
    features += 1;
  }
  return TensorError{name, sqnr, s.worst_cosine, features > 0 ? sum / features : s.worst_cosine};
}

}  // namespace

double worst_cosine(const std::vector<Tensor>& ref, const std::vector<Tensor>& got) {
  double worst = 1, xx, yy, xy, ee;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i)
    if (dot_products(ref[i], got[i], &xx, &yy, &xy, &ee)) worst = std::min(worst, cosine_of(xx, yy, xy));
  return worst;
}

std::vector<std::string> float_outputs(const ir::Model& model) {
  std::vector<std::string> names;
  for (const ir::ValueInfo& o : model.graph.outputs)
    if (o.type.dtype == DType::kFloat32 || o.type.kind != ir::TypeInfo::Kind::kTensor) names.push_back(o.name);
  return names;
}

Result<std::unique_ptr<Session>> probe(const ir::Model& model, const std::vector<std::string>& outputs) {
  auto m = std::make_shared<ir::Model>(model);
  m->graph.outputs.clear();
  for (const std::string& o : outputs) m->graph.outputs.push_back(ir::ValueInfo{o, ir::TypeInfo::tensor(DType::kFloat32), ""});
  SessionOptions options;
  options.optimize_level = 0;  // the graph as written: every tensor it names is computed
  return Session::create(m, options);
}

Status measure(const ir::Model& fp32, const ir::Model& qdq, const std::vector<std::string>& points,
               const std::map<std::string, std::string>& dequantized, const std::vector<std::vector<Tensor>>& samples,
               std::vector<TensorError>* layers, std::vector<TensorError>* outputs, OutputsBySample* kept) {
  std::vector<std::string> ref_names = points, got_names;
  for (const std::string& p : points) got_names.push_back(dequantized.at(p));
  const std::vector<std::string> model_outputs = float_outputs(fp32);
  for (const std::string& o : model_outputs) ref_names.push_back(o), got_names.push_back(o);
  KILN_ASSIGN_OR_RETURN(auto ref, probe(fp32, ref_names));
  KILN_ASSIGN_OR_RETURN(auto got, probe(qdq, got_names));
  std::vector<Sums> sums(ref_names.size());
  for (const std::vector<Tensor>& sample : samples) {
    std::vector<Value> feeds;
    for (const Tensor& t : sample) feeds.push_back(Value::of(t));
    KILN_ASSIGN_OR_RETURN(std::vector<Value> a, ref->run(feeds));
    KILN_ASSIGN_OR_RETURN(std::vector<Value> b, got->run(feeds));
    for (size_t i = 0; i < sums.size(); ++i)
      if (a[i].is_tensor() && b[i].is_tensor()) {
        accumulate(a[i].tensor, b[i].tensor, sums[i]);
        if (i >= points.size()) accumulate_features(a[i].tensor, b[i].tensor, sums[i]);
      }
    if (kept) {  // the model outputs, after the points
      kept->float_outputs.emplace_back(), kept->quantized.emplace_back();
      for (size_t i = points.size(); i < a.size(); ++i) {
        kept->float_outputs.back().push_back(a[i].is_tensor() ? a[i].tensor : Tensor());
        kept->quantized.back().push_back(b[i].is_tensor() ? b[i].tensor : Tensor());
      }
    }
  }
  layers->clear(), outputs->clear();
  for (size_t i = 0; i < points.size(); ++i) layers->push_back(error_of(points[i], sums[i]));
  for (size_t i = 0; i < model_outputs.size(); ++i) outputs->push_back(error_of(model_outputs[i], sums[points.size() + i]));
  return Status::ok();
}

double least_feature_cosine(const OutputsBySample& o) {
  double least = 1;
  const size_t outputs = o.float_outputs.empty() ? 0 : o.float_outputs[0].size();
  for (size_t i = 0; i < outputs; ++i) {
    Sums sums;
    for (size_t s = 0; s < o.float_outputs.size() && s < o.quantized.size(); ++s)
      if (i < o.float_outputs[s].size() && i < o.quantized[s].size())
        accumulate_features(o.float_outputs[s][i], o.quantized[s][i], sums);
    if (!sums.fxx.empty()) least = std::min(least, error_of("", sums).feature_cosine);
  }
  return least;
}

double top1_agreement(const OutputsBySample& o) {
  int64_t rows = 0, agree = 0;
  for (size_t s = 0; s < o.float_outputs.size(); ++s)
    for (size_t i = 0; i < o.float_outputs[s].size(); ++i) {
      const Tensor &a = o.float_outputs[s][i], &b = o.quantized[s][i];
      if (a.dtype() != DType::kFloat32 || b.shape() != a.shape() || a.rank() < 1 || a.numel() == 0) continue;
      const int64_t n = a.dim(a.rank() - 1);
      for (int64_t r = 0; r < a.numel() / n; ++r) {
        const float *x = a.data<float>() + r * n, *y = b.data<float>() + r * n;
        ++rows;
        agree += std::max_element(x, x + n) - x == std::max_element(y, y + n) - y;
      }
    }
  return rows == 0 ? 1.0 : static_cast<double>(agree) / static_cast<double>(rows);
}

}  // namespace kiln::quantize
