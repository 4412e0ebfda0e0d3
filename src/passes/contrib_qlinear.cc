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
#include "passes/node_lowering.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

// DequantizeLinear of the (x, scale, zero point) at inputs i, i + 1, i + 2 of the node.
std::string dequantized(NodeLowering& l, size_t i) {
  return l.add("DequantizeLinear", {l.node.inputs[i], l.node.inputs[i + 1], l.input(i + 2)});
}

// QuantizeLinear of float `y` to the node's output with the scale and zero point at inputs i, i + 1.
bool quantize_to_output(NodeLowering& l, const std::string& y, size_t i) {
  l.add("QuantizeLinear", {y, l.node.inputs[i], l.node.inputs[i + 1]}, l.node.outputs[0]);
  return true;
}

// Softmax as of the node's `opset` attribute: before 13 the input is seen as 2-D, flattened at
// `axis` (default 1); from 13 on, along `axis` (default -1), which a Softmax of the model's own
// opset states only from 13 on ("" where it cannot: the node stays).
std::string softmax(NodeLowering& l, const std::string& x) {
  const bool flattened = l.node.attr_int("opset", 13) < 13;
  const int64_t axis = l.node.attr_int("axis", flattened ? 1 : -1);
  if (!flattened && l.model.opset("") < 13 && axis != -1) return "";
  if (!flattened) return l.add("Softmax", {x}, "", {ir::Attribute::of_int("axis", axis)});
  const std::string flat = l.add("Flatten", {x}, "", {ir::Attribute::of_int("axis", axis)});
  const std::string y = l.add("Softmax", {flat}, "", {ir::Attribute::of_int("axis", -1)});
  return l.add("Reshape", {y, l.add("Shape", {x})});
}

bool gemm(NodeLowering& l) {
  const ir::Node& n = l.node;
  const bool quantized_out = n.has_input(7);
  if (quantized_out && !n.has_input(8)) return false;  // a zero point names the 8-bit output type
  std::string a = n.inputs[0], b = n.inputs[3];
  if (n.attr_int("transA", 0) != 0) a = l.add("Transpose", {a}, "", {ir::Attribute::of_ints("perm", {1, 0})});
  if (n.attr_int("transB", 0) != 0) b = l.add("Transpose", {b}, "", {ir::Attribute::of_ints("perm", {1, 0})});
  std::string b_scale = n.inputs[4];
  if (const float alpha = n.attr_float("alpha", 1.0f); alpha != 1.0f)
    b_scale = l.add("Mul", {b_scale, l.constant(Tensor::scalar<float>(DType::kFloat32, alpha), "alpha")});
  std::vector<std::string> mm = {a, b, n.inputs[1], b_scale, n.inputs[2], n.inputs[5]};
  // c in float: c * as * bs * alpha; MatMulIntegerToFloat adds a bias of N values, an Add after it
  // any other shape c may have.
  std::string bias;
  if (n.has_input(6)) {
    const std::string c = l.add("Cast", {n.inputs[6]}, "", {ir::Attribute::of_int("to", 1)});
    bias = l.add("Mul", {c, l.add("Mul", {n.inputs[1], b_scale})});
  }
  const Tensor* c = n.has_input(6) ? l.index.constant(n.inputs[6]) : nullptr;
  const bool bias_row = c && c->rank() == 1;
  if (bias_row) mm.push_back(bias);
  std::string y = quantized_out || (!bias.empty() && !bias_row) ? l.value("float") : n.outputs[0];
  l.add("MatMulIntegerToFloat", mm, y, {}, "com.microsoft");
  if (!bias.empty() && !bias_row) y = l.add("Add", {y, bias}, quantized_out ? "" : n.outputs[0]);
  if (quantized_out) quantize_to_output(l, y, 7);
  return true;
}

bool matmul(NodeLowering& l) {
  const ir::Node& n = l.node;
  // MatMulIntegerToFloat takes float32 scales; QLinearMatMul from opset 21 may have float16 ones
  // (its reference kernel runs those).
  for (size_t i : {size_t{1}, size_t{4}, size_t{6}}) {
    const Tensor* s = l.index.constant(n.inputs[i]);
    if (!s || s->dtype() != DType::kFloat32) return false;
  }
  const std::string y = l.value("float");
  l.add("MatMulIntegerToFloat", {n.inputs[0], n.inputs[3], n.inputs[1], n.inputs[4], n.inputs[2], n.inputs[5]}, y, {},
        "com.microsoft");
  return quantize_to_output(l, y, 6);
}

bool lower(NodeLowering& l) {
  const ir::Node& n = l.node;
  const std::string& op = n.op_type;
  const size_t in = n.inputs.size();
  if (op == "QLinearMatMul" && n.domain.empty() && in == 8) return matmul(l);
  if (n.domain != "com.microsoft") return false;
  if (op == "QGemm" && in >= 6) return gemm(l);
  if (op == "QLinearConcat" && in >= 5 && (in - 2) % 3 == 0) {
    std::vector<std::string> xs;
    for (size_t i = 2; i < in; i += 3) xs.push_back(dequantized(l, i));
    return quantize_to_output(l, l.add("Concat", xs, "", l.attrs_except({})), 0);
  }
  if ((op == "QLinearAveragePool" || op == "QLinearLeakyRelu" || op == "QLinearSoftmax") && in == 5) {
    if (n.attr_int("channels_last", 0) != 0) return false;
    const std::string x = dequantized(l, 0);
    const std::string y = op == "QLinearSoftmax" ? softmax(l, x) : l.add(op.substr(7), {x}, "", l.attrs_except({"channels_last"}));
    return !y.empty() && quantize_to_output(l, y, 3);
  }
  if (op == "QLinearWhere" && in == 9)
    return quantize_to_output(l, l.add("Where", {n.inputs[0], dequantized(l, 1), dequantized(l, 4)}), 7);
  return false;
}

class ContribQLinear : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext&) override {
    const int64_t lowered = lower_nodes(model, lower);
    // MatMulIntegerToFloat is ONNX Runtime's.
    if (lowered > 0) model.opsets.emplace("com.microsoft", 1);
    return lowered;
  }
};

}  // namespace

KILN_REGISTER_PASS(ContribQLinear, "contrib-qlinear", 1, kSimplify, 4, true);

}  // namespace kiln::passes
