// qdq-fusion and qlinear-nhwc on a QDQ model as ONNX Runtime's quantize_static writes them: a
// conv (per-filter weight scales, an int32 bias, a Relu its Q absorbs), an 8-bit MaxPool, a 1x1
// conv and a residual Add, each between DequantizeLinear and QuantizeLinear. Every scale is a
// power of two and the values small, so the float ops of the QDQ form are exact and the 8-bit
// kernels must give the very same outputs.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/float_convert.h"
#include "pass_test_util.h"
#include "qdq_test_util.h"

namespace kiln {
namespace {

using test::scalar_of;
using qdq_test::dequantized_constant;
using qdq_test::qdq;

// A conv's weights W (int8 within +-w_max, shape w_shape) and bias B (int32 within +-bias_max)
// behind their DequantizeLinear, as the quantizers write them: per-filter scales 2^-6 .. 2^-8,
// the bias in xs * ws.
void conv_constants(test::Builder& b, const std::string& w, const std::string& bias, const Shape& w_shape, float xs,
                    int w_max, int bias_max, std::mt19937& rng) {
  std::uniform_int_distribution<int> w8(-w_max, w_max), b32(-bias_max, bias_max);
  const int64_t m = w_shape[0];
  Tensor wq = Tensor::make(DType::kInt8, w_shape).value();
  for (int64_t i = 0; i < wq.numel(); ++i) wq.data<int8_t>()[i] = static_cast<int8_t>(w8(rng));
  Tensor ws = Tensor::make(DType::kFloat32, {m}).value(), bs = Tensor::make(DType::kFloat32, {m}).value();
  Tensor bq = Tensor::make(DType::kInt32, {m}).value();
  for (int64_t i = 0; i < m; ++i) {
    ws.data<float>()[i] = 1.0f / static_cast<float>(64 << (i % 3));
    bs.data<float>()[i] = xs * ws.data<float>()[i];
    bq.data<int32_t>()[i] = b32(rng);
  }
  dequantized_constant(b, w, wq, ws, Tensor::make(DType::kInt8, {m}).value(), 0);
  dequantized_constant(b, bias, bq, bs, Tensor::make(DType::kInt32, {m}).value(), 0);
}

ir::Model qdq_block() {
  const int64_t c = 8, m = 16;
  test::Builder b(13);
  b.input("x", {1, c, 9, 9});
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> w8(-127, 127);
  const float xs = 0.0625f;
  qdq(b, "x", "xq", "xd", xs, 128);
  // conv1: 3x3, per-filter scales 2^-6 .. 2^-8, bias in xs * ws.
  conv_constants(b, "w1", "b1", {m, c, 3, 3}, xs, 127, 900, rng);
  b.add("Conv", {"xd", "w1", "b1"}, {"c1"}, {test::attr_ints("pads", {1, 1, 1, 1})});
  b.add("Relu", {"c1"}, {"r1"});
  qdq(b, "r1", "r1q", "r1d", 0.25f, 0);
  b.add("MaxPool", {"r1d"}, {"p1"}, {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("pads", {1, 1, 1, 1})});
  qdq(b, "p1", "p1q", "p1d", 0.25f, 0);
  // conv2: 1x1 back to c filters, one scale, no bias.
  Tensor w2 = Tensor::make(DType::kInt8, {c, m, 1, 1}).value();
  for (int64_t i = 0; i < w2.numel(); ++i) w2.data<int8_t>()[i] = static_cast<int8_t>(w8(rng));
  dequantized_constant(b, "w2", w2, scalar_of(DType::kFloat32, 1.0 / 128), scalar_of(DType::kInt8, 0), 1);
  b.add("Conv", {"p1d", "w2"}, {"c2"});
  qdq(b, "c2", "c2q", "c2d", 0.5f, 100);
  // The residual: conv2's output plus the block's input.
  b.add("Add", {"c2d", "xd"}, {"s"});
  b.add("Relu", {"s"}, {"sr"});
  qdq(b, "sr", "sq", "y", 0.5f, 0);
  b.output("y");
  return b.m;
}

TEST(QdqFusion, QdqOpsBecomeTheirEightBitForms) {
  const ir::Model before = qdq_block();
  ir::Model after = before;
  test::run_passes(after, {"qdq-fusion", "dead-code"});
  EXPECT_EQ(test::qualified_histogram(after),
            (std::map<std::string, int>{{"QLinearConv", 2},
                                        {"MaxPool", 1},
                                        {"com.microsoft.QLinearAdd", 1},
                                        {"QuantizeLinear", 1},
                                        {"DequantizeLinear", 1}}));
  test::Builder inputs;
  const Tensor x = inputs.random({1, 8, 9, 9}, -8, 8);
  test::expect_same_outputs(before, after, {x}, 0.0f);
}

// Adds Conv(conv_inputs) (3x3, pads 1) with a Q/DQ pair on its output to b's model (input x
// [1, c, 7, 7]), and checks that qdq-fusion makes it one QLinearConv with the same outputs.
void expect_one_qlinear_conv(test::Builder& b, const std::vector<std::string>& conv_inputs, int64_t c) {
  b.add("Conv", conv_inputs, {"conv"}, {test::attr_ints("pads", {1, 1, 1, 1})});
  qdq(b, "conv", "yq", "y", 0.5f, 100);
  b.output("y");
  ir::Model after = b.m;
  test::run_passes(after, {"qdq-fusion", "dead-code"});
  EXPECT_EQ(test::histogram(after).count("Conv"), 0u);
  EXPECT_EQ(test::histogram(after).at("QLinearConv"), 1);
  test::expect_same_outputs(b.m, after, {b.random({1, c, 7, 7}, -8, 8)}, 0.0f);
}

// ONNX Runtime's QUInt8 weights: u8 W with a zero point of 120 (W less it past s8) and one a
// filter around 128; the conv becomes QLinearConv on them, with the same outputs.
TEST(QdqFusion, UnsignedWeightsWithZeroPointsBecomeQLinearConv) {
  for (const bool per_filter : {false, true}) {
    const int64_t c = 8, m = 6;
    test::Builder b(13);
    b.input("x", {1, c, 7, 7});
    std::mt19937 rng(5);
    qdq(b, "x", "xq", "xd", 0.0625f, 128);
    Tensor wq = Tensor::make(DType::kUInt8, {m, c, 3, 3}).value();
    for (int64_t i = 0; i < wq.numel(); ++i) wq.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
    Tensor wz = Tensor::make(DType::kUInt8, per_filter ? Shape{m} : Shape{}).value();
    for (int64_t i = 0; i < wz.numel(); ++i) wz.data<uint8_t>()[i] = static_cast<uint8_t>(per_filter ? 124 + i : 120);
    Tensor ws = Tensor::make(DType::kFloat32, wz.shape()).value();  // (a DQ's scale and zero point agree)
    for (int64_t i = 0; i < ws.numel(); ++i) ws.data<float>()[i] = 1.0f / static_cast<float>(128 << (i % 2));
    dequantized_constant(b, "w", wq, ws, wz, 0);
    expect_one_qlinear_conv(b, {"xd", "w"}, c);
  }
}

// Fake-quantized weights (NVIDIA's pytorch-quantization, other QAT exports): float W with its own
// QuantizeLinear before the DequantizeLinear, and a float bias. The Q of constants folds to codes
// first, the bias rounds to int32 in xs * ws, so the conv becomes QLinearConv as with int8 weights
// (left to constant folding, W was float); the bias on that grid here, so the same outputs.
TEST(QdqFusion, FakeQuantizedWeightsBecomeQLinearConv) {
  const int64_t c = 8, m = 6;
  test::Builder b(13);
  b.input("x", {1, c, 7, 7});
  qdq(b, "x", "xq", "xd", 0.0625f, 128);
  std::mt19937 rng(2);
  Tensor w = Tensor::make(DType::kFloat32, {m, c, 3, 3}).value();  // codes times the scale, and off them
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 255) - 127) / 128 + 0.003f;
  auto& init = b.m.graph.initializers;
  init["w"] = w, init["ws"] = scalar_of(DType::kFloat32, 1.0 / 128), init["wz"] = scalar_of(DType::kInt8, 0);
  b.add("QuantizeLinear", {"w", "ws", "wz"}, {"wq"});
  b.add("DequantizeLinear", {"wq", "ws", "wz"}, {"wd"});
  Tensor bias = Tensor::make(DType::kFloat32, {m}).value();
  for (int64_t i = 0; i < m; ++i) bias.data<float>()[i] = static_cast<float>(i * 300 - 700) / 2048;  // xs * ws = 2^-11
  init["bias"] = bias;
  expect_one_qlinear_conv(b, {"xd", "wd", "bias"}, c);
}

