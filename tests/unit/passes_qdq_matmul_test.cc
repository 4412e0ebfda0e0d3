// qdq-fusion's MatMul and Gemm on quantized weights (quantize_static's) and dynamic-quant-matmul's
// chain (quantize_dynamic's): both become MatMulIntegerToFloat.
#include <gtest/gtest.h>

#include <random>

#include "pass_test_util.h"
#include "qdq_test_util.h"

namespace kiln {
namespace {

using qdq_test::dequantized_constant;
using qdq_test::qdq;
using test::scalar_of;

// quantize_static's MatMul and Gemm on constant weights, DQ(xq) times DQ(wq) [+ c]: a MatMul with
// per-column scales, a Gemm with transB, alpha, beta and an int32 bias behind its DQ, and a Gemm
// whose c is a float row, each becomes MatMulIntegerToFloat on the codes; a MatMul whose weights
// are quantized per row (the sum's axis) stays float. Scales are powers of two, so the float ops
// are exact and the outputs the same.
TEST(QdqFusion, MatMulAndGemmOnQuantizedWeightsBecomeEightBit) {
  const int64_t m = 3, k = 20, n = 12;
  test::Builder b(13);
  b.input("x", {m, k});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> w8(-127, 127), b32(-5000, 5000);
  auto weights = [&](const Shape& shape) {
    Tensor t = Tensor::make(DType::kInt8, shape).value();
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int8_t>()[i] = static_cast<int8_t>(w8(rng));
    return t;
  };
  auto scales = [](int64_t count) {
    Tensor t = Tensor::make(DType::kFloat32, {count}).value();
    for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = 1.0f / static_cast<float>(64 << (i % 3));
    return t;
  };
  const float xs = 0.0625f;
  qdq(b, "x", "xq", "xd", xs, 128);
  // MatMul, per-column scales (axis 1).
  dequantized_constant(b, "w1", weights({k, n}), scales(n), Tensor::make(DType::kInt8, {n}).value(), 1);
  b.add("MatMul", {"xd", "w1"}, {"y1"});
  // Gemm, transB: W [n, k] with per-row (output) scales, alpha, beta, an int32 bias in xs * ws * alpha.
  dequantized_constant(b, "w2", weights({n, k}), scales(n), Tensor::make(DType::kInt8, {n}).value(), 0);
  Tensor bq = Tensor::make(DType::kInt32, {n}).value(), bs = scales(n);
  for (int64_t j = 0; j < n; ++j) bq.data<int32_t>()[j] = b32(rng), bs.data<float>()[j] *= xs;
  dequantized_constant(b, "b2", bq, bs, Tensor::make(DType::kInt32, {n}).value(), 0);
  b.add("Gemm", {"xd", "w2", "b2"}, {"y2"},
        {test::attr_i("transB", 1), test::attr_f("alpha", 0.5f), test::attr_f("beta", 2.0f)});
  // Gemm, one weight scale, c a float row [1, n].
  dequantized_constant(b, "w3", weights({k, n}), scalar_of(DType::kFloat32, 1.0 / 128), scalar_of(DType::kInt8, 0), 1);
  Tensor c = Tensor::make(DType::kFloat32, {1, n}).value();
  for (int64_t j = 0; j < n; ++j) c.data<float>()[j] = static_cast<float>(j) * 0.25f - 1.0f;
  b.m.graph.initializers["c3"] = c;
  b.add("Gemm", {"xd", "w3", "c3"}, {"y3"});
  // MatMul, scales per row of W (axis 0, the summed axis): no 8-bit form.
  dequantized_constant(b, "w4", weights({k, n}), scales(k), Tensor::make(DType::kInt8, {k}).value(), 0);
  b.add("MatMul", {"xd", "w4"}, {"y4"});
  for (const char* y : {"y1", "y2", "y3", "y4"}) b.output(y);
  ir::Model after = b.m;
  test::run_passes(after, {"qdq-fusion", "dead-code"});
  const auto h = test::qualified_histogram(after);
  EXPECT_EQ(h.at("com.microsoft.MatMulIntegerToFloat"), 3);
  EXPECT_EQ(h.at("MatMul"), 1);
  EXPECT_EQ(h.count("Gemm"), 0u);
  test::expect_same_outputs(b.m, after, {b.random({m, k}, -8, 8)}, 0.0f);
}

// quantize_dynamic's MatMul chain, DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(xs * ws)
// -> Add(bias), becomes one MatMulIntegerToFloat with the same float operations: the outputs stay
// (FMA contraction aside) the same; per-column weight scales too.
TEST(DynamicQuantMatMul, ChainBecomesMatMulIntegerToFloat) {
  for (const bool per_column : {false, true}) {
    const int64_t k = 40, n = 24;
    test::Builder b(13);
    b.input("x", {2, 7, k});
    std::mt19937 rng(9);
    std::uniform_int_distribution<int> w8(-127, 127);
    Tensor wq = Tensor::make(DType::kInt8, {k, n}).value();
    for (int64_t i = 0; i < wq.numel(); ++i) wq.data<int8_t>()[i] = static_cast<int8_t>(w8(rng));
    auto& init = b.m.graph.initializers;
    init["wq"] = wq;
    init["wz"] = scalar_of(DType::kInt8, 0);
    if (per_column)
      init["ws"] = b.random({n}, 0.001f, 0.01f);
    else
      init["ws"] = scalar_of(DType::kFloat32, 0.004);
    init["bias"] = b.random({n});
    b.add("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
    b.add("MatMulInteger", {"xq", "wq", "xz", "wz"}, {"acc"});
    b.add("Cast", {"acc"}, {"accf"}, {test::attr_i("to", 1)});
    b.add("Mul", {"xs", "ws"}, {"s"});
    b.add("Mul", {"accf", "s"}, {"m"});
    b.add("Add", {"bias", "m"}, {"y"});
    b.output("y");
    ir::Model after = b.m;
    auto rewrites = test::run_pass(after, "dynamic-quant-matmul");
    ASSERT_TRUE(rewrites.is_ok()) << rewrites.status().message();
    ASSERT_EQ(*rewrites, 1);
    test::run_passes(after, {"dead-code"});  // the scale product, kept for other readers
    EXPECT_EQ(test::qualified_histogram(after),
              (std::map<std::string, int>{{"DynamicQuantizeLinear", 1}, {"com.microsoft.MatMulIntegerToFloat", 1}}));
    test::expect_same_outputs(b.m, after, {b.random({2, 7, k})}, 1e-6f);
  }
}

// Two chains on one X whose weights share a scale, with one Mul(xs, ws) for both (ONNX Runtime
// writes bert_base's last K and V so): both fuse, the Mul stays until neither reads it.
TEST(DynamicQuantMatMul, ChainsSharingTheirScaleProductBothFuse) {
  const int64_t k = 16, n = 8;
  test::Builder b(13);
  b.input("x", {3, k});
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> w8(-127, 127);
  auto& init = b.m.graph.initializers;
  init["wz"] = scalar_of(DType::kInt8, 0);
  init["ws"] = scalar_of(DType::kFloat32, 0.004);
  b.add("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  b.add("Mul", {"xs", "ws"}, {"s"});
  for (const std::string p : {"k", "v"}) {
    Tensor wq = Tensor::make(DType::kInt8, {k, n}).value();
    for (int64_t i = 0; i < wq.numel(); ++i) wq.data<int8_t>()[i] = static_cast<int8_t>(w8(rng));
    init["w" + p] = wq;
    b.add("MatMulInteger", {"xq", "w" + p, "xz", "wz"}, {p + "_acc"});
    b.add("Cast", {p + "_acc"}, {p + "_accf"}, {test::attr_i("to", 1)});
    b.add("Mul", {p + "_accf", "s"}, {p});
    b.output(p);
  }
  ir::Model after = b.m;
  test::run_passes(after, {"dynamic-quant-matmul", "dead-code"});
  EXPECT_EQ(test::qualified_histogram(after),
            (std::map<std::string, int>{{"DynamicQuantizeLinear", 1}, {"com.microsoft.MatMulIntegerToFloat", 2}}));
  test::expect_same_outputs(b.m, after, {b.random({3, k})}, 1e-6f);
}

}  // namespace
}  // namespace kiln
