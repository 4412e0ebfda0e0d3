// Gradient expansion checked against central finite differences of sum(y), through a Session,
// for broadcasting elementwise graphs (static shapes below and from opset 13, symbolic shapes) and
// MatMul; plus the errors for unsupported ops.
#include "ir/gradient.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "kiln/session.h"

namespace kiln::ir {
namespace {

ValueInfo tensor_info(const std::string& name, const std::vector<Dim>& dims, bool shaped = true) {
  ValueInfo v;
  v.name = name;
  v.type = TypeInfo::tensor(DType::kFloat64);
  v.type.has_shape = shaped;
  v.type.shape = dims;
  return v;
}

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.name = op + "_" + out[0];
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

Node gradient_node(std::vector<std::string> xs, const std::string& y,
                   std::vector<std::string> out) {
  Node n = node("Gradient", xs, std::move(out));
  n.domain = "ai.onnx.preview.training";
  Attribute a;
  a.name = "xs";
  a.type = Attribute::Type::kStrings;
  a.strings = xs;
  Attribute b;
  b.name = "y";
  b.type = Attribute::Type::kString;
  b.s = y;
  n.attrs = {a, b};
  return n;
}

Tensor random_tensor(const Shape& shape, std::mt19937& rng, double lo, double hi) {
  Tensor t = Tensor::make(DType::kFloat64, shape).value();
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = dist(rng);
  return t;
}

double sum(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.data<double>()[i];
  return s;
}

// Runs the model (outputs: y, then one gradient per input) and compares every gradient element
// with (sum y(x + h) - sum y(x - h)) / 2h.
void check_against_finite_differences(const Model& m, std::vector<Tensor> inputs) {
  auto session = Session::create(std::make_shared<const Model>(m));
  ASSERT_TRUE(session.is_ok()) << session.status().message();
  auto run = [&](const std::vector<Tensor>& in) {
    std::vector<Value> feeds;
    for (const auto& t : in) feeds.push_back(Value::of(t));
    auto out = (*session)->run(feeds);
    EXPECT_TRUE(out.is_ok()) << out.status().message();
    return out.is_ok() ? std::move(out).value() : std::vector<Value>{};
  };
  std::vector<Value> out = run(inputs);
  ASSERT_EQ(out.size(), inputs.size() + 1);
  const double h = 1e-5;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& grad = out[k + 1].tensor;
    ASSERT_EQ(grad.shape(), inputs[k].shape()) << "gradient " << k;
    for (int64_t i = 0; i < inputs[k].numel(); ++i) {
      std::vector<Tensor> plus = inputs, minus = inputs;
      plus[k] = inputs[k].clone();
      minus[k] = inputs[k].clone();
      plus[k].data<double>()[i] += h;
      minus[k].data<double>()[i] -= h;
      const double fd = (sum(run(plus)[0].tensor) - sum(run(minus)[0].tensor)) / (2 * h);
      EXPECT_NEAR(grad.data<double>()[i], fd, 1e-5 * (1 + std::abs(fd)))
          << "input " << k << " element " << i;
    }
  }
}

// y = (a + b) * a - a / b with a [2,3] broadcasting against b [3].
Model broadcast_model(int64_t opset, bool symbolic) {
  Model m;
  m.opsets = {{"", opset}, {"ai.onnx.preview.training", 1}};
  Graph& g = m.graph;
  g.name = "grad_test";
  const Dim n = symbolic ? Dim{-1, "n"} : Dim{2, ""};
  const Dim c = symbolic ? Dim{-1, "c"} : Dim{3, ""};
  g.inputs = {tensor_info("a", {n, c}), tensor_info("b", {c}, !symbolic)};
  g.nodes = {node("Add", {"a", "b"}, {"s"}), node("Mul", {"s", "a"}, {"p"}),
             node("Div", {"a", "b"}, {"q"}), node("Sub", {"p", "q"}, {"y"}),
             gradient_node({"a", "b"}, "y", {"dy_da", "dy_db"})};
  g.outputs = {tensor_info("y", {}, false), tensor_info("dy_da", {}, false),
               tensor_info("dy_db", {}, false)};
  return m;
}

TEST(GradientTest, BroadcastingElementwiseOpset12) {
  std::mt19937 rng(1);
  check_against_finite_differences(broadcast_model(12, false), {random_tensor({2, 3}, rng, -2, 2),
                                                                random_tensor({3}, rng, 0.5, 2)});
}

TEST(GradientTest, BroadcastingElementwiseOpset13) {
  std::mt19937 rng(2);
  check_against_finite_differences(broadcast_model(13, false), {random_tensor({2, 3}, rng, -2, 2),
                                                                random_tensor({3}, rng, 0.5, 2)});
}

TEST(GradientTest, UnknownShapesReduceAtRunTime) {
  std::mt19937 rng(3);
  check_against_finite_differences(broadcast_model(13, true), {random_tensor({2, 3}, rng, -2, 2),
                                                               random_tensor({3}, rng, 0.5, 2)});
  // The same graph also serves a b that broadcasts along the other axis.
  check_against_finite_differences(broadcast_model(13, true), {random_tensor({4, 1}, rng, -2, 2),
                                                               random_tensor({3}, rng, 0.5, 2)});
}

TEST(GradientTest, UnknownShapesNeedOpset13) {
  Model m = broadcast_model(12, true);
  Status st = expand_gradients(m.graph, 12);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("opset"), std::string::npos) << st.message();
}

