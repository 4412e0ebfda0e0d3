// The -O1 simplification passes (constant-folding, noop-removal, shape-resolution, cse,
// redundant-ops, transpose-matmul, ...; fold-batchnorm has passes_fold_batchnorm_test.cc): the
// structure each leaves, and the same numbers before and after.
#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;
using test::attr_ints;
using test::Builder;
using test::expect_same_outputs;
using test::histogram;
using test::num;
using test::run_passes;
using test::sym;

constexpr int64_t kOpset = 17;

std::vector<int64_t> int64_values(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

// x [batch, seq, 8] reshaped to [batch, seq, 2, 4] through a Shape/Gather/Concat chain.
void shape_chain(Builder& b) {
  b.input_dims("x", {sym("batch"), sym("seq"), num(8)});
  b.output("y");
  b.m.graph.initializers["i0"] = Tensor::scalar<int64_t>(DType::kInt64, 0);
  b.m.graph.initializers["i1"] = Tensor::scalar<int64_t>(DType::kInt64, 1);
  b.ints("ax", {0});
  b.ints("c2", {2});
  b.ints("c4", {4});
  b.add("Shape", {"x"}, {"s"});
  b.add("Gather", {"s", "i0"}, {"b"}, {attr_i("axis", 0)});
  b.add("Gather", {"s", "i1"}, {"q"}, {attr_i("axis", 0)});
  b.add("Unsqueeze", {"b", "ax"}, {"b1"});
  b.add("Unsqueeze", {"q", "ax"}, {"q1"});
  b.add("Concat", {"b1", "q1", "c2", "c4"}, {"shape"}, {attr_i("axis", 0)});
  b.add("Reshape", {"x", "shape"}, {"r"});
  b.add("Relu", {"r"}, {"y"});
}

TEST(ShapeResolution, ShapeChainBecomesConstantAndStaysDynamic) {
  Builder b(kOpset);
  shape_chain(b);
  ir::Model m = b.m;
  run_passes(m, {"shape-resolution", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Reshape", 1}, {"Relu", 1}}));
  EXPECT_EQ(int64_values(m.graph.initializers.at(m.graph.nodes[0].inputs[1])),
            (std::vector<int64_t>{0, 0, 2, 4}));
  expect_same_outputs(b.m, m, {b.random({3, 5, 8})});
  expect_same_outputs(b.m, m, {b.random({1, 7, 8})});
}

TEST(ShapeResolution, FixedDimsFoldToLiterals) {
  Builder b(kOpset);
  shape_chain(b);
  for (auto& d : b.m.graph.inputs[0].type.shape) d = num(d.known() ? d.value : 2);
  ir::Model m = b.m;
  run_passes(m, {"shape-resolution", "dead-code"});
  ASSERT_EQ(m.graph.nodes.size(), 2u);
  EXPECT_EQ(int64_values(m.graph.initializers.at(m.graph.nodes[0].inputs[1])),
            (std::vector<int64_t>{2, 2, 2, 4}));
  expect_same_outputs(b.m, m, {b.random({2, 2, 8})});
}

TEST(Cse, DuplicateNodesAndConstantsMerge) {
  Builder b(kOpset);
  b.input("x", {2, 3});
  b.output_dims("y", {num(2), num(3)});
  b.weight("k1", {3});
  b.m.graph.initializers["k2"] = b.m.graph.initializers["k1"].clone();
  b.add("Mul", {"x", "k1"}, {"a"});
  b.add("Mul", {"x", "k2"}, {"b"});  // same once k2 merges into k1
  b.add("Relu", {"a"}, {"ra"});
  b.add("Relu", {"b"}, {"rb"});
  b.add("Softmax", {"ra"}, {"sa"}, {attr_i("axis", 1)});
  b.add("Softmax", {"rb"}, {"sb"}, {attr_i("axis", 0)});  // different attribute: stays
  b.add("Add", {"sa", "sb"}, {"y"});
  ir::Model m = b.m;
  run_passes(m, {"cse", "dead-code"});
  EXPECT_EQ(histogram(m),
            (std::map<std::string, int>{{"Mul", 1}, {"Relu", 1}, {"Softmax", 2}, {"Add", 1}}));
  expect_same_outputs(b.m, m, {b.random({2, 3})});
}

TEST(RedundantOps, NoOpsAndChainsGo) {
  Builder b(kOpset);
  b.input_dims("x", {sym("batch"), num(4), num(6)});
  b.output_dims("y", {sym("batch"), num(6), num(4)});
  b.floats("zero", {6}, std::vector<float>(6, 0.0f));
  b.floats("one", {1}, {1.0f});
  b.ints("flat", {-1, 24});
  b.ints("back", {-1, 4, 6});
  b.add("Cast", {"x"}, {"c"}, {attr_i("to", static_cast<int64_t>(DType::kFloat32))});
  b.add("Add", {"zero", "c"}, {"a"});  // commuted x + 0
  b.add("Mul", {"a", "one"}, {"mu"});
  b.add("Reshape", {"mu", "flat"}, {"r1"});
  b.add("Reshape", {"r1", "back"}, {"r2"});  // back to [batch, 4, 6]
  b.add("Transpose", {"r2"}, {"t1"}, {attr_ints("perm", {1, 0, 2})});
  b.add("Transpose", {"t1"}, {"t2"}, {attr_ints("perm", {1, 2, 0})});  // composed: [0, 2, 1]
  b.add("Transpose", {"t2"}, {"t3"}, {attr_ints("perm", {0, 1, 2})});
  b.add("Relu", {"t3"}, {"y"});
  ir::Model m = b.m;
  run_passes(m, {"redundant-ops", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Transpose", 1}, {"Relu", 1}}));
  for (const auto& n : m.graph.nodes)
    if (n.op_type == "Transpose") {
      EXPECT_EQ(n.attr_ints("perm"), (std::vector<int64_t>{0, 2, 1}));
    }
  expect_same_outputs(b.m, m, {b.random({3, 4, 6})});
}

TEST(RedundantOps, UnsqueezeChainsMergeAndSqueezePairsGo) {
  Builder b(kOpset);
  b.input_dims("x", {sym("batch"), sym("seq")});
  b.output("y");
  b.output("z");
  b.ints("one", {1});
  b.add("Unsqueeze", {"x", "one"}, {"u1"});
  b.add("Unsqueeze", {"u1", "one"}, {"u2"});  // [batch, 1, 1, seq]
  b.add("Relu", {"u2"}, {"y"});
  b.add("Squeeze", {"u1", "one"}, {"s"});  // back to x
  b.add("Neg", {"s"}, {"z"});
  ir::Model m = b.m;
  run_passes(m, {"redundant-ops", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Unsqueeze", 1}, {"Relu", 1}, {"Neg", 1}}));
  for (const auto& n : m.graph.nodes) {
    if (n.op_type == "Neg") {
      EXPECT_EQ(n.inputs[0], "x");
    }
    if (n.op_type != "Unsqueeze") continue;
    EXPECT_EQ(int64_values(m.graph.initializers.at(n.inputs[1])), (std::vector<int64_t>{1, 2}));
  }
  expect_same_outputs(b.m, m, {b.random({2, 5})});
}

TEST(RedundantOps, ShapeChangingNeutralOpsStay) {
  Builder b(kOpset);
  b.input("x", {3});
  b.output_dims("y", {num(2), num(3)});
  b.floats("zero", {2, 3}, std::vector<float>(6, 0.0f));  // broadcasts x up
  b.add("Add", {"x", "zero"}, {"y"});
  ir::Model m = b.m;
  run_passes(m, {"redundant-ops", "dead-code"});
  EXPECT_EQ(m.graph.nodes.size(), 1u);
}

TEST(TransposeMatMul, TransposesFoldIntoGemm) {
  Builder b(kOpset);
  b.input("a", {4, 3});
  b.input("b", {5, 4});
  b.output_dims("y", {num(3), num(5)});
  b.output_dims("z", {num(5), num(5)});
  b.weight("c", {5});
  b.add("Transpose", {"a"}, {"at"}, {attr_ints("perm", {1, 0})});
  b.add("Transpose", {"b"}, {"bt"}, {attr_ints("perm", {1, 0})});
  b.add("MatMul", {"at", "bt"}, {"y"});
  b.add("Gemm", {"b", "bt", "c"}, {"z"});
  ir::Model m = b.m;
  run_passes(m, {"transpose-matmul", "dead-code"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Gemm", 2}}));
  EXPECT_EQ(m.graph.nodes[0].attr_int("transA", 0), 1);
  EXPECT_EQ(m.graph.nodes[0].attr_int("transB", 0), 1);
  EXPECT_EQ(m.graph.nodes[1].attr_int("transB", 0), 1);
  expect_same_outputs(b.m, m, {b.random({4, 3}), b.random({5, 4})});
}

TEST(ConstantFolding, ConstantSubgraphBecomesOneInitializer) {
  Builder b(kOpset);
  b.input("x", {3, 4});
  b.output_dims("y", {num(3), num(5)});
  b.output_dims("noise", {num(2)});
  b.weight("wt", {5, 4});
  b.weight("scale", {5});
  b.ints("noise_shape", {2});
  b.add("Transpose", {"wt"}, {"w"}, {attr_ints("perm", {1, 0})});
  b.add("Mul", {"w", "scale"}, {"ws"});
  b.add("MatMul", {"x", "ws"}, {"y"});
  // Random ops are never folded, even with constant inputs.
  b.add("RandomNormalLike", {"scale"}, {"r"});
  b.add("Shape", {"r"}, {"rs"});
  b.add("Cast", {"noise_shape"}, {"noise_f"}, {attr_i("to", static_cast<int64_t>(DType::kFloat32))});
  b.add("Identity", {"noise_f"}, {"noise"});
  ir::Model m = b.m;
  run_passes(m, {"constant-folding", "dead-code"});
  // Transpose and Mul of constants fold; Cast folds; the Identity writing a graph output stays.
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"MatMul", 1}, {"Identity", 1}}));
  const Tensor& ws = m.graph.initializers.at(m.graph.nodes[0].inputs[1]);
  const Tensor& wt = b.m.graph.initializers.at("wt");
  const Tensor& scale = b.m.graph.initializers.at("scale");
  ASSERT_EQ(ws.shape(), (Shape{4, 5}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 5; ++j)
      EXPECT_EQ(ws.data<float>()[i * 5 + j], wt.data<float>()[j * 4 + i] * scale.data<float>()[j]);
  expect_same_outputs(b.m, m, {b.random({3, 4})});
  // A random op whose result is read is kept.
  Builder c(kOpset);
  c.output_dims("r", {num(5)});
  c.weight("scale", {5});
  c.add("RandomNormalLike", {"scale"}, {"r"});
  ir::Model mc = c.m;
  run_passes(mc, {"constant-folding", "dead-code"});
  EXPECT_EQ(histogram(mc), (std::map<std::string, int>{{"RandomNormalLike", 1}}));
}

TEST(NoopRemoval, IdentityAndInferenceDropoutGo) {
  Builder b(kOpset);
  b.input("x", {2, 3});
  b.output_dims("y", {num(2), num(3)});
  b.output_dims("mask", {num(2), num(3)});
  b.output_dims("z", {num(2), num(3)});
  b.add("Identity", {"x"}, {"i1"});
  b.add("Identity", {"i1"}, {"i2"});
  b.add("Dropout", {"i2"}, {"d"});
  b.add("Relu", {"d"}, {"y"});
  // Dropout whose mask is read stays; an Identity writing a graph output stays.
  b.add("Dropout", {"x"}, {"d2", "mask"});
  b.add("Identity", {"d2"}, {"z"});
  ir::Model m = b.m;
  run_passes(m, {"noop-removal"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Relu", 1}, {"Dropout", 1}, {"Identity", 1}}));
  EXPECT_EQ(m.graph.nodes[0].inputs[0], "x");
  expect_same_outputs(b.m, m, {b.random({2, 3})});
}

// Dropout with a training_mode input (opset 12+) passes its input through when training_mode is
// a constant false or the ratio a constant 0, and no one reads its mask (naming it is not
// reading it); with a training_mode fed at run time it stays.
TEST(NoopRemoval, DropoutInTrainingModeWithRatioZeroGoes) {
  Builder b(kOpset);
  b.input("x", {2, 3});
  b.m.graph.inputs.push_back(ir::ValueInfo{"train", ir::TypeInfo::tensor(DType::kBool, {}), ""});
  b.m.graph.initializers["yes"] = Tensor::scalar<bool>(DType::kBool, true);
  b.m.graph.initializers["no"] = Tensor::scalar<bool>(DType::kBool, false);
  b.scalar("zero", 0.0f);
  b.scalar("tenth", 0.1f);
  b.add("Dropout", {"x", "zero", "yes"}, {"d1", "unread_mask"});  // ratio 0: goes
  b.add("Dropout", {"d1", "tenth", "no"}, {"d2"});                // inference: goes
  b.add("Dropout", {"d2", "tenth", "train"}, {"d3"});             // training decided at run time
  b.add("Relu", {"d3"}, {"y"});
  b.output_dims("y", {num(2), num(3)});
  ir::Model m = b.m;
  run_passes(m, {"noop-removal"});
  EXPECT_EQ(histogram(m), (std::map<std::string, int>{{"Relu", 1}, {"Dropout", 1}}));
  EXPECT_EQ(m.graph.nodes[0].inputs[0], "x");
  expect_same_outputs(b.m, m, {b.random({2, 3}), Tensor::scalar<bool>(DType::kBool, false)});
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A quantized embedding table (int8 rows, one scale per row) dequantized by Cast and Mul, then
// gathered: the Gather moves onto the int8 table and the row scales, so only the picked rows are
// dequantized. A bias spanning only the last dim is read as it is; one spanning the gathered
// axis with extent 1 blocks the rewrite (it would need its own reshape).
TEST(GatherElementwise, GatherMovesOntoTheQuantizedTable) {
  test::Builder b(17);
  Tensor q = Tensor::make(DType::kInt8, {50, 6}).value();
  for (int64_t i = 0; i < q.numel(); ++i) q.data<int8_t>()[i] = static_cast<int8_t>((i * 37) % 255 - 127);
  b.m.graph.initializers["q"] = q;
  b.weight("scale", {50, 1});
  b.weight("bias", {6});
  b.input_dims("ids", {test::num(2), test::num(3)}, DType::kInt64);
  b.add("Cast", {"q"}, {"qf"}, {test::attr_i("to", 1)});
  b.add("Mul", {"qf", "scale"}, {"table"});
  b.add("Add", {"table", "bias"}, {"table_b"});
  b.add("Gather", {"table_b", "ids"}, {"rows"});
  b.output("rows");
  ir::Model after = b.m;
  auto n = test::run_pass(after, "gather-elementwise");
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(*n, 3);
  EXPECT_EQ(test::op_types(after), (std::vector<std::string>{"Gather", "Cast", "Gather", "Mul", "Add"}));
  EXPECT_EQ(after.graph.nodes[0].inputs[0], "q");
  EXPECT_EQ(after.graph.nodes[2].inputs[0], "scale");
  Tensor ids = Tensor::make(DType::kInt64, {2, 3}).value();
  const int64_t picks[] = {0, 49, 7, -1, 7, 23};
  std::copy(std::begin(picks), std::end(picks), ids.data<int64_t>());
  test::expect_same_outputs(b.m, after, {ids}, 0.0f);

  test::Builder blocked(17);
  blocked.weight("t", {50, 6});
  blocked.weight("row_one", {1, 6});
  blocked.input_dims("ids", {test::num(3)}, DType::kInt64);
  blocked.add("Relu", {"t"}, {"r"});
  blocked.add("Mul", {"r", "row_one"}, {"m"});
  blocked.add("Gather", {"m", "ids"}, {"rows"});
  blocked.output("rows");
  auto none = test::run_pass(blocked.m, "gather-elementwise");
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(*none, 0);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// ONNX Runtime's DynamicQuantizeLSTM (int8 W [D, input, 4H] with per-column scales, uint8... here
// int8 R [D, H, 4H] with per-direction scales) lowers to a standard LSTM that computes exactly
// what an LSTM on the dequantized, transposed weights computes.
TEST(ContribLstm, DynamicQuantizeLstmBecomesLstmOnDequantizedWeights) {
  const int64_t dirs = 2, hidden = 5, input = 3, gates = 4 * hidden;
  auto int8s = [](const Shape& shape, int seed) {
    Tensor t = Tensor::make(DType::kInt8, shape).value();
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int8_t>()[i] = static_cast<int8_t>((i * 31 + seed) % 201 - 100);
    return t;
  };
  const Tensor wq = int8s({dirs, input, gates}, 3), rq = int8s({dirs, hidden, gates}, 11);
  const Tensor w_zero = int8s({dirs, gates}, 5), r_zero = int8s({dirs}, 7);
  test::Builder b(14);
  b.m.opsets["com.microsoft"] = 1;
  b.input("x", {4, 1, input});
  b.m.graph.initializers["wq"] = wq;
  b.m.graph.initializers["rq"] = rq;
  b.weight("bias", {dirs, 2 * gates});
  b.weight("w_scale", {dirs, gates});
  b.weight("r_scale", {dirs});
  b.m.graph.initializers["w_zero"] = w_zero;
  b.m.graph.initializers["r_zero"] = r_zero;
  const std::vector<ir::Attribute> attrs = {test::attr_i("hidden_size", hidden), test::attr_s("direction", "bidirectional")};
  b.add("DynamicQuantizeLSTM", {"x", "wq", "rq", "bias", "", "", "", "", "w_scale", "w_zero", "r_scale", "r_zero"},
        {"y", "y_h"}, attrs)
      .domain = "com.microsoft";
  b.output("y");
  b.output("y_h");

  // The same layer written by hand as a standard LSTM.
  test::Builder want(14);
  want.input("x", {4, 1, input});
  Tensor w = Tensor::make(DType::kFloat32, {dirs, gates, input}).value();
  Tensor r = Tensor::make(DType::kFloat32, {dirs, gates, hidden}).value();
  const float* ws = b.m.graph.initializers["w_scale"].data<float>();
  const float* rs = b.m.graph.initializers["r_scale"].data<float>();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t j = 0; j < gates; ++j) {
      for (int64_t i = 0; i < input; ++i)
        w.data<float>()[(d * gates + j) * input + i] =
            (wq.data<int8_t>()[(d * input + i) * gates + j] - w_zero.data<int8_t>()[d * gates + j]) * ws[d * gates + j];
      for (int64_t i = 0; i < hidden; ++i)
        r.data<float>()[(d * gates + j) * hidden + i] =
            (rq.data<int8_t>()[(d * hidden + i) * gates + j] - r_zero.data<int8_t>()[d]) * rs[d];
    }
  want.m.graph.initializers["w"] = w;
  want.m.graph.initializers["r"] = r;
  want.m.graph.initializers["bias"] = b.m.graph.initializers["bias"];
  want.add("LSTM", {"x", "w", "r", "bias"}, {"y", "y_h"}, attrs);
  want.output("y");
  want.output("y_h");

  ir::Model after = b.m;
  auto n = test::run_pass(after, "contrib-lstm");
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(*n, 1);
  ASSERT_EQ(test::op_types(after), std::vector<std::string>{"LSTM"});
  EXPECT_TRUE(after.graph.nodes[0].domain.empty());
  test::expect_same_outputs(want.m, after, {want.random({4, 1, input})}, 0.0f);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// jax.nn.one_hot + a dense layer: MatMul(Cast(Equal(x, iota)), W) becomes a row lookup, x
// [batch, n, 1] against iota [1, 1, K]; indices outside [0, K) select the zero row, as the
// all-zero one-hot row does.
void one_hot_dense(Builder& b, const std::vector<int64_t>& iota, DType index_type = DType::kInt64) {
  const int64_t k = static_cast<int64_t>(iota.size());
  b.input_dims("x", {sym("batch"), num(5), num(1)}, index_type);
  Tensor t = Tensor::make(index_type, {1, 1, k}).value();
  for (int64_t i = 0; i < k; ++i) {
    if (index_type == DType::kInt64) t.data<int64_t>()[i] = iota[static_cast<size_t>(i)];
    else t.data<int32_t>()[i] = static_cast<int32_t>(iota[static_cast<size_t>(i)]);
  }
  b.m.graph.initializers["iota"] = t;
  b.weight("w", {k, 6});
  b.add("Equal", {"iota", "x"}, {"hot"});
  b.add("Cast", {"hot"}, {"hot_f"}, {attr_i("to", 1)});
  b.add("MatMul", {"hot_f", "w"}, {"y"});
  b.output("y");
}

TEST(OneHotGather, OneHotMatMulBecomesARowLookup) {
  for (const DType index_type : {DType::kInt64, DType::kInt32}) {
    Builder b(13);
    one_hot_dense(b, {0, 1, 2, 3, 4, 5, 6}, index_type);
    ir::Model m = b.m;
    const Result<int64_t> r = test::run_pass(m, "one-hot-gather");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r.value(), 1);
    EXPECT_EQ(test::op_types(m), (std::vector<std::string>{"Clip", "Gather", "Squeeze"}));
    Tensor x = Tensor::make(index_type, {2, 5, 1}).value();
    const int64_t values[10] = {0, 6, 3, -1, 7, 100, -100, 2, 5, 1};
    for (int64_t i = 0; i < 10; ++i) {
      if (index_type == DType::kInt64) x.data<int64_t>()[i] = values[i];
      else x.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
    }
    expect_same_outputs(b.m, m, {x}, 0.0f);
  }
}

TEST(OneHotGather, OtherComparisonsAreLeftAlone) {
  Builder b(13);
  one_hot_dense(b, {1, 2, 3, 4});  // not 0, 1, ..., K-1
  const Result<int64_t> r = test::run_pass(b.m, "one-hot-gather");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value(), 0);
  Builder old(12);  // integer Clip and Squeeze's axes input need opset 13
  one_hot_dense(old, {0, 1, 2});
  const Result<int64_t> old_r = test::run_pass(old.m, "one-hot-gather");
  ASSERT_TRUE(old_r.is_ok()) << old_r.status().message();
  EXPECT_EQ(old_r.value(), 0);
}

// An STFT-like pair of 1-D convs on one input (different filter counts, one with a bias) become
// one Conv and a Split; a third with another stride, and 2-D convs, stay as they are.
TEST(SiblingConvs, OneDConvsOnOneInputStack) {
  Builder b(17);
  b.input("x", {2, 3, 300});
  b.weight("wa", {16, 3, 32});
  b.weight("ba", {16});
  b.weight("wb", {24, 3, 32});
  b.weight("wc", {8, 3, 32});
  b.add("Conv", {"x", "wa", "ba"}, {"ya"}, {attr_ints("strides", {10})});
  b.add("Conv", {"x", "wb"}, {"yb"}, {attr_ints("strides", {10})});
  b.add("Conv", {"x", "wc"}, {"yc"}, {attr_ints("strides", {5})});
  b.add("Relu", {"yb"}, {"rb"});
  b.output("ya");
  b.output("rb");
  b.output("yc");
  ir::Model m = b.m;
  const Result<int64_t> r = test::run_pass(m, "sibling-convs");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value(), 1);
  EXPECT_EQ(test::op_types(m), (std::vector<std::string>{"Conv", "Split", "Conv", "Relu"}));
  EXPECT_EQ(m.graph.initializers.at(m.graph.nodes[0].inputs[1]).shape(), (Shape{40, 3, 32}));
  expect_same_outputs(b.m, m, {b.random({2, 3, 300})});

  Builder two_d(17);
  two_d.input("x", {1, 3, 8, 8});
  two_d.conv("x", "p", 3, 8);
  two_d.conv("x", "q", 3, 8);
  two_d.output("p");
  two_d.output("q");
  const Result<int64_t> r2 = test::run_pass(two_d.m, "sibling-convs");
  ASSERT_TRUE(r2.is_ok()) << r2.status().message();
  EXPECT_EQ(r2.value(), 0);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// ONNX Runtime's dynamic quantization of a Conv (DynamicQuantizeLinear of x, ConvInteger on int8
// weights, the bias rounded to the accumulator's scale at run time, Cast and Mul back to float)
// becomes a Conv that computes exactly Conv(x, (wq - wz) * ws, b); the quantized graph agrees
// with it to the rounding of x to 8 bits. A per-channel weight scale is left alone.
ir::Model quantized_conv(const Tensor& w_scale) {
  const int64_t c = 3, m = 4;
  test::Builder b(13);
  b.input("x", {1, c, 6, 5});
  Tensor wq = Tensor::make(DType::kInt8, {m, c, 3, 3}).value();
  for (int64_t i = 0; i < wq.numel(); ++i) wq.data<int8_t>()[i] = static_cast<int8_t>((i * 37 + 11) % 255 - 127);
  b.m.graph.initializers["wq"] = wq;
  b.m.graph.initializers["wz"] = Tensor::scalar<int8_t>(DType::kInt8, 3);
  b.m.graph.initializers["ws"] = w_scale;
  b.weight("b", {m});
  b.ints("bias_shape", {1, m, 1, 1});
  b.add("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  b.add("Mul", {"xs", "ws"}, {"bias_scale"});
  b.add("Div", {"b", "bias_scale"}, {"b_div"});
  b.add("Floor", {"b_div"}, {"b_floor"});
  b.add("Cast", {"b_floor"}, {"bq"}, {test::attr_i("to", static_cast<int64_t>(DType::kInt32))});
  b.add("Reshape", {"bq", "bias_shape"}, {"bq4"});
  b.add("ConvInteger", {"xq", "wq", "xz", "wz"}, {"acc"}, {test::attr_ints("pads", {1, 1, 1, 1})});
  b.add("Add", {"acc", "bq4"}, {"acc_b"});
  b.add("Cast", {"acc_b"}, {"acc_f"}, {test::attr_i("to", static_cast<int64_t>(DType::kFloat32))});
  b.add("Mul", {"xs", "ws"}, {"out_scale"});
  b.add("Mul", {"acc_f", "out_scale"}, {"y"});
  b.output("y");
  return b.m;
}

TEST(DynamicQuantFloat, ConvIntegerChainBecomesConvOnDequantizedWeights) {
  const ir::Model before = quantized_conv(Tensor::scalar<float>(DType::kFloat32, 0.02f));
  ir::Model after = before;
  auto n = test::run_pass(after, "dynamic-quant-float");
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(*n, 1);
  auto dce = test::run_pass(after, "dead-code");
  ASSERT_TRUE(dce.is_ok());
  ASSERT_EQ(test::op_types(after), std::vector<std::string>{"Conv"});

  // The float conv written by hand.
  test::Builder want(13);
  want.input("x", {1, 3, 6, 5});
  const Tensor& wq = before.graph.initializers.at("wq");
  Tensor w = Tensor::make(DType::kFloat32, wq.shape()).value();
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = (wq.data<int8_t>()[i] - 3) * 0.02f;
  want.m.graph.initializers["w"] = w;
  want.m.graph.initializers["b"] = before.graph.initializers.at("b");
  want.add("Conv", {"x", "w", "b"}, {"y"}, {test::attr_ints("pads", {1, 1, 1, 1})});
  want.output("y");
  const Tensor x = want.random({1, 3, 6, 5});
  test::expect_same_outputs(want.m, after, {x}, 1e-6f);
  // x in 8 bits over [-1, 1]: steps of 2/255, times 27 taps of |w| <= 2.6.
  test::expect_same_outputs(before, after, {x}, 0.3f);
}

TEST(DynamicQuantFloat, PerChannelScaleStaysQuantized) {
  Tensor ws = Tensor::make(DType::kFloat32, {4}).value();
  for (int64_t i = 0; i < 4; ++i) ws.data<float>()[i] = 0.01f * static_cast<float>(i + 1);
  ir::Model m = quantized_conv(ws);
  auto n = test::run_pass(m, "dynamic-quant-float");
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 0);
}

}  // namespace
}  // namespace kiln
