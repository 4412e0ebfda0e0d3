// Post-training quantization (kiln/quantize.h): the calibration methods against distributions
// whose answer is known; a small CNN quantized end to end (its QDQ form, its weights and biases
// checked against their definitions, its outputs against the float model's, and the fused 8-bit
// run against the QDQ graph run as written); a model at opset 11 raised to 13 on the way; the
// points chosen around activations and carriers. (quantize_guard_test.cc: the accuracy guard;
// quantize_dynamic_test.cc: --dynamic; quantize_weights_test.cc: weight-only and 16-bit weights;
// quantize_speed_test.cc: the speed check.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/float_convert.h"
#include "kiln/model.h"
#include "pass_test_util.h"
#include "quantize_test_util.h"
#include "quantize/calibration.h"
#include "quantize/quantize_internal.h"

namespace kiln {
namespace {

using test::cosine;
using test::samples_of;
using test::small_cnn;

TEST(Calibration, MethodsPickTheirRanges) {
  // 100000 values uniform in [-1, 1] plus one outlier at 50.
  std::vector<float> x(100000);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  x[7] = 50.0f;
  quantize::TensorStats s;
  s.add_range(x.data(), static_cast<int64_t>(x.size()));
  s.add_histogram(x.data(), static_cast<int64_t>(x.size()));
  QuantizeOptions o = test::untimed();
  float lo = 0, hi = 0;
  s.range(o, &lo, &hi);  // min-max: the outlier counts
  EXPECT_NEAR(lo, -1.0f, 1e-3f);
  EXPECT_EQ(hi, 50.0f);
  // Each clips the lone outlier, as far as its rule goes: the percentile to the bulk's edge
  // (within a bin, 50/2048), entropy to its shortest threshold (128 bins, 3.125: the 8-bit
  // histogram it compares has 128 levels), MSE to where the outlier's clipping error stops
  // outweighing the rounding error of 100000 values on a coarser grid.
  o.percentile = 99.9;
  o.method = CalibrationMethod::kPercentile;
  s.range(o, &lo, &hi);
  EXPECT_NEAR(hi, 1.0f, 0.05f);
  EXPECT_NEAR(lo, -1.0f, 0.05f);
  o.method = CalibrationMethod::kEntropy;
  s.range(o, &lo, &hi);
  EXPECT_NEAR(hi, 3.125f, 1e-3f);
  EXPECT_NEAR(lo, -1.0f, 1e-3f);
  o.method = CalibrationMethod::kMse;
  s.range(o, &lo, &hi);
  EXPECT_GT(hi, 1.0f);
  EXPECT_LT(hi, 45.0f);
}

TEST(Calibration, ActivationParams) {
  const quantize::QuantParams u = quantize::activation_params(-1.0f, 3.0f, false);
  EXPECT_FLOAT_EQ(u.scale, 4.0f / 255.0f);
  EXPECT_EQ(u.zero_point, 64);  // round(1 / (4/255)) = round(63.75)
  const quantize::QuantParams relu = quantize::activation_params(0.0f, 6.0f, false);
  EXPECT_EQ(relu.zero_point, 0);
  const quantize::QuantParams s = quantize::activation_params(-2.0f, 0.5f, true);
  EXPECT_FLOAT_EQ(s.scale, 2.0f / 127.0f);
  EXPECT_EQ(s.zero_point, 0);
  EXPECT_FLOAT_EQ(quantize::activation_params(0.0f, 0.0f, false).scale, 1.0f);  // a constant zero tensor
}

TEST(Quantize, SmallCnnToQdq) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 8, {1, 8, 12, 12});
  Model model(std::make_shared<ir::Model>(fp32));
  auto report = model.quantize(samples_of(calib), test::untimed());
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->samples, 6);  // every 4th held back for the guard
  EXPECT_EQ(report->held_out_of_calibration, 2);
  // The two convs, and the Gemm, whose logits go on in float, quantized dynamically.
  EXPECT_EQ(report->quantized_nodes, 3);
  EXPECT_TRUE(report->kept_float.empty());
  ASSERT_EQ(report->dynamic_nodes.size(), 1u);
  // auto calibration: each method tried, the one kept the best on the held-back samples.
  ASSERT_EQ(report->calibration_trials.size(), 4u);
  double best = 0;
  for (const auto& [method, cosine] : report->calibration_trials) best = std::max(best, cosine);
  ASSERT_EQ(report->outputs.size(), 1u);
  EXPECT_EQ(report->outputs[0].cosine, best);
  EXPECT_TRUE(std::any_of(report->calibration_trials.begin(), report->calibration_trials.end(),
                          [&](const auto& t) { return t.first == report->calibration_method && t.second == best; }));
  EXPECT_EQ(report->removed_clamps, 2);
  const ir::Model& q = model.ir();
  const auto h = test::histogram(q);
  EXPECT_EQ(h.count("Relu"), 0u);
  EXPECT_EQ(h.at("Conv"), 2);
  EXPECT_EQ(h.count("Gemm"), 0u);
  EXPECT_EQ(h.at("DynamicQuantMatMul"), 1);  // reading its input's DequantizeLinear
  EXPECT_GT(h.at("QuantizeLinear"), 0);
  // Weights: int8 with each filter's largest |w| at 127; the float ones are gone.
  int per_channel = 0;
  for (const ir::Node& n : q.graph.nodes) {
    if (n.op_type != "DequantizeLinear" || !q.graph.initializers.count(n.inputs[0])) continue;
    const Tensor& wq = q.graph.initializers.at(n.inputs[0]);
    if (wq.dtype() != DType::kInt8) continue;
    const Tensor& ws = q.graph.initializers.at(n.inputs[1]);
    ASSERT_EQ(ws.rank(), 1);
    ++per_channel;
    const int64_t axis = n.attr_int("axis", 1), channels = wq.dim(axis);
    ASSERT_EQ(ws.numel(), channels);
    std::vector<int> top(static_cast<size_t>(channels), 0);
    int64_t inner = 1;
    for (int64_t d = axis + 1; d < wq.rank(); ++d) inner *= wq.dim(d);
    for (int64_t i = 0; i < wq.numel(); ++i)
      top[static_cast<size_t>((i / inner) % channels)] =
          std::max(top[static_cast<size_t>((i / inner) % channels)], std::abs(int{wq.data<int8_t>()[i]}));
    for (int t : top) EXPECT_EQ(t, 127);
  }
  EXPECT_EQ(per_channel, 2);
  EXPECT_FALSE(q.graph.initializers.count("c1_w"));
  EXPECT_FALSE(model.optimized());  // loading the QDQ model still fuses it
  // Outputs close to the float model's on held-out inputs; the fused 8-bit run (default -O3)
  // equal to the QDQ graph run as written up to a step of the output's scale.
  for (int i = 0; i < 4; ++i) {
    const Tensor x = data.random({1, 8, 12, 12});
    const Tensor want = test::run_model(fp32, {x})[0].tensor;
    SessionOptions plain;
    plain.optimize_level = 0;
    const Tensor qdq = test::run_model(q, {x}, plain)[0].tensor;
    const Tensor fused = test::run_model(q, {x})[0].tensor;
    EXPECT_GT(cosine(want, qdq), 0.99f);
    EXPECT_GT(cosine(qdq, fused), 0.999f);
  }
}

