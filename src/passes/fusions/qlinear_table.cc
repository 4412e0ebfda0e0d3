// qlinear-table (-O1, after qdq-fusion): Q(op(DQ(x), c...)) with op a function of x's element
// alone (is_code_function) and per-tensor constant parameters becomes ai.kiln.QLinearLookup(x,
// table), the table DequantizeLinear, op and QuantizeLinear's own kernels run on x's 256 codes
// (bit for bit the unfused ops); and a table read only by another table becomes one. A LeakyRelu,
// Tanh or HardSwish between 8-bit convs is then one pass over bytes (folded into the conv before
// it at -O3), not a dequantization, a float op and a quantization.
#include "passes/fusions/qlinear_table.h"

#include <set>

#include "ir/op_schema.h"
#include "kernels/kernel.h"
#include "kernels/kernel_util.h"
#include "passes/fusions/epilogue_match.h"
#include "passes/graph_edit.h"
#include "passes/graph_index.h"
#include "passes/pass.h"

namespace kiln::passes {

bool is_code_function(const ir::Node& n, const std::function<const Tensor*(const std::string&)>& constant) {
  static const std::set<std::string> excluded = {"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear",
                                                 "DynamicQuantizeLinear", "Dropout", "Relu", "Clip", "Identity"};
  if (!n.domain.empty() || n.outputs.size() != 1 || n.inputs.empty() || excluded.count(n.op_type)) return false;
  const ir::OpSchema* schema = ir::OpSchemaRegistry::global().find("", n.op_type);
  if (!schema || !schema->elementwise) return false;
  int data = 0;
  for (const std::string& in : n.inputs) {
    if (in.empty()) continue;
    const Tensor* c = constant(in);
    if (!c) ++data;
    else if (c->numel() != 1) return false;  // a per-position operand: not one function of the code
  }
  return data == 1;
}

Result<Tensor> run_kernel(const ir::Model& model, const ir::Node& n, const std::vector<const Tensor*>& inputs) {
  const KernelDef* def = KernelRegistry::global().own(n.domain, n.op_type);
  if (!def) return Status::error("no kernel for " + n.op_type);
  const int64_t opset = std::max<int64_t>(model.opset(n.domain), 1);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, def->create(n, opset));
  std::vector<Value> values;
  values.reserve(inputs.size());
  std::vector<const Value*> in;
  for (const Tensor* t : inputs) {
    values.push_back(t ? Value::of(*t) : Value());
    in.push_back(t ? &values.back() : nullptr);
  }
  KernelContext ctx(n, opset, std::move(in), nullptr, nullptr);
  KILN_RETURN_IF_ERROR(kernel->run(ctx));
  if (ctx.outputs.empty() || !ctx.outputs[0].is_tensor()) return Status::error(n.op_type + " gave no tensor");
  return ctx.outputs[0].tensor;
}

namespace {

// Node n's inputs as constant tensors (null where absent or not constant).
std::vector<const Tensor*> constants_of(const ir::Node& n, const GraphIndex& idx) {
  std::vector<const Tensor*> in;
  for (const std::string& v : n.inputs) in.push_back(v.empty() ? nullptr : idx.constant(v));
  return in;
}

}  // namespace

std::optional<Tensor> code_table(const ir::Model& model, const GraphIndex& idx, DType x_type, const ir::Node& dq,
                                 const ir::Node* op, const ir::Node& q) {
  Tensor codes = Tensor::make(x_type, {256}).value();
  for (int c = 0; c < 256; ++c) static_cast<uint8_t*>(codes.raw_data())[c] = static_cast<uint8_t>(c);
  std::vector<const Tensor*> dq_in = constants_of(dq, idx);
  dq_in[0] = &codes;
  auto y = run_kernel(model, dq, dq_in);
  if (!y) return std::nullopt;
  if (op) {
    std::vector<const Tensor*> op_in = constants_of(*op, idx);
    for (size_t i = 0; i < op->inputs.size(); ++i)
      if (op->inputs[i] == dq.outputs[0]) op_in[i] = &*y;
    y = run_kernel(model, *op, op_in);
    if (!y || y->dtype() != DType::kFloat32 || y->numel() != 256) return std::nullopt;
  }
  std::vector<const Tensor*> q_in = constants_of(q, idx);
  q_in[0] = &*y;
  auto table = run_kernel(model, q, q_in);
  if (!table) return std::nullopt;
  return std::move(table).value();
}

