// Which nodes and activations the quantizer puts in 8 bits (quantize_internal.h):
//  - Conv (any group) with constant weights, MatMul with a constant 2-D B, Gemm with a constant B
//    (alpha 1, no transA): their weights, their bias, and their activation input;
//  - the ops that carry 8-bit data from one such node to the next, quantized in and out so that
//    the chain stays 8-bit: Add or Mul of two activations (a residual, a SiLU's x * Sigmoid(x), a
//    squeeze-excitation's scaling), Sigmoid, MaxPool, AveragePool, GlobalAveragePool, Concat,
//    Split and Slice (a YOLO C2f block's halves; their parts keep the input's parameters,
//    quantize.cc), and elementwise ops of one activation and one-value constants (LeakyRelu,
//    Tanh, HardSwish, ...), where they touch a chosen node's data (the fusions give them 8-bit
//    kernels: QLinearAdd, QLinearMul, QLinearSigmoid, a SiLU one table, QLinearGlobalAveragePool,
//    a table of codes);
//  - but only the nodes whose output is quantized (through a Relu or Clip): one whose output goes
//    on in float (the logits) would not run as one 8-bit kernel, so it stays float;
//  - in kiln's form (not portable), a Conv read only by an activation the 8-bit conv applies in
//    float (SiLU, Sigmoid, Tanh, HardSwish, HardSigmoid, LeakyRelu: qdq-fusion's ai.kiln.QLinearConv)
//    is quantized after the activation, not before: its own output, whose range an activation
//    squashes (yolox's first conv, -17 to 20, into a SiLU flat below -4), stays float. With a point
//    there, 8 bits before the SiLU cost yolox's output cosine 0.978 against 0.991 without. Those
//    the caller names in `tabled` take the table form (activation_choice.cc decides).
// An activation is a non-constant float32 tensor. Each gets one Q/DQ pair whatever reads it;
// a node's output needs no rule of its own: it is quantized when an op above reads it.
#include <algorithm>
#include <map>
#include <set>

#include "passes/fusions/epilogue_match.h"
#include "passes/fusions/qlinear_table.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {

bool asked_float(const QuantizeOptions& options, const ir::Node& n) {
  const std::vector<std::string>& names = options.keep_float;
  return std::find(names.begin(), names.end(), n.name) != names.end() ||
         (!n.outputs.empty() && std::find(names.begin(), names.end(), n.outputs[0]) != names.end());
}

bool takes_parts(const ir::Node& n) { return n.domain.empty() && (n.op_type == "Split" || n.op_type == "Slice"); }

