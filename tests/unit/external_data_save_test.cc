// save_model with external data: large initializers go to one aligned data file beside the model,
// small ones stay inline, and the result reads back bit for bit. The saved files are checked with
// the ONNX protobuf classes and plain file reads, independently of kiln's importer.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "onnx/model_io.h"
#include "pass_test_util.h"

namespace fs = std::filesystem;
using namespace kiln;
using onnx_io::SaveOptions;

namespace {

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("kiln_extsave_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Y = MatMul(Relu(X @ W1 + b1), W2) * scale, plus an If whose branch holds its own initializer.
// Sizes straddle the 1024-byte default threshold: W1 256 KiB, W2 8 KiB, b1 exactly 1024 bytes,
// `near` 1020 bytes, scale 4 bytes, shape 24 bytes; the branch's `inner` 2 KiB.
ir::Model test_model() {
  test::Builder b;
  b.input("X", {4, 256});
  b.weight("W1", {256, 256});
  b.weight("b1", {256});
  b.weight("W2", {256, 8});
  b.weight("near", {255});
  b.scalar("scale", 0.5f);
  b.ints("shape", {1, 4, 8});
  b.add("MatMul", {"X", "W1"}, {"h"});
  b.add("Add", {"h", "b1"}, {"h1"});
  b.add("Relu", {"h1"}, {"r"});
  b.add("MatMul", {"r", "W2"}, {"y"});
  b.add("Mul", {"y", "scale"}, {"Y"});
  b.output("Y");
  auto branch = std::make_shared<ir::Graph>();
  branch->name = "then";
  branch->initializers["inner"] = b.random({512});
  branch->outputs.push_back(ir::ValueInfo{"inner", ir::TypeInfo::tensor(DType::kFloat32, {512}), ""});
  ir::Attribute then_branch;
  then_branch.name = "then_branch";
  then_branch.type = ir::Attribute::Type::kGraph;
  then_branch.g = branch;
  ir::Attribute else_branch = then_branch;
  else_branch.name = "else_branch";
  b.scalar("cond", 1.0f);
  b.add("If", {"cond"}, {"Z"}, {then_branch, else_branch});
  b.output("Z");
  return b.m;
}

std::map<std::string, const Tensor*> all_initializers(const ir::Model& m) {
  std::map<std::string, const Tensor*> out;
  for (const auto& [name, t] : m.graph.initializers) out[name] = &t;
  for (const auto& n : m.graph.nodes)
    for (const auto& a : n.attrs)
      if (a.g) for (const auto& [name, t] : a.g->initializers) out[a.name + "/" + name] = &t;
  return out;
}

// The saved ModelProto, parsed without kiln; initializers by name as above.
struct SavedModel {
  onnx::ModelProto proto;
  std::map<std::string, const onnx::TensorProto*> inits;
};

SavedModel read_saved(const std::string& path) {
  SavedModel s;
  EXPECT_TRUE(s.proto.ParseFromString(file_bytes(path))) << path;
  for (const auto& t : s.proto.graph().initializer()) s.inits[t.name()] = &t;
  for (const auto& n : s.proto.graph().node())
    for (const auto& a : n.attribute())
      if (a.has_g()) for (const auto& t : a.g().initializer()) s.inits[a.name() + "/" + t.name()] = &t;
  return s;
}

std::map<std::string, std::string> entries(const onnx::TensorProto& t) {
  std::map<std::string, std::string> kv;
  for (const auto& e : t.external_data()) kv[e.key()] = e.value();
  return kv;
}

void expect_same_tensors(const ir::Model& want, const ir::Model& got) {
  auto a = all_initializers(want), b = all_initializers(got);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Tensor& u = *b[name];
    EXPECT_EQ(t->dtype(), u.dtype()) << name;
    EXPECT_EQ(t->shape(), u.shape()) << name;
    ASSERT_EQ(t->nbytes(), u.nbytes()) << name;
    EXPECT_EQ(0, std::memcmp(t->raw_data(), u.raw_data(), t->nbytes())) << name;
  }
}

TEST(ExternalDataSave, RoundTripIsBitIdenticalAlignedAndKeepsSmallTensorsInline) {
  TempDir dir;
  const ir::Model model = test_model();
  SaveOptions o;
  o.external_data = SaveOptions::ExternalData::kAlways;
  onnx_io::SaveReport report;
  ASSERT_TRUE(onnx_io::save_model(model, dir / "m.onnx", o, &report).is_ok());
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"m.onnx", "m.onnx.data"}));
  EXPECT_EQ(report.data_path, dir / "m.onnx.data");
  EXPECT_EQ(report.external_tensors, 5);  // W1, W2, b1 and both branches' `inner`

  const std::string data = file_bytes(dir / "m.onnx.data");
  const SavedModel saved = read_saved(dir / "m.onnx");
  const auto want = all_initializers(model);
  uint64_t end = 0;
  std::set<std::string> external;
  for (const auto& [name, p] : saved.inits) {
    const Tensor& t = *want.at(name);
    const std::string bytes(static_cast<const char*>(t.raw_data()), t.nbytes());
    if (t.nbytes() < 1024) {
      EXPECT_NE(p->data_location(), onnx::TensorProto::EXTERNAL) << name;
      EXPECT_EQ(p->raw_data(), bytes) << name;
      continue;
    }
    external.insert(name);
    ASSERT_EQ(p->data_location(), onnx::TensorProto::EXTERNAL) << name;
    EXPECT_FALSE(p->has_raw_data()) << name;
    auto kv = entries(*p);
    EXPECT_EQ(kv["location"], "m.onnx.data") << name;
    const uint64_t offset = std::stoull(kv["offset"]), length = std::stoull(kv["length"]);
    EXPECT_EQ(offset % 4096, 0u) << name;
    EXPECT_EQ(length, t.nbytes()) << name;
    ASSERT_LE(offset + length, data.size()) << name;
    EXPECT_EQ(data.substr(offset, length), bytes) << name;
    end = std::max(end, offset + length);
  }
  EXPECT_EQ(external, (std::set<std::string>{"W1", "W2", "b1", "then_branch/inner", "else_branch/inner"}));
  // Packed in order, each at the next 4096 boundary: W1, W2 (both whole pages), b1 (1024 bytes,
  // padded to a page), then_branch/inner (2048, padded), else_branch/inner (2048, the end).
  const uint64_t w1 = 256 * 256 * 4, w2 = 256 * 8 * 4;
  EXPECT_EQ(data.size(), end);
  EXPECT_EQ(data.size(), w1 + w2 + 4096 + 4096 + 2048);
  EXPECT_EQ(report.data_file_bytes, data.size());

  auto back = onnx_io::load_model(dir / "m.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_TRUE(back->external_data);
  expect_same_tensors(model, *back);
}

