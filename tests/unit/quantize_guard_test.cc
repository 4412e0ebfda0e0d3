// The quantizer's accuracy guard (kiln/quantize.h, quantize.cc, fallback_ranking.cc, accuracy.cc):
// the per-layer report, the budgets (cosine, top-1, a metric of the user's) held by fallbacks to
// float in the order of what each alone does to them, the samples measured on, and the feature
// cosine the calibration methods compete on; a carrier of a tensor put back in float stays float.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "kiln/model.h"
#include "pass_test_util.h"
#include "quantize_test_util.h"
#include "quantize/quantize_internal.h"

namespace kiln {
namespace {

using test::cosine;
using test::samples_of;
using test::small_cnn;

// The per-layer report names every quantized activation with a finite SQNR; the accuracy guard,
// given a budget the plain quantization misses (calibration ranges blown up by an outlier sample,
// so the first conv's input is coarse), puts tensors back in float until the held-out outputs
// meet it, and says which; with the guard off nothing goes back.
TEST(Quantize, ReportAndAccuracyGuard) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 6, {1, 8, 12, 12});
  calib[0].data<float>()[5] = 400.0f;  // one outlier: the input's range is 400 wide
  std::vector<Tensor> held_out = test::random_samples(data, 4, {1, 8, 12, 12});
  QuantizeOptions off = test::untimed();
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
  QuantizeOptions guarded = test::untimed();
  guarded.min_cosine = 0.9999;
  Model model(std::make_shared<ir::Model>(fp32));
  auto r = model.quantize(samples_of(calib), guarded, samples_of(held_out));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GE(r->outputs[0].cosine, 0.9999);
  EXPECT_TRUE(std::any_of(r->kept_float.begin(), r->kept_float.end(),
                          [](const std::string& k) { return k.find("accuracy guard") != std::string::npos; }));
  // What the fallbacks cost: both models timed (a guarded run without fallbacks times nothing).
  EXPECT_GT(r->latency_ms, 0.0);
  EXPECT_GT(r->latency_all_8bit_ms, 0.0);
  EXPECT_EQ(r0->latency_ms, 0.0);
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

// The guard puts back in float what helps the outputs most, not what loses most SQNR: here the
// side input z has the coarser range (an outlier 4000 wide, against x's 400), but reaches the
// output scaled by 1e-3, so one fallback on x's path meets the budget and none on z's would.
TEST(Quantize, GuardFallsBackWhereTheOutputsGainMost) {
  test::Builder b(13);
  b.input("x", {1, 8, 12, 12});
  b.input("z", {1, 8, 12, 12});
  b.conv("x", "cx", 8, 8);
  b.add("Relu", {"cx"}, {"rx"});
  b.conv("z", "cz", 8, 8);
  b.add("Relu", {"cz"}, {"rz"});
  b.m.graph.initializers["k"] = test::scalar_of(DType::kFloat32, 1e-3);
  b.add("Mul", {"rz", "k"}, {"side"});
  b.add("Add", {"rx", "side"}, {"s"});
  b.conv("s", "y", 8, 8);
  b.add("Add", {"y", "x"}, {"out"});
  b.output("out");
  test::Builder data;
  std::vector<std::vector<Tensor>> calib, held;
  for (int i = 0; i < 6; ++i) calib.push_back({data.random({1, 8, 12, 12}), data.random({1, 8, 12, 12})});
  for (int i = 0; i < 4; ++i) held.push_back({data.random({1, 8, 12, 12}), data.random({1, 8, 12, 12})});
  calib[0][0].data<float>()[5] = 400.0f, calib[1][1].data<float>()[7] = 4000.0f;
  auto reader = [](std::vector<std::vector<Tensor>>& samples) -> CalibrationReader {
    auto next = std::make_shared<size_t>(0);
    return [&samples, next]() -> Result<std::optional<std::vector<Tensor>>> {
      if (*next >= samples.size()) return std::optional<std::vector<Tensor>>();
      return std::optional<std::vector<Tensor>>(samples[(*next)++]);
    };
  };
  QuantizeOptions o = test::untimed();
  o.method = CalibrationMethod::kMinMax;  // the outliers set the ranges
  o.min_cosine = 0;
  Model plain(std::make_shared<ir::Model>(b.m));
  auto r0 = plain.quantize(reader(calib), o, reader(held));
  ASSERT_TRUE(r0.is_ok()) << r0.status().message();
  double noisiest_sqnr = 1e9;
  std::string noisiest;
  for (const TensorError& e : r0->layers)
    if (e.sqnr_db < noisiest_sqnr) noisiest_sqnr = e.sqnr_db, noisiest = e.tensor;
  EXPECT_TRUE(noisiest == "z" || noisiest == "rz" || noisiest == "side") << noisiest;  // z's path loses most SQNR
  o.min_cosine = std::min(0.9999, 1 - (1 - r0->outputs.at(0).cosine) / 4);
  o.max_fallbacks = 1;
  Model guarded(std::make_shared<ir::Model>(b.m));
  auto r = guarded.quantize(reader(calib), o, reader(held));
  ASSERT_TRUE(r.is_ok()) << r.status().message() << " (budget " << o.min_cosine << ")";
  std::vector<std::string> guard;
  for (const std::string& k : r->kept_float)
    if (k.find("accuracy guard") != std::string::npos) guard.push_back(k.substr(0, k.find(':')));
  ASSERT_EQ(guard.size(), 1u);
  EXPECT_TRUE(guard[0] == "x (activation)" || guard[0].find("cx") != std::string::npos) << guard[0];
}

// Without held-out samples, every 4th calibration sample is held back: it sets no range (an
// outlier there leaves the input's scale alone) and the guard measures on it (the output cosine
// reported is the one of those samples); hold_out_every = 0 calibrates on all of them.
TEST(Quantize, GuardMeasuresOnCalibrationSamplesHeldBack) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 9, {1, 8, 12, 12});
  calib[3].data<float>()[5] = 400.0f;  // in a held-back sample
  // The scale of the model input's QuantizeLinear in the portable (QDQ) model.
  auto input_scale = [](const ir::Model& m) {
    for (const ir::Node& n : m.graph.nodes)
      if (n.op_type == "QuantizeLinear" && n.inputs[0] == "x") return m.graph.initializers.at(n.inputs[1]).data<float>()[0];
    return 0.0f;
  };
  QuantizeOptions o = test::untimed();
  o.portable = true;
  o.min_cosine = 0;
  o.method = CalibrationMethod::kMinMax;  // the outlier sets the range wherever it is calibrated on
  Model held(std::make_shared<ir::Model>(fp32));
  auto r = held.quantize(samples_of(calib), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->samples, 7);
  EXPECT_EQ(r->held_out_of_calibration, 2);
  EXPECT_TRUE(r->measured_on_held_out);
  EXPECT_LT(input_scale(held.ir()), 2.5f / 255);  // the outlier calibrated nothing
  ASSERT_EQ(r->outputs.size(), 1u);
  float worst = 1;
  for (int i : {3, 7})
    worst = std::min(worst, cosine(test::run_model(fp32, {calib[i]})[0].tensor, test::run_model(held.ir(), {calib[i]})[0].tensor));
  EXPECT_NEAR(r->outputs[0].cosine, worst, 1e-4);
  o.hold_out_every = 0;
  Model all(std::make_shared<ir::Model>(fp32));
  auto r_all = all.quantize(samples_of(calib), o);
  ASSERT_TRUE(r_all.is_ok()) << r_all.status().message();
  EXPECT_EQ(r_all->samples, 9);
  EXPECT_FALSE(r_all->measured_on_held_out);
  EXPECT_GT(input_scale(all.ir()), 400.0f / 255);
}

