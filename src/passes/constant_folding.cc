// Constant folding: a node whose inputs are all fixed initializers is run once, now, with its
// reference kernel, and its outputs become initializers. Random ops, control flow and ops whose
// result would bloat the model are left alone. In a portable model the nodes that widen stored
// weights stay: DequantizeLinear of 8-bit weights (how a QDQ model states its int8 ops, which the
// runtime that loads it, ONNX Runtime, TensorRT or OpenVINO, runs in 8 bits only while it sees
// them) and Cast of float16/bfloat16 weights to float (the model keeps half the size).
#include <set>

#include "core/thread_pool.h"
#include "kernels/kernel.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// Folding must not change what a run computes, so nothing random is folded.
const std::set<std::string> kNeverFold = {
    "RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli",
    "Multinomial", "Dropout"};

// A folded output larger than this stays computed at run time: ConstantOfShape or Expand into a
// big constant would grow the saved model, for little gain.
constexpr int64_t kMaxFoldedBytes = int64_t{16} << 20;

class ConstantFolding : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ThreadPool pool(1);
    int64_t folded = 0;
    const bool portable = ctx.options().portable;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      std::vector<ir::Node> kept;
      for (auto& n : g.nodes) {
        if (!(portable && widens_stored_weights(g, n)) && fold(model, g, n, pool)) {
          ++folded;
          continue;
        }
        kept.push_back(std::move(n));
      }
      g.nodes = std::move(kept);
    });
    return folded;
  }

 private:
  static bool widens_stored_weights(const ir::Graph& g, const ir::Node& n) {
    if (!n.domain.empty()) return false;
    if (n.op_type == "DequantizeLinear") return true;
    if (n.op_type != "Cast" || n.inputs.empty() || n.attr_int("to", 0) != static_cast<int64_t>(DType::kFloat32))
      return false;
    const Tensor* t = constant_value(g, n.inputs[0]);
    return t && (t->dtype() == DType::kFloat16 || t->dtype() == DType::kBFloat16);
  }

  // Runs `n` when all its inputs are constant; true when its outputs became initializers.
  static bool fold(const ir::Model& model, ir::Graph& g, const ir::Node& n, ThreadPool& pool) {
    if (kNeverFold.count(n.op_type) || !n.domain.empty()) return false;
    // An omitted first input is an error for every foldable op; run time reports it.
    if (!n.inputs.empty() && n.inputs[0].empty()) return false;
    for (const auto& a : n.attrs)
      if (a.g || !a.graphs.empty()) return false;
    std::vector<Value> values;
    values.reserve(n.inputs.size());
    for (const auto& in : n.inputs) {
      if (in.empty()) {
        values.emplace_back();
        continue;
      }
      const Tensor* t = constant_value(g, in);
      if (!t) return false;
      values.push_back(Value::of(*t));
    }
    for (const auto& o : n.outputs)
      if (o.empty() || is_graph_output(g, o)) return false;  // keep graph outputs computed by nodes
    const KernelDef* def = KernelRegistry::global().own(n.domain, n.op_type);
    if (!def) return false;
    const int64_t opset = std::max<int64_t>(model.opset(n.domain), 1);
    auto kernel = def->create(n, opset);
    if (!kernel) return false;
    std::vector<const Value*> inputs;
    for (size_t i = 0; i < values.size(); ++i) inputs.push_back(n.inputs[i].empty() ? nullptr : &values[i]);
    KernelContext ctx(n, opset, std::move(inputs), &pool, nullptr);
    // A kernel error here (e.g. a shape that does not broadcast) is left for run time to report.
    if (!(*kernel)->run(ctx).is_ok()) return false;
    for (const auto& out : ctx.outputs)
      if (!out.is_tensor() || !out.tensor.defined() || out.tensor.nbytes() > kMaxFoldedBytes) return false;
    for (size_t i = 0; i < n.outputs.size(); ++i) g.initializers[n.outputs[i]] = ctx.outputs[i].tensor;
    return true;
  }
};

}  // namespace

KILN_REGISTER_PASS(ConstantFolding, "constant-folding", 1, kSimplify, 10, true);

}  // namespace kiln::passes
