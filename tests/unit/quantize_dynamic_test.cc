// --dynamic quantization (kiln/quantize.h): ONNX Runtime's quantize_dynamic chain and kiln's
// per-row ai.kiln.DynamicQuantMatMul against plain loops, and the epilogues -O2 folds into them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/float_convert.h"
#include "kiln/model.h"
#include "pass_test_util.h"
#include "quantize_test_util.h"
#include "quantize/calibration.h"

namespace kiln {
namespace {

using test::cosine;
using test::samples_of;
using test::small_cnn;

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
  QuantizeOptions o = test::untimed();
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
// of zeros and an all-positive row among them), with rows of 8 bits and of 7 (row_bits 7: the
// u8s8 tile on vpmaddubsw where the CPU lacks VNNI, against full-range int8 weights).
void check_dynamic_rows(int row_bits) {
  SCOPED_TRACE(::testing::Message() << "row_bits " << row_bits);
  test::Builder b(13);
  b.input("x", {3, 16});
  b.weight("w", {16, 12});
  b.weight("bias", {12});
  b.add("MatMul", {"x", "w"}, {"m"});
  b.add("Add", {"m", "bias"}, {"y"});
  b.output("y");
  Model model = test::dynamically_quantized(b.m, row_bits);
  EXPECT_EQ(test::qualified_histogram(model.ir()), (std::map<std::string, int>{{"ai.kiln.DynamicQuantMatMul", 1}}));
  EXPECT_EQ(model.ir().graph.nodes[0].attr_int("row_bits", 8), row_bits);
  const float top = row_bits == 7 ? 127.0f : 255.0f;
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
    const float scale = (hi == lo ? 1.0f : hi - lo) / top;
    const float zp = std::nearbyint(std::clamp(-lo / scale, 0.0f, top));
    for (int64_t j = 0; j < 12; ++j) {
      int64_t sum = 0;
      for (int64_t k = 0; k < 16; ++k) {
        const float q = std::min(top, std::max(0.0f, std::nearbyint(row[k] * (1.0f / scale)) + zp));
        sum += (static_cast<int64_t>(q) - static_cast<int64_t>(zp)) * wq.data<int8_t>()[k * 12 + j];
      }
      const float want = static_cast<float>(sum) * (scale * ws.data<float>()[ws.numel() == 1 ? 0 : j]) + bias.data<float>()[j];
      // The codes and sums exactly; the last multiply-add may fuse (an FMA's single rounding).
      ASSERT_NEAR(y.data<float>()[i * 12 + j], want, 1e-6f * std::max(1.0f, std::fabs(want))) << i << " " << j;
    }
  }
  EXPECT_GT(cosine(test::run_model(b.m, {x})[0].tensor, y), 0.999f);
}

TEST(Quantize, DynamicQuantMatMulPerRow) {
  check_dynamic_rows(8);
  check_dynamic_rows(7);
}

// A row_bits other than 7 or 8 is an error that names it, when the session is made.
TEST(Quantize, DynamicQuantMatMulRowBitsOtherThanSevenOrEightIsAnError) {
  test::Builder b(13);
  b.input("x", {3, 16});
  b.weight("w", {16, 12});
  b.add("MatMul", {"x", "w"}, {"y"});
  b.output("y");
  auto m = std::make_shared<ir::Model>(test::dynamically_quantized(b.m).ir());
  m->graph.nodes[0].attrs.push_back(ir::Attribute::of_int("row_bits", 5));
  auto s = Session::create(m);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("row_bits must be 7 or 8, got 5"), std::string::npos) << s.status().message();
}

// reduce_range with dynamic quantization: 7-bit weights (each column's largest |w| at 63), which
// gemm_u8s8 runs on vpmaddubsw on CPUs without VNNI (and vpdpbusd with it), and the outputs stay
// close to the float model's.
TEST(Quantize, DynamicReduceRangeWritesSevenBitWeights) {
  test::Builder b(13);
  b.input("x", {5, 48});
  b.weight("w", {48, 20});
  b.add("MatMul", {"x", "w"}, {"y"});
  b.output("y");
  Model model = test::dynamically_quantized(b.m, 8, true);
  const ir::Node& n = model.ir().graph.nodes[0];
  const Tensor& wq = model.ir().graph.initializers.at(n.inputs[1]);
  for (int64_t j = 0; j < 20; ++j) {
    int most = 0;
    for (int64_t k = 0; k < 48; ++k) most = std::max(most, std::abs(static_cast<int>(wq.data<int8_t>()[k * 20 + j])));
    EXPECT_EQ(most, 63) << "column " << j;
  }
  const Tensor x = b.random({5, 48});
  EXPECT_GT(cosine(test::run_model(b.m, {x})[0].tensor, test::run_model(model.ir(), {x})[0].tensor), 0.999f);
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
  QuantizeOptions o = test::untimed();
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
  QuantizeOptions o = test::untimed();
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

}  // namespace
}  // namespace kiln
