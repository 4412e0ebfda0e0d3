// Quantized models in QDQ form (what ONNX Runtime's quantize_static and kiln quantize write, and
// TensorRT and OpenVINO read) state each int8 op as float ops between DequantizeLinear and
// QuantizeLinear. This pass gives those ops their 8-bit kernels:
//
//   Q(Conv(DQ(xq), DQ(wq) [, DQ(bq)]), ys, yz)      -> QLinearConv(xq, ..., wq, ..., ys, yz [, bq])
//   Q(Relu or Clip(Conv(...)))                      -> the same, when the clamp changes no code (Q's
//                                                      saturation does it: a Relu before u8 codes
//                                                      from 0, a ReLU6 before codes within [0, 6])
//   Conv(DQ(xq), DQ(wq) [, b]) no Q reads           -> ai.kiln.QLinearConv(xq, ..., wq, ..., "", "" [, bq]):
//                                                      Y float32, the sums scaled (a TensorRT-style
//                                                      model's conv before its residual add)
//   Q(act(Conv(...))), act a SiLU, Sigmoid, Tanh,   -> ai.kiln.QLinearConv(..., activation=act): the
//   HardSwish, HardSigmoid or LeakyRelu               activation on the float sums, Y quantized
//                                                      after it (where kiln quantize leaves the
//                                                      conv's own output in float, kiln's form)
//   MatMul(DQ(xq), DQ(wq)), Gemm(DQ(xq), DQ(wq)      -> com.microsoft.MatMulIntegerToFloat(xq, wq', xs, ws',
//   [, c]), wq constant (a classifier's, a           xz, wz' [, bias]): the 8-bit GEMM on the packed
//   transformer's projections)                        weights, float out (wq' = wq^T for transB, ws' =
//                                                      ws * alpha, bias = beta * c, c's DQ evaluated)
//   Q(MaxPool(DQ(xq)), s, z), DQ's s and z           -> MaxPool(xq) (max commutes with a monotone map)
//   Q([Relu or Clip](Add(DQ(a), DQ(b))))            -> com.microsoft.QLinearAdd(a, ..., b, ..., ys, yz)
//   Q([Relu or Clip](Mul(DQ(a), DQ(b))))            -> com.microsoft.QLinearMul (the same inputs)
//   Q(Sigmoid(DQ(x)))                               -> com.microsoft.QLinearSigmoid(x, xs, xz, ys, yz)
//   Q(GlobalAveragePool(DQ(x)))                     -> com.microsoft.QLinearGlobalAveragePool(x, xs, xz,
//                                                      ys, yz) (the sum in integers: may differ by a code)
//   Q(Concat(DQ(a), DQ(b), ...)), Q(Reshape(DQ(x)))  -> Concat(a', b', ...), Reshape(x'), ... (an op that
//   and other ops that only move elements             only moves elements moves the codes; x' is x or,
//                                                      with other parameters, a table of x's code)
//   Q(part) of each part of Split(DQ(x))             -> Split(x), each part through a table where its
//                                                      Q's parameters are not x's
//
// x's DequantizeLinear stays for its other readers (dead-code drops it when none is left); the
// weights' and bias's are absorbed. Needs per-tensor x and y parameters, 8-bit weights with their
// zero points (per tensor or per output channel; s8 with zero points 0 as most quantizers write
// them, u8 from ONNX Runtime's QUInt8 weights; float weights with their own Q, fake-quantized, fold
// to codes first), a bias in the accumulator's scale (xs * ws, as ONNX Runtime's quantizer writes
// it) or any constant one, rounded to it (TensorRT-style QDQ leaves biases float). Runs before
// constant folding, which would fold DQ(wq) into float weights.
// On every CPU: the 8-bit conv's AVX2 tile runs ONNX Runtime's QDQ resnet50 in 33 ms against
// 36-42 ms for the float convs on the folded weights (AMD EPYC Zen 4 capped at AVX2). Not
// portable: QLinearAdd, QLinearMul, QLinearSigmoid and QLinearGlobalAveragePool are ONNX Runtime's
// (which loads them);
// QLinearConv and 8-bit MaxPool are standard ONNX.
#include <cmath>

#include "core/float_convert.h"
#include "ir/topological_order.h"
#include "kernels/cpu/qconv/qlinear_conv.h"
#include "kernels/kernel_util.h"
#include "passes/fusions/epilogue_match.h"
#include "passes/fusions/qlinear_table.h"
#include "passes/graph_edit.h"
#include "passes/pass.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

