// Post-training quantization (kiln/quantize.h): the calibration methods against distributions
// whose answer is known; a small CNN quantized end to end (its QDQ form, its weights and biases
// checked against their definitions, its outputs against the float model's, and the fused 8-bit
// run against the QDQ graph run as written); a model at opset 11 raised to 13 on the way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/float_convert.h"
#include "kiln/model.h"
#include "pass_test_util.h"
#include "quantize/calibration.h"

namespace kiln {
namespace {

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
  QuantizeOptions o;
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

// conv3x3 -> Relu -> MaxPool -> conv1x1 -> + (residual) -> Relu -> GlobalAveragePool -> Flatten -> Gemm.
ir::Model small_cnn(int64_t opset) {
  test::Builder b(opset);
  b.input("x", {1, 8, 12, 12});
  b.conv("x", "c1", 8, 16);
  b.add("Relu", {"c1"}, {"r1"});
  b.add("MaxPool", {"r1"}, {"p1"}, {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("pads", {1, 1, 1, 1})});
  b.conv("p1", "c2", 16, 8, 1);
  b.add("Add", {"c2", "x"}, {"s"});
  b.add("Relu", {"s"}, {"r2"});
  b.add("GlobalAveragePool", {"r2"}, {"g"});
  b.add("Flatten", {"g"}, {"f"});
  b.weight("fc_w", {10, 8});
  b.weight("fc_b", {10});
  b.add("Gemm", {"f", "fc_w", "fc_b"}, {"y"}, {test::attr_i("transB", 1)});
  b.output("y");
  return b.m;
}

CalibrationReader samples_of(std::vector<Tensor>& xs) {
  auto next = std::make_shared<size_t>(0);
  return [&xs, next]() -> Result<std::optional<std::vector<Tensor>>> {
    if (*next >= xs.size()) return std::optional<std::vector<Tensor>>();
    return std::optional<std::vector<Tensor>>(std::vector<Tensor>{xs[(*next)++]});
  };
}

float cosine(const Tensor& a, const Tensor& b) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double p = a.data<float>()[i], q = b.data<float>()[i];
    ab += p * q, aa += p * p, bb += q * q;
  }
  return static_cast<float>(ab / std::sqrt(aa * bb));
}

TEST(Quantize, SmallCnnToQdq) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib;
  for (int i = 0; i < 8; ++i) calib.push_back(data.random({1, 8, 12, 12}));
  Model model(std::make_shared<ir::Model>(fp32));
  auto report = model.quantize(samples_of(calib), {});
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->samples, 8);
  // The two convs, and the Gemm, whose logits go on in float, quantized dynamically.
  EXPECT_EQ(report->quantized_nodes, 3);
  EXPECT_TRUE(report->kept_float.empty());
  ASSERT_EQ(report->dynamic_nodes.size(), 1u);
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
// the float one. At -O3 the block runs 8-bit throughout: QLinearConv, the SiLUs as tables in
// the convs before them, the excitation's QLinearMul, no float ops.
TEST(Quantize, SiluAndSqueezeExcitationCarryEightBits) {
  const ir::Model fp32 = silu_se_block();
  test::Builder data;
  std::vector<Tensor> calib;
  for (int i = 0; i < 8; ++i) calib.push_back(data.random({1, 8, 10, 10}, -2, 2));
  Model model(std::make_shared<ir::Model>(fp32));
  auto report = model.quantize(samples_of(calib), {});
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->quantized_nodes, 4);
  EXPECT_TRUE(report->kept_float.empty());
  ir::Model fused = model.ir();
  ASSERT_TRUE(optimize(fused, OptimizeOptions{}).is_ok());
  const auto h = test::qualified_histogram(fused);
  EXPECT_EQ(h.at("com.microsoft.QLinearConv"), 2);
  EXPECT_EQ(h.at("ai.kiln.QLinearConv"), 2);  // the two before a SiLU, its table taken in
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