// An efficientnet block: conv -> SiLU (x * Sigmoid(x)) -> squeeze-excitation (GlobalAveragePool,
// 1x1 conv, SiLU, 1x1 conv, Sigmoid, Mul by the gate) -> projecting conv, and the residual.
ir::Model silu_se_block() {
  test::Builder b(13);
  b.input("x", {1, 8, 10, 10});
  b.conv("x", "c1", 8, 16, 1);
  b.add("Sigmoid", {"c1"}, {"s1"});
  b.add("Mul", {"c1", "s1"}, {"a1"});
  b.add("GlobalAveragePool", {"a1"}, {"g"});
  b.conv("g", "e1", 16, 4, 1);
  b.add("Sigmoid", {"e1"}, {"es"});
  b.add("Mul", {"e1", "es"}, {"ea"});
  b.conv("ea", "e2", 4, 16, 1);
  b.add("Sigmoid", {"e2"}, {"gate"});
  b.add("Mul", {"a1", "gate"}, {"se"});
  b.conv("se", "c2", 16, 8, 1);
  b.add("Add", {"c2", "x"}, {"y"});
  b.output("y");
  return b.m;
}

// Sigmoid and Mul carry 8-bit data as Add does, so that the convs feeding a SiLU (all of an
// efficientnet's but the projections) are 8-bit too: they were kept in float ("its output goes
// on in float"), with conversions around the projections that made the int8 model slower than
// the float one. At -O3 the block runs 8-bit throughout: QLinearConv, the SiLUs and the gate's
// Sigmoid applied by the convs before them to their float sums, the excitation's QLinearMul, no
// float ops.
TEST(Quantize, SiluAndSqueezeExcitationCarryEightBits) {
  const ir::Model fp32 = silu_se_block();
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 8, {1, 8, 10, 10}, -2, 2);
  Model model(std::make_shared<ir::Model>(fp32));
  auto report = model.quantize(samples_of(calib), test::untimed());
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->quantized_nodes, 4);
  EXPECT_TRUE(report->kept_float.empty());
  ir::Model fused = model.ir();
  ASSERT_TRUE(optimize(fused, OptimizeOptions{}).is_ok());
  const auto h = test::qualified_histogram(fused);
  EXPECT_EQ(h.at("com.microsoft.QLinearConv"), 1);
  std::map<std::string, int> activations;  // the two before a SiLU, the gate's before its Sigmoid
  for (const ir::Node& n : fused.graph.nodes)
    if (n.domain == "ai.kiln" && n.op_type == "QLinearConv") ++activations[n.attr_string("activation", "")];
  EXPECT_EQ(activations, (std::map<std::string, int>{{"Silu", 2}, {"Sigmoid", 1}}));
  EXPECT_EQ(h.at("com.microsoft.QLinearMul"), 1);
  EXPECT_EQ(h.at("com.microsoft.QLinearGlobalAveragePool"), 1);
  for (const char* op : {"Conv", "Sigmoid", "Mul", "GlobalAveragePool", "ai.kiln.BlockedConv"}) {
    EXPECT_EQ(h.count(op), 0u) << op;
  }
  for (int i = 0; i < 4; ++i) {
    const Tensor x = data.random({1, 8, 10, 10}, -2, 2);
    EXPECT_GT(cosine(test::run_model(fp32, {x})[0].tensor, test::run_model(fused, {x})[0].tensor), 0.99f);
  }
}