Plan choose(const ir::Model& model, const passes::ValueTypes& types, const QuantizeOptions& options,
            const std::set<std::string>& float_tensors, QuantizeReport* report, const std::set<std::string>& tabled) {
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
  // The activation a chosen Conv's output goes through in kiln's form (its match), if any.
  auto conv_activation = [&](const ir::Node& n) -> std::optional<passes::epilogue::ActivationMatch> {
    static const std::set<std::string> fused = {"Silu", "Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu"};
    if (options.portable || n.op_type != "Conv" || n.inputs.size() < 2 || !float_constant(n.inputs[1], -1) ||
        passes::is_graph_output(g, n.outputs[0]) || tabled.count(n.outputs[0]))
      return std::nullopt;
    auto m = passes::epilogue::match_activation(g, index, n.outputs[0], {});
    if (!m || !m->act.clip.empty() || !fused.count(m->act.name) || !activation(m->output)) return std::nullopt;
    // The spellings qdq-fusion takes: the op itself, or x * Sigmoid(x).
    if (m->act.name == "Silu" ? m->nodes[0]->op_type != "Sigmoid" : m->nodes[0]->op_type != m->act.name) return std::nullopt;
    return m;
  };
  // The ops that carry 8-bit data from one chosen node to the next: Add or Mul of two activations,
  // Sigmoid, MaxPool, AveragePool, GlobalAveragePool, Concat, Split, Slice, with every data input
  // and output activations. (Without Sigmoid and Mul, efficientnet_b0's convs feeding a SiLU, 67
  // of 82, stayed float, and the int8 model ran slower than the float one.)
  auto carrier = [&](const ir::Node& n) {
    const std::string& op = n.op_type;
    if (takes_parts(n))
      return activation(n.inputs[0]) && std::all_of(n.inputs.begin() + 1, n.inputs.end(), [&](const std::string& in) {
               return in.empty() || constant(in);
             }) && std::all_of(n.outputs.begin(), n.outputs.end(), activation);
    if (n.outputs.size() != 1 || !activation(n.outputs[0])) return false;
    if (op == "Add" || op == "Mul") return n.inputs.size() == 2 && activation(n.inputs[0]) && activation(n.inputs[1]);
    if (op == "Sigmoid") return activation(n.inputs[0]);
    // An op of one activation and one-value constants (LeakyRelu, Tanh, HardSwish, Max with a
    // bound): a table of the input's codes (qlinear-table).
    if (passes::is_code_function(n, constant))
      return std::all_of(n.inputs.begin(), n.inputs.end(), [&](const std::string& in) { return in.empty() || constant(in) || activation(in); });
    if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool") return activation(n.inputs[0]);
    if (op != "Concat") return false;
    for (const std::string& in : n.inputs)
      if (!activation(in)) return false;
    return true;
  };
  // One pass over the graph, the nodes in `skip` left out.
  auto pass = [&](const std::set<size_t>& skip, QuantizeReport* rep) {
    Plan plan;
    std::vector<const ir::Node*> carriers;
    std::set<const ir::Node*> activations;  // the convs' (conv_activation), not carriers
    std::set<std::string> chosen;
    auto point = [&](const std::string& v) {
      if (!float_tensors.count(v) && chosen.insert(v).second) plan.points.push_back(v);
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const ir::Node& n = g.nodes[i];
      if (!n.domain.empty() || n.inputs.empty() || n.outputs.empty()) continue;
      // A conv's activation stays with it, in float too (its input was never calibrated).
      std::optional<passes::epilogue::ActivationMatch> act = conv_activation(n);
      if (act) activations.insert(act->nodes.begin(), act->nodes.end());
      if (skip.count(i)) continue;
      const std::string& op = n.op_type;
      const bool compute = op == "Conv" || op == "MatMul" || op == "Gemm";
      if (asked_float(options, n)) {
        if (compute) rep->kept_float.push_back(n.name + ": asked to (keep_float)");
        continue;
      }
      if (compute) {
        if (n.inputs.size() < 2 || !activation(n.inputs[0])) continue;
        QuantizedNode q{i, 1, 0, -1};
        if (op == "Conv") {
          if (!float_constant(n.inputs[1], -1)) {
            rep->kept_float.push_back(n.name + ": weights not a constant");
            continue;
          }
          if (n.inputs.size() > 2 && float_constant(n.inputs[2], 1)) q.bias_input = 2;
        } else if (op == "MatMul") {
          if (!float_constant(n.inputs[1], 2)) continue;  // activation x activation (attention)
          q.weight_axis = 1;
        } else {
          if (!float_constant(n.inputs[1], 2) || n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f ||
              n.attr_float("beta", 1.0f) != 1.0f) {
            rep->kept_float.push_back(n.name + ": Gemm form not quantized (transA, alpha, beta, or B not constant)");
            continue;
          }
          q.weight_axis = n.attr_int("transB", 0) != 0 ? 0 : 1;
          if (n.inputs.size() > 2 && float_constant(n.inputs[2], 1)) q.bias_input = 2;
        }
        if (n.inputs.size() > 2 && !n.inputs[2].empty() && q.bias_input < 0 && op != "MatMul") {
          rep->kept_float.push_back(n.name + ": bias not a constant vector");
          continue;
        }
        q.output = act ? act->output : through_clamp(n.outputs[0]);
        plan.nodes.push_back(q);
        if (act)
          plan.float_activations.push_back(
              {n.outputs[0], act->output, act->act.name == "Silu" ? act->nodes[0]->outputs[0] : "", act->act});
        point(n.inputs[0]);
      } else if (carrier(n)) {
        carriers.push_back(&n);
      }
    }
    // The carriers join where they touch 8-bit data: an input or output (through a clamp) that a
    // chosen node reads or writes, or that another carrier already quantized. A chain of them
    // between float ops (a squeeze-excite's pooling) would only add Q/DQ passes. One reading or
    // writing a tensor the guard put back in float stays float: else that tensor's values went
    // through the carrier's 8-bit output all the same (yolox's head concatenates its objectness
    // with box offsets a hundred times larger, and the guard's first fallback changed nothing).
    auto kept_float = [&](const std::string& v) { return float_tensors.count(v) > 0; };
    std::erase_if(carriers, [&](const ir::Node* c) { return activations.count(c) > 0; });
    std::set<std::string> produced;  // the chosen nodes' outputs, through their clamps or activations
    for (const QuantizedNode& q : plan.nodes) produced.insert(q.output);
    std::set<const ir::Node*> joined;
    for (bool grew = true; grew;) {
      grew = false;
      for (const ir::Node* c : carriers) {
        std::vector<std::string> outs, ins = c->inputs;
        for (const std::string& o : c->outputs) outs.push_back(through_clamp(o));
        if (takes_parts(*c)) ins.resize(1);  // the data
        if (joined.count(c) || std::any_of(outs.begin(), outs.end(), kept_float) ||
            std::any_of(ins.begin(), ins.end(), kept_float))
          continue;
        bool touches = false;
        for (const std::string& v : outs) touches = touches || chosen.count(v) || produced.count(v);
        for (const std::string& in : ins) touches = touches || chosen.count(in) || produced.count(in);
        if (!touches) continue;
        for (const std::string& in : ins) point(in);
        for (const std::string& v : outs) point(v);
        joined.insert(c);
        grew = true;
      }
    }
    return plan;
  };
  // An 8-bit Conv/MatMul/Gemm pays only with a QuantizeLinear after it (through a clamp), so that
  // it runs as one 8-bit kernel; one whose output goes on in float (logits) stays float,
  // and the activations only it wanted go with it.
  std::set<size_t> skip;
  std::vector<std::string> unpaid;
  for (;;) {
    QuantizeReport scratch;
    const Plan plan = pass(skip, &scratch);
    const std::set<std::string> points(plan.points.begin(), plan.points.end());
    const size_t before = skip.size();
    for (const QuantizedNode& q : plan.nodes) {
      const ir::Node& n = g.nodes[q.node];
      if (points.count(q.output)) continue;
      skip.insert(q.node);
      unpaid.push_back(node_label(n) + ": its output goes on in float, so 8 bits would not pay");
    }
    if (skip.size() == before) break;
  }
  Plan plan = pass(skip, report);
  report->kept_float.insert(report->kept_float.end(), unpaid.begin(), unpaid.end());
  report->quantized_nodes = static_cast<int64_t>(plan.nodes.size());
  return plan;
}

}  // namespace kiln::quantize
