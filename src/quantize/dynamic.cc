// Dynamic quantization (`kiln quantize --dynamic`, QuantizeOptions::dynamic): the MatMul and
// Gemm nodes with constant 2-D weights get int8 weights (symmetric, one scale per output column
// or per tensor) and quantize their activation at run time, per tensor, as ONNX Runtime's
// quantize_dynamic writes it in standard ONNX:
//
//   xq, xs, xz = DynamicQuantizeLinear(x)            (once per activation, shared by its readers)
//   y = Mul(Cast(MatMulInteger(xq, wq, xz, wz)), Mul(xs, ws)) [+ C]
//
// That is the portable form: ONNX Runtime runs it as is, and kiln's dynamic-quant-matmul fuses each
// chain into one MatMulIntegerToFloat. kiln's own form (QuantizeOptions::portable false) is one
// ai.kiln.DynamicQuantMatMul a node, which quantizes each row of the activation on its own (to
// QuantizeOptions::dynamic_row_bits). No
// calibration either way: the activations' ranges are each run's.
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

// W [K, N] (or, `transposed`, W [N, K] as W^T) as int8 [K, N] with scales per column (or one),
// within +-63 with `reduce_range` (gemm_u8s8's vpmaddubsw route on CPUs without VNNI).
QuantizedWeight quantize_columns(const Tensor& w, bool transposed, bool per_column, bool reduce_range) {
  QuantizedWeight r = quantize_weight(w, transposed ? 0 : 1, per_column, reduce_range ? 63.0f : 127.0f);
  if (!transposed) return r;
  const int64_t n = w.dim(0), k = w.dim(1);
  Tensor t = Tensor::make(DType::kInt8, {k, n}).value();
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < k; ++i) t.data<int8_t>()[i * n + j] = r.q.data<int8_t>()[j * k + i];
  r.q = std::move(t);
  return r;
}

}  // namespace

