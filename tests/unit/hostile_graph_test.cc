// Hostile graph structure: Ifs nested past the limit, types nested too deeply, unknown ops (also
// inside subgraphs), cycles, dangling and duplicate value names, missing graphs and attribute
// values. Each must give an error that names the node or value at fault, never a crash or a
// stack overflow.
#include "hostile_test_util.h"
#include "kiln/optimize.h"

namespace kiln::hostile {
namespace {

// A graph whose single If node nests `levels` more Ifs in both branches; the innermost branch
// returns X + 1 (reading X from the outermost graph).
void fill_nested_if(onnx::GraphProto* g, int levels, const std::string& out) {
  if (levels == 0) {
    auto* one = g->add_initializer();
    one->set_name("one_" + out);
    one->set_data_type(onnx::TensorProto::FLOAT);
    one->add_float_data(1.0f);
    add_node(g, "Add", {"X", "one_" + out}, {out});
    g->add_output()->set_name(out);
    return;
  }
  auto* c = g->add_initializer();
  c->set_name("cond_" + out);
  c->set_data_type(onnx::TensorProto::BOOL);
  c->add_int32_data(1);
  auto* n = add_node(g, "If", {"cond_" + out}, {out});
  // The then branch nests further; the else branch (never taken) stays flat.
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    a->mutable_g()->set_name(std::string(branch) + std::to_string(levels));
    fill_nested_if(a->mutable_g(), branch[0] == 't' ? levels - 1 : 0, out + "_");
  }
  g->add_output()->set_name(out);
}

onnx::ModelProto nested_if_model(int levels) {
  onnx::ModelProto m = base_model();
  m.mutable_graph()->clear_output();
  fill_nested_if(m.mutable_graph(), levels, "Y");
  return m;
}

// `m` serialized, parsed and optimized at `level`; what the optimizer said (an error or not, never
// a crash) in `status`.
ir::Model optimized_at(const onnx::ModelProto& m, int level, Status& status) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  auto model = onnx_io::parse_model(bytes, "");
  if (!model.is_ok()) {
    ADD_FAILURE() << model.status().message();
    return ir::Model{};
  }
  OptimizeOptions options;
  options.level = level;
  status = optimize(*model, options).status();
  return std::move(model).value();
}

TEST(HostileModel, ModeratelyNestedIfRuns) {
  const std::vector<Value> in{Value::of(float_tensor({2, 3}, 2.0f))};
  std::string bytes;
  ASSERT_TRUE(nested_if_model(10).SerializeToString(&bytes));
  auto model = onnx_io::parse_model(bytes, "");
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  auto s = Session::create(std::make_shared<const ir::Model>(std::move(model).value()));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto out = (*s)->run(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(out.value()[0].tensor.data<float>()[0], 3.0f);
}

TEST(HostileModel, DeeplyNestedIf) {
  expect_error(load_and_run(nested_if_model(200)), {"nested more than"});
  expect_error(load_and_run(nested_if_model(onnx_io::kMaxGraphNesting + 1)), {"nested more than"});
  // Beyond even the protobuf recursion limit: still an error, not a stack overflow.
  expect_error(load_and_run(nested_if_model(2000)), {"not a valid ONNX model"});
}

TEST(HostileModel, DeeplyNestedType) {
  onnx::ModelProto m = relu_model();
  auto* t = m.mutable_graph()->mutable_output(0)->mutable_type();
  for (int i = 0; i < 200; ++i) t = t->mutable_sequence_type()->mutable_elem_type();
  t->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  expect_error(load_and_run(m), {"value 'Y'", "nested too deeply"});
}

TEST(HostileModel, UnknownOps) {
  onnx::ModelProto m = base_model();
  add_node(m.mutable_graph(), "TotallyMadeUpOp", {"X"}, {"Y"}, "mystery");
  expect_error(load_and_run(m), {"node 'mystery' (TotallyMadeUpOp)", "not supported"});

  onnx::ModelProto d = base_model();
  add_node(d.mutable_graph(), "Relu", {"X"}, {"Y"}, "foreign")->set_domain("com.example.evil");
  expect_error(load_and_run(d), {"node 'foreign'", "com.example.evil.Relu is not supported"});

  // Unknown ops inside a subgraph are found too.
  onnx::ModelProto s = nested_if_model(2);
  auto* inner = s.mutable_graph()
                    ->mutable_node(0)
                    ->mutable_attribute(0)
                    ->mutable_g()
                    ->mutable_node(0)
                    ->mutable_attribute(0)
                    ->mutable_g()
                    ->mutable_node(0);
  inner->set_op_type("NoSuchOp");
  expect_error(load_and_run(s), {"NoSuchOp is not supported"});

  onnx::ModelProto e = base_model();
  add_node(e.mutable_graph(), "", {"X"}, {"Y"}, "blank");
  expect_error(load_and_run(e), {"node 'blank'", "no op_type"});
}

TEST(HostileModel, OmittedRequiredInputsAreErrorsAtEveryLevel) {
  // The fuzzer found constant folding running Identity("") (inside a Loop body); every level's
  // passes must leave such nodes for run time to report.
  for (const char* op : {"Identity", "Relu", "Transpose", "Add"}) {
    onnx::ModelProto m = base_model();
    add_node(m.mutable_graph(), op, {"", "X"}, {"Y"}, "omitted");
    if (std::string(op) != "Add") m.mutable_graph()->mutable_node(0)->mutable_input()->RemoveLast();
    for (int level = 1; level <= 3; ++level) {
      Status optimized;
      auto s =
          Session::create(std::make_shared<const ir::Model>(optimized_at(m, level, optimized)));
      const Status st = s.is_ok() ? (*s)->run({Value::of(float_tensor({2, 3}))}).status() : s.status();
      EXPECT_FALSE(st.is_ok()) << op << " at -O" << level;
    }
  }
}

TEST(HostileModel, NodesWithoutOutputsAreLoadErrors) {
  // The fuzzer found cost rules reading output 0 of a Conv with no outputs (under ASan: a read
  // past an empty vector), and a SequenceConstruct with none that constant folding ran, its
  // kernel writing output 0. Every operator has an output: the loader names such a node.
  for (const char* op : {"MatMul", "Gemm", "Conv", "SequenceConstruct"}) {
    onnx::ModelProto m = base_model();
    auto* w = m.mutable_graph()->add_initializer();
    w->set_name("W");
    w->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : {3, 3}) w->add_dims(d);
    for (int i = 0; i < 9; ++i) w->add_float_data(1.0f);
    add_node(m.mutable_graph(), op, {"X", "W"}, {}, "no_outputs");
    add_node(m.mutable_graph(), "Relu", {"X"}, {"Y"}, "relu");
    const std::string node = std::string("node 'no_outputs' (") + op + ")";
    expect_error(load_and_run(m), {node.c_str(), "no outputs"});
  }
}