TEST(Quantize, OldOpsetIsRaisedForPerChannelScales) {
  // Opset 11: Squeeze takes axes as an attribute (an input from 13), which the converter moves.
  ir::Model fp32 = small_cnn(11);
  for (ir::Node& n : fp32.graph.nodes)
    if (n.op_type == "Flatten") {
      n.op_type = "Squeeze";
      n.attrs = {test::attr_ints("axes", {2, 3})};
    }
  test::Builder data;
  std::vector<Tensor> calib;
  for (int i = 0; i < 4; ++i) calib.push_back(data.random({1, 8, 12, 12}));
  Model model(std::make_shared<ir::Model>(fp32));
  auto report = model.quantize(samples_of(calib), {});
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->opset_before, 11);
  EXPECT_EQ(report->opset_after, 13);
  const Tensor x = data.random({1, 8, 12, 12});
  EXPECT_GT(cosine(test::run_model(fp32, {x})[0].tensor, test::run_model(model.ir(), {x})[0].tensor), 0.99f);
}

TEST(Quantize, NothingToQuantizeIsAnError) {
  test::Builder b(13);
  b.input("x", {2, 3});
  b.add("Relu", {"x"}, {"y"});
  b.output("y");
  Model model(std::make_shared<ir::Model>(b.m));
  std::vector<Tensor> calib = {b.random({2, 3})};
  auto report = model.quantize(samples_of(calib), {});
  ASSERT_FALSE(report.is_ok());
  EXPECT_NE(report.status().message().find("no Conv, MatMul or Gemm"), std::string::npos);
}

// The per-layer report names every quantized activation with a finite SQNR; the accuracy guard,
// given a budget the plain quantization misses (calibration ranges blown up by an outlier sample,
// so the first conv's input is coarse), puts tensors back in float until the held-out outputs
// meet it, and says which; with the guard off nothing goes back.
TEST(Quantize, ReportAndAccuracyGuard) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib, held_out;
  for (int i = 0; i < 6; ++i) calib.push_back(data.random({1, 8, 12, 12}));
  calib[0].data<float>()[5] = 400.0f;  // one outlier: the input's range is 400 wide
  for (int i = 0; i < 4; ++i) held_out.push_back(data.random({1, 8, 12, 12}));
  QuantizeOptions off;
  off.min_cosine = 0;
  Model plain(std::make_shared<ir::Model>(fp32));
  auto r0 = plain.quantize(samples_of(calib), off, samples_of(held_out));
  ASSERT_TRUE(r0.is_ok()) << r0.status().message();
  EXPECT_TRUE(r0->measured_on_held_out);
  ASSERT_FALSE(r0->layers.empty());
  for (const TensorError& e : r0->layers) EXPECT_TRUE(std::isfinite(e.sqnr_db)) << e.tensor;
  ASSERT_EQ(r0->outputs.size(), 1u);
  const double plain_cosine = r0->outputs[0].cosine;
  EXPECT_TRUE(r0->kept_float.empty());
  EXPECT_EQ(r0->dynamic_nodes.size(), 1u);  // the Gemm: its logits go on in float
  ASSERT_LT(plain_cosine, 0.9999);  // the outlier made it lose accuracy
  QuantizeOptions guarded;
  guarded.min_cosine = 0.9999;
  Model model(std::make_shared<ir::Model>(fp32));
  auto r = model.quantize(samples_of(calib), guarded, samples_of(held_out));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GE(r->outputs[0].cosine, 0.9999);
  EXPECT_TRUE(std::any_of(r->kept_float.begin(), r->kept_float.end(),
                          [](const std::string& k) { return k.find("accuracy guard") != std::string::npos; }));
  // The held-out outputs of the saved model meet the budget as measured.
  for (const Tensor& x : held_out) {
    SessionOptions plain_run;
    plain_run.optimize_level = 0;
    EXPECT_GE(cosine(test::run_model(fp32, {x})[0].tensor, test::run_model(model.ir(), {x}, plain_run)[0].tensor),
              0.9999f);
  }
  // A budget no fallback can meet within the allowance is an error naming it.
  guarded.max_fallbacks = 0;
  Model strict(std::make_shared<ir::Model>(fp32));
  auto bad = strict.quantize(samples_of(calib), guarded, samples_of(held_out));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("budget"), std::string::npos);
}

