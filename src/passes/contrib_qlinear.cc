// ONNX Runtime's QOperator form (its quantize_static with QuantFormat.QOperator) states 8-bit
// ops of its own. Those kiln has kernels for stay (QLinearConv, QLinearAdd, QLinearMul,
// QLinearSigmoid, QLinearGlobalAveragePool); the rest become standard ops here:
//
//   QGemm(a, as, az, b, bs, bz [, c] [, ys, yz])   -> MatMulIntegerToFloat(a, b', as, bs * alpha, az, bz,
//                                                     c * as * bs * alpha) [-> QuantizeLinear(ys, yz)]
//   QLinearMatMul(a, as, az, b, bs, bz, ys, yz)    -> MatMulIntegerToFloat(a, b, as, bs, az, bz) -> QuantizeLinear
//   QLinearConcat, QLinearAveragePool, QLinearLeakyRelu, QLinearSoftmax, QLinearWhere
//                                                   -> DequantizeLinear -> the float op -> QuantizeLinear
//
// MatMulIntegerToFloat runs the 8-bit GEMM and dequantizes as its tiles finish (its bias and the
// QuantizeLinear after it are float steps where ONNX Runtime adds c in int32 and requantizes in
// one step: the same value to float rounding, so a code may differ where it lands on a half).
// The rest is the QDQ form, which qdq-fusion (next) gives 8-bit kernels where it has them and
// otherwise runs in float between. QGemm's c is int32 at scale as * bs * alpha (ONNX Runtime's
// QGemm; its quantizer writes beta = 1). -O1, portable: the output is standard ONNX plus
// MatMulIntegerToFloat, which ONNX Runtime loads.
#include "passes/graph_edit.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// Builds the nodes that replace one QOperator node, naming new values after it.
class Lowering {
 public:
  // `taken`: the names lowerings of this graph gave so far (not yet in it).
  Lowering(ir::Graph& g, const ir::Node& n, int64_t opset, std::set<std::string>& taken)
      : g_(g), n_(n), opset_(opset), taken_(taken) {}

  std::vector<ir::Node> nodes;

  // A fresh value name for `what`.
  std::string value(const std::string& what) {
    std::string name = fresh_name(g_, n_.outputs[0] + "_" + what);
    while (taken_.count(name)) name += "_";
    taken_.insert(name);
    return name;
  }
  std::string add(std::string op, std::vector<std::string> inputs, std::string out = "",
                  std::vector<ir::Attribute> attrs = {}, std::string domain = "") {
    if (out.empty()) out = value(op);
    ir::Node node = make_node(n_.name + "_" + op + std::to_string(nodes.size()), std::move(op), std::move(inputs),
                              {out}, std::move(domain));
    node.attrs = std::move(attrs);
    nodes.push_back(std::move(node));
    return out;
  }
  // DequantizeLinear of the (x, scale, zero point) at inputs i, i + 1, i + 2 of the node.
  std::string dequantized(size_t i) {
    return add("DequantizeLinear", {n_.inputs[i], n_.inputs[i + 1], n_.has_input(i + 2) ? n_.inputs[i + 2] : ""});
  }
  // QuantizeLinear of float `y` to the node's output with the scale and zero point at inputs i, i + 1.
  void quantize_to_output(const std::string& y, size_t i) {
    add("QuantizeLinear", {y, n_.inputs[i], n_.inputs[i + 1]}, n_.outputs[0]);
  }
  // The node's attributes, less those named in `drop`.
  std::vector<ir::Attribute> attrs_except(std::initializer_list<std::string_view> drop) const {
    std::vector<ir::Attribute> out;
    for (const ir::Attribute& a : n_.attrs)
      if (std::find(drop.begin(), drop.end(), a.name) == drop.end()) out.push_back(a);
    return out;
  }

  bool lower() {
    const std::string& op = n_.op_type;
    const size_t in = n_.inputs.size();
    if (op == "QGemm" && in >= 6) return gemm();
    if (op == "QLinearMatMul" && n_.domain.empty() && in == 8) return matmul();
    if (op == "QLinearConcat" && in >= 5 && (in - 2) % 3 == 0) {
      std::vector<std::string> xs;
      for (size_t i = 2; i < in; i += 3) xs.push_back(dequantized(i));
      quantize_to_output(add("Concat", xs, "", attrs_except({})), 0);
      return true;
    }
    if (in < 4) return false;
    const bool unary = op == "QLinearAveragePool" || op == "QLinearLeakyRelu" || op == "QLinearSoftmax";
    if (unary && in == 5) {
      if (n_.attr_int("channels_last", 0) != 0) return false;
      const std::string x = dequantized(0);
      const std::string y = op == "QLinearSoftmax" ? softmax(x) : add(op.substr(7), {x}, "", attrs_except({"channels_last"}));
      if (y.empty()) return false;
      quantize_to_output(y, 3);
      return true;
    }
    if (op == "QLinearWhere" && in == 9) {
      const std::string x = dequantized(1), y = dequantized(4);
      quantize_to_output(add("Where", {n_.inputs[0], x, y}), 7);
      return true;
    }
    return false;
  }

