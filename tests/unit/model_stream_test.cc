// Streamed model I/O: load_model parses the file as a stream and save_model/serialize_model write
// the weights straight from the tensors (ModelWriter). The bytes written must be exactly what
// protobuf's own serializer gives for the whole ModelProto; a file must load as its bytes parse;
// and a corrupt length in a file must be refused without allocating what it claims.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "hostile_test_util.h"
#include "onnx/proto_convert.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("kiln_stream_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string file_bytes(const fs::path& path) { return onnx_io::read_file(path.string()).value(); }

Tensor filled(DType dtype, const Shape& shape, uint8_t seed) {
  Tensor t = Tensor::make(dtype, shape).value();
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
  return t;
}

// Every way a tensor is stored: raw floats and integers, bool, float16, 4-bit packing (odd count),
// strings (string_data, not raw), an empty tensor, a scalar; plus a subgraph initializer, an
// attribute tensor, value infos, metadata, doc strings and a function.
ir::Model storage_model() {
  test::Builder b;
  b.input("X", {4, 8});
  b.weight("W", {8, 8});
  b.m.graph.initializers["i64"] = test::int64s({1, -2, 3});
  b.m.graph.initializers["half"] = filled(DType::kFloat16, {5}, 3);
  b.m.graph.initializers["flags"] = filled(DType::kBool, {3}, 0);
  Tensor nib = Tensor::make(DType::kInt4, {5}).value();
  for (int i = 0; i < 5; ++i)
    nib.data<uint8_t>()[i] = static_cast<uint8_t>(i % 2 ? 0xf9 : 3);  // -7, 3
  b.m.graph.initializers["nibbles"] = nib;
  Tensor words = Tensor::make(DType::kString, {2}).value();
  words.data<std::string>()[0] = "kiln";
  words.data<std::string>()[1] = std::string("a\0b", 3);
  b.m.graph.initializers["words"] = words;
  b.m.graph.initializers["empty"] = Tensor::make(DType::kFloat32, {0, 3}).value();
  b.scalar("s", 2.5f);
  b.add("MatMul", {"X", "W"}, {"h"});
  b.add("Mul", {"h", "s"}, {"Y"});
  b.output("Y");
  auto branch = std::make_shared<ir::Graph>();
  branch->name = "then";
  branch->initializers["inner"] = b.random({300});
  branch->outputs.push_back(
      ir::ValueInfo{"inner", ir::TypeInfo::tensor(DType::kFloat32, {300}), ""});
  ir::Attribute g;
  g.name = "then_branch";
  g.type = ir::Attribute::Type::kGraph;
  g.g = branch;
  ir::Attribute e = g;
  e.name = "else_branch";
  b.scalar("cond", 1.0f);
  b.add("If", {"cond"}, {"Z"}, {g, e});
  ir::Attribute value;
  value.name = "value";
  value.type = ir::Attribute::Type::kTensor;
  value.t = b.random({16});
  b.add("Constant", {}, {"C"}, {value});
  b.output("Z");
  b.m.graph.value_info.push_back(
      ir::ValueInfo{"h", ir::TypeInfo::tensor(DType::kFloat32, {4, 8}), "hidden"});
  b.m.graph.doc = "graph doc";
  b.m.doc = "model doc";
  b.m.producer_name = "model_stream_test";
  b.m.ir_version = 9;
  b.m.metadata.emplace_back("k", "v");
  ir::Function f;
  f.name = "Twice";
  f.domain = "local";
  f.inputs = {"a"};
  f.outputs = {"b"};
  ir::Node n;
  n.op_type = "Add";
  n.inputs = {"a", "a"};
  n.outputs = {"b"};
  f.nodes.push_back(n);
  f.opsets[""] = 20;
  b.m.functions.push_back(f);
  return b.m;
}

// The reference: protobuf serialising the whole ModelProto.
std::string protobuf_bytes(const ir::Model& m) {
  onnx::ModelProto p;
  onnx_io::model_to_proto(m, p);
  std::string out;
  EXPECT_TRUE(p.SerializeToString(&out));
  return out;
}

TEST(ModelStream, WrittenBytesAreProtobufs) {
  const ir::Model m = storage_model();
  const std::string want = protobuf_bytes(m);
  auto got = onnx_io::serialize_model(m);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(*got, want);
  EXPECT_EQ(onnx_io::ModelWriter(m).size(), want.size());

  TempDir dir;
  ASSERT_TRUE(onnx_io::save_model(m, (dir / "m.onnx").string()).is_ok());
  EXPECT_EQ(file_bytes(dir / "m.onnx"), want);
}

