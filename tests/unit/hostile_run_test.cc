// Hostile requests at run time: inputs of the wrong type, rank, shape or count, and nodes whose
// output shape (ConstantOfShape, Expand) asks for terabytes. Each must give an error that names
// the input or node, never a crash or an allocation past the budget, and leave the session usable.
#include "hostile_test_util.h"

namespace kiln::hostile {
namespace {

onnx::TensorProto* add_int64_initializer(onnx::GraphProto* g, const std::string& name,
                                         const std::vector<int64_t>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
  return t;
}

// ---------------------------------------------------------------------------------------------
// Run-time allocation requests: ConstantOfShape and Expand asking for terabytes.

TEST(HostileModel, ConstantOfShapeTerabytes) {
  onnx::ModelProto m = base_model();
  m.mutable_graph()->clear_input();
  add_int64_initializer(m.mutable_graph(), "shape", {1000000, 1000000});
  add_node(m.mutable_graph(), "ConstantOfShape", {"shape"}, {"Y"}, "cos");
  expect_error(load_and_run(m, {}), {"node 'cos' (ConstantOfShape)", "GiB"});

  // Dims whose product overflows int64.
  m.mutable_graph()->mutable_initializer(0)->set_int64_data(0, int64_t{1} << 40);
  m.mutable_graph()->mutable_initializer(0)->set_int64_data(1, int64_t{1} << 40);
  expect_error(load_and_run(m, {}), {"node 'cos' (ConstantOfShape)", "overflows"});

  m.mutable_graph()->mutable_initializer(0)->set_int64_data(0, -5);
  expect_error(load_and_run(m, {}), {"node 'cos' (ConstantOfShape)", "negative"});
}

TEST(HostileModel, ExpandTerabytes) {
  onnx::ModelProto m = base_model();
  add_int64_initializer(m.mutable_graph(), "shape", {100000, 100000, 2, 3});
  add_node(m.mutable_graph(), "Expand", {"X", "shape"}, {"Y"}, "expand");
  expect_error(load_and_run(m), {"node 'expand' (Expand)", "GiB"});

  auto* shape = m.mutable_graph()->mutable_initializer(0);
  shape->set_int64_data(0, int64_t{1} << 40);
  shape->set_int64_data(1, int64_t{1} << 40);
  expect_error(load_and_run(m), {"node 'expand' (Expand)", "overflows"});

  shape->set_int64_data(0, -7);
  shape->set_int64_data(1, 1);
  expect_error(load_and_run(m), {"node 'expand' (Expand)", "negative"});
}

// A node whose required input names no value (the fuzzer's SplitToSequence read a null input).
TEST(HostileModel, SplitToSequenceWithoutItsInput) {
  onnx::ModelProto m = base_model();
  add_node(m.mutable_graph(), "SplitToSequence", {""}, {"S"}, "split");
  auto* concat = add_node(m.mutable_graph(), "ConcatFromSequence", {"S"}, {"Y"}, "concat");
  onnx::AttributeProto* axis = concat->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(0);
  expect_error(load_and_run(m), {"node 'split' (SplitToSequence)", "input 0 must be a tensor"});
}

// ---------------------------------------------------------------------------------------------
// Wrong inputs at run time.

TEST(HostileModel, WrongInputsAtRunTime) {
  std::string bytes;
  ASSERT_TRUE(relu_model().SerializeToString(&bytes));
  auto model = onnx_io::parse_model(bytes, "");
  ASSERT_TRUE(model.is_ok());
  auto s = Session::create(std::make_shared<const ir::Model>(std::move(model).value()));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  Session& session = **s;

  Tensor i64 = Tensor::make(DType::kInt64, {2, 3}).value();
  expect_error(session.run({Value::of(i64)}).status(), {"input 'X'", "must be float32, got int64"});
  expect_error(session.run({Value::of(float_tensor({6}))}).status(),
               {"input 'X'", "rank 2", "[6]"});
  expect_error(session.run({Value::of(float_tensor({2, 4}))}).status(),
               {"input 'X'", "dimension 1 must be 3", "[2,4]"});
  expect_error(session.run({Value::of(float_tensor({2, 3, 1}))}).status(), {"input 'X'", "rank 2"});
  expect_error(session.run({}).status(), {"takes 1 inputs, got 0"});
  expect_error(
      session.run({Value::of(float_tensor({2, 3})), Value::of(float_tensor({2, 3}))}).status(),
      {"takes 1 inputs, got 2"});
  expect_error(session.run({Value()}).status(), {"input 'X'", "must be a tensor"});
  expect_error(session.run({Value::of_sequence({float_tensor({2, 3})}, DType::kFloat32)}).status(),
               {"input 'X'", "must be a tensor"});
  // The session still works after all that.
  auto ok = session.run({Value::of(float_tensor({2, 3}, -1.0f))});
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ(ok.value()[0].tensor.data<float>()[0], 0.0f);
}

TEST(HostileModel, WrongInputDtypeWithoutDeclaredType) {
  // An untyped input: the check falls to the kernel, which must refuse cleanly.
  onnx::ModelProto m = relu_model();
  m.mutable_graph()->mutable_input(0)->clear_type();
  Tensor s = Tensor::make(DType::kString, {2}).value();
  expect_error(load_and_run(m, {Value::of(s)}), {"node 'relu' (Relu)"});
}

}  // namespace
}  // namespace kiln::hostile