using P = Pattern;

bool is_f32(const Tensor& t) { return t.dtype() == DType::kFloat32; }
bool is_8bit(const Tensor& t) { return dtype_is_8bit_integer(t.dtype()); }
bool is_i32(const Tensor& t) { return t.dtype() == DType::kInt32; }
bool any_tensor(const Tensor&) { return true; }

// DequantizeLinear of a constant (weights, bias), its parts captured as name_q, name_s, name_z.
P dequantized_constant(const std::string& name, bool (*accept)(const Tensor&)) {
  return P::op("DequantizeLinear",
               {P::constant(accept, name + "_q"), P::constant(is_f32, name + "_s"), P::constant(any_tensor, name + "_z")})
      .bind(name);
}

P conv(bool biased) {
  std::vector<P> in = {P::value("x"), dequantized_constant("w", is_8bit)};
  if (biased) in.push_back(P::value("b"));
  return P::op("Conv", in).bind("conv");
}

P quantized(const P& p) { return P::op("QuantizeLinear", {p, P::constant(is_f32, "ys"), P::value("yz")}).bind("q"); }

// A per-tensor quantization's scale and zero point inputs of node n (a Q or DQ): constants, one
// value each, the zero point 8-bit (absent: u8 0).
struct Params {
  std::string scale, zero_point;  // zero_point "" when absent
  float s = 0;
  int32_t z = 0;
  DType type = DType::kUInt8;
};
std::optional<Params> per_tensor(const ir::Node& n, const GraphIndex& idx) {
  if (n.inputs.size() < 2 || n.attr_int("block_size", 0) != 0) return std::nullopt;
  const Tensor* s = idx.constant(n.inputs[1]);
  const Tensor* z = n.inputs.size() > 2 && !n.inputs[2].empty() ? idx.constant(n.inputs[2]) : nullptr;
  if (!s || !is_f32(*s) || s->numel() != 1) return std::nullopt;
  if (n.inputs.size() > 2 && !n.inputs[2].empty() && (!z || z->numel() != 1 || !dtype_is_8bit_integer(z->dtype())))
    return std::nullopt;
  Params p{n.inputs[1], z ? n.inputs[2] : "", s->data<float>()[0], 0, z ? z->dtype() : DType::kUInt8};
  if (z) p.z = static_cast<int32_t>(load_as_double(z->dtype(), z->raw_data(), 0));
  return p;
}

// The DequantizeLinear producing `value`, and its per-tensor parameters.
std::optional<std::pair<const ir::Node*, Params>> dequantized_input(const std::string& value, RuleContext& rc) {
  const GraphIndex& idx = rc.ctx.index(rc.graph);
  const ir::Node* dq = idx.producer(value);
  if (!is_onnx_op(dq, "DequantizeLinear") || dq->inputs.empty()) return std::nullopt;
  auto p = per_tensor(*dq, idx);
  if (!p) return std::nullopt;
  return std::make_pair(dq, *p);
}

// Whether every value of the bias scale is x_scale * w_scale of its channel (relative 1e-6).
bool accumulator_scaled(const Tensor& bias_scale, float xs, const Tensor& ws) {
  if (bias_scale.numel() != ws.numel() && bias_scale.numel() != 1) return false;
  for (int64_t i = 0; i < ws.numel(); ++i) {
    const float want = xs * ws.data<float>()[i];
    const float got = bias_scale.data<float>()[bias_scale.numel() == 1 ? 0 : i];
    if (std::fabs(got - want) > 1e-6f * std::fabs(want)) return false;
  }
  return true;
}

// Whether the matched clamp (a Relu or Clip bound "act", when the rule has one) changes no code of
// the QuantizeLinear after it: then the 8-bit op's saturation does it.
bool clamp_absorbed(const Match& m, RuleContext& rc, const Params& y) {
  auto it = m.nodes.find("act");
  if (it == m.nodes.end()) return true;
  const auto bounds = epilogue::clamp_bounds(rc.ctx.index(rc.graph), *it->second);
  return bounds && epilogue::clamp_is_saturation(bounds->first, bounds->second, y.s, y.z, y.type);
}

// An activation the 8-bit conv applies to its float sums (ai.kiln.QLinearConv's `activation`),
// as a pattern over the conv's: its name there, and where its parameters are read from.
struct ConvActivation {
  const char* name;
  P pattern;
  std::vector<std::pair<const char*, float>> params;  // the bound "activation" node's attributes, defaults
};