// From `in` (8 channels): conv c1 to 16 channels, half of them 20 lower, x * Sigmoid(x) (s1, a1),
// conv c2 back to 8, plus the input x: output y.
void wide_silu_block(test::Builder& b, const std::string& in) {
  b.conv(in, "c1", 8, 16);
  for (int64_t i = 0; i < 16; i += 2) b.m.graph.initializers.at("c1_b").data<float>()[i] -= 20.0f;
  b.add("Sigmoid", {"c1"}, {"s1"});
  b.add("Mul", {"c1", "s1"}, {"a1"});
  b.conv("a1", "c2", 16, 8);
  b.add("Add", {"c2", "x"}, {"y"});
  b.output("y");
}

// In kiln's form a conv before an activation is quantized after it: its own output, whose range
// the activation squashes (half of these channels run from -30, where SiLU is flat at 0), stays
// float between the conv's sums and the activation. The portable form quantizes it (ONNX Runtime
// would run the conv in float otherwise), and loses more: the SiLU's output, 8-bit either way, is
// noisier.
TEST(Quantize, ConvBeforeAnActivationIsQuantizedAfterIt) {
  test::Builder b(13);
  b.input("x", {1, 8, 12, 12});
  wide_silu_block(b, "x");
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 12, {1, 8, 12, 12}, -3, 3);
  auto layers_and_noise = [&](bool portable) {
    QuantizeOptions o = test::untimed();
    o.portable = portable;
    o.min_cosine = 0;
    Model model(std::make_shared<ir::Model>(b.m));
    auto r = model.quantize(samples_of(calib), o);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    std::set<std::string> layers;
    double silu_sqnr = 0;
    for (const TensorError& e : r->layers) {
      layers.insert(e.tensor);
      if (e.tensor == "a1") silu_sqnr = e.sqnr_db;
    }
    return std::make_pair(layers, silu_sqnr);
  };
  const auto [kiln_form, kiln_sqnr] = layers_and_noise(false);
  const auto [portable, portable_sqnr] = layers_and_noise(true);
  EXPECT_EQ(kiln_form, (std::set<std::string>{"x", "a1", "c2", "y"}));
  EXPECT_EQ(portable, (std::set<std::string>{"x", "c1", "s1", "a1", "c2", "y"}));
  EXPECT_GT(kiln_sqnr, portable_sqnr + 3) << "kiln's form " << kiln_sqnr << " dB, portable " << portable_sqnr << " dB";
}