 private:
  // Softmax as of the node's `opset` attribute: before 13 the input is seen as 2-D, flattened at
  // `axis` (default 1); from 13 on, along `axis` (default -1), which a Softmax of the model's own
  // opset states only from 13 on ("" where it cannot: the node stays).
  std::string softmax(const std::string& x) {
    const bool flattened = n_.attr_int("opset", 13) < 13;
    const int64_t axis = n_.attr_int("axis", flattened ? 1 : -1);
    if (!flattened && opset_ < 13 && axis != -1) return "";
    if (!flattened) return add("Softmax", {x}, "", {ir::Attribute::of_int("axis", axis)});
    const std::string flat = add("Flatten", {x}, "", {ir::Attribute::of_int("axis", axis)});
    const std::string y = add("Softmax", {flat}, "", {ir::Attribute::of_int("axis", -1)});
    return add("Reshape", {y, add("Shape", {x})});
  }
  // b * alpha, where alpha is not 1.
  std::string scaled(const std::string& b_scale, float alpha) {
    if (alpha == 1.0f) return b_scale;
    Tensor t = Tensor::make(DType::kFloat32, {}).value();
    t.data<float>()[0] = alpha;
    const std::string name = value("alpha");
    g_.initializers[name] = std::move(t);
    return add("Mul", {b_scale, name});
  }
  bool gemm() {
    const bool quantized_out = n_.has_input(7);
    if (quantized_out && !n_.has_input(8)) return false;  // a zero point names the 8-bit output type
    std::string a = n_.inputs[0], b = n_.inputs[3];
    if (n_.attr_int("transA", 0) != 0) a = add("Transpose", {a}, "", {ir::Attribute::of_ints("perm", {1, 0})});
    if (n_.attr_int("transB", 0) != 0) b = add("Transpose", {b}, "", {ir::Attribute::of_ints("perm", {1, 0})});
    const std::string b_scale = scaled(n_.inputs[4], n_.attr_float("alpha", 1.0f));
    std::vector<std::string> mm = {a, b, n_.inputs[1], b_scale, n_.inputs[2], n_.inputs[5]};
    // c in float: c * as * bs * alpha; MatMulIntegerToFloat adds a bias of N values, an Add after it
    // any other shape c may have.
    std::string bias;
    if (n_.has_input(6)) {
      const std::string c = add("Cast", {n_.inputs[6]}, "", {ir::Attribute::of_int("to", 1)});
      bias = add("Mul", {c, add("Mul", {n_.inputs[1], b_scale})});
    }
    const Tensor* c = n_.has_input(6) ? constant_value(g_, n_.inputs[6]) : nullptr;
    const bool bias_row = c && c->rank() == 1;
    if (bias_row) mm.push_back(bias);
    std::string y = quantized_out || (!bias.empty() && !bias_row) ? value("float") : n_.outputs[0];
    add("MatMulIntegerToFloat", mm, y, {}, "com.microsoft");
    if (!bias.empty() && !bias_row) y = add("Add", {y, bias}, quantized_out ? "" : n_.outputs[0]);
    if (quantized_out) quantize_to_output(y, 7);
    return true;
  }
  bool matmul() {
    // MatMulIntegerToFloat takes float32 scales; QLinearMatMul from opset 21 may have float16 ones
    // (its reference kernel runs those).
    for (size_t i : {size_t{1}, size_t{4}, size_t{6}}) {
      const Tensor* s = constant_value(g_, n_.inputs[i]);
      if (!s || s->dtype() != DType::kFloat32) return false;
    }
    const std::string y = value("float");
    add("MatMulIntegerToFloat", {n_.inputs[0], n_.inputs[3], n_.inputs[1], n_.inputs[4], n_.inputs[2], n_.inputs[5]},
        y, {}, "com.microsoft");
    quantize_to_output(y, 6);
    return true;
  }

  ir::Graph& g_;
  const ir::Node& n_;
  int64_t opset_;
  std::set<std::string>& taken_;
};

bool is_lowered(const ir::Node& n) {
  if (n.op_type == "QLinearMatMul") return n.domain.empty();
  return n.domain == "com.microsoft" &&
         (n.op_type == "QGemm" || n.op_type == "QLinearConcat" || n.op_type == "QLinearAveragePool" ||
          n.op_type == "QLinearLeakyRelu" || n.op_type == "QLinearSoftmax" || n.op_type == "QLinearWhere");
}

class ContribQLinear : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    int64_t lowered = 0;
    const auto it = model.opsets.find("");
    const int64_t opset = it == model.opsets.end() ? 21 : it->second;
    bool wrote_contrib = false;
    for_each_graph(model.graph, [&](ir::Graph& g) {
      // Lowered first, on the whole graph (fresh names look at its nodes), then put in place.
      std::set<std::string> taken;
      std::vector<std::vector<ir::Node>> lowerings(g.nodes.size());
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        const ir::Node& n = g.nodes[i];
        if (!is_lowered(n) || n.outputs.empty()) continue;
        Lowering l(g, n, opset, taken);
        if (!l.lower()) continue;
        ++lowered;
        wrote_contrib |= n.op_type == "QGemm" || n.op_type == "QLinearMatMul";
        lowerings[i] = std::move(l.nodes);
      }
      std::vector<ir::Node> out;
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (lowerings[i].empty()) out.push_back(std::move(g.nodes[i]));
        for (ir::Node& m : lowerings[i]) out.push_back(std::move(m));
      }
      g.nodes = std::move(out);
    });
    if (wrote_contrib) model.opsets.emplace("com.microsoft", 1);
    return lowered;
  }
};

}  // namespace

KILN_REGISTER_PASS(ContribQLinear, "contrib-qlinear", 1, kSimplify, 4, true);

}  // namespace kiln::passes
