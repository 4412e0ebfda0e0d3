// Hostile, corrupt and truncated models, and wrong inputs at run time: each must give an error
// whose message names the problem — never a crash, a hang or an allocation past the budget.
// Models are built in code with the ONNX protobuf classes; nothing is downloaded.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "ir/graph.h"
#include "kiln/session.h"
#include "onnx/model_io.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

// A fresh, empty folder per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("kiln_hostile_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void set_tensor_type(onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

// An empty model of opset 17 with float input X [2,3] and output Y.
onnx::ModelProto base_model() {
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

onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> inputs,
                          std::vector<std::string> outputs, const std::string& name = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? op + "_" + std::to_string(g->node_size()) : name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return n;
}

// Y = Relu(X): a valid model the corrupting tests start from.
onnx::ModelProto relu_model() {
  onnx::ModelProto m = base_model();
  add_node(m.mutable_graph(), "Relu", {"X"}, {"Y"}, "relu");
  return m;
}

onnx::TensorProto* add_int64_initializer(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
  return t;
}

Tensor float_tensor(Shape shape, float fill = 1.0f) {
  Tensor t = Tensor::make(DType::kFloat32, std::move(shape)).value();
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = fill;
  return t;
}

// Loads (from a file in `dir` when given, so external data resolves; else from bytes) and, when
// that works, runs once with `inputs`. Returns the first error, or ok.
Status load_and_run(const onnx::ModelProto& m, const std::vector<Value>& inputs, const fs::path& dir = {}) {
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

Status load_and_run(const onnx::ModelProto& m) { return load_and_run(m, {Value::of(float_tensor({2, 3}))}); }

// The error must exist and its message must contain every fragment.
void expect_error(const Status& st, std::initializer_list<const char*> fragments) {
  ASSERT_FALSE(st.is_ok()) << "expected an error containing '" << *fragments.begin() << "'";
  for (const char* f : fragments)
    EXPECT_NE(st.message().find(f), std::string::npos) << "message: " << st.message() << "\nmissing: " << f;
}

fs::path conformance_root() {
  for (fs::path p : {fs::path("../shared/onnx-conformance"), fs::path(KILN_SOURCE_DIR) / "../shared/onnx-conformance"})
    if (fs::exists(p)) return p;
  return {};
}

// ---------------------------------------------------------------------------------------------
// Sanity: the base model works, so every failure below is the hostile part's doing.

TEST(HostileModel, BaseModelRuns) {
  Status st = load_and_run(relu_model());
  ASSERT_TRUE(st.is_ok()) << st.message();
}

// ---------------------------------------------------------------------------------------------
// Protobuf garbage and truncation.

TEST(HostileModel, ProtobufGarbage) {
  std::mt19937 rng(42);
  int refused = 0;
  for (int round = 0; round < 200; ++round) {
    std::string bytes(1 + rng() % 512, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    auto m = onnx_io::parse_model(bytes, "");
    if (!m) {
      ++refused;
      EXPECT_NE(m.status().message().find("not a valid ONNX model"), std::string::npos) << m.status().message();
      continue;
    }
    auto s = Session::create(std::make_shared<const ir::Model>(std::move(m).value()));
    (void)s;  // rare bytes that parse must still not crash
  }
  EXPECT_GT(refused, 150);
  expect_error(onnx_io::parse_model("", "").status(), {"no graph"});
  expect_error(onnx_io::parse_model("this is not a model at all", "").status(), {"protobuf parsing failed"});
  expect_error(onnx_io::parse_model(std::string(64, '\xff'), "").status(), {"protobuf parsing failed"});
}

TEST(HostileModel, FileErrors) {
  TempDir dir;
  expect_error(Session::load((dir.path() / "missing.onnx").string()).status(), {"cannot open"});
  expect_error(Session::load(dir.path().string()).status(), {"is a folder"});
  write_bytes(dir.path() / "empty.onnx", "");
  expect_error(Session::load((dir.path() / "empty.onnx").string()).status(), {"no graph"});
}

TEST(HostileModel, TruncatedConformanceModels) {
  const fs::path root = conformance_root();
  if (root.empty()) GTEST_SKIP() << "conformance data not found";
  for (const char* rel : {"node/test_conv_with_strides_padding/model.onnx", "simple/test_sign_model/model.onnx",
                          "node/test_if/model.onnx", "node/test_loop11/model.onnx",
                          "light/light_squeezenet.onnx"}) {
    SCOPED_TRACE(rel);
    if (!fs::exists(root / rel)) continue;
    std::string bytes = onnx_io::read_file((root / rel).string()).value();
    ASSERT_TRUE(onnx_io::parse_model(bytes, "").is_ok());
    const size_t step = std::max<size_t>(1, bytes.size() / 400);
    int refused = 0, cuts = 0;
    for (size_t cut = 0; cut < bytes.size(); cut += (cut < 64 ? 1 : step)) {
      ++cuts;
      auto m = onnx_io::parse_model(bytes.substr(0, cut), "");
      if (!m) {
        ++refused;
        EXPECT_FALSE(m.status().message().empty());
        continue;
      }
      // A cut on a field boundary is a valid, smaller model: it must compile or be refused cleanly.
      auto s = Session::create(std::make_shared<const ir::Model>(std::move(m).value()));
      if (!s) EXPECT_FALSE(s.status().message().empty());
    }
    EXPECT_GT(refused, cuts / 2) << refused << " of " << cuts << " cuts refused";
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor data and dims.

TEST(HostileModel, TensorDataShorterThanDims) {
  onnx::ModelProto m = base_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->add_dims(4);
  w->set_raw_data(std::string(8, '\0'));
  add_node(m.mutable_graph(), "Add", {"X", "W"}, {"Y"});
  expect_error(load_and_run(m), {"initializer 'W'", "[4,4]", "has 8 bytes", "expected 64"});

  w->clear_raw_data();
  for (int i = 0; i < 3; ++i) w->add_float_data(1.0f);
  expect_error(load_and_run(m), {"initializer 'W'", "has 3", "expected 16"});

  // Too much data is as corrupt as too little.
  w->clear_float_data();
  w->set_raw_data(std::string(65, '\0'));
  expect_error(load_and_run(m), {"initializer 'W'", "has 65 bytes", "expected 64"});
}

TEST(HostileModel, NegativeDims) {
  onnx::ModelProto m = base_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(-1);
  w->add_dims(4);
  add_node(m.mutable_graph(), "Add", {"X", "W"}, {"Y"});
  expect_error(load_and_run(m), {"initializer 'W'", "negative dimension -1"});
}

TEST(HostileModel, OverflowingDims) {
  onnx::ModelProto m = base_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  for (int i = 0; i < 3; ++i) w->add_dims(int64_t{1} << 40);
  w->set_raw_data(std::string(4, '\0'));
  add_node(m.mutable_graph(), "Add", {"X", "W"}, {"Y"});
  expect_error(load_and_run(m), {"initializer 'W'", "overflows"});

  // The element count fits int64 but the byte count does not: refused by the budget, no UB.
  w->clear_dims();
  w->add_dims(int64_t{1} << 31);
  w->add_dims(int64_t{1} << 31);
  expect_error(load_and_run(m), {"initializer 'W'", "GiB"});

  // Complex values count twice in float_data: 2 * n must not overflow either.
  w->set_data_type(onnx::TensorProto::COMPLEX128);
  w->clear_raw_data();
  w->add_double_data(1.0);
  expect_error(load_and_run(m), {"initializer 'W'", "GiB"});

  // Huge string tensors are refused before allocating.
  w->set_data_type(onnx::TensorProto::STRING);
  w->clear_double_data();
  expect_error(load_and_run(m), {"initializer 'W'"});
}

TEST(HostileModel, UnsupportedDataType) {
  onnx::ModelProto m = base_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("W");
  w->set_data_type(99);
  add_node(m.mutable_graph(), "Add", {"X", "W"}, {"Y"});
  expect_error(load_and_run(m), {"initializer 'W'", "unsupported data type 99"});
  w->set_data_type(0);
  expect_error(load_and_run(m), {"unsupported data type 0"});

  // An element type in a value info that no tensor can have.
  onnx::ModelProto v = relu_model();
  v.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(1234);
  expect_error(load_and_run(v), {"value 'X'", "unsupported element type 1234"});
}

TEST(HostileModel, SparseInitializers) {
  onnx::ModelProto m = base_model();
  auto* sp = m.mutable_graph()->add_sparse_initializer();
  sp->add_dims(2);
  sp->add_dims(3);
  auto* values = sp->mutable_values();
  values->set_name("W");
  values->set_data_type(onnx::TensorProto::FLOAT);
  values->add_dims(1);
  values->add_float_data(5.0f);
  auto* indices = sp->mutable_indices();
  indices->set_data_type(onnx::TensorProto::INT64);
  indices->add_dims(1);
  indices->add_int64_data(1000);
  add_node(m.mutable_graph(), "Add", {"X", "W"}, {"Y"});
  expect_error(load_and_run(m), {"sparse initializer 'W'", "out of range"});

  indices->set_int64_data(0, -1);
  expect_error(load_and_run(m), {"sparse initializer 'W'", "out of range"});

  // Strings cannot be copied byte-wise; they must be refused, not memcpy'd.
  indices->set_int64_data(0, 1);
  values->set_data_type(onnx::TensorProto::STRING);
  values->clear_float_data();
  values->add_string_data("x");
  expect_error(load_and_run(m), {"sparse initializer 'W'", "not supported"});

  // A dense shape of terabytes is refused before allocating.
  values->set_data_type(onnx::TensorProto::FLOAT);
  values->clear_string_data();
  values->add_float_data(1.0f);
  sp->set_dims(0, int64_t{1} << 30);
  sp->set_dims(1, int64_t{1} << 20);
  expect_error(load_and_run(m), {"sparse initializer 'W'", "GiB"});
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

// ---------------------------------------------------------------------------------------------
// External data: only plain files inside the model's folder.

// Y = X + W with W [2,3] float stored externally at `location`.
onnx::ModelProto external_model(const std::string& location, const std::string& offset = "",
                                const std::string& length = "") {
  onnx::ModelProto m = base_model();
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_dims(3);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add_kv = [&](const std::string& k, const std::string& v) {
    auto* kv = w->add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  };
  add_kv("location", location);
  if (!offset.empty()) add_kv("offset", offset);
  if (!length.empty()) add_kv("length", length);
  add_node(m.mutable_graph(), "Add", {"X", "W"}, {"Y"});
  return m;
}

const std::string kSixFloats(24, '\0');

TEST(HostileModel, ExternalDataValid) {
  TempDir dir;
  fs::create_directories(dir.path() / "weights");
  write_bytes(dir.path() / "weights" / "w.bin", std::string(8, 'x') + kSixFloats);
  Status st = load_and_run(external_model("weights/w.bin", "8", "24"), {Value::of(float_tensor({2, 3}))}, dir.path());
  EXPECT_TRUE(st.is_ok()) << st.message();
}

TEST(HostileModel, ExternalDataEscapingTheFolder) {
  TempDir dir;
  fs::create_directories(dir.path() / "model");
  write_bytes(dir.path() / "secret.bin", kSixFloats);
  const fs::path model_dir = dir.path() / "model";
  const std::vector<Value> in{Value::of(float_tensor({2, 3}))};

  expect_error(load_and_run(external_model("../secret.bin"), in, model_dir), {"external data '../secret.bin'", "leave"});
  expect_error(load_and_run(external_model("sub/../../secret.bin"), in, model_dir), {"external data", "leave"});
  const std::string abs = (dir.path() / "secret.bin").string();
  expect_error(load_and_run(external_model(abs), in, model_dir), {"external data", "relative"});
  expect_error(load_and_run(external_model("/etc/passwd"), in, model_dir), {"external data '/etc/passwd'", "relative"});

  // A symlink to a file outside, and a symlinked folder leading outside.
  fs::create_symlink(dir.path() / "secret.bin", model_dir / "link.bin");
  expect_error(load_and_run(external_model("link.bin"), in, model_dir), {"external data 'link.bin'", "symbolic link"});
  fs::create_directory_symlink(dir.path(), model_dir / "up");
  expect_error(load_and_run(external_model("up/secret.bin"), in, model_dir), {"external data 'up/secret.bin'", "symbolic link"});

  // Parsing bytes with no folder refuses external data altogether.
  std::string bytes;
  ASSERT_TRUE(external_model("w.bin").SerializeToString(&bytes));
  expect_error(onnx_io::parse_model(bytes, "").status(), {"external data", "not allowed"});
}

TEST(HostileModel, ExternalDataBadRange) {
  TempDir dir;
  write_bytes(dir.path() / "w.bin", kSixFloats);
  const std::vector<Value> in{Value::of(float_tensor({2, 3}))};
  expect_error(load_and_run(external_model("missing.bin"), in, dir.path()), {"external data 'missing.bin'", "not found"});
  expect_error(load_and_run(external_model("w.bin", "100"), in, dir.path()), {"external data 'w.bin'", "offset 100"});
  expect_error(load_and_run(external_model("w.bin", "8"), in, dir.path()), {"external data 'w.bin'", "needs 24 bytes"});
  expect_error(load_and_run(external_model("w.bin", "0", "12"), in, dir.path()), {"tensor 'W'", "has 12 bytes", "expected 24"});
  expect_error(load_and_run(external_model("w.bin", "-8"), in, dir.path()), {"external data", "offset '-8'"});
  expect_error(load_and_run(external_model("w.bin", "0", "lots"), in, dir.path()), {"external data", "length 'lots'"});
  expect_error(load_and_run(external_model(""), in, dir.path()), {"external data", "no location"});
  fs::create_directory(dir.path() / "folder");
  expect_error(load_and_run(external_model("folder"), in, dir.path()), {"external data 'folder'", "not a regular file"});
  // Never reads more than the tensor needs, even from a large file.
  write_bytes(dir.path() / "big.bin", std::string(1 << 20, '\0'));
  EXPECT_TRUE(load_and_run(external_model("big.bin"), in, dir.path()).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Graph structure: nesting, unknown ops, cycles, dangling names.

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
  auto* inner = s.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g()->mutable_node(0)
                    ->mutable_attribute(0)->mutable_g()->mutable_node(0);
  inner->set_op_type("NoSuchOp");
  expect_error(load_and_run(s), {"NoSuchOp is not supported"});

  onnx::ModelProto e = base_model();
  add_node(e.mutable_graph(), "", {"X"}, {"Y"}, "blank");
  expect_error(load_and_run(e), {"node 'blank'", "no op_type"});
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
  expect_error(session.run({Value::of(float_tensor({6}))}).status(), {"input 'X'", "rank 2", "[6]"});
  expect_error(session.run({Value::of(float_tensor({2, 4}))}).status(), {"input 'X'", "dimension 1 must be 3", "[2,4]"});
  expect_error(session.run({Value::of(float_tensor({2, 3, 1}))}).status(), {"input 'X'", "rank 2"});
  expect_error(session.run({}).status(), {"takes 1 inputs, got 0"});
  expect_error(session.run({Value::of(float_tensor({2, 3})), Value::of(float_tensor({2, 3}))}).status(),
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