TEST(ExternalDataSave, NeverKeepsOneFile) {
  TempDir dir;
  ir::Model model = test_model();
  model.external_data = true;  // as if loaded from external data: kNever still wins
  SaveOptions o;
  o.external_data = SaveOptions::ExternalData::kNever;
  onnx_io::SaveReport report;
  ASSERT_TRUE(onnx_io::save_model(model, dir / "m.onnx", o, &report).is_ok());
  EXPECT_EQ(dir.files(), std::vector<std::string>{"m.onnx"});
  EXPECT_TRUE(report.data_path.empty());
  for (const auto& [name, p] : read_saved(dir / "m.onnx").inits)
    EXPECT_NE(p->data_location(), onnx::TensorProto::EXTERNAL) << name;
  auto back = onnx_io::load_model(dir / "m.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_FALSE(back->external_data);
  expect_same_tensors(model, *back);
}

TEST(ExternalDataSave, AlwaysWithCustomLocationAndThreshold) {
  TempDir dir;
  const ir::Model model = test_model();
  SaveOptions o;
  o.external_data = SaveOptions::ExternalData::kAlways;
  o.location = "weights.bin";
  o.size_threshold = 2048;  // b1 (1024 bytes) now stays inline
  o.alignment = 64;
  ASSERT_TRUE(onnx_io::save_model(model, dir / "net.onnx", o).is_ok());
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"net.onnx", "weights.bin"}));
  const SavedModel saved = read_saved(dir / "net.onnx");
  EXPECT_NE(saved.inits.at("b1")->data_location(), onnx::TensorProto::EXTERNAL);
  for (const char* name : {"W1", "W2", "then_branch/inner"}) {
    auto kv = entries(*saved.inits.at(name));
    EXPECT_EQ(kv["location"], "weights.bin") << name;
    EXPECT_EQ(std::stoull(kv["offset"]) % 64, 0u) << name;
  }
  auto back = onnx_io::load_model(dir / "net.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  expect_same_tensors(model, *back);

  // Saving again over both files replaces them whole and leaves no temporary file behind.
  ASSERT_TRUE(onnx_io::save_model(model, dir / "net.onnx", o).is_ok());
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"net.onnx", "weights.bin"}));
  back = onnx_io::load_model(dir / "net.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  expect_same_tensors(model, *back);
}