// A TensorRT-style QDQ model quantizes the inputs of its convs alone: a conv whose output no Q
// reads (its residual add in float) becomes ai.kiln.QLinearConv with a float Y, the same values
// (power-of-two scales: the float ops are exact); at -O3 too, channels-last around it.
TEST(QdqFusion, ConvNoQuantizeReadsBecomesFloatOutputQLinearConv) {
  const int64_t c = 8, m = 8;
  test::Builder b(13);
  b.input("x", {1, c, 6, 6});
  b.input("skip", {1, m, 6, 6});
  std::mt19937 rng(4);
  qdq(b, "x", "xq", "xd", 0.0625f, 128);
  conv_constants(b, "w", "bias", {m, c, 3, 3}, 0.0625f, 127, 900, rng);
  b.add("Conv", {"xd", "w", "bias"}, {"conv"}, {test::attr_ints("pads", {1, 1, 1, 1})});
  b.add("Add", {"conv", "skip"}, {"y"});
  b.output("y");
  ir::Model after = b.m;
  test::run_passes(after, {"qdq-fusion", "dead-code"});
  EXPECT_EQ(test::qualified_histogram(after), (std::map<std::string, int>{{"QuantizeLinear", 1},
                                                                          {"ai.kiln.QLinearConv", 1},
                                                                          {"Add", 1}}));
  test::Builder inputs;
  const std::vector<Tensor> feeds = {inputs.random({1, c, 6, 6}, -8, 8), inputs.random({1, m, 6, 6}, -4, 4)};
  test::expect_same_outputs(b.m, after, feeds, 0.0f);
  SessionOptions o0, o3;
  o0.optimize_level = 0, o3.optimize_level = 3;
  const std::vector<Value> want = test::run_model(b.m, feeds, o0), got = test::run_model(b.m, feeds, o3);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(want[0].tensor.raw_data(), got[0].tensor.raw_data(), want[0].tensor.nbytes()), 0);
}

