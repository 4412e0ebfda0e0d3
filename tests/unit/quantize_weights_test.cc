// Quantizing weights only (kiln/quantize.h): --weight-only in 8 bits (QDQ) or 4 (MatMulNBits),
// and --precision fp16/bf16 storage.
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