// --dynamic: every MatMul and Gemm with constant 2-D weights becomes ONNX Runtime's
// quantize_dynamic chain in standard ops (one DynamicQuantizeLinear per activation, shared),
// weights int8 per column at 127; no calibration; the output stays close to the float model's,
// and at -O2 each chain fuses into one MatMulIntegerToFloat.
TEST(Quantize, DynamicMatMulAndGemm) {
  test::Builder b(13);
  b.input("x", {2, 5, 16});
  b.weight("w1", {16, 24});
  b.weight("w2", {16, 8});
  b.weight("w3", {6, 24});  // Gemm with transB: [N, K]
  b.weight("c3", {6});
  b.add("MatMul", {"x", "w1"}, {"h"});
  b.add("MatMul", {"x", "w2"}, {"side"});
  b.add("Relu", {"h"}, {"r"});
  b.add("Reshape", {"r", "shape"}, {"r2"});
  b.ints("shape", {10, 24});
  b.add("Gemm", {"r2", "w3", "c3"}, {"y"}, {test::attr_i("transB", 1)});
  b.output("y");
  b.output("side");
  Model model(std::make_shared<ir::Model>(b.m));
  QuantizeOptions o;
  o.dynamic = true;
  o.portable = true;  // ONNX Runtime's chain; kiln's own form: DynamicQuantMatMulPerRow below
  auto report = model.quantize({}, o);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->quantized_nodes, 3);
  const auto h = test::histogram(model.ir());
  EXPECT_EQ(h.at("DynamicQuantizeLinear"), 2);  // x's (shared by two MatMuls) and r2's
  EXPECT_EQ(h.at("MatMulInteger"), 3);
  EXPECT_EQ(h.count("MatMul") + h.count("Gemm"), 0u);
  for (const auto& [name, t] : model.ir().graph.initializers) {
    if (t.dtype() != DType::kInt8 || t.rank() != 2) continue;
    for (int64_t j = 0; j < t.dim(1); ++j) {
      int top = 0;
      for (int64_t i = 0; i < t.dim(0); ++i) top = std::max(top, std::abs(int{t.data<int8_t>()[i * t.dim(1) + j]}));
      EXPECT_EQ(top, 127) << name << " column " << j;
    }
  }
  const Tensor x = b.random({2, 5, 16});
  SessionOptions plain;
  plain.optimize_level = 0;
  const auto want = test::run_model(b.m, {x});
  const auto got = test::run_model(model.ir(), {x}, plain);
  const auto fused = test::run_model(model.ir(), {x});
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_GT(cosine(want[i].tensor, got[i].tensor), 0.999f) << i;
    EXPECT_GT(cosine(got[i].tensor, fused[i].tensor), 0.99999f) << i;
  }
  ir::Model optimized = model.ir();
  OptimizeOptions o2;
  o2.level = 2;
  ASSERT_TRUE(optimize(optimized, o2).is_ok());
  // Three MatMulIntegerToFloat, one of them kiln's (gemm-epilogue moved what follows it in).
  const auto h2 = test::qualified_histogram(optimized);
  EXPECT_EQ(h2.at("com.microsoft.MatMulIntegerToFloat") + (h2.count("ai.kiln.MatMulIntegerToFloat") ? h2.at("ai.kiln.MatMulIntegerToFloat") : 0), 3);
}

