// Hostile model files: protobuf garbage and truncation, unreadable files, initializers whose data
// disagrees with their dims or type, and external data that tries to leave the model's folder.
// Each must give an error whose message names the problem — never a crash, a hang or an
// allocation past the budget.
#include <unistd.h>

#include <algorithm>
#include <random>

#include "hostile_test_util.h"

namespace kiln::hostile {
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

fs::path conformance_root() {
  for (fs::path p : {fs::path("../shared/onnx-conformance"),
                     fs::path(KILN_SOURCE_DIR) / "../shared/onnx-conformance"})
    if (fs::exists(p)) return p;
  return {};
}

// ---------------------------------------------------------------------------------------------
// Sanity: the base model works, so every failure in hostile_*_test.cc is the hostile part's doing.

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
      EXPECT_NE(m.status().message().find("not a valid ONNX model"), std::string::npos)
          << m.status().message();
      continue;
    }
    auto s = Session::create(std::make_shared<const ir::Model>(std::move(m).value()));
    (void)s;  // rare bytes that parse must still not crash
  }
  EXPECT_GT(refused, 150);
  expect_error(onnx_io::parse_model("", "").status(), {"no graph"});
  expect_error(onnx_io::parse_model("this is not a model at all", "").status(),
               {"protobuf parsing failed"});
  expect_error(onnx_io::parse_model(std::string(64, '\xff'), "").status(),
               {"protobuf parsing failed"});
}

TEST(HostileModel, FileErrors) {
  TempDir dir;
  const Status missing = Session::load((dir.path() / "missing.onnx").string()).status();
  expect_error(missing, {"cannot open"});
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  expect_error(Session::load(dir.path().string()).status(), {"is a folder"});
  EXPECT_EQ(Session::load(dir.path().string()).status().code(), StatusCode::kInvalidModel);
  write_bytes(dir.path() / "empty.onnx", "");
  expect_error(Session::load((dir.path() / "empty.onnx").string()).status(), {"no graph"});
}

TEST(HostileModel, TruncatedConformanceModels) {
  const fs::path root = conformance_root();
  if (root.empty()) GTEST_SKIP() << "conformance data not found";
  for (const char* rel :
       {"node/test_conv_with_strides_padding/model.onnx", "simple/test_sign_model/model.onnx",
        "node/test_if/model.onnx", "node/test_loop11/model.onnx", "light/light_squeezenet.onnx"}) {
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
      if (!s) {
        EXPECT_FALSE(s.status().message().empty());
      }
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
  Status st = load_and_run(external_model("weights/w.bin", "8", "24"),
                           {Value::of(float_tensor({2, 3}))}, dir.path());
  EXPECT_TRUE(st.is_ok()) << st.message();
}

TEST(HostileModel, ExternalDataEscapingTheFolder) {
  TempDir dir;
  fs::create_directories(dir.path() / "model");
  write_bytes(dir.path() / "secret.bin", kSixFloats);
  const fs::path model_dir = dir.path() / "model";
  const std::vector<Value> in{Value::of(float_tensor({2, 3}))};

  expect_error(load_and_run(external_model("../secret.bin"), in, model_dir),
               {"external data '../secret.bin'", "leave"});
  expect_error(load_and_run(external_model("sub/../../secret.bin"), in, model_dir),
               {"external data", "leave"});
  const std::string abs = (dir.path() / "secret.bin").string();
  expect_error(load_and_run(external_model(abs), in, model_dir), {"external data", "relative"});
  expect_error(load_and_run(external_model("/etc/passwd"), in, model_dir),
               {"external data '/etc/passwd'", "relative"});

  // A symlink to a file outside, and a symlinked folder leading outside.
  fs::create_symlink(dir.path() / "secret.bin", model_dir / "link.bin");
  expect_error(load_and_run(external_model("link.bin"), in, model_dir),
               {"external data 'link.bin'", "symbolic link"});
  fs::create_directory_symlink(dir.path(), model_dir / "up");
  expect_error(load_and_run(external_model("up/secret.bin"), in, model_dir),
               {"external data 'up/secret.bin'", "symbolic link"});

  // Parsing bytes with no folder refuses external data altogether.
  std::string bytes;
  ASSERT_TRUE(external_model("w.bin").SerializeToString(&bytes));
  expect_error(onnx_io::parse_model(bytes, "").status(), {"external data", "not allowed"});
}

TEST(HostileModel, ExternalDataBadRange) {
  TempDir dir;
  write_bytes(dir.path() / "w.bin", kSixFloats);
  const std::vector<Value> in{Value::of(float_tensor({2, 3}))};
  expect_error(load_and_run(external_model("missing.bin"), in, dir.path()),
               {"external data 'missing.bin'", "not found"});
  expect_error(load_and_run(external_model("w.bin", "100"), in, dir.path()),
               {"external data 'w.bin'", "offset 100"});
  expect_error(load_and_run(external_model("w.bin", "8"), in, dir.path()),
               {"external data 'w.bin'", "needs 24 bytes"});
  expect_error(load_and_run(external_model("w.bin", "0", "12"), in, dir.path()),
               {"tensor 'W'", "has 12 bytes", "expected 24"});
  expect_error(load_and_run(external_model("w.bin", "-8"), in, dir.path()),
               {"external data", "offset '-8'"});
  expect_error(load_and_run(external_model("w.bin", "0", "lots"), in, dir.path()),
               {"external data", "length 'lots'"});
  expect_error(load_and_run(external_model(""), in, dir.path()), {"external data", "no location"});
  fs::create_directory(dir.path() / "folder");
  expect_error(load_and_run(external_model("folder"), in, dir.path()),
               {"external data 'folder'", "not a regular file"});
  // Never reads more than the tensor needs, even from a large file.
  write_bytes(dir.path() / "big.bin", std::string(1 << 20, '\0'));
  EXPECT_TRUE(load_and_run(external_model("big.bin"), in, dir.path()).is_ok());
}

}  // namespace
}  // namespace kiln::hostile