TEST(ModelStream, ExternalDataBytesAreProtobufsToo) {
  // The same model saved external: the model file is what protobuf writes once the tensors point
  // at the data file, and every tensor comes back bit for bit.
  const ir::Model m = storage_model();
  TempDir dir;
  onnx_io::SaveOptions o;
  o.external_data = onnx_io::SaveOptions::ExternalData::kAlways;
  o.size_threshold = 16;
  onnx_io::SaveReport report;
  ASSERT_TRUE(onnx_io::save_model(m, (dir / "m.onnx").string(), o, &report).is_ok());
  EXPECT_EQ(report.external_tensors, 4);  // W, i64 (24 bytes), and both branches' `inner`
  onnx::ModelProto saved;
  ASSERT_TRUE(saved.ParseFromString(file_bytes(dir / "m.onnx")));
  std::string reserialized;
  ASSERT_TRUE(saved.SerializeToString(&reserialized));
  EXPECT_EQ(file_bytes(dir / "m.onnx"), reserialized);
  auto back = onnx_io::load_model((dir / "m.onnx").string());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  ASSERT_EQ(back->graph.initializers.size(), m.graph.initializers.size());
  for (const auto& [name, t] : m.graph.initializers) {
    const Tensor& u = back->graph.initializers.at(name);
    EXPECT_EQ(u.shape(), t.shape()) << name;
    if (t.dtype() == DType::kString) {
      for (int64_t i = 0; i < t.numel(); ++i)
        EXPECT_EQ(u.data<std::string>()[i], t.data<std::string>()[i]);
      continue;
    }
    ASSERT_EQ(u.nbytes(), t.nbytes()) << name;
    if (t.dtype() == DType::kBool)  // loading normalises bools to 0/1
      for (int64_t i = 0; i < t.numel(); ++i)
        EXPECT_EQ(u.data<uint8_t>()[i], t.data<uint8_t>()[i] != 0);
    else
      EXPECT_EQ(0, std::memcmp(u.raw_data(), t.raw_data(), t.nbytes())) << name;
  }
}

