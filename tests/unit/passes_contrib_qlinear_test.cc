// ONNX Runtime's QOperator ops that contrib-qlinear lowers: QGemm against plain loops (float and
// 8-bit outputs, transB, alpha, an int32 bias), QLinearMatMul against its reference kernel, and
// qdq-fusion's moves of 8-bit codes (Q(Concat(DQ, DQ)) with other parameters, Q(Resize(DQ))) bit
// for bit against the unfused ops. (tests/python checks the other lowered ops against ONNX
// Runtime's own kernels.)
#include <gtest/gtest.h>

#include <cmath>

#include "core/float_convert.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::scalar_of;

template <typename T>
Tensor filled(DType t, const Shape& shape, std::mt19937& rng, int lo, int hi) {
  Tensor x = Tensor::make(t, shape).value();
  std::uniform_int_distribution<int> d(lo, hi);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<T>()[i] = static_cast<T>(d(rng));
  return x;
}

struct QGemmCase {
  bool quantized_out, trans_b;
  float alpha;
};

// QGemm(a u8, b s8 per column, c int32) as ONNX Runtime defines it:
// y = alpha * as * bs[n] * (sum_k (a - az)(b - bz[n]) + c[n]), then y / ys + yz rounded and saturated.
TEST(ContribQLinear, QGemmMatchesPlainLoops) {
  for (const QGemmCase& tc : {QGemmCase{false, true, 1.0f}, QGemmCase{true, true, 1.0f}, QGemmCase{true, false, 0.5f},
                              QGemmCase{false, false, 2.0f}}) {
    const int64_t m = 3, k = 37, n = 10;
    std::mt19937 rng(5);
    const Tensor a = filled<uint8_t>(DType::kUInt8, {m, k}, rng, 0, 255);
    const Tensor b = filled<int8_t>(DType::kInt8, tc.trans_b ? Shape{n, k} : Shape{k, n}, rng, -127, 127);
    const Tensor c = filled<int32_t>(DType::kInt32, {n}, rng, -5000, 5000);
    Tensor bs = Tensor::make(DType::kFloat32, {n}).value();
    for (int64_t j = 0; j < n; ++j) bs.data<float>()[j] = 0.001f * static_cast<float>(j + 1);
    const float as = 0.02f, ys = 0.7f;
    const int az = 131, yz = 120;
    test::Builder bld(13);
    bld.input_dims("a", {test::num(m), test::num(k)}, DType::kUInt8);
    auto& init = bld.m.graph.initializers;
    init["as"] = scalar_of(DType::kFloat32, as), init["az"] = scalar_of(DType::kUInt8, az);
    init["b"] = b, init["bs"] = bs, init["bz"] = Tensor::make(DType::kInt8, {n}).value(), init["c"] = c;
    std::vector<std::string> in = {"a", "as", "az", "b", "bs", "bz", "c"};
    if (tc.quantized_out) {
      init["ys"] = scalar_of(DType::kFloat32, ys), init["yz"] = scalar_of(DType::kUInt8, yz);
      in.insert(in.end(), {"ys", "yz"});
    }
    ir::Node& q = bld.add("QGemm", in, {"y"},
                          {test::attr_i("transB", tc.trans_b), ir::Attribute::of_float("alpha", tc.alpha)});
    q.domain = "com.microsoft";
    bld.m.opsets["com.microsoft"] = 1;
    bld.output_dims("y", {test::num(m), test::num(n)}, tc.quantized_out ? DType::kUInt8 : DType::kFloat32);
    test::run_passes(bld.m, {"contrib-qlinear", "constant-folding"});
    EXPECT_EQ(test::qualified_histogram(bld.m).count("com.microsoft.QGemm"), 0u);
    const std::vector<Value> y = test::run_model(bld.m, {a});
    ASSERT_EQ(y.size(), 1u);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t sum = c.data<int32_t>()[j];
        for (int64_t p = 0; p < k; ++p) {
          const int bv = b.data<int8_t>()[tc.trans_b ? j * k + p : p * n + j];
          sum += (a.data<uint8_t>()[i * k + p] - az) * bv;
        }
        const double want = static_cast<double>(tc.alpha) * as * bs.data<float>()[j] * static_cast<double>(sum);
        if (!tc.quantized_out) {
          EXPECT_NEAR(y[0].tensor.data<float>()[i * n + j], want, 1e-5 * std::max(1.0, std::fabs(want)))
              << "alpha " << tc.alpha << " at " << i << ", " << j;
          continue;
        }
        // Within one code: the float steps may land the other side of a half.
        const double code = std::clamp(std::nearbyint(want / ys) + yz, 0.0, 255.0);
        EXPECT_NEAR(y[0].tensor.data<uint8_t>()[i * n + j], code, 1.0) << "at " << i << ", " << j;
      }
  }
}