// At -O3 the chain runs channels-last: one Transpose into it and one out, none between.
TEST(QdqFusion, ChainStaysChannelsLastAtO3) {
  const ir::Model before = qdq_block();
  ir::Model after = before;
  auto report = optimize(after, OptimizeOptions{});
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  const auto h = test::qualified_histogram(after);
  EXPECT_EQ(h.at("com.microsoft.QLinearConv"), 2);
  EXPECT_EQ(h.at("com.microsoft.NhwcMaxPool"), 1);
  EXPECT_EQ(h.at("com.microsoft.QLinearAdd"), 1);
  EXPECT_EQ(h.at("Transpose"), 2);
  test::Builder inputs;
  const Tensor x = inputs.random({1, 8, 9, 9}, -8, 8);
  ir::Model plain = before;
  OptimizeOptions none;
  none.level = 0;
  ASSERT_TRUE(optimize(plain, none).is_ok());
  test::expect_same_outputs(plain, after, {x}, 0.0f);
}

// An image's QuantizeLinear and the Transpose to channels-last join the first conv at -O3
// (qlinear-conv-quantize-input): ai.kiln.QLinearConv takes the float image and quantizes it as it
// stages it, the very codes of the two ops. 1, 3 and 4 channels (one quad a pixel; 1 and 3 as
// window rows on the quads' tiles), a width past whole steps of 16 and 32 pixels, u8 and s8
// codes, weights within 7 bits and not (so that AVX2 stages u8 and int16), a depthwise first conv
// (staged in 16s), NaN, infinities and values far past the range; 5 channels stay as they were.
TEST(QdqFusion, ImageQuantizeJoinsTheFirstConvAtO3) {
  for (const int64_t c : {1, 3, 4, 5})
    for (const bool depthwise : {false, true})
      for (const bool s8 : {false, true})
        for (const int w_max : {64, 127}) {
          if (depthwise && c == 1) continue;  // one channel: group 1
          SCOPED_TRACE(::testing::Message() << c << " channels" << (depthwise ? " depthwise" : "")
                                            << (s8 ? " s8" : " u8") << " |w| <= " << w_max);
          const int64_t m = depthwise ? c : 64;  // (64 filters: enough for window rows to pay)
          test::Builder b(13);
          b.input("x", {2, c, 11, 75});
          auto& init = b.m.graph.initializers;
          init["xs"] = scalar_of(DType::kFloat32, 0.05);
          init["xz"] = scalar_of(s8 ? DType::kInt8 : DType::kUInt8, s8 ? -3 : 125);
          b.add("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
          b.add("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
          std::mt19937 rng(7);
          std::uniform_int_distribution<int> wv(-w_max, w_max), bias(-900, 900);
          Tensor w = Tensor::make(DType::kInt8, {m, depthwise ? 1 : c, 3, 3}).value();
          for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(wv(rng));
          Tensor bq = Tensor::make(DType::kInt32, {m}).value();
          for (int64_t i = 0; i < m; ++i) bq.data<int32_t>()[i] = bias(rng);
          dequantized_constant(b, "w", w, scalar_of(DType::kFloat32, 1.0 / 64), scalar_of(DType::kInt8, 0), 0);
          dequantized_constant(b, "b", bq, scalar_of(DType::kFloat32, 0.05 / 64), scalar_of(DType::kInt32, 0), 0);
          b.add("Conv", {"xd", "w", "b"}, {"c"},
                {test::attr_ints("pads", {1, 1, 1, 1}), test::attr_ints("strides", {2, 2}),
                 test::attr_i("group", depthwise ? c : 1)});
          b.add("Relu", {"c"}, {"r"});
          qdq(b, "r", "rq", "y", 0.25f, 0);
          b.output("y");
          ir::Model o3 = b.m, apart = b.m;
          OptimizeOptions without;
          without.disabled = {"qlinear-conv-quantize-input"};
          ASSERT_TRUE(optimize(o3, OptimizeOptions{}).is_ok());
          ASSERT_TRUE(optimize(apart, without).is_ok());
          const auto h = test::qualified_histogram(o3);
          EXPECT_EQ(h.count("QuantizeLinear"), c <= 4 ? 0u : 1u);
          EXPECT_EQ(h.count("ai.kiln.QLinearConv"), c <= 4 ? 1u : 0u);
          if (c <= 4) {
            EXPECT_EQ(o3.graph.nodes.front().inputs[0], "x");
          }
          test::Builder inputs;
          Tensor x = inputs.random({2, c, 11, 75}, -8, 8);
          float* xd = x.data<float>();
          xd[0] = std::nanf(""), xd[1] = INFINITY, xd[2] = -INFINITY, xd[3] = 1e30f, xd[4] = -1e30f;
          xd[5] = 0.025f, xd[6] = -0.075f;  // halves of the scale
          test::expect_same_outputs(apart, o3, {x}, 0.0f);
        }
}

// An elementwise op of one 8-bit value and one-value constants is a table of its codes:
// Q(LeakyRelu(DQ(x))), then Q(Max(DQ(.), bound)) and Q(Tanh(DQ(.))) after it, become one
// QLinearLookup (tables of tables compose), bit for bit the unfused ops; an op with a
// per-position operand stays.
TEST(QdqFusion, ElementwiseOpsOfCodesBecomeOneTable) {
  test::Builder b(13);
  b.input("x", {1, 4, 5, 6});
  qdq(b, "x", "xq", "xd", 0.05f, 128);
  b.add("LeakyRelu", {"xd"}, {"l"}, {test::attr_f("alpha", 0.1f)});
  qdq(b, "l", "lq", "ld", 0.04f, 20);
  b.scalar("bound", -0.3f);
  b.add("Max", {"ld", "bound"}, {"m"});
  qdq(b, "m", "mq", "md", 0.03f, 10);
  b.add("Tanh", {"md"}, {"t"});
  qdq(b, "t", "tq", "td", 1.0f / 128, 128);
  b.weight("per_position", {1, 4, 5, 6});
  b.add("Mul", {"td", "per_position"}, {"y"});
  b.output("y");
  const ir::Model before = b.m;
  ir::Model after = before;
  test::run_passes(after, {"qdq-fusion", "qlinear-table", "dead-code"});
  EXPECT_EQ(test::qualified_histogram(after), (std::map<std::string, int>{{"QuantizeLinear", 1},
                                                                          {"ai.kiln.QLinearLookup", 1},
                                                                          {"DequantizeLinear", 1},
                                                                          {"Mul", 1}}));
  test::Builder inputs;
  test::expect_same_outputs(before, after, {inputs.random({1, 4, 5, 6}, -6, 6)}, 0.0f);
}

// A YOLO C2f block's Split in QDQ form, each part quantized on its own: Split(DQ(x)) -> Q, Q
// becomes the Split of x's codes, the part whose Q has x's parameters as it is, the other through
// a table of its requantization; bit for bit the unfused ops.
TEST(QdqFusion, SplitMovesCodes) {
  test::Builder b(13);
  b.input("x", {1, 8, 5, 6});
  qdq(b, "x", "xq", "xd", 0.05f, 128);
  b.ints("sizes", {3, 5});
  b.add("Split", {"xd", "sizes"}, {"s0", "s1"}, {test::attr_i("axis", 1)});
  qdq(b, "s0", "s0q", "y0", 0.05f, 128);
  qdq(b, "s1", "s1q", "y1", 0.04f, 120);
  b.output("y0");
  b.output("y1");
  ir::Model after = b.m;
  test::run_passes(after, {"qdq-fusion", "dead-code"});
  EXPECT_EQ(test::qualified_histogram(after), (std::map<std::string, int>{{"QuantizeLinear", 1},
                                                                          {"Split", 1},
                                                                          {"ai.kiln.QLinearLookup", 1},
                                                                          {"DequantizeLinear", 2}}));
  test::Builder inputs;
  test::expect_same_outputs(b.m, after, {inputs.random({1, 8, 5, 6}, -7, 7)}, 0.0f);
}

// quantize_static's ActivationSymmetric: s8 codes around 0, where a conv's ReLU6 changes codes its
// Q cannot absorb, so it stays between DQ and Q: Q(Clip(DQ(x), 0, 6)) and Q(Relu(DQ(x))) become
// tables of the codes too (then the conv's, at -O3), with the same outputs.
TEST(QdqFusion, ClampsNoCodeRangeAbsorbsBecomeTables) {
  test::Builder b(13);
  b.input("x", {1, 4, 5, 6});
  auto& init = b.m.graph.initializers;
  auto qdq_s8 = [&](const std::string& x, const std::string& q, const std::string& dq, float s) {
    init[q + "_s"] = scalar_of(DType::kFloat32, s), init[q + "_z"] = scalar_of(DType::kInt8, 0);
    b.add("QuantizeLinear", {x, q + "_s", q + "_z"}, {q});
    b.add("DequantizeLinear", {q, q + "_s", q + "_z"}, {dq});
  };
  qdq_s8("x", "xq", "xd", 0.0625f);
  b.scalar("lo", 0.0f), b.scalar("hi", 6.0f);
  b.add("Clip", {"xd", "lo", "hi"}, {"c"});
  qdq_s8("c", "cq", "cd", 0.0625f);
  b.add("Relu", {"cd"}, {"r"});
  qdq_s8("r", "rq", "y", 0.03125f);
  b.output("y");
  ir::Model after = b.m;
  test::run_passes(after, {"qdq-fusion", "qlinear-table", "dead-code"});
  EXPECT_EQ(test::qualified_histogram(after), (std::map<std::string, int>{{"QuantizeLinear", 1},
                                                                          {"ai.kiln.QLinearLookup", 1},
                                                                          {"DequantizeLinear", 1}}));
  test::Builder inputs;
  test::expect_same_outputs(b.m, after, {inputs.random({1, 4, 5, 6}, -9, 9)}, 0.0f);
}

// A classifier's pool in QDQ form after a conv, Q(GlobalAveragePool(DQ(x))): QLinearGlobalAveragePool,
// whose integer sum and single rounding agree with the float ops to one step of the output's
// scale; at -O3 it reads the conv's channels-last output where it is (the Transpose left is of
// one pixel a channel).
TEST(QdqFusion, GlobalAveragePoolBecomesEightBitAndChannelsLast) {
  test::Builder b(13);
  b.input("x", {2, 8, 6, 6});
  qdq(b, "x", "xq", "xd", 0.05f, 128);
  Tensor w = Tensor::make(DType::kInt8, {16, 8, 1, 1}).value();
  std::mt19937 rng(6);
  for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  dequantized_constant(b, "w", w, scalar_of(DType::kFloat32, 1.0 / 64), scalar_of(DType::kInt8, 0), 1);
  b.add("Conv", {"xd", "w"}, {"c"});
  qdq(b, "c", "cq", "cd", 0.1f, 120);
  b.add("GlobalAveragePool", {"cd"}, {"pool"});
  qdq(b, "pool", "pq", "y", 0.02f, 100);
  b.output("y");
  ir::Model fused = b.m;
  test::run_passes(fused, {"qdq-fusion", "dead-code"});
  const auto h = test::qualified_histogram(fused);
  EXPECT_EQ(h.at("com.microsoft.QLinearGlobalAveragePool"), 1);
  EXPECT_EQ(h.count("GlobalAveragePool"), 0u);
  test::Builder inputs;
  const std::vector<Tensor> feeds = {inputs.random({2, 8, 6, 6}, -6, 6)};
  test::expect_same_outputs(b.m, fused, feeds, 0.0201f);
  ir::Model o3 = b.m;
  ASSERT_TRUE(optimize(o3, OptimizeOptions{}).is_ok());
  int pools = 0;
  for (const auto& n : o3.graph.nodes)
    if (n.op_type == "QLinearGlobalAveragePool") {
      ++pools;
      EXPECT_EQ(n.attr_int("channels_last", 0), 1);
    }
  EXPECT_EQ(pools, 1);
  EXPECT_EQ(test::qualified_histogram(o3).at("Transpose"), 2);  // into the conv, and of the pool's pixel
  test::expect_same_outputs(fused, o3, feeds, 0.0f);
}

// An efficientnet block's squeeze-excitation in QDQ form: an 8-bit conv and its SiLU (a table,
// elementwise), the pool of that, a 1x1 conv and sigmoid of the pool making the gate, the
// product of the two, and the projecting conv. At -O3 the convs run channels-last and every
// Transpose between them goes: the one after the first conv moves below the SiLU, the gate's
// below the product, and then the first one below the pool, which reads channels-last X itself.
// Only the model's way in and out are full-size Transposes. (Before dead-code ran ahead of the
// layout passes, a dead reader kept the first Transpose in place, and efficientnet_b0's 16 blocks
// paid 32 full-size Transposes.) The first conv then takes its SiLU's table (qlinear-conv-lookup).
void conv1x1(test::Builder& b, const std::string& x, const std::string& y, int64_t in, int64_t out, uint32_t seed) {
  Tensor w = Tensor::make(DType::kInt8, {out, in, 1, 1}).value();
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  dequantized_constant(b, y + "_w", w, scalar_of(DType::kFloat32, 1.0 / 128), scalar_of(DType::kInt8, 0), 1);
  b.add("Conv", {x, y + "_w"}, {y});
}

TEST(QdqFusion, SqueezeExcitationStaysChannelsLast) {
  test::Builder b(13);
  b.input("x", {1, 8, 6, 6});
  qdq(b, "x", "xq", "xd", 0.05f, 128);
  conv1x1(b, "xd", "c", 8, 16, 8);
  qdq(b, "c", "cq", "cd", 0.1f, 120);
  b.add("Sigmoid", {"cd"}, {"sig"});  // a SiLU: one table at -O2 (qlinear-lookup)
  qdq(b, "sig", "sgq", "sgd", 1.0f / 256, 0);
  b.add("Mul", {"cd", "sgd"}, {"silu"});
  qdq(b, "silu", "sq", "sd", 0.05f, 10);
  b.add("GlobalAveragePool", {"sd"}, {"pool"});
  qdq(b, "pool", "pq", "pd", 1.0f / 256, 0);
  conv1x1(b, "pd", "e", 16, 16, 9);
  qdq(b, "e", "eq", "ed", 0.01f, 128);
  b.add("Sigmoid", {"ed"}, {"gate"});
  qdq(b, "gate", "gq", "gd", 1.0f / 256, 0);
  b.add("Mul", {"sd", "gd"}, {"se"});
  qdq(b, "se", "seq", "sed", 1.0f / 256, 0);
  conv1x1(b, "sed", "p", 16, 8, 10);
  qdq(b, "p", "yq", "y", 0.02f, 128);
  b.output("y");
  ir::Model o3 = b.m;
  ASSERT_TRUE(optimize(o3, OptimizeOptions{}).is_ok());
  const auto h = test::qualified_histogram(o3);
  EXPECT_EQ(h.at("com.microsoft.QLinearGlobalAveragePool"), 1);
  EXPECT_EQ(h.at("com.microsoft.QLinearConv"), 2);
  EXPECT_EQ(h.at("ai.kiln.QLinearConv"), 1);  // the first, its SiLU's table taken in
  EXPECT_EQ(h.count("ai.kiln.QLinearLookup"), 0u);
  EXPECT_EQ(h.at("com.microsoft.QLinearMul"), 1);
  EXPECT_EQ(h.at("Transpose"), 2);  // into the first conv and out of the last
  for (const auto& n : o3.graph.nodes) {
    if (n.op_type == "QLinearGlobalAveragePool") {
      EXPECT_EQ(n.attr_int("channels_last", 0), 1);
    }
  }
  ir::Model plain = b.m;
  OptimizeOptions none;
  none.level = 0;
  ASSERT_TRUE(optimize(plain, none).is_ok());
  test::Builder inputs;
  const std::vector<Tensor> feeds = {inputs.random({1, 8, 6, 6}, -6, 6)};
  test::expect_same_outputs(plain, o3, feeds, 0.0201f);
  // The conv with its table gives the codes of the conv and the table apart, bit for bit.
  ir::Model apart = b.m;
  OptimizeOptions no_table;
  no_table.disabled = {"qlinear-conv-lookup"};
  ASSERT_TRUE(optimize(apart, no_table).is_ok());
  EXPECT_EQ(test::qualified_histogram(apart).at("ai.kiln.QLinearLookup"), 1);
  test::expect_same_outputs(apart, o3, feeds, 0.0f);
}

// A bottleneck block's residual add in QDQ form, the add's operands either way round, its input
// the first conv's output (channels-last, as in resnet50): at -O3 the add joins the last conv
// (qlinear-conv-residual), its codes those of the conv and the add apart.
TEST(QdqFusion, ResidualAddJoinsItsConvAtO3) {
  for (const bool conv_first : {true, false}) {
    SCOPED_TRACE(conv_first ? "Add(conv, residual)" : "Add(residual, conv)");
    test::Builder b(13);
    b.input("x", {1, 8, 7, 7});
    qdq(b, "x", "xq", "xd", 0.05f, 128);
    conv1x1(b, "xd", "a", 8, 8, 1);
    qdq(b, "a", "aq", "ad", 0.1f, 120);
    conv1x1(b, "ad", "c", 8, 16, 2);
    b.add("Relu", {"c"}, {"cr"});
    qdq(b, "cr", "cq", "cd", 0.1f, 0);
    conv1x1(b, "cd", "e", 16, 8, 3);
    qdq(b, "e", "eq", "ed", 0.2f, 130);
    b.add("Add", conv_first ? std::vector<std::string>{"ed", "ad"} : std::vector<std::string>{"ad", "ed"}, {"s"});
    qdq(b, "s", "yq", "y", 0.25f, 125);
    b.output("y");
    ir::Model o3 = b.m, apart = b.m, plain = b.m;
    OptimizeOptions no_residual, none;
    no_residual.disabled = {"qlinear-conv-residual"};
    none.level = 0;
    ASSERT_TRUE(optimize(o3, OptimizeOptions{}).is_ok());
    ASSERT_TRUE(optimize(apart, no_residual).is_ok());
    ASSERT_TRUE(optimize(plain, none).is_ok());
    const auto h = test::qualified_histogram(o3);
    EXPECT_EQ(h.at("ai.kiln.QLinearConv"), 1);
    EXPECT_EQ(h.at("com.microsoft.QLinearConv"), 2);
    EXPECT_EQ(h.count("com.microsoft.QLinearAdd"), 0u);
    EXPECT_EQ(test::qualified_histogram(apart).at("com.microsoft.QLinearAdd"), 1);
    test::Builder inputs;
    const std::vector<Tensor> feeds = {inputs.random({1, 8, 7, 7}, -6, 6)};
    test::expect_same_outputs(apart, o3, feeds, 0.0f);
    test::expect_same_outputs(plain, o3, feeds, 0.2501f);  // float ops on the QDQ form: one step of y
  }
}

// An efficientnet's SiLU in QDQ form, x * sigmoid(x) with every tensor quantized, and a
// squeeze-excitation's broadcast Mul: QLinearSigmoid and QLinearMul, then the SiLU one table. The
// sigmoid's table computes it in double, the float op in float: the outputs agree to one step of
// the output's scale.
TEST(QdqFusion, SiluAndBroadcastMulBecomeEightBit) {
  test::Builder b(13);
  b.input("x", {1, 8, 5, 5});
  b.input("g", {1, 8, 1, 1});
  qdq(b, "x", "xq", "xd", 0.05f, 128);
  b.add("Sigmoid", {"xd"}, {"sig"});
  qdq(b, "sig", "sq", "sd", 1.0f / 256, 0);
  b.add("Mul", {"xd", "sd"}, {"silu"});
  qdq(b, "silu", "mq", "md", 0.04f, 10);
  qdq(b, "g", "gq", "gd", 1.0f / 256, 0);
  b.add("Mul", {"md", "gd"}, {"se"});
  qdq(b, "se", "yq", "y", 0.03f, 20);
  b.output("y");
  ir::Model fused = b.m;
  test::run_passes(fused, {"qdq-fusion", "dead-code"});
  const auto h = test::qualified_histogram(fused);
  EXPECT_EQ(h.at("com.microsoft.QLinearSigmoid"), 1);
  EXPECT_EQ(h.at("com.microsoft.QLinearMul"), 2);
  EXPECT_EQ(h.count("Sigmoid") + h.count("Mul"), 0u);
  test::Builder inputs;
  const std::vector<Tensor> feeds = {inputs.random({1, 8, 5, 5}, -6, 6), inputs.random({1, 8, 1, 1}, 0, 1)};
  test::expect_same_outputs(b.m, fused, feeds, 0.0301f);
  // -O2: the SiLU, a function of x's code alone, becomes one table (qlinear-lookup), the two
  // ops' own kernels run on the 256 codes: the same outputs bit for bit.
  ir::Model table = fused;
  test::run_passes(table, {"qlinear-lookup", "dead-code"});
  const auto t = test::qualified_histogram(table);
  EXPECT_EQ(t.at("ai.kiln.QLinearLookup"), 1);
  EXPECT_EQ(t.at("com.microsoft.QLinearMul"), 1);  // the broadcast one
  EXPECT_EQ(t.count("com.microsoft.QLinearSigmoid"), 0u);
  test::expect_same_outputs(fused, table, feeds, 0.0f);
}

// Q(act(Conv(DQ(x), DQ(w), DQ(b)))), kiln quantize's form for a conv before an activation, becomes
// ai.kiln.QLinearConv with the activation, which runs on the float sums before Y's quantization:
// each spelling, group 1 and depthwise, fused alone (-O1) and at -O3 (channels-last), against the
// QDQ ops: at most one code apart (the activation's exp in float is a few ulp off), and rarely.
TEST(QdqFusion, ConvActivationRunsOnTheFloatSums) {
  struct Activation {
    const char* name;
    std::function<void(test::Builder&)> write;  // "c" -> "a"
  };
  const std::vector<Activation> activations = {
      {"Silu", [](test::Builder& b) { b.add("Sigmoid", {"c"}, {"s"}), b.add("Mul", {"s", "c"}, {"a"}); }},
      {"Sigmoid", [](test::Builder& b) { b.add("Sigmoid", {"c"}, {"a"}); }},
      {"Tanh", [](test::Builder& b) { b.add("Tanh", {"c"}, {"a"}); }},
      {"HardSwish", [](test::Builder& b) { b.add("HardSwish", {"c"}, {"a"}); }},
      {"HardSigmoid", [](test::Builder& b) {
         b.add("HardSigmoid", {"c"}, {"a"}, {test::attr_f("alpha", 0.3f), test::attr_f("beta", 0.4f)});
       }},
      {"LeakyRelu", [](test::Builder& b) { b.add("LeakyRelu", {"c"}, {"a"}, {test::attr_f("alpha", 0.2f)}); }}};
  const int64_t c = 8;
  const float xs = 0.0625f, ys = 1.0f / 64;
  for (const bool depthwise : {false, true})
    for (const Activation& act : activations) {
      SCOPED_TRACE(std::string(act.name) + (depthwise ? ", depthwise" : ", group 1"));
      const int64_t m = depthwise ? c : 24;
      test::Builder b(14);
      b.input("x", {1, c, 9, 9});
      qdq(b, "x", "xq", "xd", xs, 128);
      std::mt19937 rng(7);
      conv_constants(b, "w", "b", {m, depthwise ? 1 : c, 3, 3}, xs, 40, 300, rng);
      b.add("Conv", {"xd", "w", "b"}, {"c"},
            {test::attr_ints("pads", {1, 1, 1, 1}), test::attr_i("group", depthwise ? c : 1)});
      act.write(b);
      qdq(b, "a", "aq", "y", ys, 100);
      b.output("y");
      test::Builder inputs;
      const std::vector<Tensor> feeds = {inputs.random({1, c, 9, 9}, -8, 8)};
      const Tensor want = test::run_model(b.m, feeds)[0].tensor;
      auto expect_near_codes = [&](const ir::Model& model) {
        const Tensor got = test::run_model(model, feeds)[0].tensor;
        ASSERT_EQ(got.shape(), want.shape());
        int64_t apart = 0;
        for (int64_t i = 0; i < want.numel(); ++i) {
          const float d = std::fabs(got.data<float>()[i] - want.data<float>()[i]);
          ASSERT_LE(d, ys * 1.001f) << "element " << i;
          apart += d > 0;
        }
        EXPECT_LE(apart, want.numel() / 100);
      };
      ir::Model fused = b.m;
      test::run_passes(fused, {"qdq-fusion", "dead-code"});
      const auto h = test::qualified_histogram(fused);
      EXPECT_EQ(h.at("ai.kiln.QLinearConv"), 1);
      EXPECT_EQ(h.count("Conv") + h.count("Sigmoid") + h.count("Mul") + h.count(act.name), 0u);
      for (const ir::Node& n : fused.graph.nodes)
        if (n.op_type == "QLinearConv") {
          EXPECT_EQ(n.attr_string("activation", ""), act.name);
        }
      expect_near_codes(fused);
      ir::Model o3 = b.m;
      ASSERT_TRUE(optimize(o3, OptimizeOptions{}).is_ok());
      int channels_last = 0;
      for (const ir::Node& n : o3.graph.nodes)
        channels_last += n.domain == "ai.kiln" && n.op_type == "QLinearConv" && n.attr_int("channels_last", 0) == 1;
      EXPECT_EQ(channels_last, 1);
      expect_near_codes(o3);
    }
}

// A saved portable model keeps the weights' DequantizeLinear, so that the runtime loading it
// still sees int8 convs.
TEST(QdqFusion, PortableModelKeepsDequantizedWeights) {
  ir::Model m = qdq_block();
  OptimizeOptions portable;
  portable.portable = true;
  ASSERT_TRUE(optimize(m, portable).is_ok());
  const auto h = test::histogram(m);
  EXPECT_EQ(h.at("Conv"), 2);
  EXPECT_EQ(h.at("DequantizeLinear"), 8);  // 5 activations' and 3 constants'
}

}  // namespace
}  // namespace kiln