// The top-1 budget and a metric of the user's: measured on the held-out outputs of both models
// (the metric sees every held-out sample's outputs), reported, and held like the cosine: a metric
// no fallback can meet ends in an error naming it.
TEST(Quantize, TopOneAndMetricBudgets) {
  const ir::Model fp32 = small_cnn(13);
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 6, {1, 8, 12, 12});
  std::vector<Tensor> held_out = test::random_samples(data, 5, {1, 8, 12, 12});
  QuantizeOptions o = test::untimed();
  o.min_cosine = 0;
  o.min_top1 = 0.5;
  size_t samples_seen = 0;
  o.metric = [&](const std::vector<std::vector<Tensor>>& a, const std::vector<std::vector<Tensor>>& b) -> Result<double> {
    samples_seen = a.size();
    EXPECT_EQ(b.size(), a.size());
    return cosine(a[0][0], b[0][0]);
  };
  o.min_metric = 0.5;
  Model model(std::make_shared<ir::Model>(fp32));
  auto r = model.quantize(samples_of(calib), o, samples_of(held_out));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(samples_seen, held_out.size());
  ASSERT_TRUE(r->top1 && r->metric);
  int agree = 0;
  for (const Tensor& x : held_out) {
    const Tensor a = test::run_model(fp32, {x})[0].tensor, b = test::run_model(model.ir(), {x})[0].tensor;
    const float *p = a.data<float>(), *q = b.data<float>();
    agree += std::max_element(p, p + 10) - p == std::max_element(q, q + 10) - q;
  }
  EXPECT_DOUBLE_EQ(*r->top1, agree / 5.0);
  // A metric nothing meets: every node goes back to float, then an error naming the metric.
  o.metric = [](const std::vector<std::vector<Tensor>>&, const std::vector<std::vector<Tensor>>&) -> Result<double> {
    return 0.25;
  };
  o.max_fallbacks = 100;
  Model strict(std::make_shared<ir::Model>(fp32));
  auto bad = strict.quantize(samples_of(calib), o, samples_of(held_out));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("metric 0.25"), std::string::npos) << bad.status().message();
}

