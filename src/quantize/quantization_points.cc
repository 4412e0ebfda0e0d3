// Which nodes and activations the quantizer puts in 8 bits (quantize_internal.h):
//  - Conv (any group) with constant weights, MatMul with a constant 2-D B, Gemm with a constant B
//    (alpha 1, no transA): their weights, their bias, and their activation input;
//  - the ops that carry 8-bit data from one such node to the next, quantized in and out so that
//    the chain stays 8-bit: Add of two activations (a residual), MaxPool, AveragePool,
//    GlobalAveragePool, Concat.
// An activation is a non-constant float32 tensor. Each gets one Q/DQ pair whatever reads it;
// a node's output needs no rule of its own: it is quantized when an op above reads it.
#include <algorithm>
#include <map>
#include <set>

#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

bool listed(const std::vector<std::string>& names, const ir::Node& n) {
  return std::find(names.begin(), names.end(), n.name) != names.end() ||
         (!n.outputs.empty() && std::find(names.begin(), names.end(), n.outputs[0]) != names.end());
}

}  // namespace

Plan choose(const ir::Model& model, const passes::ValueTypes& types, const QuantizeOptions& options,
            const std::set<std::string>& float_tensors, QuantizeReport* report) {
  const ir::Graph& g = model.graph;
  auto constant = [&](const std::string& v) -> const Tensor* {
    return v.empty() ? nullptr : passes::constant_value(g, v);
  };
  auto activation = [&](const std::string& v) {
    const ir::TypeInfo* t = types.tensor(v);
    return !v.empty() && !constant(v) && t && t->dtype == DType::kFloat32;
  };
  auto float_constant = [&](const std::string& v, int64_t rank) {
    const Tensor* t = constant(v);
    return t && t->dtype() == DType::kFloat32 && (rank < 0 ? t->rank() >= 3 : t->rank() == rank);
  };
  std::map<std::string, std::vector<const ir::Node*>> readers;
  for (const ir::Node& n : g.nodes)
    for (const std::string& in : n.inputs) readers[in].push_back(&n);
  // An op's output read only by a Relu or Clip is quantized after it, which its QuantizeLinear
  // then absorbs where the calibrated range allows (qdq_writer.cc): one Q/DQ pair, not a
  // requantization from the op's range.
  const passes::GraphIndex index(g);
  auto through_clamp = [&](const std::string& v) {
    auto it = readers.find(v);
    if (it == readers.end() || it->second.size() != 1 || passes::is_graph_output(g, v)) return v;
    const ir::Node* r = it->second[0];
    return r->inputs[0] == v && passes::epilogue::clamp_bounds(index, *r) && activation(r->outputs[0]) ? r->outputs[0] : v;
  };
  Plan plan;
  std::set<std::string> chosen;
  auto point = [&](const std::string& v) {
    if (!float_tensors.count(v) && chosen.insert(v).second) plan.points.push_back(v);
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.domain.empty() || n.inputs.empty() || n.outputs.empty()) continue;
    const std::string& op = n.op_type;
    const bool compute = op == "Conv" || op == "MatMul" || op == "Gemm";
    if (listed(options.keep_float, n)) {
      if (compute) report->kept_float.push_back(n.name + ": asked to (keep_float)");
      continue;
    }
    if (compute) {
      if (n.inputs.size() < 2 || !activation(n.inputs[0])) continue;
      QuantizedNode q{i, 1, 0, -1};
      if (op == "Conv") {
        if (!float_constant(n.inputs[1], -1)) {
          report->kept_float.push_back(n.name + ": weights not a constant");
          continue;
        }
        if (n.inputs.size() > 2 && float_constant(n.inputs[2], 1)) q.bias_input = 2;
      } else if (op == "MatMul") {
        if (!float_constant(n.inputs[1], 2)) continue;  // activation x activation (attention)
        q.weight_axis = 1;
      } else {
        if (!float_constant(n.inputs[1], 2) || n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f ||
            n.attr_float("beta", 1.0f) != 1.0f) {
          report->kept_float.push_back(n.name + ": Gemm form not quantized (transA, alpha, beta, or B not constant)");
          continue;
        }
        q.weight_axis = n.attr_int("transB", 0) != 0 ? 0 : 1;
        if (n.inputs.size() > 2 && float_constant(n.inputs[2], 1)) q.bias_input = 2;
      }
      if (n.inputs.size() > 2 && !n.inputs[2].empty() && q.bias_input < 0 && op != "MatMul") {
        report->kept_float.push_back(n.name + ": bias not a constant vector");
        continue;
      }
      plan.nodes.push_back(q);
      point(n.inputs[0]);
    } else if (op == "Add") {
      if (n.inputs.size() == 2 && activation(n.inputs[0]) && activation(n.inputs[1]) && activation(n.outputs[0]))
        point(n.inputs[0]), point(n.inputs[1]), point(through_clamp(n.outputs[0]));
    } else if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool") {
      if (n.outputs.size() == 1 && activation(n.inputs[0]) && activation(n.outputs[0]))
        point(n.inputs[0]), point(through_clamp(n.outputs[0]));
    } else if (op == "Concat") {
      bool all = activation(n.outputs[0]);
      for (const std::string& in : n.inputs) all = all && activation(in);
      if (!all) continue;
      for (const std::string& in : n.inputs) point(in);
      point(through_clamp(n.outputs[0]));
    }
  }
  report->quantized_nodes = static_cast<int64_t>(plan.nodes.size());
  return plan;
}

}  // namespace kiln::quantize
