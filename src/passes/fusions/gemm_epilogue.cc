// -O2 fusion of a float MatMul or Gemm with a following bias Add, activation and/or residual Add
// into ai.kiln.FusedMatMul / ai.kiln.FusedGemm, and of the activation and residual Add after an
// ai.kiln.DynamicQuantMatMul into it, or after ONNX Runtime's MatMulIntegerToFloat into
// ai.kiln.MatMulIntegerToFloat, its inputs and the epilogue (docs/ops.md).
#include "ir/op_schema.h"
#include "ir/shape_inference.h"
#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using namespace epilogue;

const ir::Node* sole_add(const GraphIndex& idx, const std::string& v, const Taken& taken) {
  if (idx.use_count(v) != 1 || idx.consumers(v).size() != 1) return nullptr;
  const ir::Node* n = idx.consumers(v)[0];
  if (taken.count(n) || !n->domain.empty() || n->op_type != "Add" || n->inputs.size() != 2 ||
      n->inputs[0] == n->inputs[1])
    return nullptr;
  return n;
}

bool is_bias_for(const Tensor& c, const ir::TypeInfo& out, bool last_axis_only);

// ai.kiln.BiasGelu(v, bias) with a constant per-column bias and only the approximate attribute.
const ir::Node* bias_gelu(const GraphIndex& idx, const std::string& v, const ir::TypeInfo& out,
                          const Taken& taken) {
  if (idx.use_count(v) != 1 || idx.consumers(v).size() != 1) return nullptr;
  const ir::Node* n = idx.consumers(v)[0];
  if (taken.count(n) || n->domain != "ai.kiln" || n->op_type != "BiasGelu" ||
      n->inputs.size() != 2 || n->inputs[0] != v || n->inputs[1] == v || n->outputs.size() != 1)
    return nullptr;
  for (const auto& a : n->attrs)
    if (a.name != "approximate") return nullptr;
  const std::string approx = n->attr_string("approximate", "none");
  if (approx != "none" && approx != "tanh") return nullptr;
  const Tensor* b = idx.constant(n->inputs[1]);
  return b && is_bias_for(*b, out, true) ? n : nullptr;
}

// A fixed float32 tensor that broadcasts onto `out` without growing it: per-column (MatMul
// wants exactly N values along the last axis) or, for Gemm, anything unidirectionally
// broadcastable to [M, N].
bool is_bias_for(const Tensor& c, const ir::TypeInfo& out, bool last_axis_only) {
  if (c.dtype() != DType::kFloat32 || !out.has_shape || out.shape.empty()) return false;
  if (c.rank() > static_cast<int64_t>(out.shape.size())) return false;
  const size_t off = out.shape.size() - static_cast<size_t>(c.rank());
  for (int64_t i = 0; i < c.rank(); ++i) {
    const ir::Dim& d = out.shape[off + i];
    const bool last = off + i + 1 == out.shape.size();
    if (last_axis_only) {
      if (last ? !(d.known() && d.value == c.dim(i)) : c.dim(i) != 1) return false;
    } else if (c.dim(i) != 1 && !(d.known() && d.value == c.dim(i))) {
      return false;
    }
  }
  return !last_axis_only || c.rank() >= 1;
}

