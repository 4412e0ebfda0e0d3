// The public model handle (kiln/model.h) and status codes: loading, inputs as a session sees
// them, optimize without touching a session made before, save/load round trips, and each kind
// of failure reported with its code.
#include <gtest/gtest.h>

#include <filesystem>

#include "ir/graph.h"
#include "kiln/model.h"
#include "kiln/session.h"
#include "onnx/model_io.h"

using namespace kiln;

namespace {

// y = Relu(x + b): x float [batch, 3], b an initializer.
std::shared_ptr<ir::Model> add_relu_model(const std::string& op = "Relu") {
  auto m = std::make_shared<ir::Model>();
  m->opsets[""] = 17;
  m->producer_name = "model_api_test";
  ir::Graph& g = m->graph;
  g.name = "add_relu";
  ir::ValueInfo x{"x", ir::TypeInfo::tensor(DType::kFloat32), ""};
  x.type.has_shape = true;
  x.type.shape = {ir::Dim{-1, "batch"}, ir::Dim{3, ""}};
  g.inputs.push_back(x);
  Tensor b = Tensor::make(DType::kFloat32, {3}).value();
  for (int i = 0; i < 3; ++i) b.data<float>()[i] = static_cast<float>(i) - 1.0f;
  g.initializers["b"] = b;
  g.inputs.push_back(ir::ValueInfo{"b", ir::TypeInfo::tensor(DType::kFloat32, {3}), ""});
  ir::Node add;
  add.op_type = "Add", add.name = "add", add.inputs = {"x", "b"}, add.outputs = {"s"};
  ir::Node act;
  act.op_type = op, act.name = "act", act.inputs = {"s"}, act.outputs = {"y"};
  if (op != "Relu") act.domain = "com.nowhere";
  g.nodes = {add, act};
  g.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kFloat32), ""});
  if (op != "Relu") m->opsets["com.nowhere"] = 1;
  return m;
}

Value input(std::vector<float> v, int64_t rows) {
  Tensor t = Tensor::make(DType::kFloat32, {rows, 3}).value();
  std::copy(v.begin(), v.end(), t.data<float>());
  return Value::of(t);
}

TEST(ModelApi, InputsOutputsAndMetadata) {
  Model m(add_relu_model());
  const std::vector<IoInfo> inputs = m.inputs();
  ASSERT_EQ(inputs.size(), 1u);  // b is an initializer, not an input
  const IoInfo& x = inputs[0];
  EXPECT_EQ(x.name, "x");
  EXPECT_EQ(x.dtype, DType::kFloat32);
  EXPECT_EQ(x.dims, (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(x.dim_names[0], "batch");
  EXPECT_EQ(m.outputs()[0].name, "y");
  EXPECT_EQ(m.producer_name(), "model_api_test");
  EXPECT_EQ(m.graph_name(), "add_relu");
  EXPECT_FALSE(m.optimized());
  auto s = Session::create(m);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ((*s)->inputs()[0].dims, x.dims);
}

TEST(ModelApi, OptimizeLeavesEarlierSessionsAlone) {
  Model m(add_relu_model());
  auto before = Session::create(m);
  ASSERT_TRUE(before.is_ok());
  const ir::Model* shared = &(*before)->model();
  ASSERT_TRUE(m.optimize().is_ok());
  EXPECT_TRUE(m.optimized());
  EXPECT_NE(&m.ir(), shared);                           // the model copied before changing
  EXPECT_FALSE(is_optimized((*before)->model()));       // the session's graph is as it was
  auto after = Session::create(m);
  ASSERT_TRUE(after.is_ok());
  const std::vector<Value> in = {input({-2, 0.5f, 3, 1, 1, -5}, 2)};
  auto a = (*before)->run(in);
  auto b = (*after)->run(in);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  const std::vector<float> want = {0, 0.5f, 4, 0, 1, 0};  // relu(x + [-1, 0, 1])
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ((*a)[0].tensor.data<float>()[i], want[i]);
    EXPECT_EQ((*b)[0].tensor.data<float>()[i], want[i]);
  }
}

TEST(ModelApi, SaveLoadAndBytesRoundTrip) {
  Model m(add_relu_model());
  ASSERT_TRUE(m.optimize().is_ok());
  const auto path = std::filesystem::temp_directory_path() / "kiln_model_api_test.onnx";
  ASSERT_TRUE(m.save(path.string()).is_ok());
  auto loaded = Model::load(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_TRUE(loaded->optimized());
  EXPECT_EQ(loaded->inputs()[0].dim_names[0], "batch");
  auto bytes = m.to_bytes();
  ASSERT_TRUE(bytes.is_ok());
  auto from_bytes = Model::load_bytes(*bytes);
  ASSERT_TRUE(from_bytes.is_ok());
  EXPECT_EQ(from_bytes->metadata(), m.metadata());
}

TEST(ModelApi, FailuresCarryTheirCode) {
  auto missing = Model::load("/no/such/dir/model.onnx");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto garbage = Model::load_bytes("\x08\x07this is not a model");
  ASSERT_FALSE(garbage.is_ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidModel);
  auto no_kernel = Session::create(Model(add_relu_model("NoSuchOp")));
  ASSERT_FALSE(no_kernel.is_ok());
  EXPECT_EQ(no_kernel.status().code(), StatusCode::kNotImplemented);

  auto s = Session::create(Model(add_relu_model()));
  ASSERT_TRUE(s.is_ok());
  Tensor wrong_type = Tensor::make(DType::kFloat64, {1, 3}).value();
  Tensor wrong_dim = Tensor::make(DType::kFloat32, {1, 4}).value();
  for (const Tensor& t : {wrong_type, wrong_dim}) {
    auto r = (*s)->run({Value::of(t)});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
    EXPECT_NE(r.status().message().find("input 'x'"), std::string::npos);
  }
  auto none = (*s)->run({});
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  // A code survives added context; an unclassified error takes a boundary's default.
  EXPECT_EQ(Status::invalid_model("m").with_context("c").code(), StatusCode::kInvalidModel);
  EXPECT_EQ(Status::error("m").with_default_code(StatusCode::kInvalidModel).code(),
            StatusCode::kInvalidModel);
  EXPECT_EQ(Status::not_implemented("m").with_default_code(StatusCode::kInvalidModel).code(),
            StatusCode::kNotImplemented);
  EXPECT_STREQ(status_code_name(StatusCode::kInvalidArgument), "InvalidArgument");
}

}  // namespace
