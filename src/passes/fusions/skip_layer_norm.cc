// SkipLayerNorm fusion: LayerNorm(Add(input, skip)) becomes ai.kiln.SkipLayerNorm, absorbing a
// 1-D constant bias added to either operand, and giving the sum as a second output when it is
// also read elsewhere (pre-LN transformers feed it to the next residual).
#include <optional>

#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using ir::Node;

bool is_layer_norm(const Node& n) {
  const bool std_ln = n.domain.empty() && n.op_type == "LayerNormalization";
  const bool kiln_ln = n.domain == "ai.kiln" && n.op_type == "LayerNorm";
  if (!std_ln && !kiln_ln) return false;
  // Mean and InvStdDev outputs are not part of SkipLayerNorm.
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (!n.outputs[i].empty()) return false;
  return n.has_input(0) && n.has_input(1) && !n.outputs.empty() && !n.outputs[0].empty() &&
         n.attr_int("stash_type", 1) == 1;
}

struct Match {
  const Node* ln = nullptr;
  const Node* add = nullptr;
  const Node* bias_add = nullptr;  // the inner Add whose constant became the bias, if any
  std::string input, skip, bias;
  bool sum_out = false;  // the sum is read beyond the LayerNorm
  const Node* at = nullptr;
};

std::optional<Match> match(const GraphIndex& idx, const ir::Graph& g, const Node& ln) {
  if (!is_layer_norm(ln)) return std::nullopt;
  Match m;
  m.ln = &ln;
  const std::string& s = ln.inputs[0];
  m.add = idx.producer(s);
  if (!is_onnx_op(m.add, "Add") || m.add->inputs.size() != 2 || !m.add->has_input(0) ||
      !m.add->has_input(1))
    return std::nullopt;
  m.input = m.add->inputs[0];
  m.skip = m.add->inputs[1];
  m.sum_out = !idx.single_use(s);
  for (int i = 0; i < 2 && m.bias.empty(); ++i) {
    const std::string& v = m.add->inputs[i];
    const Node* inner = idx.producer(v);
    if (!is_onnx_op(inner, "Add") || inner->inputs.size() != 2 || !idx.single_use(v)) continue;
    for (int j = 0; j < 2; ++j) {
      const Tensor* b = idx.constant(inner->inputs[j]);
      if (!b || b->rank() != 1 || inner->inputs[1 - j].empty()) continue;
      m.bias_add = inner;
      m.bias = inner->inputs[j];
      m.input = inner->inputs[1 - j];
      m.skip = m.add->inputs[1 - i];
      break;
    }
  }
  // The fused node sits where the Add was when the sum has other readers (they come after it),
  // so Scale and B must be defined by then; otherwise it sits where the LayerNorm was.
  auto pos = [&](const Node* n) { return n - g.nodes.data(); };
  bool defined_before_add = true;
  for (size_t i = 1; i < ln.inputs.size(); ++i) {
    const Node* p = ln.inputs[i].empty() ? nullptr : idx.producer(ln.inputs[i]);
    if (p && pos(p) > pos(m.add)) defined_before_add = false;
  }
  if (defined_before_add)
    m.at = m.add;
  else if (!m.sum_out)
    m.at = &ln;
  else
    return std::nullopt;
  return m;
}

class SkipLayerNormFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t rewrites = 0;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      std::map<const Node*, Node> at;
      std::set<const Node*> removed;
      {
        GraphIndex idx(g);
        for (const auto& n : g.nodes) {
          auto m = match(idx, g, n);
          if (!m || removed.count(m->add) || removed.count(m->ln) ||
              (m->bias_add && removed.count(m->bias_add)))
            continue;
          Node f;
          f.name = n.name.empty() ? n.outputs[0] + "_SkipLayerNorm" : n.name + "_SkipLayerNorm";
          f.op_type = "SkipLayerNorm";
          f.domain = "ai.kiln";
          f.inputs = {m->input, m->skip, n.inputs[1], n.inputs.size() > 2 ? n.inputs[2] : ""};
          if (!m->bias.empty()) f.inputs.push_back(m->bias);
          while (!f.inputs.empty() && f.inputs.back().empty()) f.inputs.pop_back();
          f.outputs = {n.outputs[0]};
          if (m->sum_out) f.outputs.push_back(n.inputs[0]);
          f.attrs = {ir::Attribute::of_int("axis", n.attr_int("axis", -1)),
                     ir::Attribute::of_float("epsilon", n.attr_float("epsilon", 1e-5f))};
          removed.insert(m->add);
          removed.insert(m->ln);
          if (m->bias_add) removed.insert(m->bias_add);
          at[m->at] = std::move(f);
        }
      }
      std::vector<Node> kept;
      for (auto& n : g.nodes) {
        if (auto it = at.find(&n); it != at.end())
          kept.push_back(std::move(it->second));
        else if (!removed.count(&n))
          kept.push_back(std::move(n));
      }
      g.nodes = std::move(kept);
      rewrites += static_cast<int64_t>(at.size());
    });
    if (rewrites > 0 && !model.opsets.count("ai.kiln")) model.opsets["ai.kiln"] = 1;
    return rewrites;
  }
};

}  // namespace

KILN_REGISTER_PASS(SkipLayerNormFusion, "skip-layer-norm", 2, kFuse, 12, false);

}  // namespace kiln::passes