std::vector<ConvActivation> conv_activations(bool biased) {
  P shared = conv(biased);
  shared.shared();
  auto of = [&](const char* op) { return P::op(op, {conv(biased)}).bind("activation"); };
  return {{"Silu", P::op("Mul", {shared, P::op("Sigmoid", {P::value("conv")})}).commutative(), {}},
          {"Sigmoid", of("Sigmoid"), {}},
          {"Tanh", of("Tanh"), {}},
          {"HardSwish", of("HardSwish"), {}},
          {"HardSigmoid", of("HardSigmoid"), {{"alpha", 0.2f}, {"beta", 0.5f}}},
          {"LeakyRelu", of("LeakyRelu"), {{"alpha", 0.01f}}}};
}

// Node n's output by its own kernel, where every input it names is a constant; else nullopt.
std::optional<Tensor> evaluated(const ir::Model& model, const GraphIndex& idx, const ir::Node& n) {
  std::vector<const Tensor*> in;
  for (const std::string& v : n.inputs) {
    in.push_back(v.empty() ? nullptr : idx.constant(v));
    if (!v.empty() && !in.back()) return std::nullopt;
  }
  auto t = run_kernel(model, n, in);
  return t ? std::optional<Tensor>(std::move(*t)) : std::nullopt;
}

// `value` as a float32 constant: itself, or a DequantizeLinear of constants evaluated (a bias as
// the quantizers write it); null where it is neither.
std::optional<Tensor> float_constant(const std::string& value, RuleContext& rc) {
  const GraphIndex& idx = rc.ctx.index(rc.graph);
  if (const Tensor* t = idx.constant(value)) return is_f32(*t) ? std::optional<Tensor>(*t) : std::nullopt;
  const ir::Node* dq = idx.producer(value);
  if (!is_onnx_op(dq, "DequantizeLinear")) return std::nullopt;
  auto t = evaluated(rc.model, idx, *dq);
  return t && is_f32(*t) ? t : std::nullopt;
}

// The conv's bias `value` as QLinearConv's int32 bias in the accumulator's scale (xs * ws): the
// quantizers' DQ(int32 codes) of that scale as it is; a float bias (TensorRT-style QDQ, which
// quantizes weights and activations alone) or a DQ of another scale rounded to it, as ONNX
// Runtime and TensorRT do: half a step of xs * ws at most, far below Y's. nullopt where neither.
std::optional<std::string> int32_bias(const std::string& value, float xs, const Tensor& ws, int64_t filters,
                                      RuleContext& rc) {
  const GraphIndex& idx = rc.ctx.index(rc.graph);
  const ir::Node* dq = idx.producer(value);
  if (is_onnx_op(dq, "DequantizeLinear") && dq->inputs.size() == 3) {
    const Tensor *q = idx.constant(dq->inputs[0]), *s = idx.constant(dq->inputs[1]), *z = idx.constant(dq->inputs[2]);
    if (q && s && z && is_i32(*q) && q->numel() == filters && all_zero(*z) && accumulator_scaled(*s, xs, ws))
      return dq->inputs[0];
  }
  const auto b = float_constant(value, rc);
  if (!b || b->numel() != filters) return std::nullopt;
  Tensor codes = Tensor::make(DType::kInt32, {filters}).value();
  for (int64_t f = 0; f < filters; ++f) {
    const double step = static_cast<double>(xs) * ws.data<float>()[ws.numel() == 1 ? 0 : f];
    const double c = std::nearbyint(b->data<float>()[f] / step);
    if (!(std::fabs(c) < 2147483647.0)) return std::nullopt;  // (a zero step too)
    codes.data<int32_t>()[f] = static_cast<int32_t>(c);
  }
  const std::string name = rc.fresh_name(value + "_int32");
  rc.graph.initializers[name] = std::move(codes);
  return name;
}

