// Dynamic quantization (`kiln quantize --dynamic`, QuantizeOptions::dynamic): the MatMul and
// Gemm nodes with constant 2-D weights get int8 weights (symmetric, one scale per output column
// or per tensor) and quantize their activation at run time, per tensor, as ONNX Runtime's
// quantize_dynamic writes it in standard ONNX:
//
//   xq, xs, xz = DynamicQuantizeLinear(x)            (once per activation, shared by its readers)
//   y = Mul(Cast(MatMulInteger(xq, wq, xz, wz)), Mul(xs, ws)) [+ C]
//
// No calibration: the activations' ranges are each run's. ONNX Runtime runs the result as is;
// kiln's dynamic-quant-matmul fuses each chain into one MatMulIntegerToFloat.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "passes/graph_edit.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

using passes::fresh_name;
using passes::make_node;

bool listed(const std::vector<std::string>& names, const ir::Node& n) {
  return std::find(names.begin(), names.end(), n.name) != names.end() ||
         std::find(names.begin(), names.end(), n.outputs[0]) != names.end();
}

// W [K, N] (or W^T when `transposed`) as int8 [K, N] with scales per column (or one).
void quantize_columns(const Tensor& w, bool transposed, bool per_column, Tensor* q, Tensor* scale, Tensor* zero) {
  const int64_t k = transposed ? w.dim(1) : w.dim(0), n = transposed ? w.dim(0) : w.dim(1);
  auto at = [&](int64_t i, int64_t j) { return w.data<float>()[transposed ? j * k + i : i * n + j]; };
  std::vector<float> top(static_cast<size_t>(per_column ? n : 1), 0.0f);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float v = at(i, j);
      float& t = top[static_cast<size_t>(per_column ? j : 0)];
      if (std::isfinite(v)) t = std::max(t, std::fabs(v));
    }
  const Shape params = per_column ? Shape{n} : Shape{};
  *scale = Tensor::make(DType::kFloat32, params).value();
  *zero = Tensor::make(DType::kInt8, params).value();
  for (size_t c = 0; c < top.size(); ++c) scale->data<float>()[c] = top[c] > 0 ? top[c] / 127.0f : 1.0f;
  *q = Tensor::make(DType::kInt8, {k, n}).value();
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float s = scale->data<float>()[per_column ? j : 0], v = at(i, j);
      q->data<int8_t>()[i * n + j] =
          static_cast<int8_t>(std::clamp(std::isfinite(v) ? std::nearbyint(v / s) : 0.0f, -127.0f, 127.0f));
    }
}

}  // namespace

Status write_dynamic(ir::Model& model, const passes::ValueTypes& types, const QuantizeOptions& options,
                     QuantizeReport* report) {
  ir::Graph& g = model.graph;
  std::map<std::string, std::array<std::string, 3>> quantized;  // activation -> xq, xs, xz
  std::vector<ir::Node> nodes;
  std::set<std::string> replaced;
  for (const ir::Node& n : g.nodes) {
    const bool matmul = n.domain.empty() && n.op_type == "MatMul", gemm = n.domain.empty() && n.op_type == "Gemm";
    const Tensor* w = (matmul || gemm) && n.inputs.size() >= 2 ? passes::constant_value(g, n.inputs[1]) : nullptr;
    const ir::TypeInfo* x = (matmul || gemm) ? types.tensor(n.inputs[0]) : nullptr;
    const bool plain_gemm = !gemm || (n.attr_int("transA", 0) == 0 && n.attr_float("alpha", 1.0f) == 1.0f &&
                                      n.attr_float("beta", 1.0f) == 1.0f);
    if (!w || w->dtype() != DType::kFloat32 || w->rank() != 2 || !x || x->dtype != DType::kFloat32 ||
        passes::constant_value(g, n.inputs[0]) || !plain_gemm || n.outputs.size() != 1) {
      nodes.push_back(n);
      continue;
    }
    if (listed(options.keep_float, n)) {
      report->kept_float.push_back((n.name.empty() ? n.outputs[0] : n.name) + ": asked to (keep_float)");
      nodes.push_back(n);
      continue;
    }
    auto& q = quantized[n.inputs[0]];
    if (q[0].empty()) {
      for (int i = 0; i < 3; ++i)
        q[static_cast<size_t>(i)] = fresh_name(g, n.inputs[0] + (i == 0 ? "_quantized" : i == 1 ? "_scale" : "_zero_point"));
      nodes.push_back(make_node(q[0], "DynamicQuantizeLinear", {n.inputs[0]}, {q[0], q[1], q[2]}));
    }
    Tensor wq, ws, wz;
    quantize_columns(*w, gemm && n.attr_int("transB", 0) != 0, options.per_channel, &wq, &ws, &wz);
    const std::string base = n.inputs[1];
    const std::string wq_name = fresh_name(g, base + "_quantized"), ws_name = fresh_name(g, base + "_scale"),
                      wz_name = fresh_name(g, base + "_zero_point");
    g.initializers[wq_name] = std::move(wq), g.initializers[ws_name] = std::move(ws), g.initializers[wz_name] = std::move(wz);
    replaced.insert(base);
    const std::string out = n.outputs[0], stem = n.name.empty() ? out : n.name;
    const std::string acc = fresh_name(g, stem + "_int32"), accf = fresh_name(g, stem + "_int32_float"),
                      scale = fresh_name(g, stem + "_scale"), product = fresh_name(g, stem + "_product");
    const bool biased = gemm && n.inputs.size() > 2 && !n.inputs[2].empty();
    nodes.push_back(make_node(stem + "_MatMulInteger", "MatMulInteger", {q[0], wq_name, q[2], wz_name}, {acc}));
    ir::Node cast = make_node(stem + "_Cast", "Cast", {acc}, {accf});
    cast.attrs.push_back(ir::Attribute::of_int("to", static_cast<int64_t>(DType::kFloat32)));
    nodes.push_back(std::move(cast));
    nodes.push_back(make_node(stem + "_scales", "Mul", {q[1], ws_name}, {scale}));
    nodes.push_back(make_node(stem + "_Mul", "Mul", {accf, scale}, {biased ? product : out}));
    if (biased) nodes.push_back(make_node(stem + "_bias", "Add", {product, n.inputs[2]}, {out}));
    ++report->quantized_nodes;
  }
  g.nodes = std::move(nodes);
  passes::drop_unread_initializers(g, replaced);
  return Status::ok();
}

}  // namespace kiln::quantize
