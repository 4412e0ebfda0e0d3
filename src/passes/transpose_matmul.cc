// Folds a Transpose of a 2-D operand into Gemm's transA/transB, and turns a 2-D MatMul with a
// transposed operand into a Gemm that reads the operand untransposed. Top-level graph only.
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// The input of a Transpose swapping the two axes of a 2-D tensor, or "".
std::string transposed_source(const ir::Node* p) {
  if (!p || p->op_type != "Transpose" || !p->domain.empty() || !p->has_input(0)) return "";
  if (p->attr_ints("perm") != std::vector<int64_t>{1, 0}) return "";
  return p->inputs[0];
}

void set_int_attr(ir::Node& n, const std::string& name, int64_t v) {
  for (auto& a : n.attrs)
    if (a.name == name) {
      a.i = v;
      return;
    }
  n.attrs.push_back(ir::Attribute::of_int(name, v));
}

class TransposeMatMul : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    ir::Graph& g = model.graph;
    std::map<std::string, const ir::Node*> producer;
    bool has_matmul = false;
    for (const auto& n : g.nodes) {
      for (const auto& o : n.outputs) producer[o] = &n;
      has_matmul |= n.op_type == "MatMul" && n.domain.empty();
    }
    // Gemm's C became optional in opset 11; only then can a MatMul become a Gemm.
    const ValueTypes* types = has_matmul && model.opset("") >= 11 ? &ctx.types() : nullptr;
    auto rank2_f32 = [&](const std::string& v) {
      const ir::TypeInfo* t = types && types->inferred ? types->tensor(v) : nullptr;
      return t && t->has_shape && t->shape.size() == 2 && t->dtype == DType::kFloat32;
    };
    auto source = [&](const std::string& v) {
      auto it = producer.find(v);
      return transposed_source(it == producer.end() ? nullptr : it->second);
    };
    int64_t rewrites = 0;
    for (auto& n : g.nodes) {
      if (!n.domain.empty() || n.inputs.size() < 2) continue;
      if (n.op_type == "Gemm") {
        for (int i = 0; i < 2; ++i) {
          const std::string src = source(n.inputs[i]);
          if (src.empty()) continue;
          const std::string attr = i == 0 ? "transA" : "transB";
          set_int_attr(n, attr, n.attr_int(attr, 0) ? 0 : 1);
          n.inputs[i] = src;
          ++rewrites;
        }
      } else if (n.op_type == "MatMul" && rank2_f32(n.inputs[0]) && rank2_f32(n.inputs[1])) {
        const std::string a = source(n.inputs[0]), b = source(n.inputs[1]);
        if (a.empty() && b.empty()) continue;
        n.op_type = "Gemm";
        n.attrs.clear();
        if (!a.empty()) {
          n.inputs[0] = a;
          set_int_attr(n, "transA", 1);
        }
        if (!b.empty()) {
          n.inputs[1] = b;
          set_int_attr(n, "transB", 1);
        }
        ++rewrites;
      }
    }
    return rewrites;
  }
};

}  // namespace

KILN_REGISTER_PASS(TransposeMatMul, "transpose-matmul", 1, kSimplify, 60, true);

}  // namespace kiln::passes
