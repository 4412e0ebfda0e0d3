// The quantizer's speed check (quantize_internal.h): 8 bits only where they win. Each Conv,
// MatMul and Gemm of the plan is cut out of the model with its clamp into a model of its own,
// written once in float and once in QDQ (the plan's parameters, qdq_writer.cc), and each is
// optimized and run as kiln runs it on the values the node sees in the first held-out sample,
// the two alternately, each node's time its least over the runs.
//
// The 8-bit node runs inside a chain of 8-bit nodes: it costs its kernel alone (its QuantizeLinear,
// DequantizeLinear and layout Transposes are the small model's edges, not the chain's). Put back
// in float, it costs the float model's whole run, its reorders included, and the conversions
// between the 8-bit chain and itself: those edges, as the QDQ model measured them. So a node goes
// back to float only where float + conversions beats the 8-bit kernel by a margin; a chain of
// float-leaning neighbours sharing their conversions is not looked for (the check errs to 8 bits).
#include <algorithm>
#include <map>
#include <set>

#include "ir/topological_order.h"
#include "kiln/optimize.h"
#include "passes/graph_edit.h"
#include "quantize/quantize_internal.h"

namespace kiln::quantize {
namespace {

constexpr int kTimedRuns = 9;          // each model's runs after one warm-up, alternated
constexpr double kFloatMargin = 0.10;  // float must win by this fraction of the 8-bit time,
constexpr double kFloatGainUs = 10;    // and by this much: below it a run's noise decides, and a
                                       // model's few-us nodes would come out differently each time

// Whether a node of an optimized QDQ model converts at its edges rather than computes.
bool is_conversion(const NodeTiming& t) {
  if (t.domain.empty())
    return t.op_type == "QuantizeLinear" || t.op_type == "DequantizeLinear" || t.op_type == "Transpose";
  return t.op_type.rfind("Reorder", 0) == 0;  // ai.kiln's layout reorders
}

// The small model of `nodes` (a compute node, then its clamp): `input` with the shape `x` has as
// its input, every constant the nodes read as an initializer, the last node's output (through an
// Identity) its output.
ir::Model cut_out(const ir::Model& model, const std::vector<const ir::Node*>& nodes, const std::string& input,
                  const Tensor& x) {
  ir::Model m;
  m.ir_version = model.ir_version;
  m.opsets = model.opsets;
  m.graph.name = "speed_check";
  m.graph.inputs.push_back(ir::ValueInfo{input, ir::TypeInfo::tensor(x.dtype(), x.shape()), ""});
  for (const ir::Node* n : nodes) {
    m.graph.nodes.push_back(*n);
    for (const std::string& in : n->inputs)
      if (const Tensor* c = in.empty() ? nullptr : passes::constant_value(model.graph, in))
        m.graph.initializers[in] = *c;
  }
  // The output through an Identity, as another node would read it: so that the QDQ writer treats
  // the last output as it does inside the model (a graph output's clamp stays, Q and DQ beside it).
  ir::Node read;
  read.op_type = "Identity";
  read.inputs = {nodes.back()->outputs[0]};
  read.outputs = {"speed_check_output"};
  m.graph.nodes.push_back(read);
  m.graph.outputs.push_back(ir::ValueInfo{read.outputs[0], ir::TypeInfo::tensor(DType::kFloat32), ""});
  return m;
}

// A small model's session, and each of its nodes' least time over the runs so far.
struct Timed {
  std::unique_ptr<Session> session;
  std::map<std::string, NodeTiming> least;  // by node name
};

Status run_once(Timed& t, const std::vector<Value>& feeds) {
  RunProfile profile;
  KILN_RETURN_IF_ERROR(t.session->run_profiled(feeds, &profile).status());
  for (const NodeTiming& n : profile.nodes) {
    auto [it, fresh] = t.least.emplace(n.node, n);
    if (!fresh) it->second.dur_us = std::min(it->second.dur_us, n.dur_us);
  }
  return Status::ok();
}

// The values `names` hold when the float model as written runs `sample`.
Result<std::vector<Value>> values_read(const ir::Model& model, const std::vector<std::string>& names,
                                       const std::vector<Tensor>& sample) {
  KILN_ASSIGN_OR_RETURN(auto session, probe(model, names));
  std::vector<Value> feeds;
  for (const Tensor& t : sample) feeds.push_back(Value::of(t));
  return session->run(feeds);
}

// `int8` and `fp32`, two forms of node `name` cut out, each run on `x` as kiln runs it, the two
// alternately: the 8-bit form's kernel and conversions, the float form's whole run.
Result<NodeSpeed> time_pair(const std::string& name, const ir::Model& int8, const ir::Model& fp32, const Tensor& x) {
  Timed a, b;
  KILN_ASSIGN_OR_RETURN(a.session, optimized_session(int8));
  KILN_ASSIGN_OR_RETURN(b.session, optimized_session(fp32));
  const std::vector<Value> feeds = {Value::of(x)};
  for (int r = 0; r <= kTimedRuns; ++r) {
    if (r == 1) a.least.clear(), b.least.clear();  // the warm-up run's times go
    KILN_RETURN_IF_ERROR(run_once(a, feeds));
    KILN_RETURN_IF_ERROR(run_once(b, feeds));
  }
  NodeSpeed s{name};
  for (const auto& [node, t] : a.least) {
    if (t.domain.empty() && t.op_type == "Identity") continue;
    (is_conversion(t) ? s.conversion_us : s.int8_us) += t.dur_us;
    if (!is_conversion(t))
      s.int8_ops += (s.int8_ops.empty() ? "" : " ") + (t.domain.empty() ? "" : t.domain + ".") + t.op_type;
  }
  for (const auto& [node, t] : b.least) s.float_us += t.dur_us;
  return s;
}

// Whether every input of `n` after the first is a constant (or omitted): the node cuts out alone.
bool constants_beyond_first(const ir::Graph& g, const ir::Node& n) {
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (!n.inputs[i].empty() && !passes::constant_value(g, n.inputs[i])) return false;
  return true;
}

}  // namespace

Result<std::unique_ptr<Session>> optimized_session(const ir::Model& model) {
  auto optimized = std::make_shared<ir::Model>(model);
  ir::deep_copy_subgraphs(optimized->graph);
  KILN_RETURN_IF_ERROR(optimize(*optimized, OptimizeOptions{}).status());
  return Session::create(optimized, SessionOptions{});
}

Result<std::vector<NodeSpeed>> time_plan_nodes(const ir::Model& model, const Plan& plan,
                                               const std::map<std::string, QuantParams>& params,
                                               const QuantizeOptions& options, const std::vector<Tensor>& sample) {
  const ir::Graph& g = model.graph;
  std::map<std::string, std::vector<const ir::Node*>> readers;
  for (const ir::Node& n : g.nodes)
    for (const std::string& in : n.inputs) readers[in].push_back(&n);
  const std::set<std::string> points(plan.points.begin(), plan.points.end());
  std::vector<std::string> inputs;
  for (const QuantizedNode& q : plan.nodes) inputs.push_back(g.nodes[q.node].inputs[0]);
  KILN_ASSIGN_OR_RETURN(const std::vector<Value> seen, values_read(model, inputs, sample));
  std::vector<NodeSpeed> speeds;
  for (size_t i = 0; i < plan.nodes.size(); ++i) {
    const QuantizedNode& q = plan.nodes[i];
    const ir::Node& n = g.nodes[q.node];
    if (!seen[i].is_tensor()) continue;
    // The node and the Relu, Clip or activation after it that its QuantizeLinear follows
    // (choose()'s q.output): its output's readers, one of them writing q.output (a SiLU's Sigmoid
    // and Mul), the others read only within.
    std::vector<const ir::Node*> nodes = {&n};
    const std::string& out = q.output.empty() ? n.outputs[0] : q.output;
    if (out != n.outputs[0]) {
      auto it = readers.find(n.outputs[0]);
      if (it == readers.end()) continue;
      nodes.insert(nodes.end(), it->second.begin(), it->second.end());
      bool closed = std::any_of(nodes.begin(), nodes.end(), [&](const ir::Node* r) { return r->outputs[0] == out; });
      for (const ir::Node* r : it->second) {
        if (r->outputs[0] == out) continue;
        for (const ir::Node* next : readers[r->outputs[0]])
          closed = closed && std::find(nodes.begin(), nodes.end(), next) != nodes.end();
      }
      if (!closed || !points.count(out)) continue;
      std::stable_partition(nodes.begin(), nodes.end(), [&](const ir::Node* r) { return r->outputs[0] != out; });
    }
    if (!params.count(n.inputs[0]) || !params.count(out)) continue;
    const ir::Model fp32 = cut_out(model, nodes, n.inputs[0], seen[i].tensor);
    ir::Model qdq = fp32;
    QuantizeReport scratch;
    std::map<std::string, std::string> dequantized;
    const Plan one{{QuantizedNode{0, q.weight_input, q.weight_axis, q.bias_input, out}}, {n.inputs[0], out}};
    // A node that will not cut out and run on its own stays as planned: the check only advises.
    if (!write_qdq(qdq, one, params, options, &scratch, &dequantized).is_ok() ||
        !ir::sort_topologically(qdq.graph).is_ok())
      continue;
    if (auto s = time_pair(node_label(n), qdq, fp32, seen[i].tensor)) speeds.push_back(std::move(*s));
  }
  return speeds;
}

Result<std::vector<NodeSpeed>> time_dynamic_nodes(const ir::Model& model, const QuantizeOptions& options,
                                                  const std::vector<Tensor>& sample,
                                                  const std::set<std::string>& skip) {
  const ir::Graph& g = model.graph;
  const auto uses = passes::use_counts(g);
  std::map<std::string, const ir::Node*> reader;  // a value's reader, where it has one
  for (const ir::Node& n : g.nodes)
    for (const std::string& in : n.inputs) reader[in] = &n;
  // The MatMul and Gemm nodes with a constant 2-D weight: write_dynamic decides on each cut out.
  std::vector<const ir::Node*> candidates;
  std::vector<std::string> inputs;
  for (const ir::Node& n : g.nodes) {
    const Tensor* w = n.inputs.size() >= 2 ? passes::constant_value(g, n.inputs[1]) : nullptr;
    if (n.domain.empty() && (n.op_type == "MatMul" || n.op_type == "Gemm") && w && w->rank() == 2 &&
        !passes::constant_value(g, n.inputs[0]) && constants_beyond_first(g, n) && !skip.count(node_label(n)))
      candidates.push_back(&n), inputs.push_back(n.inputs[0]);
  }
  KILN_ASSIGN_OR_RETURN(const std::vector<Value> seen, values_read(model, inputs, sample));
  std::vector<NodeSpeed> speeds;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const ir::Node& n = *candidates[i];
    if (!seen[i].is_tensor() || seen[i].tensor.dtype() != DType::kFloat32) continue;
    // With the bias Add kiln's form takes in, where it reads the output alone.
    std::vector<const ir::Node*> nodes = {&n};
    auto it = reader.find(n.outputs[0]);
    auto use = uses.find(n.outputs[0]);
    const bool read_once = use != uses.end() && use->second == 1 && it != reader.end();
    if (n.op_type == "MatMul" && read_once && it->second->op_type == "Add" && it->second->domain.empty() &&
        !passes::is_graph_output(g, n.outputs[0]) && it->second->inputs.size() == 2) {
      const ir::Node& add = *it->second;
      const Tensor* c = passes::constant_value(g, add.inputs[add.inputs[0] == n.outputs[0] ? 1 : 0]);
      if (c && c->rank() == 1) nodes.push_back(&add);
    }
    ir::Model fp32 = cut_out(model, nodes, n.inputs[0], seen[i].tensor);
    ir::Model int8 = fp32;
    OptimizeOptions none;
    passes::PassContext ctx(fp32, none);
    QuantizeReport scratch;
    if (!write_dynamic(int8, ctx.types(), options, &scratch).is_ok() || scratch.quantized_nodes == 0) continue;
    if (auto s = time_pair(node_label(n), int8, fp32, seen[i].tensor)) speeds.push_back(std::move(*s));
  }
  return speeds;
}

bool faster_in_float(const NodeSpeed& s) {
  const double in_float = s.float_us + s.conversion_us;
  return in_float < (1 - kFloatMargin) * s.int8_us && in_float + kFloatGainUs <= s.int8_us;
}

}  // namespace kiln::quantize