class GemmEpilogue : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    if (!has_op(model.graph, {"MatMul", "Gemm"}) && !has_op(model.graph, {"DynamicQuantMatMul"}, "ai.kiln") &&
        !has_op(model.graph, {"MatMulIntegerToFloat"}, "com.microsoft"))
      return int64_t{0};
    return fuse_sweep(model, ctx, [](const ir::Graph& g, const GraphIndex& idx, const Types& types,
                                const ir::Node& n, Rewrites& rw) {
      if (n.outputs.size() != 1) return;
      if (n.domain == "ai.kiln" && n.op_type == "DynamicQuantMatMul") fuse_dynamic_quant(g, idx, types, n, rw, 4);
      if (n.domain == "com.microsoft" && n.op_type == "MatMulIntegerToFloat") fuse_dynamic_quant(g, idx, types, n, rw, 7);
      if (!n.domain.empty()) return;
      if (n.op_type == "MatMul") fuse_matmul(g, idx, types, n, rw);
      if (n.op_type == "Gemm") fuse_gemm(g, idx, types, n, rw);
    });
  }

 private:
  // ai.kiln.DynamicQuantMatMul or com.microsoft.MatMulIntegerToFloat (their biases already in)
  // -> epilogue: kiln's op with the epilogue attributes and the residual as input `z_input`,
  // applied to each tile as it is dequantized.
  static void fuse_dynamic_quant(const ir::Graph& g, const GraphIndex& idx, const Types& types, const ir::Node& n,
                                 Rewrites& rw, size_t z_input) {
    if (n.inputs.size() > z_input || !n.attr_string("activation", "").empty()) return;
    auto e = match_epilogue(g, idx, types, n.outputs[0], rw.drop);
    if (!e) return;
    ir::Node f = n;
    f.domain = "ai.kiln";
    f.inputs.resize(z_input);
    f.inputs.push_back(e->z);
    f.outputs = {e->output};
    add_epilogue_attrs(f, *e);
    trim_inputs(f);
    std::vector<const ir::Node*> nodes{&n};
    nodes.insert(nodes.end(), e->nodes.begin(), e->nodes.end());
    rw.replace(nodes, std::move(f));
  }

  // MatMul -> [Add(bias)] -> epilogue. The bias alone is worth a fusion too.
  static void fuse_matmul(const ir::Graph& g, const GraphIndex& idx, const Types& types,
                          const ir::Node& n, Rewrites& rw) {
    if (n.inputs.size() != 2 || !n.has_input(0) || !n.has_input(1)) return;
    auto ta = types.of(n.inputs[0]), tb = types.of(n.inputs[1]), ty = types.of(n.outputs[0]);
    // 1-D operands drop dims from the result, so "the last axis" would not be N.
    if (!ta || !tb || !ty || ty->dtype != DType::kFloat32 || ta->dtype != DType::kFloat32 ||
        ir::rank_of(*ta) < 2 || ir::rank_of(*tb) < 2)
      return;
    std::vector<const ir::Node*> nodes{&n};
    std::string v = n.outputs[0], bias;
    // The GELU fusion (kFuse order 14) may have taken the bias Add already: Gelu(y + bias) is
    // ai.kiln.BiasGelu(y, bias).
    if (const ir::Node* bg = bias_gelu(idx, v, *ty, rw.drop)) {
      ir::Node f;
      f.name = n.name;
      f.op_type = "FusedMatMul";
      f.domain = "ai.kiln";
      f.inputs = {n.inputs[0], n.inputs[1], bg->inputs[1]};
      f.outputs = {bg->outputs[0]};
      nodes.push_back(bg);
      EpilogueMatch e;
      e.act =
          Activation{bg->attr_string("approximate", "none") == "tanh" ? "GeluTanh" : "Gelu", {}};
      e.output = bg->outputs[0];
      if (auto r = match_residual(g, idx, types, bg->outputs[0], rw.drop)) {
        e.z = r->z;
        f.inputs.push_back(r->z);
        f.outputs = {r->output};
        nodes.insert(nodes.end(), r->nodes.begin(), r->nodes.end());
      }
      add_epilogue_attrs(f, e);
      rw.replace(nodes, std::move(f));
      return;
    }
    if (const ir::Node* add = sole_add(idx, v, rw.drop)) {
      const std::string c = add->inputs[0] == v ? add->inputs[1] : add->inputs[0];
      const Tensor* t = idx.constant(c);
      if (t && is_bias_for(*t, *ty, true)) {
        bias = c;
        nodes.push_back(add);
        v = add->outputs[0];
      }
    }
    auto e = match_epilogue(g, idx, types, v, rw.drop);
    if (!e && bias.empty()) return;
    ir::Node f;
    f.name = n.name;
    f.op_type = "FusedMatMul";
    f.domain = "ai.kiln";
    f.inputs = {n.inputs[0], n.inputs[1], bias};
    f.outputs = {v};
    if (e) {
      f.inputs.push_back(e->z);
      f.outputs = {e->output};
      add_epilogue_attrs(f, *e);
      nodes.insert(nodes.end(), e->nodes.begin(), e->nodes.end());
    }
    trim_inputs(f);
    rw.replace(nodes, std::move(f));
  }

  // Gemm (without C: -> [Add(bias)]) -> epilogue.
  static void fuse_gemm(const ir::Graph& g, const GraphIndex& idx, const Types& types,
                        const ir::Node& n, Rewrites& rw) {
    if (n.inputs.size() < 2 || n.inputs.size() > 3 || !n.has_input(0) || !n.has_input(1)) return;
    auto ty = types.of(n.outputs[0]);
    if (!ty || ty->dtype != DType::kFloat32 || !types.is_float32(n.inputs[0])) return;
    std::vector<const ir::Node*> nodes{&n};
    std::string v = n.outputs[0], c = n.has_input(2) ? n.inputs[2] : "";
    bool set_beta = false;
    if (c.empty()) {
      if (const ir::Node* add = sole_add(idx, v, rw.drop)) {
        const std::string b = add->inputs[0] == v ? add->inputs[1] : add->inputs[0];
        const Tensor* t = idx.constant(b);
        if (t && is_bias_for(*t, *ty, false)) {
          c = b;
          set_beta = true;
          nodes.push_back(add);
          v = add->outputs[0];
        }
      }
    }
    auto e = match_epilogue(g, idx, types, v, rw.drop);
    if (!e && !set_beta) return;
    ir::Node f;
    f.name = n.name;
    f.op_type = "FusedGemm";
    f.domain = "ai.kiln";
    f.inputs = {n.inputs[0], n.inputs[1], c};
    f.outputs = {v};
    for (const auto& a : n.attrs)
      if (!(set_beta && a.name == "beta")) f.attrs.push_back(a);
    if (e) {
      f.inputs.push_back(e->z);
      f.outputs = {e->output};
      add_epilogue_attrs(f, *e);
      nodes.insert(nodes.end(), e->nodes.begin(), e->nodes.end());
    }
    trim_inputs(f);
    rw.replace(nodes, std::move(f));
  }
};

}  // namespace

KILN_REGISTER_PASS(GemmEpilogue, "gemm-epilogue", 2, kFuse, 50, false);

}  // namespace kiln::passes