TEST(ExternalDataSave, RefusesLocationsOutsideTheModelsFolderAndTheModelItself) {
  TempDir dir;
  const ir::Model model = test_model();
  for (const std::string bad : {"../w.data", "sub/w.data", "..", ".", "/tmp/w.data", "a\\b.data"}) {
    SaveOptions o;
    o.external_data = SaveOptions::ExternalData::kAlways;
    o.location = bad;
    Status st = onnx_io::save_model(model, dir / "m.onnx", o);
    ASSERT_FALSE(st.is_ok()) << bad;
    EXPECT_NE(st.message().find("'" + bad + "'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("plain file name"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(dir.files().empty());

  // The data file may not be the model file, by name or through a link.
  ASSERT_TRUE(onnx_io::save_model(model, dir / "m.onnx").is_ok());
  const std::string before = file_bytes(dir / "m.onnx");
  SaveOptions o;
  o.external_data = SaveOptions::ExternalData::kAlways;
  o.location = "m.onnx";
  Status st = onnx_io::save_model(model, dir / "m.onnx", o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("overwrite the model"), std::string::npos) << st.message();
  fs::create_symlink("m.onnx", dir / "link.onnx");
  o.location = "m.onnx";
  st = onnx_io::save_model(model, dir / "link.onnx", o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("overwrite the model"), std::string::npos) << st.message();
  EXPECT_EQ(file_bytes(dir / "m.onnx"), before);
}

TEST(ExternalDataSave, ErrorsNameTheDataFile) {
  TempDir dir;
  SaveOptions o;
  o.external_data = SaveOptions::ExternalData::kAlways;
  Status st = onnx_io::save_model(test_model(), dir / "missing_folder/m.onnx", o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(dir / "missing_folder/m.onnx.data"), std::string::npos) << st.message();
}

TEST(ExternalDataSave, AutoFollowsHowTheModelWasLoaded) {
  TempDir dir;
  const ir::Model model = test_model();
  ASSERT_FALSE(model.external_data);
  // Built in code, small: auto saves inline, and loading that gives an inline model again.
  ASSERT_TRUE(onnx_io::save_model(model, dir / "inline.onnx").is_ok());
  auto inline_model = onnx_io::load_model(dir / "inline.onnx");
  ASSERT_TRUE(inline_model.is_ok()) << inline_model.status().message();
  EXPECT_FALSE(inline_model->external_data);

  SaveOptions always;
  always.external_data = SaveOptions::ExternalData::kAlways;
  ASSERT_TRUE(onnx_io::save_model(model, dir / "ext.onnx", always).is_ok());
  auto loaded = onnx_io::load_model(dir / "ext.onnx");
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_TRUE(loaded->external_data);
  ir::Model copy = *loaded;  // what kiln optimize saves is a rewritten copy
  onnx_io::SaveReport report;
  ASSERT_TRUE(onnx_io::save_model(copy, dir / "again.onnx", {}, &report).is_ok());
  EXPECT_EQ(report.data_path, dir / "again.onnx.data");
  EXPECT_EQ(read_saved(dir / "again.onnx").inits.at("W1")->data_location(), onnx::TensorProto::EXTERNAL);
  auto back = onnx_io::load_model(dir / "again.onnx");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  expect_same_tensors(model, *back);

  // Auto also goes external when the model would not fit inline (the 2 GiB limit, scaled down).
  SaveOptions small_limit;
  small_limit.max_inline_bytes = 64 * 1024;
  ASSERT_TRUE(onnx_io::save_model(model, dir / "big.onnx", small_limit, &report).is_ok());
  EXPECT_EQ(report.data_path, dir / "big.onnx.data");
  small_limit.max_inline_bytes = 1 << 20;
  ASSERT_TRUE(onnx_io::save_model(model, dir / "fits.onnx", small_limit, &report).is_ok());
  EXPECT_TRUE(report.data_path.empty());
  EXPECT_FALSE(fs::exists(dir / "fits.onnx.data"));
}

TEST(ExternalDataSave, NothingLargeEnoughWritesNoDataFile) {
  TempDir dir;
  test::Builder b;
  b.input("X", {4});
  b.weight("w", {4});
  b.add("Add", {"X", "w"}, {"Y"});
  b.output("Y");
  SaveOptions o;
  o.external_data = SaveOptions::ExternalData::kAlways;
  ASSERT_TRUE(onnx_io::save_model(b.m, dir / "m.onnx", o).is_ok());
  EXPECT_EQ(dir.files(), std::vector<std::string>{"m.onnx"});
}

}  // namespace