// The conv as QLinearConv; where the match has no QuantizeLinear "q" (a rule rooted at the conv),
// ai.kiln's with a float Y.
std::optional<std::vector<ir::Node>> to_qlinear_conv(const Match& m, RuleContext& rc, bool biased,
                                                     const ConvActivation* act = nullptr) {
  const auto x = dequantized_input(m.value("x"), rc);
  const bool float_y = m.nodes.count("q") == 0;
  const auto y = float_y ? std::optional<Params>(Params{}) : per_tensor(m.node("q"), rc.ctx.index(rc.graph));
  if (!x || !y || (!float_y && y->zero_point.empty())) return std::nullopt;
  const Tensor &ws = m.constant("w_s"), &wz = m.constant("w_z");
  const int64_t filters = m.constant("w_q").rank() > 0 ? m.constant("w_q").dim(0) : 0;
  // One scale and zero point, or one each a filter; W's zero points of its type (u8 weights too:
  // the 8-bit conv subtracts them, qlinear_conv.cc).
  auto per_filter = [&](const Tensor& t) { return t.numel() == 1 || (t.rank() == 1 && t.numel() == filters); };
  const bool any_per_filter = ws.numel() != 1 || wz.numel() != 1;
  if (wz.dtype() != m.constant("w_q").dtype() || !per_filter(ws) || !per_filter(wz) || ws.rank() > 1 ||
      (any_per_filter && m.node("w").attr_int("axis", 1) != 0))
    return std::nullopt;
  if (!float_y && !clamp_absorbed(m, rc, *y)) return std::nullopt;
  const ir::Node& dq = *x->first;
  std::vector<std::string> in = {dq.inputs[0], x->second.scale, x->second.zero_point,
                                 m.node("w").inputs[0], m.node("w").inputs[1], m.node("w").inputs[2],
                                 y->scale, y->zero_point};
  if (biased) {
    auto b = int32_bias(m.value("b"), x->second.s, ws, filters, rc);
    if (!b) return std::nullopt;
    in.push_back(*b);
  }
  ir::Node n = replacement_node(m, "QLinearConv", in);
  n.attrs = m.node("conv").attrs;
  if (act || float_y) {  // ai.kiln's, which runs only on the tiles
    n.domain = "ai.kiln";
    std::vector<const Tensor*> constants;
    for (const std::string& v : n.inputs) constants.push_back(v.empty() ? nullptr : rc.ctx.index(rc.graph).constant(v));
    if (!qlinear_conv_tileable(n, constants)) return std::nullopt;
    rc.model.opsets.emplace("ai.kiln", 1);
  }
  if (act) {
    n.attrs.push_back(ir::Attribute::of_string("activation", act->name));
    if (!act->params.empty()) {
      std::vector<float> params;
      for (const auto& [name, fallback] : act->params) params.push_back(m.node("activation").attr_float(name, fallback));
      n.attrs.push_back(ir::Attribute::of_floats("activation_params", params));
    }
    rc.model.opsets.emplace("ai.kiln", 1);
  }
  return std::vector<ir::Node>{std::move(n)};
}

// Q(Add or Mul(DQ(a), DQ(b))) of one 8-bit type throughout: ONNX Runtime's QLinearAdd or
// QLinearMul (its QOperator forms), whose kernels compute the same float operations in one pass
// over 8-bit data.
std::optional<std::vector<ir::Node>> to_qlinear_binary(const Match& m, RuleContext& rc, const char* op) {
  const auto a = dequantized_input(m.value("a"), rc), b = dequantized_input(m.value("b"), rc);
  const auto y = per_tensor(m.node("q"), rc.ctx.index(rc.graph));
  if (!a || !b || !y || y->zero_point.empty() || a->second.type != y->type || b->second.type != y->type)
    return std::nullopt;
  const ir::TypeInfo* ta = rc.ctx.types().tensor(a->first->inputs[0]);
  const ir::TypeInfo* tb = rc.ctx.types().tensor(b->first->inputs[0]);
  if (!ta || !tb || ta->dtype != y->type || tb->dtype != y->type) return std::nullopt;
  if (!clamp_absorbed(m, rc, *y)) return std::nullopt;
  ir::Node n = replacement_node(m, op,
                                {a->first->inputs[0], a->second.scale, a->second.zero_point, b->first->inputs[0],
                                 b->second.scale, b->second.zero_point, y->scale, y->zero_point},
                                "com.microsoft");
  rc.model.opsets.emplace("com.microsoft", 1);
  return std::vector<ir::Node>{std::move(n)};
}

