// LSTM, GRU and RNN weights in 8 bits (quantize/recurrent_weights.cc): what the quantizer writes
// (int8 a scale per row, DequantizeLinear + Reshape, standard ONNX), the outputs against the float
// model's, and what leaves them float (keep_float, portable).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kiln/model.h"
#include "pass_test_util.h"
#include "quantize_test_util.h"

namespace kiln {
namespace {

using test::attr_i;
using test::attr_s;
using test::cosine;

// x [7, 1, 12] -> bidirectional LSTM (hidden 16), GRU (hidden 10, linear_before_reset) and RNN
// (hidden 9), each an output; weights of a trained layer's size, |w| <= 1 / sqrt(12). With `b`
// given, the cells read its value `seq` [T, 1, 12] instead.
test::Builder recurrent_model(int64_t opset, test::Builder* given = nullptr, const std::string& seq = "x") {
  test::Builder b = given ? *given : test::Builder(opset);
  if (!given) b.input("x", {7, 1, 12});
  const float r = 0.29f;
  struct Cell {
    const char* op;
    int64_t dirs, gates, hidden;
  };
  for (const Cell& c : {Cell{"LSTM", 2, 4, 16}, Cell{"GRU", 1, 3, 10}, Cell{"RNN", 1, 1, 9}}) {
    const std::string name = c.op, w = name + "_W", rr = name + "_R", bias = name + "_B";
    b.m.graph.initializers[w] = b.random({c.dirs, c.gates * c.hidden, 12}, -r, r);
    b.m.graph.initializers[rr] = b.random({c.dirs, c.gates * c.hidden, c.hidden}, -r, r);
    b.m.graph.initializers[bias] = b.random({c.dirs, 2 * c.gates * c.hidden}, -r, r);
    std::vector<ir::Attribute> attrs = {attr_i("hidden_size", c.hidden),
                                        attr_s("direction", c.dirs == 2 ? "bidirectional" : "forward")};
    if (name == "GRU") attrs.push_back(attr_i("linear_before_reset", 1));
    b.add(c.op, {seq, w, rr, bias}, {name + "_y"}, attrs).name = name;
    b.output(name + "_y");
  }
  return b;
}

// The node named `name` in g.
const ir::Node* node_named(const ir::Graph& g, const std::string& name) {
  for (const ir::Node& n : g.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

const ir::Node* producer(const ir::Graph& g, const std::string& value) {
  for (const ir::Node& n : g.nodes)
    if (std::find(n.outputs.begin(), n.outputs.end(), value) != n.outputs.end()) return &n;
  return nullptr;
}

TEST(Quantize, RecurrentWeightsInEightBitsARow) {
  test::Builder b = recurrent_model(11);
  Model model(std::make_shared<ir::Model>(b.m));
  QuantizeOptions o = test::untimed();
  o.dynamic = true;
  auto report = model.quantize({}, o);
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->recurrent_nodes, (std::vector<std::string>{"LSTM", "GRU", "RNN"}));
  EXPECT_EQ(report->opset_after, 13);  // DequantizeLinear's axis
  const ir::Graph& g = model.ir().graph;
  for (const char* name : {"LSTM", "GRU", "RNN"}) {
    const ir::Node* n = node_named(g, name);
    ASSERT_NE(n, nullptr) << name;
    for (size_t i : {size_t{1}, size_t{2}}) {
      // int8 [D * G * H, K] -> DequantizeLinear (axis 0) -> Reshape back to the weight's shape.
      const ir::Node* reshape = producer(g, n->inputs[i]);
      ASSERT_TRUE(reshape && reshape->op_type == "Reshape") << name << " input " << i;
      const ir::Node* dq = producer(g, reshape->inputs[0]);
      ASSERT_TRUE(dq && dq->op_type == "DequantizeLinear" && dq->attr_int("axis", -1) == 0) << name << " input " << i;
      const Tensor& q = g.initializers.at(dq->inputs[0]);
      const Tensor& scale = g.initializers.at(dq->inputs[1]);
      const Tensor& want = b.m.graph.initializers.at(std::string(name) + (i == 1 ? "_W" : "_R"));
      ASSERT_EQ(q.dtype(), DType::kInt8);
      ASSERT_EQ(q.shape(), (Shape{want.dim(0) * want.dim(1), want.dim(2)}));
      ASSERT_EQ(scale.numel(), q.dim(0));
      for (int64_t row = 0; row < q.dim(0); ++row) {  // each row's own scale: its largest code 127
        int top = 0;
        for (int64_t k = 0; k < q.dim(1); ++k) {
          const int8_t c = q.data<int8_t>()[row * q.dim(1) + k];
          top = std::max(top, std::abs(int{c}));
          ASSERT_NEAR(c * scale.data<float>()[row], want.data<float>()[row * q.dim(1) + k], scale.data<float>()[row] / 2 + 1e-7f)
              << name << " input " << i << " row " << row;
        }
        EXPECT_EQ(top, 127) << name << " input " << i << " row " << row;
      }
    }
  }
  // The outputs: int8 weights against float ones, and the kernels (codes against 16-bit h and x)
  // against the reference loops on the same 8-bit weights.
  const Tensor x = b.random({7, 1, 12}, -1.0f, 1.0f);
  SessionOptions plain;
  plain.optimize_level = 0;
  const auto want = test::run_model(b.m, {x});
  const auto reference = test::run_model(model.ir(), {x}, plain);
  const auto got = test::run_model(model.ir(), {x});
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_GT(cosine(want[i].tensor, got[i].tensor), 0.999f) << i;
    for (int64_t e = 0; e < got[i].tensor.numel(); ++e)
      ASSERT_NEAR(got[i].tensor.data<float>()[e], reference[i].tensor.data<float>()[e], 1e-4) << i << " element " << e;
  }
}

TEST(Quantize, RecurrentWeightsStayFloatWhereAsked) {
  for (const bool portable : {false, true}) {
    test::Builder b = recurrent_model(13);
    b.weight("fc", {12, 4});  // a MatMul, so that --dynamic has a node to quantize with portable
    b.add("MatMul", {"x", "fc"}, {"m"});
    b.output("m");
    Model model(std::make_shared<ir::Model>(b.m));
    QuantizeOptions o = test::untimed();
    o.dynamic = true;
    o.portable = portable;
    o.keep_float = {"GRU"};
    auto report = model.quantize({}, o);
    ASSERT_TRUE(report.is_ok()) << report.status().message();
    // Portable models run elsewhere: nothing of kiln's; else the GRU as asked.
    const std::vector<std::string> want = portable ? std::vector<std::string>{} : std::vector<std::string>{"LSTM", "RNN"};
    EXPECT_EQ(report->recurrent_nodes, want);
    const ir::Node* gru = node_named(model.ir().graph, "GRU");
    ASSERT_NE(gru, nullptr);
    EXPECT_EQ(model.ir().graph.initializers.at(gru->inputs[1]).dtype(), DType::kFloat32);
  }
}

// Static quantization writes them too: an image through two 8-bit convs and a pool, read as a
// sequence of 144 pixels of 12 channels by the three cells.
TEST(Quantize, StaticQuantizationTakesRecurrentWeightsToo) {
  test::Builder img(13);
  img.input("img", {1, 8, 12, 12});
  img.conv("img", "c1", 8, 16);
  img.add("Relu", {"c1"}, {"r1"});
  img.conv("r1", "c2", 16, 12, 1);
  img.add("MaxPool", {"c2"}, {"p2"}, {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("pads", {1, 1, 1, 1})});
  img.ints("rows", {12, 144});
  img.add("Reshape", {"p2", "rows"}, {"flat"});
  img.add("Transpose", {"flat"}, {"pixels"}, {test::attr_ints("perm", {1, 0})});
  img.ints("seq_shape", {144, 1, 12});
  img.add("Reshape", {"pixels", "seq_shape"}, {"seq"});
  test::Builder b = recurrent_model(13, &img, "seq");
  std::vector<Tensor> xs = test::random_samples(b, 8, {1, 8, 12, 12});
  Model model(std::make_shared<ir::Model>(b.m));
  auto report = model.quantize(test::samples_of(xs), test::untimed());
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->quantized_nodes, 2);
  EXPECT_EQ(report->recurrent_nodes, (std::vector<std::string>{"LSTM", "GRU", "RNN"}));
  const Tensor x = b.random({1, 8, 12, 12});
  const auto want = test::run_model(b.m, {x});
  const auto got = test::run_model(model.ir(), {x});
  for (size_t i = 0; i < 3; ++i) EXPECT_GT(cosine(want[i].tensor, got[i].tensor), 0.99f) << i;
}

// Static quantization of a model with nothing to put in 8 bits but the cells' weights (a
// wake-word model's LSTM head): those, rather than the error that nothing would run in 8 bits.
TEST(Quantize, StaticQuantizationOfRecurrentWeightsAlone) {
  test::Builder b = recurrent_model(13);
  std::vector<Tensor> xs = test::random_samples(b, 4, {7, 1, 12});
  Model model(std::make_shared<ir::Model>(b.m));
  auto report = model.quantize(test::samples_of(xs), test::untimed());
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  EXPECT_EQ(report->quantized_nodes, 0);
  EXPECT_EQ(report->recurrent_nodes, (std::vector<std::string>{"LSTM", "GRU", "RNN"}));
  ASSERT_EQ(report->outputs.size(), 3u);  // measured on the samples against the budget
  for (const TensorError& e : report->outputs) EXPECT_GT(e.cosine, 0.999) << e.tensor;
}

}  // namespace
}  // namespace kiln