// kiln's form chooses per conv: an activation a table of the conv's 8-bit codes gives as well as
// the float one (c0's SiLU, its input far above 0, where SiLU is x and the two grids of
// codes agree) takes the table, faster; one fed a range it squashes (c1's, half its channels from
// -30) stays in float. Either choice made for both fails.
TEST(Quantize, ConvActivationTakesATableWhereItIsAsAccurate) {
  test::Builder b(13);
  b.input("x", {1, 8, 12, 12});
  b.conv("x", "c0", 8, 8);
  for (int64_t i = 0; i < 8; ++i) b.m.graph.initializers.at("c0_b").data<float>()[i] += 30.0f;
  b.add("Sigmoid", {"c0"}, {"s0"});
  b.add("Mul", {"c0", "s0"}, {"a0"});
  wide_silu_block(b, "a0");
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 12, {1, 8, 12, 12}, -3, 3);
  QuantizeOptions o = test::untimed();
  o.min_cosine = 0;
  Model model(std::make_shared<ir::Model>(b.m));
  auto r = model.quantize(samples_of(calib), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->activations_in_tables, 1);
  EXPECT_EQ(r->activations_in_float, 1);
  std::set<std::string> layers;
  for (const TensorError& e : r->layers) layers.insert(e.tensor);
  EXPECT_EQ(layers, (std::set<std::string>{"x", "c0", "s0", "a0", "a1", "c2", "y"}));
}

TEST(Quantize, OldOpsetIsRaisedForPerChannelScales) {
  // Opset 11: Squeeze takes axes as an attribute (an input from 13), which the converter moves.
  ir::Model fp32 = small_cnn(11);
  for (ir::Node& n : fp32.graph.nodes)
    if (n.op_type == "Flatten") {
      n.op_type = "Squeeze";
      n.attrs = {test::attr_ints("axes", {2, 3})};
    }
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 4, {1, 8, 12, 12});
  Model model(std::make_shared<ir::Model>(fp32));
  auto report = model.quantize(samples_of(calib), test::untimed());
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->opset_before, 11);
  EXPECT_EQ(report->opset_after, 13);
  const Tensor x = data.random({1, 8, 12, 12});
  EXPECT_GT(cosine(test::run_model(fp32, {x})[0].tensor, test::run_model(model.ir(), {x})[0].tensor), 0.99f);
}