// Q(op(DQ(x))) of one 8-bit type as ONNX Runtime's (x, xs, xz, ys, yz) op: QLinearSigmoid, a
// 256-entry table (SiLU's and squeeze-excitation's sigmoids in QDQ efficientnets), and
// QLinearGlobalAveragePool, which sums the codes exactly and requantizes once (a classifier's
// pool and every squeeze-excitation's; channels-last at -O3, without the transpose back to NCHW).
std::optional<std::vector<ir::Node>> to_qlinear_unary(const Match& m, RuleContext& rc, const char* op) {
  const auto x = dequantized_input(m.value("x"), rc);
  const auto y = per_tensor(m.node("q"), rc.ctx.index(rc.graph));
  if (!x || !y || x->second.zero_point.empty() || y->zero_point.empty() || x->second.type != y->type)
    return std::nullopt;
  ir::Node n = replacement_node(m, op, {x->first->inputs[0], x->second.scale, x->second.zero_point, y->scale, y->zero_point},
                                "com.microsoft");
  rc.model.opsets.emplace("com.microsoft", 1);
  return std::vector<ir::Node>{std::move(n)};
}

std::optional<std::vector<ir::Node>> to_8bit_max_pool(const Match& m, RuleContext& rc) {
  const auto x = dequantized_input(m.value("x"), rc);
  const auto y = per_tensor(m.node("q"), rc.ctx.index(rc.graph));
  if (!x || !y || x->second.s != y->s || x->second.z != y->z || x->second.type != y->type) return std::nullopt;
  if (m.node("pool").outputs.size() != 1) return std::nullopt;  // Indices are not 8-bit
  ir::Node n = replacement_node(m, "MaxPool", {x->first->inputs[0]});
  n.attrs = m.node("pool").attrs;
  return std::vector<ir::Node>{std::move(n)};
}

// MatMul(DQ(x), DQ(w)) or Gemm(DQ(x), DQ(w) [, c]), w a constant 2-D 8-bit matrix quantized per
// tensor or per output column: MatMulIntegerToFloat(xq, w [K, N], xs, ws, xz, wz [, bias]), which
// sums the codes exactly and scales each output once. (Left to constant folding, the weights
// became float: 4x the bytes a GEMM streams, resnet50's classifier 0.2 ms of float Gemm against
// ONNX Runtime's 0.055 of QGemm, AVX2.)
std::optional<std::vector<ir::Node>> to_matmul_integer(const Match& m, RuleContext& rc, bool gemm, bool biased) {
  const auto x = dequantized_input(m.value("x"), rc);
  if (!x) return std::nullopt;
  const ir::TypeInfo* xt = rc.ctx.types().tensor(x->first->inputs[0]);
  const ir::Node& op = *m.root;
  const Tensor &wq = m.constant("w_q"), &ws = m.constant("w_s"), &wz = m.constant("w_z");
  const bool trans_b = gemm && op.attr_int("transB", 0) != 0;
  if (!xt || !dtype_is_8bit_integer(xt->dtype) || (gemm && op.attr_int("transA", 0) != 0)) return std::nullopt;
  if (wq.rank() != 2 || !dtype_is_8bit_integer(wq.dtype()) || wz.dtype() != wq.dtype()) return std::nullopt;
  const int64_t k = wq.dim(trans_b ? 1 : 0), n = wq.dim(trans_b ? 0 : 1);
  // One scale and zero point, or one each per output column (the DQ's axis is wq's column axis).
  const ir::Node& w_dq = m.node("w");
  int64_t axis = w_dq.attr_int("axis", 1);
  if (axis < 0) axis += 2;
  auto per_column = [&](const Tensor& t) {
    return t.numel() == 1 ? t.rank() <= 1 : t.rank() == 1 && t.numel() == n && axis == (trans_b ? 0 : 1);
  };
  if (!per_column(ws) || !per_column(wz) || w_dq.attr_int("block_size", 0) != 0) return std::nullopt;
  std::vector<std::string> in = {x->first->inputs[0], w_dq.inputs[0], x->second.scale, w_dq.inputs[1],
                                 x->second.zero_point, w_dq.inputs[2]};
  auto add_constant = [&](const std::string& base, Tensor t) {
    const std::string name = rc.fresh_name(base);
    rc.graph.initializers[name] = std::move(t);
    return name;
  };
  const std::string base = op.outputs[0];
  if (trans_b) {  // [N, K] -> [K, N]
    Tensor t = Tensor::make(wq.dtype(), {k, n}).value();
    const auto* from = static_cast<const uint8_t*>(wq.raw_data());
    auto* to = static_cast<uint8_t*>(t.raw_data());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) to[c * n + r] = from[r * k + c];
    in[1] = add_constant(base + "_weights", std::move(t));
  }
  if (const float alpha = gemm ? op.attr_float("alpha", 1.0f) : 1.0f; alpha != 1.0f) {
    Tensor t = ws.clone();  // (copies share storage)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= alpha;
    in[3] = add_constant(base + "_weight_scale", std::move(t));
  }
  if (biased) {  // beta * c as one value per column
    const auto c = float_constant(m.value("c"), rc);
    if (!c || !(c->numel() == 1 || (c->numel() == n && c->dim(c->rank() - 1) == n))) return std::nullopt;
    Tensor bias = Tensor::make(DType::kFloat32, {n}).value();
    const float beta = op.attr_float("beta", 1.0f);
    for (int64_t j = 0; j < n; ++j) bias.data<float>()[j] = beta * c->data<float>()[c->numel() == 1 ? 0 : j];
    in.push_back(add_constant(base + "_bias", std::move(bias)));
  }
  rc.model.opsets.emplace("com.microsoft", 1);
  return std::vector<ir::Node>{replacement_node(m, "MatMulIntegerToFloat", in, "com.microsoft")};
}