namespace {

// Per-tensor constant parameters of a QuantizeLinear/DequantizeLinear (scale, zero point given).
bool per_tensor(const ir::Node& q, const GraphIndex& idx) {
  if (q.inputs.size() < 3 || q.attr_int("block_size", 0) != 0) return false;
  const Tensor *s = idx.constant(q.inputs[1]), *z = idx.constant(q.inputs[2]);
  return s && z && s->numel() == 1 && z->numel() == 1 && s->dtype() == DType::kFloat32 &&
         dtype_is_8bit_integer(z->dtype());
}

bool is_lookup(const ir::Node* n) { return n && n->domain == "ai.kiln" && n->op_type == "QLinearLookup" && n->inputs.size() == 2; }

class QLinearTable : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t rewritten = 0;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      rewritten += rewrite_until_done(g, [&](const GraphIndex& idx, const ir::Node& q) {
        std::optional<NodeReplacement> r = rewrite(model, g, idx, q);
        if (!r) return false;
        std::vector<NodeReplacement> found{std::move(*r)};
        replace_nodes(g, found);
        return true;
      });
    });
    if (rewritten > 0) model.opsets.emplace("ai.kiln", 1);
    return rewritten;
  }

 private:
  // The rewrite rooted at q (a QuantizeLinear, or a QLinearLookup reading another), if any.
  static std::optional<NodeReplacement> rewrite(const ir::Model& model, ir::Graph& g, const GraphIndex& idx,
                                                const ir::Node& q) {
    const ir::Node* p = q.inputs.empty() ? nullptr : idx.producer(q.inputs[0]);
    if (!p || !idx.single_use(p->outputs[0]) || is_graph_output(g, p->outputs[0])) return std::nullopt;
    if (is_lookup(&q) && is_lookup(p)) {  // table of a table: one table
      const Tensor *inner = idx.constant(p->inputs[1]), *outer = idx.constant(q.inputs[1]);
      if (!inner || !outer || inner->numel() != 256 || outer->numel() != 256) return std::nullopt;
      Tensor t = Tensor::make(outer->dtype(), {256}).value();
      const auto* a = static_cast<const uint8_t*>(inner->raw_data());
      const auto* b = static_cast<const uint8_t*>(outer->raw_data());
      for (int c = 0; c < 256; ++c) static_cast<uint8_t*>(t.raw_data())[c] = b[a[c]];
      const std::string name = fresh_name(g, q.outputs[0] + "_table");
      g.initializers[name] = std::move(t);
      return NodeReplacement{{p, &q}, {make_node(q.outputs[0] + "_lookup", "QLinearLookup", {p->inputs[0], name}, q.outputs, "ai.kiln")}};
    }
    if (!is_onnx_op(&q, "QuantizeLinear") || !per_tensor(q, idx)) return std::nullopt;
    // A Relu or Clip left between DQ and Q is one too: one no code range absorbs (ReLU6 before
    // symmetric s8 codes, whose zero is mid-range: quantize_static's ActivationSymmetric).
    const bool clamp = (is_onnx_op(p, "Relu") || is_onnx_op(p, "Clip")) && epilogue::clamp_bounds(idx, *p);
    if (!clamp && !is_code_function(*p, [&](const std::string& v) { return idx.constant(v); })) return std::nullopt;
    const ir::Node* dq = nullptr;
    for (const std::string& in : p->inputs)
      if (!in.empty() && !idx.constant(in)) dq = idx.producer(in);
    if (!is_onnx_op(dq, "DequantizeLinear") || !per_tensor(*dq, idx)) return std::nullopt;
    auto table = code_table(model, idx, idx.constant(dq->inputs[2])->dtype(), *dq, p, q);
    if (!table) return std::nullopt;
    const std::string name = fresh_name(g, q.outputs[0] + "_table");
    g.initializers[name] = std::move(*table);
    // DQ stays for its other readers (dead-code drops it when none is left).
    return NodeReplacement{{p, &q}, {make_node(q.outputs[0] + "_lookup", "QLinearLookup", {dq->inputs[0], name}, q.outputs, "ai.kiln")}};
  }
};

}  // namespace

// After qdq-fusion (7), which gives Sigmoid its own op; before constant folding (10).
KILN_REGISTER_PASS(QLinearTable, "qlinear-table", 1, kSimplify, 8, false);

}  // namespace kiln::passes