TEST(ModelStream, ConformanceModelsWriteProtobufsBytes) {
  fs::path root;
  for (fs::path p : {fs::path("../shared/onnx-conformance"),
                     fs::path(KILN_SOURCE_DIR) / "../shared/onnx-conformance"})
    if (fs::exists(p)) root = p;
  if (root.empty()) GTEST_SKIP() << "conformance data not found";
  int checked = 0;
  for (const char* suite : {"node", "simple", "pytorch-converted"}) {
    if (!fs::exists(root / suite)) continue;
    for (const auto& e : fs::directory_iterator(root / suite)) {
      const fs::path path = e.path() / "model.onnx";
      if (!fs::exists(path)) continue;
      auto m = onnx_io::load_model(path.string());
      if (!m) continue;  // import errors are roundtrip_test's business
      // Loading from the file and parsing its bytes give the same model.
      auto parsed = onnx_io::parse_model(file_bytes(path), path.parent_path().string());
      ASSERT_TRUE(parsed.is_ok()) << path;
      EXPECT_EQ(protobuf_bytes(*parsed), protobuf_bytes(*m)) << path;
      auto got = onnx_io::serialize_model(*m);
      ASSERT_TRUE(got.is_ok()) << path;
      EXPECT_EQ(*got, protobuf_bytes(*m)) << path;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(ModelStream, FileErrorsNameTheFile) {
  TempDir dir;
  const std::string bytes = protobuf_bytes(storage_model());
  hostile::write_bytes(dir / "cut.onnx", bytes.substr(0, bytes.size() / 2));
  auto cut = onnx_io::load_model((dir / "cut.onnx").string());
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("cut.onnx"), std::string::npos) << cut.status().message();
  EXPECT_NE(cut.status().message().find("not a valid ONNX model"), std::string::npos)
      << cut.status().message();
  auto missing = onnx_io::load_model((dir / "missing.onnx").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos)
      << missing.status().message();
}


// A ModelProto whose graph holds an initializer whose raw_data claims `claimed` bytes, of which the
// file has 64.
std::string lying_length_model(uint32_t claimed) {
  auto varint = [](uint64_t v) {
    std::string s;
    for (; v >= 0x80; v >>= 7) s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    s.push_back(static_cast<char>(v));
    return s;
  };
  const std::string tensor = "\x4a" + varint(claimed) + std::string(64, 'w');  // raw_data, field 9
  const std::string graph = "\x2a" + varint(claimed + 16) + tensor;  // initializer, field 5
  return std::string("\x08\x08", 2) + "\x3a" + varint(claimed + 32) + graph;  // ir_version; graph
}

// The process's data segment as RLIMIT_DATA measures it: VmData of /proc/self/status, in bytes.
int64_t data_segment_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmData:", 0) == 0) return std::stoll(line.substr(7)) * 1024;  // "... kB"
  return 0;
}

TEST(ModelStream, CorruptLengthDoesNotAllocateWhatItClaims) {
  TempDir dir;
  hostile::write_bytes(dir / "liar.onnx", lying_length_model(0x7ffff000u));
  // In a child whose data segment may grow by 256 MB at most: an allocation of what the length
  // claims (2 GiB) would fail there and end the child, where a clean error exits 0. ASan maps
  // its shadow memory as data, so under ASan the child checks its peak RSS grew less instead.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Whatever happens, the child ends here: it must never go on to run the rest of the suite.
    try {
      struct rusage before;
      getrusage(RUSAGE_SELF, &before);
      const int64_t budget = int64_t{256} << 20;
      if (!test::kAddressSanitizer) {
        // RLIMIT_DATA counts every private writable mapping, so the base is what the process
        // has mapped (other threads' stacks and malloc arenas too), not what it has touched.
        const rlim_t limit = static_cast<rlim_t>(data_segment_bytes() + budget);
        struct rlimit rl {
          limit, limit
        };
        setrlimit(RLIMIT_DATA, &rl);
      }
      auto m = onnx_io::load_model((dir / "liar.onnx").string());
      struct rusage after;
      getrusage(RUSAGE_SELF, &after);
      const bool clean = !m.is_ok() &&
                         m.status().message().find("not a valid ONNX model") != std::string::npos &&
                         (after.ru_maxrss - before.ru_maxrss) * 1024 < budget;
      _exit(clean ? 0 : 1);
    } catch (...) {
      _exit(2);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  // The same bytes parsed from memory are refused too.
  auto m = onnx_io::parse_model(lying_length_model(0x7ffff000u), "");
  EXPECT_FALSE(m.is_ok());
}

// External data is read straight into the tensor: bools still normalised, int4 still unpacked.
TEST(ModelStream, ExternalDataIntoTensors) {
  TempDir dir;
  onnx::ModelProto m = hostile::base_model();
  auto add_external = [&](const std::string& name, int type, int64_t n, const std::string& offset,
                          const std::string& length) {
    auto* w = m.mutable_graph()->add_initializer();
    w->set_name(name);
    w->set_data_type(type);
    w->add_dims(n);
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    for (auto [k, v] : {std::pair<std::string, std::string>{"location", "w.bin"},
                        {"offset", offset},
                        {"length", length}}) {
      auto* kv = w->add_external_data();
      kv->set_key(k);
      kv->set_value(v);
    }
  };
  add_external("flags", onnx::TensorProto::BOOL, 4, "0", "4");
  add_external("nibbles", static_cast<int>(DType::kInt4), 3, "4", "2");
  add_external("floats", onnx::TensorProto::FLOAT, 2, "8", "8");
  hostile::add_node(m.mutable_graph(), "Relu", {"X"}, {"Y"});
  const float two[2] = {1.5f, -2.0f};
  std::string data(
      "\x00\x02\x01\xff"
      "\x9f\x05"
      "\x00\x00",
      8);
  data.append(reinterpret_cast<const char*>(two), sizeof two);
  hostile::write_bytes(dir / "w.bin", data);
  hostile::write_bytes(dir / "m.onnx", m.SerializeAsString());
  auto got = onnx_io::load_model((dir / "m.onnx").string());
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  const auto& inits = got->graph.initializers;
  const uint8_t* flags = inits.at("flags").data<uint8_t>();
  EXPECT_EQ(std::vector<uint8_t>(flags, flags + 4), (std::vector<uint8_t>{0, 1, 1, 1}));
  const uint8_t* nib =
      inits.at("nibbles").data<uint8_t>();  // 0x9f -> 0xf (-1), 0x9 (-7); 0x05 -> 5
  EXPECT_EQ(std::vector<uint8_t>(nib, nib + 3), (std::vector<uint8_t>{0xff, 0xf9, 0x05}));
  EXPECT_EQ(inits.at("floats").data<float>()[0], 1.5f);
  EXPECT_EQ(inits.at("floats").data<float>()[1], -2.0f);
}

}  // namespace
}  // namespace kiln