TEST(GradientTest, MatMulNegIdentityWithBatchBroadcast) {
  // y = -(A @ B) + Identity(A @ B) * A @ B  with A [2,3,4] and B [4,3] broadcast over the batch.
  Model m;
  m.opsets = {{"", 13}, {"ai.onnx.preview.training", 1}};
  Graph& g = m.graph;
  g.inputs = {tensor_info("A", {{2, ""}, {3, ""}, {4, ""}}), tensor_info("B", {{4, ""}, {3, ""}})};
  g.nodes = {node("MatMul", {"A", "B"}, {"P"}), node("Neg", {"P"}, {"N"}),
             node("Identity", {"P"}, {"I"}),    node("Mul", {"I", "P"}, {"Q"}),
             node("Add", {"N", "Q"}, {"y"}),    gradient_node({"A", "B"}, "y", {"dA", "dB"})};
  g.outputs = {tensor_info("y", {}, false), tensor_info("dA", {}, false),
               tensor_info("dB", {}, false)};
  std::mt19937 rng(4);
  check_against_finite_differences(
      m, {random_tensor({2, 3, 4}, rng, -1, 1), random_tensor({4, 3}, rng, -1, 1)});
}

TEST(GradientTest, UnreachableInputGetsZeros) {
  Model m;
  m.opsets = {{"", 13}, {"ai.onnx.preview.training", 1}};
  Graph& g = m.graph;
  g.inputs = {tensor_info("a", {{2, ""}}), tensor_info("b", {{2, ""}})};
  g.nodes = {node("Neg", {"a"}, {"y"}), gradient_node({"a", "b"}, "y", {"da", "db"})};
  g.outputs = {tensor_info("y", {}, false), tensor_info("da", {}, false),
               tensor_info("db", {}, false)};
  std::mt19937 rng(5);
  check_against_finite_differences(
      m, {random_tensor({2}, rng, -1, 1), random_tensor({2}, rng, -1, 1)});
}

TEST(GradientTest, UnsupportedOpIsNamed) {
  Model m;
  m.opsets = {{"", 13}, {"ai.onnx.preview.training", 1}};
  Graph& g = m.graph;
  g.inputs = {tensor_info("a", {{2, ""}})};
  g.nodes = {node("Exp", {"a"}, {"e"}), node("Neg", {"e"}, {"y"}),
             gradient_node({"a"}, "y", {"da"})};
  g.outputs = {tensor_info("y", {}, false), tensor_info("da", {}, false)};
  const Graph before = g;
  Status st = expand_gradients(g, 13);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("Exp"), std::string::npos) << st.message();
  EXPECT_EQ(g.nodes.size(), before.nodes.size());  // left unchanged
  auto session = Session::create(std::make_shared<const Model>(m));
  EXPECT_FALSE(session.is_ok());
}

TEST(GradientTest, GeneratedNamesAvoidExistingOnes) {
  Model m = broadcast_model(13, false);
  m.graph.value_info.push_back(tensor_info("__grad0__taken", {}, false));
  ASSERT_TRUE(expand_gradients(m.graph, 13).is_ok());
  for (const auto& n : m.graph.nodes) {
    EXPECT_NE(n.op_type, "Gradient");
    for (const auto& o : n.outputs) EXPECT_NE(o.rfind("__grad0__", 0), 0u) << o;
  }
}

}  // namespace
}  // namespace kiln::ir