// An output's feature cosine: [1, 2 features, 8] with feature 0 a hundred times feature 1 and
// feature 1 negated in the "quantized" model: the whole output's cosine stays near 1 (feature 0
// dominates), the mean feature cosine is (1 + -1) / 2 = 0 (what calibration method auto compares:
// a detector's class scores count beside its box coordinates).
TEST(Quantize, FeatureCosineWeighsEachFeatureAlike) {
  auto model = [](float second) {
    test::Builder b(13);
    b.input("x", {1, 2, 8});
    b.floats("w", {1, 2, 1}, {100.0f, second});
    b.add("Mul", {"x", "w"}, {"y"});
    b.output("y");
    return b.m;
  };
  test::Builder data;
  std::vector<std::vector<Tensor>> samples = {{data.random({1, 2, 8})}, {data.random({1, 2, 8})}};
  std::vector<TensorError> layers, outputs;
  ASSERT_TRUE(quantize::measure(model(1.0f), model(-1.0f), {}, {}, samples, &layers, &outputs).is_ok());
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_GT(outputs[0].cosine, 0.99);
  EXPECT_NEAR(outputs[0].feature_cosine, 0.0, 1e-6);
}

// The cosine budget holds for each feature too: a detector's box coordinates (hundreds of pixels)
// and class scores (0 to 1) in one output, here two convs' outputs concatenated (and pooled), one
// 300 times the other. One 8-bit range for both leaves the small feature a few codes, which the
// whole output's cosine (over 0.99) hardly sees and its mean feature cosine does: the guard puts
// tensors back in float until that meets the budget too.
TEST(Quantize, GuardHoldsTheOutputsFeatures) {
  test::Builder b(13);
  b.input("x", {1, 4, 8, 8});
  b.conv("x", "big", 4, 1);
  Tensor& wb = b.m.graph.initializers.at("big_w");
  for (int64_t i = 0; i < wb.numel(); ++i) wb.data<float>()[i] *= 300.0f;
  b.add("Relu", {"big"}, {"rb"});
  b.conv("x", "small", 4, 1);
  b.add("Relu", {"small"}, {"rs"});
  b.add("Concat", {"rb", "rs"}, {"cat"}, {test::attr_i("axis", 1)});
  b.add("MaxPool", {"cat"}, {"y"}, {test::attr_ints("kernel_shape", {2, 2})});  // reads cat's codes
  b.output("y");
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 8, {1, 4, 8, 8});
  std::vector<Tensor> held_out = test::random_samples(data, 4, {1, 4, 8, 8});
  QuantizeOptions o = test::untimed();
  o.method = CalibrationMethod::kMinMax;
  o.min_cosine = 0;
  Model plain(std::make_shared<ir::Model>(b.m));
  auto r0 = plain.quantize(samples_of(calib), o, samples_of(held_out));
  ASSERT_TRUE(r0.is_ok()) << r0.status().message();
  ASSERT_EQ(r0->outputs.size(), 1u);
  EXPECT_GT(r0->outputs[0].cosine, 0.99);
  ASSERT_LT(r0->outputs[0].feature_cosine, 0.99);
  o.min_cosine = 0.99;
  Model guarded(std::make_shared<ir::Model>(b.m));
  auto r = guarded.quantize(samples_of(calib), o, samples_of(held_out));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_GE(r->outputs[0].feature_cosine, 0.99);
  EXPECT_TRUE(std::any_of(r->kept_float.begin(), r->kept_float.end(), [](const std::string& k) {
    return k.find("mean feature cosine") != std::string::npos;
  }));
}

// A tensor the accuracy guard puts back in float keeps its float values: a carrier reading it (a
// Concat of a conv's ReLU and a Sigmoid, the model's output) stays float, where it requantized
// them at its 8-bit output all the same (as yolox's head did its objectness).
TEST(Quantize, CarrierOfAFloatTensorStaysFloat) {
  test::Builder b(13);
  b.input("x", {1, 8, 12, 12});
  b.conv("x", "c1", 8, 8);
  b.add("Relu", {"c1"}, {"r1"});
  b.conv("x", "c2", 8, 8);
  b.add("Sigmoid", {"c2"}, {"sg"});
  b.add("Concat", {"r1", "sg"}, {"y"}, {test::attr_i("axis", 1)});
  b.output("y");
  OptimizeOptions none;
  passes::PassContext ctx(b.m, none);
  QuantizeReport scratch;
  auto points = [&](const std::set<std::string>& float_tensors) {
    const quantize::Plan plan = quantize::choose(b.m, ctx.types(), QuantizeOptions{}, float_tensors, &scratch);
    return std::set<std::string>(plan.points.begin(), plan.points.end());
  };
  const std::set<std::string> all = points({});
  EXPECT_TRUE(all.count("y") && all.count("sg") && all.count("r1"));
  const std::set<std::string> without = points({"sg"});
  EXPECT_FALSE(without.count("sg"));
  EXPECT_FALSE(without.count("y")) << "the Concat would quantize sg's values at its output";
}

