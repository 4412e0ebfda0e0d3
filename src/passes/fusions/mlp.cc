// -O2 fusion of two back-to-back float MatMuls with constant weights — the transformer MLP,
// FusedMatMul(x, W1, b1, act) → MatMul(·, W2) after gemm-epilogue — into ai.kiln.FusedMLP, whose
// kernel keeps the intermediate in cache (docs/ops.md).
#include "ir/shape_inference.h"
#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using namespace epilogue;

bool is_matmul(const ir::Node& n) {
  return (n.domain.empty() && n.op_type == "MatMul") ||
         (n.domain == "ai.kiln" && n.op_type == "FusedMatMul");
}

// A constant float32 [rows, cols] weight, or nullptr.
const Tensor* weight(const GraphIndex& idx, const std::string& v) {
  const Tensor* t = idx.constant(v);
  return t && t->dtype() == DType::kFloat32 && t->rank() == 2 ? t : nullptr;
}

// A constant float32 bias of exactly `n` values (FusedMatMul's contract), or nullptr.
const Tensor* bias(const GraphIndex& idx, const std::string& v, int64_t n) {
  const Tensor* t = idx.constant(v);
  return t && t->dtype() == DType::kFloat32 && t->numel() == n ? t : nullptr;
}

// The parts of one MatMul/FusedMatMul layer the fused op takes over: X·W (+ bias), then `act`
// attributes (FusedMatMul's own, copied). No residual input: FusedMLP has none.
struct Layer {
  std::string x, w, b;  // b: "" when none
  std::vector<ir::Attribute> act;
  int64_t rows = 0, cols = 0;  // W's shape
};

std::optional<Layer> layer(const GraphIndex& idx, const ir::Node& n) {
  if (!is_matmul(n) || n.outputs.size() != 1 || n.inputs.size() < 2 || n.inputs.size() > 3 ||
      !n.has_input(0) || !n.has_input(1) || n.inputs[0] == n.inputs[1])
    return std::nullopt;
  const Tensor* w = weight(idx, n.inputs[1]);
  if (!w) return std::nullopt;
  Layer l{n.inputs[0], n.inputs[1], n.has_input(2) ? n.inputs[2] : "", {}, w->dim(0), w->dim(1)};
  if (!l.b.empty() && !bias(idx, l.b, l.cols)) return std::nullopt;
  for (const auto& a : n.attrs) {
    if (a.name == "activation" || a.name == "activation_params" || a.name == "activation_clip") {
      l.act.push_back(a);
    } else if (a.name != "residual_before_activation") {  // meaningless without a residual
      return std::nullopt;
    }
  }
  return l;
}

bool has_activation(const Layer& l) {
  for (const auto& a : l.act)
    if (!a.s.empty() || !a.floats.empty()) return true;
  return false;
}

class MlpFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (!has_matmul(model.graph)) return int64_t{0};
    return fuse_sweep(model, ctx, [](const ir::Graph&, const GraphIndex& idx, const Types& types,
                                const ir::Node& n, Rewrites& rw) { fuse(idx, types, n, rw); });
  }

 private:
  static bool has_matmul(const ir::Graph& g) {
    for (const auto& n : g.nodes) {
      if (is_matmul(n)) return true;
      for (const auto& a : n.attrs) {
        if (a.g && has_matmul(*a.g)) return true;
        for (const auto& sg : a.graphs)
          if (sg && has_matmul(*sg)) return true;
      }
    }
    return false;
  }

  // fc1 = n, fc2 = the one node reading its output (not a graph output, read nowhere else).
  static void fuse(const GraphIndex& idx, const Types& types, const ir::Node& n, Rewrites& rw) {
    auto fc1 = layer(idx, n);
    if (!fc1) return;
    const ir::Node* n2 = idx.sole_consumer(n.outputs[0]);
    if (!n2 || rw.drop.count(n2)) return;
    auto fc2 = layer(idx, *n2);
    // fc2 applies nothing after its bias: its activation would need a second epilogue.
    if (!fc2 || fc2->x != n.outputs[0] || has_activation(*fc2) || fc2->rows != fc1->cols) return;
    // Float32 rows of K values (rank 2+, so the MatMuls keep every leading dim, as FusedMLP does).
    auto tx = types.of(fc1->x), ty = types.of(n2->outputs[0]);
    if (!tx || !ty || tx->dtype != DType::kFloat32 || ty->dtype != DType::kFloat32 ||
        !tx->has_shape || tx->shape.size() < 2 || !tx->shape.back().known() ||
        tx->shape.back().value != fc1->rows)
      return;
    ir::Node f;
    f.name = n.name;
    f.op_type = "FusedMLP";
    f.domain = "ai.kiln";
    f.inputs = {fc1->x, fc1->w, fc1->b, fc2->w, fc2->b};
    f.outputs = {n2->outputs[0]};
    f.attrs = fc1->act;
    trim_inputs(f);
    rw.replace({&n, n2}, std::move(f));
  }
};

}  // namespace

KILN_REGISTER_PASS(MlpFusion, "mlp-fusion", 2, kFuse, 55, false);

}  // namespace kiln::passes