// kiln's form of --dynamic: one ai.kiln.DynamicQuantMatMul a node (a MatMul's bias Add taken
// in); the op against plain loops of its definition (each row of A quantized on its own, a row
// of zeros and an all-positive row among them).
TEST(Quantize, DynamicQuantMatMulPerRow) {
  test::Builder b(13);
  b.input("x", {3, 16});
  b.weight("w", {16, 12});
  b.weight("bias", {12});
  b.add("MatMul", {"x", "w"}, {"m"});
  b.add("Add", {"m", "bias"}, {"y"});
  b.output("y");
  Model model(std::make_shared<ir::Model>(b.m));
  QuantizeOptions o;
  o.dynamic = true;
  auto report = model.quantize({}, o);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(test::qualified_histogram(model.ir()), (std::map<std::string, int>{{"ai.kiln.DynamicQuantMatMul", 1}}));
  Tensor x = b.random({3, 16});
  for (int64_t k = 0; k < 16; ++k) x.data<float>()[k] = 0.0f;                       // row 0: zeros
  for (int64_t k = 0; k < 16; ++k) x.data<float>()[16 + k] = 0.5f + 0.1f * float(k);  // row 1: positive
  const ir::Node& n = model.ir().graph.nodes[0];
  const Tensor& wq = model.ir().graph.initializers.at(n.inputs[1]);
  const Tensor& ws = model.ir().graph.initializers.at(n.inputs[2]);
  const Tensor& bias = model.ir().graph.initializers.at(n.inputs[3]);
  SessionOptions plain;
  plain.optimize_level = 0;
  const Tensor y = test::run_model(model.ir(), {x}, plain)[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{3, 12}));
  for (int64_t i = 0; i < 3; ++i) {
    const float* row = x.data<float>() + i * 16;
    float lo = 0, hi = 0;
    for (int64_t k = 0; k < 16; ++k) lo = std::min(lo, row[k]), hi = std::max(hi, row[k]);
    const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
    const float zp = std::nearbyint(std::clamp(-lo / scale, 0.0f, 255.0f));
    for (int64_t j = 0; j < 12; ++j) {
      int64_t sum = 0;
      for (int64_t k = 0; k < 16; ++k) {
        const float q = std::min(255.0f, std::max(0.0f, std::nearbyint(row[k] * (1.0f / scale)) + zp));
        sum += (static_cast<int64_t>(q) - static_cast<int64_t>(zp)) * wq.data<int8_t>()[k * 12 + j];
      }
      const float want = static_cast<float>(sum) * (scale * ws.data<float>()[ws.numel() == 1 ? 0 : j]) + bias.data<float>()[j];
      // The codes and sums exactly; the last multiply-add may fuse (an FMA's single rounding).
      ASSERT_NEAR(y.data<float>()[i * 12 + j], want, 1e-6f * std::max(1.0f, std::fabs(want))) << i << " " << j;
    }
  }
  EXPECT_GT(cosine(test::run_model(b.m, {x})[0].tensor, y), 0.999f);
}

// reduce_range: 7-bit weights, each filter's largest |w| at 63, and the model still close to the
// float one (the AVX2 tile for them is tested bit-exactly in kernels_qconv_test.cc).
TEST(Quantize, ReduceRangeWritesSevenBitWeights) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib;
  for (int i = 0; i < 6; ++i) calib.push_back(data.random({1, 8, 12, 12}));
  QuantizeOptions o;
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


// y = Relu(x·w + bias) + z, x [20, 64], w [64, 40]: a MatMul with all of an epilogue.
test::Builder biased_relu_residual_matmul() {
  test::Builder b(13);
  b.input("x", {20, 64});
  b.input("z", {20, 40});
  b.weight("w", {64, 40});
  b.weight("bias", {40});
  b.add("MatMul", {"x", "w"}, {"m"});
  b.add("Add", {"m", "bias"}, {"mb"});
  b.add("Relu", {"mb"}, {"r"});
  b.add("Add", {"r", "z"}, {"y"});
  b.output("y");
  return b;
}