// Static quantization of a model with nothing to put in 8 bits statically (its MatMul's output
// goes on in float: magika's dense layers) quantizes the weights as --dynamic does, measured
// against the budget, rather than failing.
TEST(Quantize, NothingStaticGoesDynamic) {
  test::Builder b(13);
  b.input("x", {4, 32});
  b.weight("w", {32, 16});
  b.add("MatMul", {"x", "w"}, {"y"});
  b.output("y");
  std::vector<Tensor> calib = test::random_samples(b, 8, {4, 32});
  Model model(std::make_shared<ir::Model>(b.m));
  auto report = model.quantize(samples_of(calib), test::untimed());
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->quantized_nodes, 1);
  ASSERT_EQ(report->outputs.size(), 1u);
  EXPECT_GT(report->outputs[0].cosine, 0.999);
  EXPECT_TRUE(test::histogram(model.ir()).count("DynamicQuantizeLinear") ||
              test::qualified_histogram(model.ir()).count("ai.kiln.DynamicQuantMatMul"));
}

TEST(Quantize, NothingToQuantizeIsAnError) {
  test::Builder b(13);
  b.input("x", {2, 3});
  b.add("Relu", {"x"}, {"y"});
  b.output("y");
  Model model(std::make_shared<ir::Model>(b.m));
  std::vector<Tensor> calib = {b.random({2, 3})};
  auto report = model.quantize(samples_of(calib), test::untimed());
  ASSERT_FALSE(report.is_ok());
  EXPECT_NE(report.status().message().find("no Conv, MatMul or Gemm"), std::string::npos);
}

// A calibration sample holding NaN (a failed decode) is an error naming it, its input and the
// element, not a quantization whose ranges skipped every value.
TEST(Quantize, NanInACalibrationSampleIsAnError) {
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 3, {1, 8, 12, 12});
  calib[1].data<float>()[5] = std::nanf("");
  Model model(std::make_shared<ir::Model>(small_cnn(13)));
  auto report = model.quantize(samples_of(calib), test::untimed());
  ASSERT_FALSE(report.is_ok());
  EXPECT_NE(report.status().message().find("calibration sample 1: input 'x' holds NaN (element 5)"), std::string::npos)
      << report.status().message();
}

// An activation read inside an If's branch too (openWakeWord's heads): the branch reads its
// DequantizeLinear, the float model measured against keeps its own branch (subgraphs are shared
// between copies of a model until copied), and the outputs stay close.
TEST(Quantize, ActivationReadInsideAnIfBranch) {
  test::Builder b;
  b.m = small_cnn(13);  // its first Relu's output, r1, is quantized
  b.add("ReduceMean", {"y"}, {"m"}, {test::attr_i("keepdims", 0)});
  b.scalar("zero", 0.0f);
  b.add("Greater", {"m", "zero"}, {"cond"});
  auto branch = [](const std::string& name) {
    auto g = std::make_shared<ir::Graph>();
    g->name = name;
    ir::Node id;
    id.op_type = "Identity", id.inputs = {"r1"}, id.outputs = {name + "_y"};
    g->nodes.push_back(id);
    g->outputs.push_back(ir::ValueInfo{name + "_y", ir::TypeInfo::tensor(DType::kFloat32, {1, 16, 12, 12}), ""});
    ir::Attribute a;
    a.name = name, a.type = ir::Attribute::Type::kGraph, a.g = g;
    return a;
  };
  b.add("If", {"cond"}, {"z"}, {branch("then_branch"), branch("else_branch")});
  b.output("z");
  const ir::Model fp32 = b.m;
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 8, {1, 8, 12, 12});
  QuantizeOptions o = test::untimed();
  o.min_cosine = 0;
  Model model(std::make_shared<ir::Model>(fp32));
  auto r = model.quantize(samples_of(calib), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GE(r->quantized_nodes, 1);
  EXPECT_EQ(fp32.graph.nodes.back().attrs[0].g->nodes[0].inputs[0], "r1");  // the float model's branch as it was
  for (const Tensor& x : calib) {
    const auto want = test::run_model(fp32, {x}), got = test::run_model(model.ir(), {x});
    ASSERT_EQ(got.size(), 2u);
    EXPECT_GT(cosine(want[1].tensor, got[1].tensor), 0.99f);  // the branch's output
  }
}