// QLinearMatMul (standard ONNX; kiln's reference kernel runs it at -O0) after the lowering: the
// codes of the reference kernel, give or take one where the float steps meet a half.
TEST(ContribQLinear, QLinearMatMulMatchesItsReferenceKernel) {
  const int64_t m = 5, k = 64, n = 24;
  std::mt19937 rng(9);
  test::Builder bld(13);
  bld.input_dims("a", {test::num(2), test::num(m), test::num(k)}, DType::kUInt8);
  auto& init = bld.m.graph.initializers;
  init["as"] = scalar_of(DType::kFloat32, 0.03), init["az"] = scalar_of(DType::kUInt8, 128);
  init["b"] = filled<int8_t>(DType::kInt8, {k, n}, rng, -127, 127);
  init["bs"] = scalar_of(DType::kFloat32, 0.004), init["bz"] = scalar_of(DType::kInt8, 0);
  init["ys"] = scalar_of(DType::kFloat32, 0.9), init["yz"] = scalar_of(DType::kUInt8, 100);
  bld.add("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
  bld.output_dims("y", {test::num(2), test::num(m), test::num(n)}, DType::kUInt8);
  const ir::Model before = bld.m;
  ir::Model after = before;
  test::run_passes(after, {"contrib-qlinear"});
  EXPECT_EQ(test::qualified_histogram(after),
            (std::map<std::string, int>{{"com.microsoft.MatMulIntegerToFloat", 1}, {"QuantizeLinear", 1}}));
  const Tensor a = filled<uint8_t>(DType::kUInt8, {2, m, k}, rng, 0, 255);
  const std::vector<Value> want = test::run_model(before, {a}), got = test::run_model(after, {a});
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  int differ = 0;
  for (int64_t i = 0; i < a.numel() / k * n; ++i) {
    const int d = std::abs(want[0].tensor.data<uint8_t>()[i] - got[0].tensor.data<uint8_t>()[i]);
    ASSERT_LE(d, 1) << "element " << i;
    differ += d;
  }
  EXPECT_LE(differ, 2);  // a code apart only where a value lands within float rounding of a half
}

// Q(op(DQ(x))) of ops that only move elements: the op moves the codes; a concatenated input with
// other parameters goes through a table. Bit for bit the unfused ops.
TEST(QdqFusion, ConcatAndResizeMoveEightBitCodes) {
  test::Builder b(13);
  b.input("x", {1, 4, 5, 6});
  auto& init = b.m.graph.initializers;
  auto quantize = [&](const std::string& from, const std::string& q, float s, int z) {
    init[q + "_s"] = scalar_of(DType::kFloat32, s), init[q + "_z"] = scalar_of(DType::kUInt8, z);
    b.add("QuantizeLinear", {from, q + "_s", q + "_z"}, {q});
  };
  auto dequantize = [&](const std::string& q, const std::string& to) {
    b.add("DequantizeLinear", {q, q + "_s", q + "_z"}, {to});
  };
  quantize("x", "a", 0.05f, 128);
  quantize("x", "bq", 0.031f, 97);  // other parameters: requantized by a table
  dequantize("a", "ad"), dequantize("bq", "bd");
  b.add("Concat", {"ad", "bd", "ad"}, {"cat"}, {test::attr_i("axis", 1)});
  quantize("cat", "catq", 0.05f, 128);
  dequantize("catq", "catd");
  b.floats("scales", {4}, {1, 1, 2, 2});
  b.add("Resize", {"catd", "", "scales"}, {"up"}, {test::attr_s("mode", "nearest")});
  quantize("up", "upq", 0.05f, 128);
  dequantize("upq", "y");
  b.output("y");
  const ir::Model before = b.m;
  ir::Model after = before;
  test::run_passes(after, {"qdq-fusion", "dead-code"});
  EXPECT_EQ(test::qualified_histogram(after), (std::map<std::string, int>{{"QuantizeLinear", 2},
                                                                          {"ai.kiln.QLinearLookup", 1},
                                                                          {"Concat", 1},
                                                                          {"Resize", 1},
                                                                          {"DequantizeLinear", 1}}));
  test::Builder inputs;
  test::expect_same_outputs(before, after, {inputs.random({1, 4, 5, 6}, -7, 7)}, 0.0f);
}

}  // namespace
}  // namespace kiln