// Ops that only move elements (every output element is one of the data inputs' elements), and
// how many inputs they may have; Concat's are all data, the others' only the first.
const std::pair<const char*, size_t> kMovers[] = {
    {"Concat", 16}, {"Reshape", 2}, {"Transpose", 1}, {"Squeeze", 2}, {"Unsqueeze", 2}, {"Flatten", 1},
    {"Slice", 5},   {"Gather", 2},  {"Expand", 2},    {"Tile", 2},    {"Resize", 4},    {"DepthToSpace", 1},
    {"SpaceToDepth", 1}};

// Q(move(DQ(x1), ...)): QuantizeLinear commutes with an op that only moves elements, so the op can
// move 8-bit codes instead, each x given the output's parameters first: x itself where they are
// already its own, else ai.kiln.QLinearLookup(x, Q(DQ(code)) of the 256 codes, code_table). Bit for bit the
// unfused ops' values (an 8-bit model's concatenations, upsamplings and reshapes, which ONNX
// Runtime's QOperator form states on 8-bit data and its QDQ form between Q and DQ).
std::optional<std::vector<ir::Node>> to_8bit_move(const Match& m, RuleContext& rc) {
  const ir::Node& move = m.node("move");
  const auto y = per_tensor(m.node("q"), rc.ctx.index(rc.graph));
  if (!y || move.outputs.size() != 1) return std::nullopt;
  if (move.op_type == "Resize" && (move.attr_string("mode", "nearest") != "nearest" ||
                                   move.attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize"))
    return std::nullopt;
  const size_t data_inputs = move.op_type == "Concat" ? move.inputs.size() : 1;
  std::vector<ir::Node> out;
  ir::Node moved = replacement_node(m, move.op_type, move.inputs);
  moved.attrs = move.attrs;
  for (size_t i = 0; i < data_inputs; ++i) {
    const auto x = dequantized_input(move.inputs[i], rc);
    if (!x) return std::nullopt;
    const ir::TypeInfo* xt = rc.ctx.types().tensor(x->first->inputs[0]);
    if (!xt || !dtype_is_8bit_integer(xt->dtype) || xt->dtype != x->second.type) return std::nullopt;
    moved.inputs[i] = x->first->inputs[0];
    if (x->second.s == y->s && x->second.z == y->z && x->second.type == y->type) continue;
    auto table = code_table(rc.model, rc.ctx.index(rc.graph), x->second.type, *x->first, nullptr, m.node("q"));
    if (!table) return std::nullopt;
    // Named after the Q's output (unique among this sweep's rewrites, which are not yet in the graph).
    const std::string base = m.node("q").outputs[0] + "_input" + std::to_string(i);
    const std::string table_name = rc.fresh_name(base + "_table");
    rc.graph.initializers[table_name] = std::move(*table);
    const std::string requantized = rc.fresh_name(base);
    out.push_back(make_node(requantized, "QLinearLookup", {moved.inputs[i], table_name}, {requantized}, "ai.kiln"));
    moved.inputs[i] = requantized;
    rc.model.opsets.emplace("ai.kiln", 1);
  }
  out.push_back(std::move(moved));
  return out;
}

// Split(DQ(x)) whose every output a QuantizeLinear alone reads (a YOLO C2f block's halves, each
// on to an 8-bit conv): the Split moves x's codes instead, as to_8bit_move's ops do, each output
// given its Q's parameters by a table (ai.kiln.QLinearLookup) where they are not x's. Not a rule:
// the rewrite ends at several Qs. Returns how many it rewrote.
int64_t split_codes(ir::Model& model, PassContext& ctx) {
  ir::Graph& g = model.graph;
  const GraphIndex& idx = ctx.index(g);
  std::vector<NodeReplacement> found;
  for (const ir::Node& split : g.nodes) {
    if (!is_onnx_op(&split, "Split") || split.inputs.empty()) continue;
    const ir::Node* dq = idx.producer(split.inputs[0]);
    const auto x = is_onnx_op(dq, "DequantizeLinear") ? per_tensor(*dq, idx) : std::nullopt;
    const ir::TypeInfo* xt = dq ? ctx.types().tensor(dq->inputs[0]) : nullptr;
    if (!x || !xt || xt->dtype != x->type) continue;
    NodeReplacement r{{&split}, {}};
    ir::Node moved = split;
    moved.inputs[0] = dq->inputs[0];
    std::vector<ir::Node> tables;
    for (size_t i = 0; i < split.outputs.size() && r.remove.size() == i + 1; ++i) {
      const ir::Node* q = idx.sole_consumer(split.outputs[i]);
      const bool quantized = is_onnx_op(q, "QuantizeLinear") && !is_graph_output(g, split.outputs[i]);
      const auto y = quantized ? per_tensor(*q, idx) : std::nullopt;
      if (!y || y->type != x->type) break;
      r.remove.push_back(q);
      moved.outputs[i] = q->outputs[0];
      if (y->s == x->s && y->z == x->z) continue;
      auto table = code_table(model, idx, x->type, *dq, nullptr, *q);
      if (!table) break;
      const std::string name = fresh_name(g, q->outputs[0] + "_table"), codes = fresh_name(g, q->outputs[0] + "_moved");
      g.initializers[name] = std::move(*table);
      moved.outputs[i] = codes;
      tables.push_back(make_node(codes + "_lookup", "QLinearLookup", {codes, name}, q->outputs, "ai.kiln"));
    }
    if (r.remove.size() != split.outputs.size() + 1) continue;  // (a table made stays unread: dropped later)
    r.put.push_back(std::move(moved));
    r.put.insert(r.put.end(), tables.begin(), tables.end());
    if (!tables.empty()) model.opsets.emplace("ai.kiln", 1);
    found.push_back(std::move(r));
  }
  if (found.empty()) return 0;
  replace_nodes(g, found);
  (void)ir::sort_topologically(g);  // (put at the last Q's place: its siblings' readers may come before)
  ctx.invalidate();
  return static_cast<int64_t>(found.size());
}

// QuantizeLinear of constants (float weights with a Q/DQ pair on them, as NVIDIA's
// pytorch-quantization and other fake-quant exports write them): the codes, as an initializer,
// so that the rules see DQ(constant codes). Constant folding comes after this pass, and would
// fold the DQ as well, leaving float weights. Returns how many it folded.
int64_t fold_quantized_constants(ir::Model& model, PassContext& ctx) {
  ir::Graph& g = model.graph;
  const GraphIndex& idx = ctx.index(g);
  std::vector<std::pair<size_t, Tensor>> folded;  // node index, its codes
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!is_onnx_op(&n, "QuantizeLinear") || n.outputs.size() != 1 || is_graph_output(g, n.outputs[0])) continue;
    const Tensor* x = n.inputs.empty() ? nullptr : idx.constant(n.inputs[0]);
    if (!x || !is_f32(*x)) continue;
    if (auto codes = evaluated(model, idx, n)) folded.emplace_back(i, std::move(*codes));
  }
  for (auto it = folded.rbegin(); it != folded.rend(); ++it) {
    g.initializers[g.nodes[it->first].outputs[0]] = std::move(it->second);
    g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(it->first));
  }
  if (!folded.empty()) ctx.invalidate();
  return static_cast<int64_t>(folded.size());
}

