// What ONNX Runtime's dynamic quantizer (quantize_dynamic) writes around a Conv becomes a float
// Conv on its weights dequantized once here:
//
//   xq, xs, xz = DynamicQuantizeLinear(x)
//   y = Cast(ConvInteger(xq, wq, xz, wz) [+ Reshape(Cast(Floor(b / (xs * ws))))]) * (xs * ws)
//     -> y = Conv(x, (wq - wz) * ws [, b])
//
// The quantized form rounds x to 8 bits per tensor at every run; the float form computes the
// same layer on the exact dequantized weights, without the quantize, bias-rounding and dequantize
// ops around it, and takes the NCHWc layout and its epilogues (Winograd for 3x3). That is
// faster on VNNI CPUs too, so it runs on every CPU: crnn's 21 convs take 2.5 ms as float
// BlockedConvs against 4.7 ms of ConvInteger (vpdpwssd) plus 2.4 ms of the ops around them
// (Zen 4, 2 threads; Zen 2: BlockedConv 100-180 GFLOP/s, ConvInteger 88-124). MatMulInteger
// keeps its 8-bit weights: a classifier's [1024, 8210] MatMul over 20 rows streams its weights
// from memory, 4x more of them in float (measured: 4.8 ms float, 3.2 ms int8). Needs constant
// weights, zero points and scales (per tensor); -O1, portable.
#include <optional>

#include "core/float_convert.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using P = Pattern;

bool is_8bit(const Tensor& t) { return dtype_is_8bit_integer(t.dtype()); }
bool is_f32(const Tensor& t) { return t.dtype() == DType::kFloat32; }

bool casts_to(const ir::Node& n, DType t) { return n.attr_int("to", 0) == static_cast<int64_t>(t); }

// xs * ws: the scale of the int32 accumulator (ws captured as `name`).
P scale_product(const std::string& name) {
  return P::op("Mul", {P::value("xs"), P::constant(is_f32, name)}).commutative();
}

P conv_integer() {
  return P::op("ConvInteger",
               {P::value("xq"), P::constant(is_8bit, "wq"), P::value("xz"), P::constant(is_8bit, "wz")})
      .bind("int");
}

// Cast(acc) * (xs * ws), acc the ConvInteger, or the ConvInteger plus the bias that the quantizer
// rounds to the accumulator's scale at run time.
P dequantized(const P& acc) {
  return P::op("Mul", {P::op("Cast", {acc}).where([](const ir::Node& n) { return casts_to(n, DType::kFloat32); }),
                       scale_product("ws")})
      .commutative();
}
P conv_bias() {
  const P rounded = P::op("Floor", {P::op("Div", {P::constant(is_f32, "b"), scale_product("ws_bias")})});
  const P as_int = P::op("Cast", {rounded}).where([](const ir::Node& n) { return casts_to(n, DType::kInt32); });
  return P::op("Reshape", {as_int, P::constant([](const Tensor&) { return true; })});
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
}

// (wq - wz) * ws of W's shape, one scale and zero point for all of W; nullopt otherwise.
std::optional<Tensor> dequantize(const Tensor& wq, const Tensor& wz, const Tensor& ws) {
  if (wz.dtype() != wq.dtype() || wz.numel() != 1 || ws.numel() != 1) return std::nullopt;
  auto out = Tensor::make(DType::kFloat32, wq.shape());
  if (!out) return std::nullopt;
  float* w = out->data<float>();
  const float zero = static_cast<float>(load_as_double(wz.dtype(), wz.raw_data(), 0));
  const float scale = ws.data<float>()[0];
  for (int64_t i = 0; i < wq.numel(); ++i)
    w[i] = (static_cast<float>(load_as_double(wq.dtype(), wq.raw_data(), i)) - zero) * scale;
  return std::move(out).value();
}

// xq, xs and xz are outputs 0, 1 and 2 of one DynamicQuantizeLinear; its input, x.
std::optional<std::string> quantized_input(const Match& m, RuleContext& rc) {
  const ir::Node* q = rc.ctx.index(rc.graph).producer(m.value("xq"));
  if (!q || q->op_type != "DynamicQuantizeLinear" || !q->domain.empty() || q->outputs.size() != 3 ||
      q->inputs.size() != 1 || q->outputs[0] != m.value("xq") || q->outputs[1] != m.value("xs") ||
      q->outputs[2] != m.value("xz"))
    return std::nullopt;
  return q->inputs[0];
}

std::optional<std::vector<ir::Node>> to_float(const Match& m, RuleContext& rc, bool biased) {
  const auto x = quantized_input(m, rc);
  if (!x) return std::nullopt;
  const Tensor& ws = m.constant("ws");
  if (biased && !same_values(ws, m.constant("ws_bias"))) return std::nullopt;
  auto w = dequantize(m.constant("wq"), m.constant("wz"), ws);
  if (!w) return std::nullopt;
  const std::string w_name = rc.fresh_name(m.node("int").inputs[1] + "_dequantized");
  rc.graph.initializers[w_name] = std::move(*w);
  std::vector<std::string> inputs = {*x, w_name};
  if (biased) inputs.push_back(m.value("b"));
  ir::Node n = replacement_node(m, "Conv", inputs);
  n.attrs = m.node("int").attrs;  // ConvInteger's attributes are Conv's
  return std::vector<ir::Node>{std::move(n)};
}

class DynamicQuantFloat : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    static const std::vector<Rule> rules = {
        {"conv-integer-biased",
         dequantized(P::op("Add", {conv_integer(), conv_bias()}).commutative()),
         [](const Match& m, RuleContext& rc) { return to_float(m, rc, true); }},
        {"conv-integer", dequantized(conv_integer()),
         [](const Match& m, RuleContext& rc) { return to_float(m, rc, false); }},
    };
    return apply_rules(model, ctx, rules);
  }
};

}  // namespace

KILN_REGISTER_PASS(DynamicQuantFloat, "dynamic-quant-float", 1, kSimplify, 6, true);

}  // namespace kiln::passes