Status write_dynamic(ir::Model& model, const passes::ValueTypes& types, const QuantizeOptions& options,
                     QuantizeReport* report) {
  ir::Graph& g = model.graph;
  std::map<std::string, std::array<std::string, 3>> quantized;  // activation -> xq, xs, xz
  std::vector<ir::Node> nodes;
  std::set<std::string> replaced;
  // kiln's form takes a MatMul's bias Add in (the Add's constant vector is the op's bias input).
  std::map<std::string, const ir::Node*> bias_add;  // MatMul output -> the Add reading it alone
  std::set<const ir::Node*> absorbed;
  if (!options.portable) {
    const auto uses = passes::use_counts(g);
    for (const ir::Node& n : g.nodes) {
      if (!n.domain.empty() || n.op_type != "Add" || n.inputs.size() != 2 || n.outputs.size() != 1) continue;
      for (int side = 0; side < 2; ++side) {
        const Tensor* c = passes::constant_value(g, n.inputs[static_cast<size_t>(1 - side)]);
        const std::string& v = n.inputs[static_cast<size_t>(side)];
        auto it = uses.find(v);
        if (c && c->dtype() == DType::kFloat32 && c->rank() == 1 && it != uses.end() && it->second == 1 &&
            !passes::is_graph_output(g, v))
          bias_add.emplace(v, &n);
      }
    }
  }
  for (const ir::Node& n : g.nodes) {
    if (absorbed.count(&n)) continue;
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
    if (asked_float(options, n)) {
      report->kept_float.push_back(node_label(n) + ": asked to (keep_float)");
      nodes.push_back(n);
      continue;
    }
    QuantizedWeight qw = quantize_columns(*w, gemm && n.attr_int("transB", 0) != 0, options.per_channel, options.reduce_range);
    Tensor wq = std::move(qw.q), ws = std::move(qw.scale), wz = std::move(qw.zero_point);
    const std::string base = n.inputs[1];
    const std::string wq_name = fresh_name(g, base + "_quantized"), ws_name = fresh_name(g, base + "_scale");
    g.initializers[wq_name] = std::move(wq), g.initializers[ws_name] = std::move(ws);
    replaced.insert(base);
    ++report->quantized_nodes;
    const bool biased = gemm && n.inputs.size() > 2 && !n.inputs[2].empty();
    const std::string out = n.outputs[0], stem = n.name.empty() ? out : n.name;
    if (!options.portable) {
      const int64_t columns = g.initializers.at(wq_name).dim(1);
      std::string bias = biased ? n.inputs[2] : "", result = out;
      auto add = matmul ? bias_add.find(out) : bias_add.end();
      if (add != bias_add.end()) {
        const ir::Node& a = *add->second;
        const std::string& c = a.inputs[0] == out ? a.inputs[1] : a.inputs[0];
        if (passes::constant_value(g, c)->numel() == columns) bias = c, result = a.outputs[0], absorbed.insert(&a);
      }
      const Tensor* c = bias.empty() ? nullptr : passes::constant_value(g, bias);
      const bool bias_input = c && c->dtype() == DType::kFloat32 && c->numel() == columns;
      const std::string product = !bias.empty() && !bias_input ? fresh_name(g, stem + "_product") : result;
      std::vector<std::string> in = {n.inputs[0], wq_name, ws_name};
      if (bias_input) in.push_back(bias);
      ir::Node dq = make_node(stem + "_DynamicQuantMatMul", "DynamicQuantMatMul", in, {product}, "ai.kiln");
      if (options.dynamic_row_bits != 8)
        dq.attrs.push_back(ir::Attribute::of_int("row_bits", options.dynamic_row_bits));
      nodes.push_back(std::move(dq));
      if (!bias.empty() && !bias_input) nodes.push_back(make_node(stem + "_bias", "Add", {product, bias}, {result}));
      model.opsets.emplace("ai.kiln", 1);
      continue;
    }
    const std::string wz_name = fresh_name(g, base + "_zero_point");
    g.initializers[wz_name] = std::move(wz);
    auto& q = quantized[n.inputs[0]];
    if (q[0].empty()) {
      for (int i = 0; i < 3; ++i)
        q[static_cast<size_t>(i)] = fresh_name(g, n.inputs[0] + (i == 0 ? "_quantized" : i == 1 ? "_scale" : "_zero_point"));
      nodes.push_back(make_node(q[0], "DynamicQuantizeLinear", {n.inputs[0]}, {q[0], q[1], q[2]}));
    }
    const std::string acc = fresh_name(g, stem + "_int32"), accf = fresh_name(g, stem + "_int32_float"),
                      scale = fresh_name(g, stem + "_scale"), product = fresh_name(g, stem + "_product");
    nodes.push_back(make_node(stem + "_MatMulInteger", "MatMulInteger", {q[0], wq_name, q[2], wz_name}, {acc}));
    ir::Node cast = make_node(stem + "_Cast", "Cast", {acc}, {accf});
    cast.attrs.push_back(ir::Attribute::of_int("to", static_cast<int64_t>(DType::kFloat32)));
    nodes.push_back(std::move(cast));
    nodes.push_back(make_node(stem + "_scales", "Mul", {q[1], ws_name}, {scale}));
    nodes.push_back(make_node(stem + "_Mul", "Mul", {accf, scale}, {biased ? product : out}));
    if (biased) nodes.push_back(make_node(stem + "_bias", "Add", {product, n.inputs[2]}, {out}));
  }
  g.nodes = std::move(nodes);
  passes::drop_unread_initializers(g, replaced);
  return Status::ok();
}

Status quantize_float_outputs_dynamically(ir::Model& model, const passes::ValueTypes& types,
                                          const QuantizeOptions& options, QuantizeReport* report) {
  std::map<std::string, std::string> before;  // output -> label, of the float MatMul/Gemm nodes
  for (const ir::Node& n : model.graph.nodes)
    if (n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm") && !n.outputs.empty())
      before.emplace(n.outputs[0], node_label(n));
  QuantizeReport scratch;
  KILN_RETURN_IF_ERROR(write_dynamic(model, types, options, &scratch));
  for (const ir::Node& n : model.graph.nodes)
    if (n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm") && !n.outputs.empty())
      before.erase(n.outputs[0]);
  for (const auto& replaced : before) {  // the ones write_dynamic replaced (output -> label)
    const std::string& name = replaced.second;
    report->dynamic_nodes.push_back(name);
    std::erase_if(report->kept_float, [&](const std::string& k) { return k.substr(0, k.find(':')) == name; });
  }
  report->quantized_nodes += scratch.quantized_nodes;
  return Status::ok();
}

}  // namespace kiln::quantize