// A LeakyRelu between convs carries 8-bit data (a table of codes, qlinear-table): the conv before
// it is quantized too (it stayed float: "its output goes on in float"), and at -O3 no float op is
// left between the convs.
TEST(Quantize, LeakyReluCarriesEightBits) {
  test::Builder b(13);
  b.input("x", {1, 8, 10, 10});
  b.conv("x", "c1", 8, 16);
  b.add("LeakyRelu", {"c1"}, {"l1"}, {test::attr_f("alpha", 0.1f)});
  b.conv("l1", "c2", 16, 8, 1);
  b.add("Relu", {"c2"}, {"r2"});
  b.add("GlobalAveragePool", {"r2"}, {"g"});
  b.add("Flatten", {"g"}, {"f"});
  b.weight("fc_w", {4, 8});
  b.add("Gemm", {"f", "fc_w"}, {"y"}, {test::attr_i("transB", 1)});
  b.output("y");
  const ir::Model fp32 = b.m;
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 8, {1, 8, 10, 10});
  QuantizeOptions o = test::untimed();
  o.min_cosine = 0;
  Model model(std::make_shared<ir::Model>(fp32));
  auto r = model.quantize(samples_of(calib), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->quantized_nodes, 3);  // both convs, and the Gemm dynamically
  ASSERT_TRUE(model.optimize({}).is_ok());
  for (const ir::Node& n : model.ir().graph.nodes) EXPECT_NE(n.op_type, "LeakyRelu");
  for (const Tensor& x : calib)
    EXPECT_GT(cosine(test::run_model(fp32, {x})[0].tensor, test::run_model(model.ir(), {x})[0].tensor), 0.99f);
}

// A MaxPool's output keeps its input's parameters whatever the method (a clipping one computed
// them apart, and the 8-bit MaxPool then could not run on the codes).
TEST(Quantize, MaxPoolKeepsItsInputsParameters) {
  for (CalibrationMethod m : {CalibrationMethod::kMse, CalibrationMethod::kPercentile, CalibrationMethod::kEntropy}) {
    Model model(std::make_shared<ir::Model>(small_cnn(13)));
    test::Builder data;
    std::vector<Tensor> calib = test::random_samples(data, 6, {1, 8, 12, 12}, -3, 3);
    QuantizeOptions o = test::untimed();
    o.method = m;
    o.min_cosine = 0;
    o.portable = true;
    ASSERT_TRUE(model.quantize(samples_of(calib), o).is_ok());
    const ir::Graph& g = model.ir().graph;
    auto producer = [&](const std::string& v) -> const ir::Node* {
      for (const ir::Node& n : g.nodes)
        if (!n.outputs.empty() && n.outputs[0] == v) return &n;
      return nullptr;
    };
    for (const ir::Node& pool : g.nodes) {
      if (pool.op_type != "MaxPool") continue;
      const ir::Node* dq = producer(pool.inputs[0]);
      const ir::Node* q = nullptr;
      for (const ir::Node& n : g.nodes)
        if (n.op_type == "QuantizeLinear" && n.inputs[0] == pool.outputs[0]) q = &n;
      ASSERT_TRUE(dq && q && dq->op_type == "DequantizeLinear");
      EXPECT_EQ(g.initializers.at(dq->inputs[1]).data<float>()[0], g.initializers.at(q->inputs[1]).data<float>()[0]);
    }
  }
}