// -O2 folds the activation and the residual Add after a DynamicQuantMatMul into it (the
// gemm-epilogue pass), applied to each tile as it is dequantized: the same outputs as the ops
// run one by one.
TEST(Quantize, DynamicQuantMatMulTakesTheEpilogue) {
  test::Builder b = biased_relu_residual_matmul();
  Model model(std::make_shared<ir::Model>(b.m));
  QuantizeOptions o;
  o.dynamic = true;
  ASSERT_TRUE(model.quantize({}, o).is_ok());
  ir::Model fused = model.ir();
  OptimizeOptions o2;
  o2.level = 2;
  ASSERT_TRUE(optimize(fused, o2).is_ok());
  ASSERT_EQ(test::qualified_histogram(fused), (std::map<std::string, int>{{"ai.kiln.DynamicQuantMatMul", 1}}));
  const ir::Node& n = fused.graph.nodes[0];
  EXPECT_EQ(n.attr_string("activation", ""), "Relu");
  ASSERT_EQ(n.inputs.size(), 5u);
  EXPECT_EQ(n.inputs[4], "z");
  const std::vector<Tensor> feeds = {b.random({20, 64}), b.random({20, 40})};
  SessionOptions plain;
  plain.optimize_level = 0;
  const Tensor want = test::run_model(model.ir(), feeds, plain)[0].tensor;
  const Tensor got = test::run_model(fused, feeds, plain)[0].tensor;
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
}

// ONNX Runtime's form of the same (the portable dynamic model's DynamicQuantizeLinear and
// MatMulInteger chain, which dynamic-quant-matmul makes MatMulIntegerToFloat): gemm-epilogue
// moves the activation and the residual into kiln's ai.kiln.MatMulIntegerToFloat, whose tiles
// apply them as they are dequantized: the outputs are those of MatMulIntegerToFloat, Relu and
// Add run one after the other bit for bit, and within a few ulp of the graph as written (the
// op's fma for the scale and bias rounds once where its Mul and Add round twice).
TEST(Quantize, MatMulIntegerToFloatTakesTheEpilogue) {
  test::Builder b = biased_relu_residual_matmul();
  Model model(std::make_shared<ir::Model>(b.m));
  QuantizeOptions o;
  o.dynamic = true, o.portable = true;
  ASSERT_TRUE(model.quantize({}, o).is_ok());
  ir::Model fused = model.ir();
  OptimizeOptions o2;
  o2.level = 2;
  ASSERT_TRUE(optimize(fused, o2).is_ok());
  const auto h = test::qualified_histogram(fused);
  ASSERT_EQ(h.count("ai.kiln.MatMulIntegerToFloat"), 1u) << "fused graph lacks it";
  EXPECT_EQ(h.count("Relu") + h.count("Add"), 0u);
  for (const ir::Node& n : fused.graph.nodes) {
    if (n.op_type != "MatMulIntegerToFloat") continue;
    EXPECT_EQ(n.attr_string("activation", ""), "Relu");
    ASSERT_EQ(n.inputs.size(), 8u);
    EXPECT_EQ(n.inputs[7], "z");
  }
  ir::Model unfused = model.ir();
  o2.disabled = {"gemm-epilogue"};
  ASSERT_TRUE(optimize(unfused, o2).is_ok());
  ASSERT_EQ(test::qualified_histogram(unfused).count("com.microsoft.MatMulIntegerToFloat"), 1u);
  const std::vector<Tensor> feeds = {b.random({20, 64}), b.random({20, 40})};
  SessionOptions plain;
  plain.optimize_level = 0;
  const Tensor want = test::run_model(unfused, feeds, plain)[0].tensor;
  const Tensor got = test::run_model(fused, feeds, plain)[0].tensor;
  const Tensor as_written = test::run_model(model.ir(), feeds, plain)[0].tensor;
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
    ASSERT_NEAR(got.data<float>()[i], as_written.data<float>()[i], 1e-5f * (1 + std::fabs(as_written.data<float>()[i])))
        << i;
  }
}

