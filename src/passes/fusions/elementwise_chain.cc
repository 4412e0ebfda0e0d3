// -O2 fusion of chains of float32 elementwise nodes (Add, Sub, Mul, Div, Pow, Max, Min and the
// unary activations/math ops of ai.kiln.FusedElementwise) into one ai.kiln.FusedElementwise, so a
// memory-bound chain reads its inputs once and writes once. Runs after the other fusions, which
// keep the chains they recognise (epilogues, norms, GELU, attention).
#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "ir/gradient.h"
#include "ir/schemas/kiln_elementwise.h"
#include "ir/shape_inference.h"
#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using epilogue::Rewrites;
using epilogue::Taken;
using epilogue::Types;

// One node as a step of the chain whose running value it reads.
struct Step {
  const ir::EltwiseOpInfo* info = nullptr;
  std::string operand;  // binary: the other operand; "" when the node reads the running value twice
  bool swapped = false;
  std::vector<float> params;
};

// `small` broadcasts into `big` without growing it: every dim of `small` is 1 or provably equal to
// the aligned dim of `big`. A rank-0 value fits anything.
bool fits_into(const ir::TypeInfo& small, const ir::TypeInfo& big) {
  if (small.has_shape && small.shape.empty()) return true;
  if (!small.has_shape || !big.has_shape || small.shape.size() > big.shape.size()) return false;
  const size_t off = big.shape.size() - small.shape.size();
  for (size_t i = 0; i < small.shape.size(); ++i) {
    const ir::Dim& d = small.shape[i];
    if (!(d.known() && d.value == 1) && !ir::same_dim(d, big.shape[off + i])) return false;
  }
  return true;
}

// The node reading `v` and nothing else reading it (the node may read it twice, as in v*v).
const ir::Node* only_reader(const GraphIndex& idx, const std::string& v, const Taken& taken) {
  const auto& cs = idx.consumers(v);
  if (cs.empty() || idx.use_count(v) != static_cast<int>(cs.size())) return nullptr;
  for (const ir::Node* c : cs)
    if (c != cs[0]) return nullptr;
  return taken.count(cs[0]) ? nullptr : cs[0];
}

class ElementwiseChainFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    std::set<std::string> names;
    for (const ir::EltwiseOpInfo& op : ir::eltwise_ops()) names.insert(op.name);
    if (!epilogue::has_op(model.graph, names)) return int64_t{0};
    // A Gradient node differentiates through the standard forward nodes: leave them standard.
    if (ir::has_gradient_nodes(model.graph)) return int64_t{0};
    opset_ = model.opset("");
    return epilogue::fuse_sweep(
        model, ctx, [this](const ir::Graph&, const GraphIndex& idx, const Types& types,
                      const ir::Node& n, Rewrites& rw) { fuse_from(idx, types, n, rw); });
  }

 private:
  int64_t opset_ = 0;

  // The chain starting at `head`, grown while the running value has exactly one reader that is a
  // step; two or more nodes become one FusedElementwise.
  void fuse_from(const GraphIndex& idx, const Types& types, const ir::Node& head,
                 Rewrites& rw) const {
    std::string x0 = head_input(types, head);
    if (x0.empty()) return;
    auto first = as_step(idx, types, head, x0, /*head=*/true);
    if (!first) return;
    std::vector<const ir::Node*> nodes{&head};
    std::vector<Step> steps{*first};
    std::string v = head.outputs[0];
    while (const ir::Node* c = only_reader(idx, v, rw.drop)) {
      auto s = as_step(idx, types, *c, v, /*head=*/false);
      if (!s) break;
      nodes.push_back(c);
      steps.push_back(std::move(*s));
      v = c->outputs[0];
    }
    if (nodes.size() < 2) return;

    ir::Node f;
    f.name = head.name.empty() ? nodes.back()->name : head.name;
    f.op_type = "FusedElementwise";
    f.domain = "ai.kiln";
    f.inputs = {x0};
    f.outputs = {v};
    ir::Attribute ops = ir::Attribute::of_strings("ops", {});
    ir::Attribute operands = ir::Attribute::of_ints("operands", {});
    ir::Attribute swapped = ir::Attribute::of_ints("swapped", {});
    ir::Attribute params = ir::Attribute::of_floats("params", {});
    for (const Step& s : steps) {
      ops.strings.push_back(s.info->name);
      int64_t at = -1;
      if (s.info->binary && !s.operand.empty()) {
        auto it = std::find(f.inputs.begin(), f.inputs.end(), s.operand);
        at = it - f.inputs.begin();
        if (it == f.inputs.end()) f.inputs.push_back(s.operand);
      }
      operands.ints.push_back(at);
      swapped.ints.push_back(s.swapped ? 1 : 0);
      params.floats.insert(params.floats.end(), s.params.begin(), s.params.end());
    }
    f.attrs = {ops, operands, swapped};
    if (!params.floats.empty()) f.attrs.push_back(params);
    rw.replace(nodes, std::move(f));
  }

  // The input a chain headed by `n` starts from: the unary op's input; for a binary op the input
  // the other one broadcasts into (so the output has its shape), else input 0. "" when not a step.
  static std::string head_input(const Types& types, const ir::Node& n) {
    const ir::EltwiseOpInfo* info = ir::eltwise_op_info(n.op_type);
    if (!info || !n.domain.empty() || n.inputs.empty() || n.inputs[0].empty()) return "";
    if (!info->binary || n.inputs.size() != 2) return n.inputs[0];
    auto a = types.of(n.inputs[0]), b = types.of(n.inputs[1]);
    if (a && b && !fits_into(*b, *a) && fits_into(*a, *b)) return n.inputs[1];
    return n.inputs[0];
  }

  // `n` as a step applied to the running value `v`, or nullopt. Past the head, an operand must
  // broadcast into the running value, so earlier steps are never recomputed over a larger shape.
  std::optional<Step> as_step(const GraphIndex& idx, const Types& types, const ir::Node& n,
                              const std::string& v, bool head) const {
    Step s;
    s.info = ir::eltwise_op_info(n.op_type);
    if (!s.info || !n.domain.empty() || n.outputs.size() != 1 || n.outputs[0].empty())
      return std::nullopt;
    if (!types.is_float32(v) || !types.is_float32(n.outputs[0])) return std::nullopt;
    if (s.info->binary) {
      if (n.inputs.size() != 2 || n.inputs[0].empty() || n.inputs[1].empty() || !n.attrs.empty())
        return std::nullopt;
      if (n.inputs[0] == v && n.inputs[1] == v) return s;  // v op v
      if (n.inputs[0] != v && n.inputs[1] != v) return std::nullopt;
      s.swapped = n.inputs[1] == v;
      s.operand = s.swapped ? n.inputs[0] : n.inputs[1];
      auto to = types.of(s.operand), tv = types.of(v);
      if (!to || to->dtype != DType::kFloat32) return std::nullopt;
      if (!head && !fits_into(*to, *tv)) return std::nullopt;
      return s;
    }
    if (n.inputs.empty() || n.inputs[0] != v) return std::nullopt;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (n.inputs[i] == v) return std::nullopt;
    const std::string& op = n.op_type;
    // Only the attributes each op defines; anything else is not understood here.
    auto attrs_within = [&](std::initializer_list<const char*> ok) {
      for (const auto& a : n.attrs)
        if (std::none_of(ok.begin(), ok.end(), [&](const char* k) { return a.name == k; }))
          return false;
      return true;
    };
    if (op == "Clip") return clip_step(idx, n, s);
    if (n.inputs.size() != 1) return std::nullopt;
    if (op == "LeakyRelu" || op == "Elu") {
      if (!attrs_within({"alpha"})) return std::nullopt;
      s.params = {n.attr_float("alpha", op == "Elu" ? 1.0f : 0.01f)};
    } else if (op == "HardSigmoid") {
      if (!attrs_within({"alpha", "beta"})) return std::nullopt;
      s.params = {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)};
    } else if (!n.attrs.empty()) {
      return std::nullopt;
    }
    return s;
  }

  // Clip's bounds as the reference kernel reads them: attributes before opset 11 (absent: the
  // float range), constant float32 scalars after (absent: infinities).
  std::optional<Step> clip_step(const GraphIndex& idx, const ir::Node& n, Step s) const {
    if (opset_ < 11) {
      if (n.inputs.size() != 1) return std::nullopt;
      for (const auto& a : n.attrs)
        if (a.name != "min" && a.name != "max") return std::nullopt;
      s.params = {n.attr_float("min", std::numeric_limits<float>::lowest()),
                  n.attr_float("max", std::numeric_limits<float>::max())};
      return s;
    }
    if (n.inputs.size() > 3 || !n.attrs.empty()) return std::nullopt;
    s.params = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      const Tensor* t = idx.constant(n.inputs[i]);
      if (!t || t->dtype() != DType::kFloat32 || t->numel() != 1) return std::nullopt;
      s.params[i - 1] = t->data<float>()[0];
    }
    return s;
  }
};

}  // namespace

KILN_REGISTER_PASS(ElementwiseChainFusion, "elementwise-fusion", 2, kFuse, 70, false);

}  // namespace kiln::passes