// small_cnn(13) quantized on 8 random samples, no fallbacks allowed: the model and the report.
std::pair<std::unique_ptr<Model>, Result<QuantizeReport>> quantize_without_fallbacks(CalibrationMethod method,
                                                                                   bool reduce_range, bool widen,
                                                                                   double min_cosine) {
  test::Builder data;
  std::vector<Tensor> calib = test::random_samples(data, 8, {1, 8, 12, 12});
  QuantizeOptions o = test::untimed();
  o.method = method;
  o.reduce_range = reduce_range, o.widen_weights_if_missed = widen, o.min_cosine = min_cosine;
  o.hold_out_every = 0;
  o.max_fallbacks = 0;
  auto model = std::make_unique<Model>(std::make_shared<ir::Model>(test::small_cnn(13)));
  auto r = model->quantize(test::samples_of(calib), o);
  return {std::move(model), std::move(r)};
}

// --weight-bits auto on a CPU without VNNI (reduce_range with widen_weights_if_missed): where the
// 7-bit weights miss the budget after the fallbacks allowed (none here) and 8-bit ones hold it, the
// model written has 8-bit weights (each filter's largest at 127), the report naming the budget
// missed; without the rung quantizing fails.
TEST(Quantize, SevenBitWeightsThatMissTheBudgetWidenToEight) {
  auto quantize = [](bool reduce_range, bool widen, double min_cosine) {
    return quantize_without_fallbacks(CalibrationMethod::kMinMax, reduce_range, widen, min_cosine);
  };
  auto [m7, r7] = quantize(true, false, 0);
  auto [m8, r8] = quantize(false, false, 0);
  ASSERT_TRUE(r7.is_ok() && r8.is_ok());
  const double c7 = r7->outputs.at(0).cosine, c8 = r8->outputs.at(0).cosine;
  ASSERT_GT(c8, c7);  // 8-bit weights nearer the float model
  const double budget = (c7 + c8) / 2;
  auto [widened, r] = quantize(true, true, budget);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_NE(r->seven_bit_weights_missed.find("cosine"), std::string::npos) << r->seven_bit_weights_missed;
  EXPECT_GE(r->outputs.at(0).cosine, budget);
  for (const std::string& k : r->kept_float) EXPECT_EQ(k.find("accuracy guard"), std::string::npos) << k;
  int most = 0;  // the conv weights written: 8-bit
  for (const auto& [name, t] : widened->ir().graph.initializers)
    if (t.dtype() == DType::kInt8 && t.rank() == 4)
      for (int64_t i = 0; i < t.numel(); ++i) most = std::max(most, std::abs(int{t.data<int8_t>()[i]}));
  EXPECT_EQ(most, 127);
  auto [missed, rm] = quantize(true, false, budget);  // without the rung
  ASSERT_FALSE(rm.is_ok());
  EXPECT_NE(rm.status().message().find("the budget is missed after 0 fallbacks"), std::string::npos)
      << rm.status().message();
}

// Widened, the calibration method is picked again on the 8-bit weights: the trials and the pick
// are those of quantizing with 8-bit weights from the start, not those measured on 7-bit ones.
TEST(Quantize, WidenedWeightsPickTheirCalibrationAgain) {
  auto quantize = [](bool reduce_range, bool widen, double min_cosine) {
    return quantize_without_fallbacks(CalibrationMethod::kAuto, reduce_range, widen, min_cosine).second;
  };
  auto r7 = quantize(true, false, 0), r8 = quantize(false, false, 0);
  ASSERT_TRUE(r7.is_ok() && r8.is_ok());
  ASSERT_EQ(r7->calibration_trials.size(), 4u);
  ASSERT_NE(r7->calibration_trials, r8->calibration_trials);  // else the test would tell nothing
  const double c7 = r7->outputs.at(0).cosine, c8 = r8->outputs.at(0).cosine;
  ASSERT_GT(c8, c7);
  auto r = quantize(true, true, (c7 + c8) / 2);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_FALSE(r->seven_bit_weights_missed.empty());
  EXPECT_EQ(r->calibration_trials, r8->calibration_trials);
  EXPECT_EQ(r->calibration_method, r8->calibration_method);
  EXPECT_EQ(r->outputs.at(0).cosine, c8);
}

}  // namespace
}  // namespace kiln