// --weight-only: the MatMuls' constant weights in 8 bits (int8 per column at 127 behind a
// DequantizeLinear with axis 1) or 4 bits (MatMulNBits, a scale per block of 32 along K, the last
// block partial); activations stay float. The 4-bit kernel against A times its weights as the
// format defines them, decoded here from the packed bytes.
TEST(Quantize, WeightOnlyMatMul) {
  test::Builder b(13);
  b.input("x", {3, 40});
  b.weight("w", {40, 24});
  b.weight("w2", {40, 16});
  b.add("MatMul", {"x", "w"}, {"y"});
  b.add("MatMul", {"x", "w2"}, {"y2"});
  b.output("y");
  b.output("y2");
  const Tensor x = b.random({3, 40});
  for (int bits : {8, 4}) {
    SCOPED_TRACE(::testing::Message() << bits << " bits");
    Model model(std::make_shared<ir::Model>(b.m));
    QuantizeOptions o;
    o.weight_only_bits = bits;
    std::vector<Tensor> eval = {x};
    auto report = model.quantize({}, o, samples_of(eval));
    ASSERT_TRUE(report.is_ok()) << report.status().message();
    EXPECT_EQ(report->quantized_nodes, 2);
    EXPECT_EQ(report->weight_bytes_before, (40 * 24 + 40 * 16) * 4);
    for (const TensorError& e : report->outputs) EXPECT_GT(e.cosine, bits == 8 ? 0.9999 : 0.99) << e.tensor;
    const auto h = test::qualified_histogram(model.ir());
    const auto want = test::run_model(b.m, {x});
    if (bits == 8) {
      EXPECT_EQ(h.at("DequantizeLinear"), 2);
      EXPECT_EQ(h.at("MatMul"), 2);
      const auto got = test::run_model(model.ir(), {x});
      for (size_t i = 0; i < 2; ++i) EXPECT_GT(cosine(want[i].tensor, got[i].tensor), 0.9999f);
      continue;
    }
    EXPECT_EQ(h.at("com.microsoft.MatMulNBits"), 2);
    EXPECT_EQ(report->weight_bytes_after, (24 + 16) * 2 * (16 + 4));  // 2 blocks a column: 16 bytes + a scale each
    SessionOptions plain;
    plain.optimize_level = 0;
    const auto got = test::run_model(model.ir(), {x}, plain);
    for (const ir::Node& n : model.ir().graph.nodes) {
      const Tensor& q = model.ir().graph.initializers.at(n.inputs[1]);
      const Tensor& s = model.ir().graph.initializers.at(n.inputs[2]);
      const int64_t k = n.attr_int("K", 0), cols = n.attr_int("N", 0), blocks = 2;
      ASSERT_EQ(k, 40);
      const Tensor& y = got[n.outputs[0] == "y" ? 0 : 1].tensor;
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          double sum = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const uint8_t byte = q.data<uint8_t>()[(j * blocks + kk / 32) * 16 + (kk % 32) / 2];
            const int code = (byte >> (4 * (kk % 2))) & 15;
            sum += double{x.data<float>()[i * k + kk]} * (code - 8) * s.data<float>()[j * blocks + kk / 32];
          }
          ASSERT_NEAR(y.data<float>()[i * cols + j], sum, 1e-4 * std::max(1.0, std::fabs(sum))) << i << " " << j;
        }
    }
    for (size_t i = 0; i < 2; ++i) EXPECT_GT(cosine(want[i].tensor, got[i].tensor), 0.99f);
  }
}

