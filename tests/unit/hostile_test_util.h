// Helpers shared by the hostile-model tests (hostile_*_test.cc): models built in code with the
// ONNX protobuf classes, loaded and run once, and errors checked for the fragments that name the
// problem. Nothing is downloaded.
#pragma once

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/session.h"
#include "onnx/model_io.h"

namespace kiln::hostile {

namespace fs = std::filesystem;

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void set_tensor_type(onnx::ValueInfoProto* v, const std::string& name, int elem,
                            const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

// An empty model of opset 17 with float input X [2,3] and output Y.
inline onnx::ModelProto base_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("hostile_model_test");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  set_tensor_type(g->add_input(), "X", onnx::TensorProto::FLOAT, {2, 3});
  g->add_output()->set_name("Y");
  return m;
}

inline onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op,
                                 std::vector<std::string> inputs, std::vector<std::string> outputs,
                                 const std::string& name = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? op + "_" + std::to_string(g->node_size()) : name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return n;
}

// Y = Relu(X): a valid model the corrupting tests start from.
inline onnx::ModelProto relu_model() {
  onnx::ModelProto m = base_model();
  add_node(m.mutable_graph(), "Relu", {"X"}, {"Y"}, "relu");
  return m;
}

inline Tensor float_tensor(Shape shape, float fill = 1.0f) {
  Tensor t = Tensor::make(DType::kFloat32, std::move(shape)).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = fill;
  return t;
}

// Loads (from a file in `dir` when given, so external data resolves; else from bytes) and, when
// that works, runs once with `inputs`. Returns the first error, or ok.
inline Status load_and_run(const onnx::ModelProto& m, const std::vector<Value>& inputs,
                           const fs::path& dir = {}) {
  std::string bytes;
  if (!m.SerializeToString(&bytes)) return Status::error("test bug: cannot serialise");
  std::unique_ptr<Session> s;
  if (!dir.empty()) {
    write_bytes(dir / "model.onnx", bytes);
    KILN_ASSIGN_OR_RETURN(s, Session::load((dir / "model.onnx").string()));
  } else {
    KILN_ASSIGN_OR_RETURN(ir::Model model, onnx_io::parse_model(bytes, ""));
    KILN_ASSIGN_OR_RETURN(s, Session::create(std::make_shared<const ir::Model>(std::move(model))));
  }
  auto out = s->run(inputs);
  return out.status();
}

// Runs once with X = ones [2,3].
inline Status load_and_run(const onnx::ModelProto& m) {
  return load_and_run(m, {Value::of(float_tensor({2, 3}))});
}

// The error must exist and its message must contain every fragment.
inline void expect_error(const Status& st, std::initializer_list<const char*> fragments) {
  ASSERT_FALSE(st.is_ok()) << "expected an error containing '" << *fragments.begin() << "'";
  for (const char* f : fragments)
    EXPECT_NE(st.message().find(f), std::string::npos)
        << "message: " << st.message() << "\nmissing: " << f;
}

}  // namespace kiln::hostile