TEST(HostileModel, Cycles) {
  onnx::ModelProto m = base_model();
  add_node(m.mutable_graph(), "Add", {"X", "B"}, {"A"}, "a");
  add_node(m.mutable_graph(), "Relu", {"A"}, {"B"}, "b");
  add_node(m.mutable_graph(), "Identity", {"A"}, {"Y"}, "y");
  expect_error(load_and_run(m), {"cycle"});

  onnx::ModelProto self = base_model();
  add_node(self.mutable_graph(), "Add", {"X", "Y"}, {"Y"}, "self");
  expect_error(load_and_run(self), {"cycle", "node 'self'"});
}

// The optimizer's passes walk from producers to consumers: a typed cycle of elementwise nodes that
// no output reads is an error naming the cycle, not a walk round it forever.
TEST(HostileModel, CyclesAreOptimizerErrors) {
  onnx::ModelProto m = relu_model();
  add_node(m.mutable_graph(), "Relu", {"B"}, {"A"}, "a");
  add_node(m.mutable_graph(), "Neg", {"A"}, {"B"}, "b");
  for (const char* v : {"A", "B"})
    set_tensor_type(m.mutable_graph()->add_value_info(), v, onnx::TensorProto::FLOAT, {2, 3});
  for (int level = 1; level <= 3; ++level) {
    Status optimized;
    (void)optimized_at(m, level, optimized);
    expect_error(optimized, {"cycle", "(Relu)"});
  }
}

// Nodes listed consumers first are valid ONNX once sorted: the optimizer sorts them, and the
// optimized model computes what the unsorted one does.
TEST(HostileModel, OptimizerSortsNodesListedOutOfOrder) {
  onnx::ModelProto m = base_model();
  add_node(m.mutable_graph(), "Neg", {"B"}, {"Y"}, "last");
  add_node(m.mutable_graph(), "Relu", {"A"}, {"B"}, "middle");
  add_node(m.mutable_graph(), "Abs", {"X"}, {"A"}, "first");
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  auto model = onnx_io::parse_model(bytes, "");
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  auto report = optimize(*model, OptimizeOptions{});
  ASSERT_TRUE(report.is_ok()) << report.status().message();
  ASSERT_FALSE(model->graph.nodes.empty());
  EXPECT_EQ(model->graph.nodes.back().outputs[0], "Y");
  auto s = Session::create(std::make_shared<const ir::Model>(std::move(model).value()));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  auto out = (*s)->run({Value::of(float_tensor({2, 3}, -2.0f))});
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.value()[0].tensor.data<float>()[i], -2.0f);
}

TEST(HostileModel, DanglingAndDuplicateNames) {
  onnx::ModelProto m = base_model();
  add_node(m.mutable_graph(), "Add", {"X", "nowhere"}, {"Y"}, "dangling");
  expect_error(load_and_run(m), {"node 'dangling'", "'nowhere'"});

  onnx::ModelProto d = base_model();
  add_node(d.mutable_graph(), "Relu", {"X"}, {"Y"}, "first");
  add_node(d.mutable_graph(), "Relu", {"X"}, {"Y"}, "second");
  expect_error(load_and_run(d), {"'Y' is produced more than once", "node 'second'"});

  onnx::ModelProto o = base_model();
  add_node(o.mutable_graph(), "Relu", {"X"}, {"Z"});
  expect_error(load_and_run(o), {"graph output 'Y'", "not produced"});

  onnx::ModelProto w = base_model();
  add_node(w.mutable_graph(), "Relu", {"X"}, {"X"}, "overwrite");
  add_node(w.mutable_graph(), "Relu", {"X"}, {"Y"});
  expect_error(load_and_run(w), {"'X' is produced more than once"});
}

TEST(HostileModel, MissingGraphAndAttributeValues) {
  onnx::ModelProto m = relu_model();
  m.clear_graph();
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  expect_error(onnx_io::parse_model(bytes, "").status(), {"no graph"});

  // An If whose branch attribute says GRAPH but holds none.
  onnx::ModelProto f = nested_if_model(1);
  f.mutable_graph()->mutable_node(0)->mutable_attribute(0)->clear_g();
  expect_error(load_and_run(f), {"attribute 'then_branch'", "GRAPH has no value"});

  // An If with no branches at all fails at run time, naming the node.
  onnx::ModelProto n = nested_if_model(1);
  n.mutable_graph()->mutable_node(0)->clear_attribute();
  expect_error(load_and_run(n), {"(If)"});
}

}  // namespace
}  // namespace kiln::hostile