// --precision fp16 / bf16: float weights of 1024 values or more stored in 16 bits behind a Cast,
// bit for bit the rounded values; one beyond float16's range stays float32 (in bfloat16 it goes).
// The model computes exactly what the float model with rounded weights computes, as written and
// optimized; portable optimization keeps the Casts (the saved file stays half size), kiln's own
// folds them at load.
TEST(Quantize, SixteenBitWeightStorage) {
  test::Builder b(13);
  b.input("x", {1, 8, 12, 12});
  b.conv("x", "c1", 8, 16);  // 1152 weights; its 16 biases stay
  b.add("Relu", {"c1"}, {"r1"});
  b.add("GlobalAveragePool", {"r1"}, {"g"});
  b.add("Flatten", {"g"}, {"f"});
  b.weight("w1", {16, 96});
  b.weight("w2", {16, 64});
  b.m.graph.initializers["w2"].data<float>()[5] = 1e5f;  // beyond float16's 65504
  b.add("MatMul", {"f", "w1"}, {"y1"});
  b.add("MatMul", {"f", "w2"}, {"y2"});
  b.output("y1");
  b.output("y2");
  for (DType to : {DType::kFloat16, DType::kBFloat16}) {
    const bool half = to == DType::kFloat16;
    Model model(std::make_shared<ir::Model>(b.m));
    QuantizeOptions o;
    o.precision = half ? QuantizePrecision::kFloat16 : QuantizePrecision::kBFloat16;
    std::vector<Tensor> eval = {b.random({1, 8, 12, 12}), b.random({1, 8, 12, 12})};
    auto report = model.quantize({}, o, samples_of(eval));
    ASSERT_TRUE(report.is_ok()) << report.status().message();
    EXPECT_EQ(report->quantized_tensors, half ? 2 : 3);
    ASSERT_EQ(report->kept_float.size(), half ? 1u : 0u);
    if (half) EXPECT_NE(report->kept_float[0].find("w2: values beyond float16's range"), std::string::npos);
    EXPECT_EQ(report->weight_bytes_before, (1152 + 1536 + 1024) * 4);
    EXPECT_EQ(report->weight_bytes_after, half ? (1152 + 1536) * 2 + 1024 * 4 : (1152 + 1536 + 1024) * 2);
    ASSERT_EQ(report->outputs.size(), 2u);
    for (const TensorError& e : report->outputs) EXPECT_GT(e.cosine, half ? 0.99999 : 0.999) << e.tensor;
    // The reference: the float model with each stored weight rounded to 16 bits by its definition.
    ir::Model rounded = b.m;
    int narrow = 0;
    for (const auto& [name, t] : model.ir().graph.initializers) {
      if (t.dtype() != to) continue;
      ++narrow;
      const std::string wide = name.substr(0, name.rfind('_'));
      Tensor& w = rounded.graph.initializers.at(wide);
      ASSERT_EQ(w.shape(), t.shape()) << name;
      for (int64_t i = 0; i < w.numel(); ++i) {
        const uint16_t bits = t.data<uint16_t>()[i];
        const float v = w.data<float>()[i];
        ASSERT_EQ(bits, half ? float_to_half(v) : float_to_bfloat16(v)) << name << " " << i;
        w.data<float>()[i] = half ? half_to_float(bits) : bfloat16_to_float(bits);
      }
    }
    EXPECT_EQ(narrow, report->quantized_tensors);
    EXPECT_EQ(test::histogram(model.ir()).at("Cast"), narrow);
    // The quantizer simplified the graph first (-O1), so the sums may run in another order: equal
    // within float32 rounding, where 16-bit weights without the rounding reference differ by 1e-3.
    SessionOptions plain;
    plain.optimize_level = 0;
    const Tensor x = b.random({1, 8, 12, 12});
    const auto want = test::run_model(rounded, {x}, plain);
    for (const auto& got : {test::run_model(model.ir(), {x}, plain), test::run_model(model.ir(), {x})})
      for (size_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < want[i].tensor.numel(); ++j) {
          const float p = want[i].tensor.data<float>()[j], q = got[i].tensor.data<float>()[j];
          ASSERT_LE(std::fabs(p - q), 1e-5f * std::max(1.0f, std::fabs(p))) << "output " << i << " element " << j;
        }
    ir::Model portable = model.ir(), own = model.ir();
    OptimizeOptions p1;
    p1.level = 1;
    p1.portable = true;
    ASSERT_TRUE(optimize(portable, p1).is_ok());
    EXPECT_EQ(test::histogram(portable).at("Cast"), narrow);
    p1.portable = false;
    ASSERT_TRUE(optimize(own, p1).is_ok());
    EXPECT_EQ(test::histogram(own).count("Cast"), 0u);
  }
}

}  // namespace
}  // namespace kiln
