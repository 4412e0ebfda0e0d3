// Transpose(p) -> row-wise ops -> Transpose(p^-1) loses both Transposes. "Row-wise" ops work on
// the last axis alone (MatMul by a 2-D constant, arithmetic with a constant of rank <= 1, unary
// elementwise ops, LayerNormalization over the last axis), so permuting the other axes commutes
// with them. torch's batch_first MultiheadAttention leaves such a pair around its output
// projection once attention is fused.
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// Whether `n`, reading `v`, computes each row (last-axis vector) of its output from the same row
// of `v` alone, with the same function for every row.
bool row_wise(const GraphIndex& idx, const ir::Node& n, const std::string& v) {
  if (!n.domain.empty() || n.outputs.size() != 1 || n.inputs.empty()) return false;
  static const std::set<std::string> unary = {"Relu",     "Sigmoid", "Tanh",    "Erf", "Neg",
                                              "Abs",      "Sqrt",    "Exp",     "Log", "Reciprocal",
                                              "Softplus", "Gelu",    "Identity"};
  if (unary.count(n.op_type)) return n.inputs.size() == 1;
  if (n.op_type == "MatMul") {
    const Tensor* w = idx.constant(n.inputs[1]);
    return n.inputs[0] == v && n.inputs[1] != v && w && w->rank() == 2;
  }
  if (n.op_type == "Add" || n.op_type == "Sub" || n.op_type == "Mul" || n.op_type == "Div") {
    auto other = other_operand(n, v);
    const Tensor* c = other && *other != v ? idx.constant(*other) : nullptr;
    return c && c->rank() <= 1;
  }
  if (n.op_type == "LayerNormalization") {
    // Scale and bias are read along the normalised axis only when it is the last one.
    return n.inputs[0] == v && n.attr_int("axis", -1) == -1 && n.outputs.size() == 1;
  }
  return false;
}

// perm, or nullopt when absent (the default reverses the axes, which moves the last one).
std::optional<std::vector<int64_t>> keeps_last_axis(const ir::Node& t) {
  std::vector<int64_t> p = t.attr_ints("perm");
  if (p.size() < 2 || p.back() != static_cast<int64_t>(p.size()) - 1) return std::nullopt;
  return p;
}

class TransposeCancel : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    ir::Graph& g = model.graph;
    return rewrite_until_done(
        g, [&g](const GraphIndex& idx, const ir::Node& n) { return try_rewrite(g, idx, n); });
  }

 private:
  // Cancels `first` with the Transpose that undoes it, when one follows.
  static bool try_rewrite(ir::Graph& g, const GraphIndex& idx, const ir::Node& first) {
    if (!is_onnx_op(&first, "Transpose") || first.inputs.size() != 1 || first.outputs.size() != 1)
      return false;
    auto p = keeps_last_axis(first);
    if (!p) return false;
    // Follow single readers through row-wise ops to a Transpose that undoes `first`.
    std::vector<const ir::Node*> chain;
    std::string v = first.outputs[0];
    const ir::Node* last = nullptr;
    for (const ir::Node* n = idx.sole_consumer(v); n; n = idx.sole_consumer(v)) {
      if (is_onnx_op(n, "Transpose")) {
        last = n;
        break;
      }
      if (!row_wise(idx, *n, v)) break;
      chain.push_back(n);
      v = n->outputs[0];
    }
    // Back-to-back pairs are redundant-ops' to merge.
    if (!last || chain.empty()) return false;
    const std::vector<int64_t> q = last->attr_ints("perm");
    bool inverse = q.size() == p->size();
    for (size_t j = 0; inverse && j < q.size(); ++j)
      inverse = q[j] >= 0 && q[j] < static_cast<int64_t>(p->size()) &&
                (*p)[static_cast<size_t>(q[j])] == static_cast<int64_t>(j);
    if (!inverse) return false;
    rewrite(g, first, chain, *last);
    return true;
  }

  static void rewrite(ir::Graph& g, const ir::Node& first,
                      const std::vector<const ir::Node*>& chain, const ir::Node& last) {
    const std::string in = first.inputs[0], out = last.outputs[0];
    std::set<std::string> reshaped;
    for (auto& n : g.nodes) {
      if (std::find(chain.begin(), chain.end(), &n) == chain.end()) continue;
      for (auto& i : n.inputs)
        if (i == first.outputs[0]) i = in;
      reshaped.insert(n.outputs[0]);
      if (&n == chain.back()) n.outputs[0] = out;
    }
    std::vector<ir::Node> kept;
    for (auto& n : g.nodes)
      if (&n != &first && &n != &last) kept.push_back(std::move(n));
    g.nodes = std::move(kept);
    forget_value_info(g, reshaped);
  }
};

}  // namespace

// Level 1 and portable: it keeps standard ops. It runs with the fusions, after attention fusion
// (order 20) exposes the pair and before the epilogue fusions hide the MatMul and Add.
KILN_REGISTER_PASS(TransposeCancel, "transpose-cancel", 1, kFuse, 25, true);

}  // namespace kiln::passes
