// -O2 fusion of the elementwise tail after a FusedMLP (a per-column scale and a residual Add:
// ConvNeXt's `x + gamma * mlp(norm(dwconv(x)))` once channels-last has put the MLP's output in
// the layout of the residual) into the FusedMLP: the scale folds into W2 and B2 column by column,
// the residual becomes its R, added in the second product's write-out (docs/ops.md, FusedMLP).
// It runs in the layout stage because the tail is a FusedElementwise reading the MLP only there.
#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using namespace epilogue;

// A float32 constant of n values along the last axis only ([n], [1, n], [1, 1, n], ...).
const Tensor* column_scale(const GraphIndex& idx, const std::string& v, int64_t n) {
  const Tensor* t = idx.constant(v);
  if (!t || t->dtype() != DType::kFloat32 || t->rank() < 1 || t->numel() != n ||
      t->dim(t->rank() - 1) != n)
    return nullptr;
  return t;
}

// w [rows, n] (or n values) with column j times s[j].
Tensor scaled_columns(const Tensor& w, const Tensor& s) {
  const int64_t n = s.numel(), rows = w.numel() / n;
  Tensor out = Tensor::make(DType::kFloat32, w.shape()).value();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j)
      out.data<float>()[i * n + j] = w.data<float>()[i * n + j] * s.data<float>()[j];
  return out;
}

class MlpResidual : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (!has_mlp(model.graph)) return int64_t{0};
    ir::Graph& top = model.graph;
    std::set<std::string> replaced;  // the weights and biases scaled copies replace
    const int64_t fused = fuse_sweep(model, ctx, [&](const ir::Graph& g, const GraphIndex& idx,
                                                     const Types& types, const ir::Node& n,
                                                     Rewrites& rw) {
      if (&g == &top) fuse(top, idx, types, n, rw, replaced);
    });
    drop_unread_initializers(top, replaced);
    return fused;
  }

 private:
  static bool has_mlp(const ir::Graph& g) {
    for (const auto& n : g.nodes)
      if (n.domain == "ai.kiln" && n.op_type == "FusedMLP") return true;
    return false;
  }

  // n: a FusedMLP without R; its one reader computes Y * s + Z or Y + Z.
  static void fuse(ir::Graph& g, const GraphIndex& idx, const Types& types, const ir::Node& n,
                   Rewrites& rw, std::set<std::string>& replaced) {
    if (n.domain != "ai.kiln" || n.op_type != "FusedMLP" || n.inputs.size() > 5 ||
        n.outputs.size() != 1)
      return;
    const std::string& y = n.outputs[0];
    const ir::Node* e = idx.sole_consumer(y);
    const Tensor* w2 = n.has_input(3) ? idx.constant(n.inputs[3]) : nullptr;
    const Tensor* b2 = n.has_input(4) ? idx.constant(n.inputs[4]) : nullptr;
    if (!e || rw.drop.count(e) || e->domain != "ai.kiln" || e->op_type != "FusedElementwise" ||
        e->has_attr("x0_parts") || e->outputs.size() != 1 || e->inputs.empty() ||
        e->inputs[0] != y || !w2 || w2->rank() != 2 || w2->dtype() != DType::kFloat32 ||
        (n.has_input(4) && (!b2 || b2->dtype() != DType::kFloat32)))
      return;
    const std::vector<std::string> ops = e->attr_strings("ops");
    const std::vector<int64_t> operands = e->attr_ints("operands");
    if (ops.size() != operands.size() || !e->attr_floats("params").empty()) return;
    const bool scaled = ops == std::vector<std::string>{"Mul", "Add"};
    if (!scaled && ops != std::vector<std::string>{"Add"}) return;
    for (int64_t i : operands)
      if (i < 1 || i >= static_cast<int64_t>(e->inputs.size())) return;
    const std::string& z = e->inputs[static_cast<size_t>(operands.back())];
    const std::string& scale = e->inputs[static_cast<size_t>(operands[0])];
    const Tensor* s = scaled ? column_scale(idx, scale, w2->dim(1)) : nullptr;
    if ((scaled && !s) || z == y || idx.constant(z) || !types.same_float_shape(z, y) ||
        !types.same_float_shape(e->outputs[0], y))
      return;
    ir::Node f = n;
    f.inputs.resize(6);
    if (s) {
      replaced.insert(n.inputs[3]);
      f.inputs[3] = fresh_name(g, n.inputs[3] + "_scaled");
      g.initializers[f.inputs[3]] = scaled_columns(*w2, *s);
      if (b2) {
        replaced.insert(n.inputs[4]);
        f.inputs[4] = fresh_name(g, n.inputs[4] + "_scaled");
        g.initializers[f.inputs[4]] = scaled_columns(*b2, *s);
      }
    }
    f.inputs[5] = z;
    f.outputs = e->outputs;
    rw.replace({&n, e}, std::move(f));
  }
};

}  // namespace

// After channels-last (layout, 15); level 2, as the fusion itself needs no blocked layout.
KILN_REGISTER_PASS(MlpResidual, "mlp-residual", 2, kLayout, 16, false);

}  // namespace kiln::passes