// The clamps a QuantizeLinear may absorb, as patterns over `p`: none, Relu, and Clip with its
// bounds as attributes (1 input) or inputs (2 or 3).
std::vector<std::pair<std::string, P>> clamped(const P& p) {
  return {{"", p},
          {"relu-", P::op("Relu", {p}).bind("act")},
          {"clip1-", P::op("Clip", {p}).bind("act")},
          {"clip2-", P::op("Clip", {p, P::value("")}).bind("act")},
          {"clip3-", P::op("Clip", {p, P::value(""), P::value("")}).bind("act")}};
}

std::vector<Rule> make_rules() {
  std::vector<Rule> rules;
  for (const bool biased : {true, false})
    for (const ConvActivation& act : conv_activations(biased))
      rules.push_back({std::string("conv-") + act.name, quantized(act.pattern),
                       [biased, act](const Match& m, RuleContext& rc) { return to_qlinear_conv(m, rc, biased, &act); }});
  // Longer forms first at each root: the clamped ones, then the plain.
  for (int i = 4; i >= 0; --i) {
    for (const bool biased : {true, false}) {
      auto [prefix, pattern] = clamped(conv(biased))[static_cast<size_t>(i)];
      rules.push_back({prefix + (biased ? "conv-bias" : "conv"), quantized(pattern),
                       [biased](const Match& m, RuleContext& rc) { return to_qlinear_conv(m, rc, biased); }});
    }
    for (const char* op : {"Add", "Mul"}) {
      auto [prefix, pattern] = clamped(P::op(op, {P::value("a"), P::value("b")}))[static_cast<size_t>(i)];
      const char* fused = op[0] == 'A' ? "QLinearAdd" : "QLinearMul";
      rules.push_back({prefix + (op[0] == 'A' ? "add" : "mul"), quantized(pattern),
                       [fused](const Match& m, RuleContext& rc) { return to_qlinear_binary(m, rc, fused); }});
    }
  }
  rules.push_back({"matmul", P::op("MatMul", {P::value("x"), dequantized_constant("w", is_8bit)}),
                   [](const Match& m, RuleContext& rc) { return to_matmul_integer(m, rc, false, false); }});
  rules.push_back({"gemm-bias", P::op("Gemm", {P::value("x"), dequantized_constant("w", is_8bit), P::value("c")}),
                   [](const Match& m, RuleContext& rc) { return to_matmul_integer(m, rc, true, true); }});
  rules.push_back({"gemm", P::op("Gemm", {P::value("x"), dequantized_constant("w", is_8bit)}),
                   [](const Match& m, RuleContext& rc) { return to_matmul_integer(m, rc, true, false); }});
  rules.push_back({"sigmoid", quantized(P::op("Sigmoid", {P::value("x")})),
                   [](const Match& m, RuleContext& rc) { return to_qlinear_unary(m, rc, "QLinearSigmoid"); }});
  rules.push_back({"max-pool", quantized(P::op("MaxPool", {P::value("x")}).bind("pool")), to_8bit_max_pool});
  rules.push_back({"global-average-pool", quantized(P::op("GlobalAveragePool", {P::value("x")})),
                   [](const Match& m, RuleContext& rc) { return to_qlinear_unary(m, rc, "QLinearGlobalAveragePool"); }});
  for (const auto& [op, max_inputs] : kMovers)
    for (size_t n = 1; n <= max_inputs; ++n)
      rules.push_back({std::string("move-") + op, quantized(P::op(op, std::vector<P>(n, P::value(""))).bind("move")),
                       to_8bit_move});
  return rules;
}

class QdqFusion : public Pass {
 public:
  Result<int64_t> run(ir::Model& model, PassContext& ctx) override {
    static const std::vector<Rule> rules = make_rules();
    // Then the convs no Q follows (their output goes on in float: a TensorRT-style model, which
    // quantizes the inputs of convs alone, adds its residuals in float) as float-Y QLinearConvs.
    static const std::vector<Rule> float_y_rules = {
        {"float-y-conv-bias", conv(true), [](const Match& m, RuleContext& rc) { return to_qlinear_conv(m, rc, true); }},
        {"float-y-conv", conv(false), [](const Match& m, RuleContext& rc) { return to_qlinear_conv(m, rc, false); }}};
    const int64_t folded = fold_quantized_constants(model, ctx);
    const int64_t fused = apply_rules(model, ctx, rules) + split_codes(model, ctx);
    return folded + fused + apply_rules(model, ctx, float_y_rules);
  }
};

}  // namespace

// Before constant-folding (10), which folds the weights' DequantizeLinear.
KILN_REGISTER_PASS(QdqFusion, "qdq-fusion", 1, kSimplify, 7, false);

}  // namespace kiln::passes