// A YOLO C2f block: conv, its halves (Split), a conv on the second, the three concatenated, a
// conv (and a pool). The Split carries 8-bit data as Concat does, its parts keeping its input's parameters
// (elements moved, not changed), so every conv is 8-bit; at -O3 the Split moves the codes, and no
// float conv is left.
TEST(Quantize, SplitCarriesItsInputsCodes) {
  test::Builder b(13);
  b.input("x", {1, 8, 10, 10});
  b.conv("x", "c1", 8, 16);
  b.add("Relu", {"c1"}, {"r1"});
  b.ints("halves", {8, 8});
  b.add("Split", {"r1", "halves"}, {"h0", "h1"}, {test::attr_i("axis", 1)});
  b.conv("h1", "c2", 8, 8);
  b.add("Relu", {"c2"}, {"r2"});
  b.add("Concat", {"h0", "h1", "r2"}, {"cat"}, {test::attr_i("axis", 1)});
  b.conv("cat", "c3", 24, 8);
  b.add("Relu", {"c3"}, {"r3"});
  b.add("GlobalAveragePool", {"r3"}, {"y"});  // (an 8-bit op after c3: its output is quantized)
  b.output("y");
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 6, {1, 8, 10, 10}, -2, 2);
  QuantizeOptions o = test::untimed();
  o.portable = true;
  Model portable(std::make_shared<ir::Model>(b.m));
  auto report = portable.quantize(samples_of(calib), o);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->quantized_nodes, 3);
  EXPECT_TRUE(report->kept_float.empty());
  const ir::Graph& g = portable.ir().graph;
  const ir::Node* split = nullptr;
  for (const ir::Node& n : g.nodes)
    if (n.op_type == "Split") split = &n;
  ASSERT_TRUE(split);
  float in_scale = 0;
  for (const ir::Node& n : g.nodes)
    if (n.op_type == "DequantizeLinear" && n.outputs[0] == split->inputs[0])
      in_scale = g.initializers.at(n.inputs[1]).data<float>()[0];
  EXPECT_GT(in_scale, 0.0f) << "the Split reads a DequantizeLinear";
  int parts = 0;
  for (const ir::Node& n : g.nodes)
    if (n.op_type == "QuantizeLinear" && std::count(split->outputs.begin(), split->outputs.end(), n.inputs[0])) {
      ++parts;
      EXPECT_EQ(g.initializers.at(n.inputs[1]).data<float>()[0], in_scale);
    }
  EXPECT_EQ(parts, 2);
  Model kiln_form(std::make_shared<ir::Model>(b.m));
  ASSERT_TRUE(kiln_form.quantize(samples_of(calib), test::untimed()).is_ok());
  ir::Model fused = kiln_form.ir();
  ASSERT_TRUE(optimize(fused, OptimizeOptions{}).is_ok());
  const auto h = test::qualified_histogram(fused);
  for (const char* op : {"Conv", "ai.kiln.BlockedConv"}) EXPECT_EQ(h.count(op), 0u) << op;
  EXPECT_EQ(h.at("Split"), 1);
  EXPECT_EQ(h.at("DequantizeLinear"), 1);  // the output's
  for (int i = 0; i < 3; ++i) {
    const Tensor x = data.random({1, 8, 10, 10}, -2, 2);
    EXPECT_GT(cosine(test::run_model(b.m, {x})[0].tensor, test::run_model(fused, {x})[0].tensor), 0.99f);
  }
}

// reduce_range: 7-bit weights, each filter's largest |w| at 63, and the model still close to the
// float one (the AVX2 tile for them is tested bit-exactly in kernels_qconv_test.cc).
TEST(Quantize, ReduceRangeWritesSevenBitWeights) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 6, {1, 8, 12, 12});
  QuantizeOptions o = test::untimed();
  o.reduce_range = true;
  Model model(std::make_shared<ir::Model>(fp32));
  auto report = model.quantize(samples_of(calib), o);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  int checked = 0;
  for (const ir::Node& n : model.ir().graph.nodes) {
    if (n.op_type != "DequantizeLinear" || !model.ir().graph.initializers.count(n.inputs[0])) continue;
    const Tensor& wq = model.ir().graph.initializers.at(n.inputs[0]);
    if (wq.dtype() != DType::kInt8) continue;
    int top = 0;
    for (int64_t i = 0; i < wq.numel(); ++i) top = std::max(top, std::abs(int{wq.data<int8_t>()[i]}));
    EXPECT_EQ(top, 63);
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  const Tensor x = data.random({1, 8, 12, 12});
  EXPECT_GT(cosine(test::run_model(fp32, {x})[0].tensor, test::run_model(model.ir(), {x})[0].tensor), 0.99f);
}

}  // namespace
}  // namespace kiln
