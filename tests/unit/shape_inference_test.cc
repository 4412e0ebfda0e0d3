// Shape inference checked against real data: for every ONNX conformance model, the inferred type
// of each graph output must agree with the stored expected output (dtype and every known dim),
// starting from the actual input shapes. Plus hand-built cases for symbolic dims and cost.
#include "ir/shape_inference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "onnx/model_io.h"

namespace fs = std::filesystem;

namespace kiln::ir {
namespace {

fs::path conformance_root() {
  for (fs::path p : {fs::path("../shared/onnx-conformance"), fs::path(KILN_SOURCE_DIR) / "../shared/onnx-conformance"})
    if (fs::exists(p)) return p;
  return {};
}

// The type a value file shows: concrete dtype and shape.
TypeInfo type_of_tensor(const Tensor& t) { return TypeInfo::tensor(t.dtype(), t.shape()); }

TypeInfo type_of_value(const Value& v, const TypeInfo& declared) {
  if (v.is_tensor()) return type_of_tensor(v.tensor);
  if (v.is_sequence()) {
    TypeInfo e = v.sequence.empty() ? TypeInfo::tensor(v.sequence_dtype) : type_of_tensor(v.sequence[0]);
    for (const Tensor& t : v.sequence) e = type_union(e, type_of_tensor(t));
    return sequence_type(e);
  }
  if (!v.has_element) return declared;
  Value inner = v;
  inner.kind = v.element_kind;
  return optional_type(type_of_value(inner, TypeInfo{}));
}

struct Tally {
  bool small_inputs_known = false;  // second pass: small inputs (shapes, axes, scales) as constants
  int outputs = 0;       // outputs compared
  int fully_known = 0;   // outputs whose dtype and every dim were inferred
  std::vector<std::string> failures;
};

// Compares an inferred type with one concrete tensor; false on a contradiction.
bool check_tensor(const TypeInfo& got, const Tensor& want, bool& full, std::string& why) {
  if (got.kind == TypeInfo::Kind::kUnknown) {
    full = false;
    return true;
  }
  if (got.kind != TypeInfo::Kind::kTensor) {
    why = "inferred a non-tensor for a tensor";
    return false;
  }
  // The suite stores bfloat16 results as their uint16 bit patterns (test_cast_FLOAT_to_BFLOAT16).
  const bool bf16_bits = got.dtype == DType::kBFloat16 && want.dtype() == DType::kUInt16;
  if (got.dtype == DType::kUndefined) full = false;
  else if (got.dtype != want.dtype() && !bf16_bits) {
    why = std::string("dtype ") + dtype_name(got.dtype) + ", expected " + dtype_name(want.dtype());
    return false;
  }
  if (!got.has_shape) {
    full = false;
    return true;
  }
  if (static_cast<int64_t>(got.shape.size()) != want.rank()) {
    why = "shape " + dims_str(got.shape) + ", expected " + shape_str(want.shape());
    return false;
  }
  for (size_t i = 0; i < got.shape.size(); ++i) {
    if (!got.shape[i].known()) {
      full = false;
    } else if (got.shape[i].value != want.dim(i)) {
      why = "shape " + dims_str(got.shape) + ", expected " + shape_str(want.shape());
      return false;
    }
  }
  return true;
}

bool check_value(const TypeInfo& got, const Value& want, bool& full, std::string& why) {
  if (got.kind == TypeInfo::Kind::kUnknown) {
    full = false;
    return true;
  }
  if (want.is_tensor()) return check_tensor(got, want.tensor, full, why);
  if (want.is_sequence()) {
    if (got.kind != TypeInfo::Kind::kSequence) {
      why = "expected a sequence";
      return false;
    }
    const TypeInfo e = got.elem ? *got.elem : TypeInfo{};
    if (e.kind == TypeInfo::Kind::kTensor && e.dtype != DType::kUndefined && want.sequence_dtype != DType::kUndefined &&
        e.dtype != want.sequence_dtype) {
      why = std::string("sequence of ") + dtype_name(e.dtype) + ", expected " + dtype_name(want.sequence_dtype);
      return false;
    }
    if (want.sequence.empty()) full = false;
    for (const Tensor& t : want.sequence)
      if (!check_tensor(e, t, full, why)) return false;
    return true;
  }
  if (got.kind != TypeInfo::Kind::kOptional) {
    why = "expected an optional";
    return false;
  }
  if (!want.has_element) return true;
  Value inner = want;
  inner.kind = want.element_kind;
  return check_value(got.elem ? *got.elem : TypeInfo{}, inner, full, why);
}

void check_model_dir(const fs::path& dir, const std::string& name, Tally& tally, std::set<std::string>& missing) {
  auto loaded = onnx_io::load_model((dir / "model.onnx").string());
  if (!loaded) return;  // a model kiln cannot load is the importer's test to fail
  const Model original = std::move(loaded).value();
  std::function<void(const Graph&)> scan = [&](const Graph& g) {
    for (const Node& n : g.nodes) {
      if (n.domain.empty() && !OpSchemaRegistry::global().find("", n.op_type)) missing.insert(n.op_type);
      for (const Attribute& a : n.attrs) {
        if (a.g) scan(*a.g);
        for (const auto& sg : a.graphs) scan(*sg);
      }
    }
  };
  scan(original.graph);
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  for (const fs::path& set : sets) {
    Model m = original;
    // Nothing the model declares about intermediates or outputs may help: only inference counts.
    m.graph.value_info.clear();
    for (ValueInfo& o : m.graph.outputs) o.type = TypeInfo{};
    size_t k = 0;
    bool ok = true;
    for (ValueInfo& in : m.graph.inputs) {
      if (m.graph.initializers.count(in.name)) continue;
      const fs::path f = set / ("input_" + std::to_string(k++) + ".pb");
      if (!fs::exists(f)) continue;
      auto bytes = onnx_io::read_file(f.string());
      auto v = bytes ? onnx_io::parse_value(*bytes, in.type) : Result<Value>(bytes.status());
      if (!v) {
        ok = false;
        break;
      }
      in.type = type_of_value(*v, in.type);
      if (tally.small_inputs_known && v->is_tensor() && v->tensor.numel() <= 64) m.graph.initializers[in.name] = v->tensor;
    }
    if (!ok) continue;
    Status st = infer_shapes(m);
    if (!st.is_ok()) {
      tally.failures.push_back(name + ": " + st.message());
      continue;
    }
    for (size_t i = 0; i < m.graph.outputs.size(); ++i) {
      const fs::path f = set / ("output_" + std::to_string(i) + ".pb");
      if (!fs::exists(f)) continue;
      auto bytes = onnx_io::read_file(f.string());
      auto want = bytes ? onnx_io::parse_value(*bytes, original.graph.outputs[i].type) : Result<Value>(bytes.status());
      if (!want) continue;
      bool full = true;
      std::string why;
      ++tally.outputs;
      if (!check_value(m.graph.outputs[i].type, *want, full, why)) {
        tally.failures.push_back(name + " output '" + m.graph.outputs[i].name + "': " + why);
      } else if (full) {
        ++tally.fully_known;
      } else if (std::getenv("KILN_SHAPE_VERBOSE")) {
        const TypeInfo& t = m.graph.outputs[i].type;
        std::cout << "partial " << name << " output " << i << ": " << (t.has_shape ? dims_str(t.shape) : "(no shape)")
                  << " kind " << static_cast<int>(t.kind) << "\n";
      }
    }
  }
}

TEST(ShapeInference, ConformanceOutputsMatchStoredData) {
  const fs::path root = conformance_root();
  if (root.empty()) GTEST_SKIP() << "no ../shared/onnx-conformance";
  for (bool values : {false, true}) {
  Tally tally;
  tally.small_inputs_known = values;
  std::set<std::string> missing;
  for (const char* suite : {"node", "simple", "pytorch-converted", "pytorch-operator"}) {
    if (!fs::exists(root / suite)) continue;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(root / suite))
      if (e.is_directory()) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) check_model_dir(d, std::string(suite) + "/" + d.filename().string(), tally, missing);
  }
  for (const auto& f : tally.failures) ADD_FAILURE() << f;
  const double fraction = tally.outputs ? static_cast<double>(tally.fully_known) / tally.outputs : 0;
  std::string miss;
  for (const auto& op : missing) miss += " " + op;
  std::cout << (values ? "with small inputs as constants: " : "from input shapes only: ") << tally.outputs << " outputs checked, " << tally.failures.size()
            << " contradictions, " << tally.fully_known << " fully inferred (" << 100 * fraction << "%)\n"
            << "default-domain ops without a schema:" << (miss.empty() ? " none" : miss) << "\n";
  EXPECT_GT(tally.outputs, 1000);
  // Measured: see the report; shape-only inference cannot know outputs sized by input data.
  EXPECT_GE(fraction, values ? 0.90 : 0.75);
  EXPECT_TRUE(missing.empty()) << "ops without a schema:" << miss;
  }
}

// ---- hand-built graphs ----

Dim sym(const char* s) { return Dim{-1, s}; }

Node make_node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.op_type = op;
  n.name = out.empty() ? op : out[0];
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

Attribute ints_attr(const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}

Tensor i64(std::vector<int64_t> v) {
  Tensor t = Tensor::make(DType::kInt64, {static_cast<int64_t>(v.size())}).value();
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

const TypeInfo& type_of(const Model& m, const std::string& name) {
  const ValueInfo* vi = m.graph.find_value_info(name);
  static const TypeInfo none;
  return vi ? vi->type : none;
}

std::string str(const TypeInfo& t) { return t.has_shape ? dims_str(t.shape) : "(no shape)"; }

// A BERT-like attention input projection: x[batch,seq,768] @ W + b, split into 12 heads.
Model bert_like() {
  Model m;
  m.opsets[""] = 17;
  Graph& g = m.graph;
  g.inputs.push_back({"x", tensor_type(DType::kFloat32, {sym("batch"), sym("seq"), known_dim(768)}), ""});
  g.initializers["W"] = Tensor::make(DType::kFloat32, {768, 768}).value();
  g.initializers["b"] = Tensor::make(DType::kFloat32, {768}).value();
  g.initializers["heads"] = i64({0, 0, 12, 64});
  g.initializers["tail"] = i64({12, 64});
  g.initializers["flat"] = i64({-1, 768});
  g.nodes.push_back(make_node("MatMul", {"x", "W"}, {"xw"}));
  g.nodes.push_back(make_node("Add", {"xw", "b"}, {"proj"}));
  g.nodes.push_back(make_node("Reshape", {"proj", "heads"}, {"r1"}));
  g.nodes.push_back(make_node("Shape", {"x"}, {"xs"}));
  Node sl = make_node("Slice", {"xs", "s0", "s2"}, {"bs"});
  g.initializers["s0"] = i64({0});
  g.initializers["s2"] = i64({2});
  g.nodes.push_back(sl);
  Node cat = make_node("Concat", {"bs", "tail"}, {"shape2"});
  Attribute axis;
  axis.name = "axis";
  axis.type = Attribute::Type::kInt;
  cat.attrs.push_back(axis);
  g.nodes.push_back(cat);
  g.nodes.push_back(make_node("Reshape", {"proj", "shape2"}, {"r2"}));
  // [batch, seq, -1, 64]: a -1 among symbolic values, as torch's dynamo exporter writes them.
  g.initializers["minus_one"] = i64({-1});
  g.initializers["d64"] = i64({64});
  Node cat3 = make_node("Concat", {"bs", "minus_one", "d64"}, {"shape3"});
  cat3.attrs.push_back(axis);
  g.nodes.push_back(cat3);
  g.nodes.push_back(make_node("Reshape", {"proj", "shape3"}, {"r3"}));
  Node tr = make_node("Transpose", {"r2"}, {"t"});
  tr.attrs.push_back(ints_attr("perm", {0, 2, 1, 3}));
  g.nodes.push_back(tr);
  g.nodes.push_back(make_node("Reshape", {"proj", "flat"}, {"f"}));
  g.nodes.push_back(make_node("MatMul", {"t", "t_T"}, {"scores"}));
  Node tt = make_node("Transpose", {"r2"}, {"t_T"});
  tt.attrs.push_back(ints_attr("perm", {0, 2, 3, 1}));
  g.nodes.insert(g.nodes.end() - 1, tt);
  g.outputs.push_back({"scores", TypeInfo{}, ""});
  return m;
}

TEST(ShapeInference, SymbolicDimsFlowThroughBertLikeChain) {
  Model m = bert_like();
  ASSERT_TRUE(infer_shapes(m).is_ok());
  EXPECT_EQ(str(type_of(m, "xw")), "[batch,seq,768]");
  EXPECT_EQ(str(type_of(m, "proj")), "[batch,seq,768]");
  EXPECT_EQ(str(type_of(m, "r1")), "[batch,seq,12,64]");
  EXPECT_EQ(str(type_of(m, "xs")), "[3]");
  EXPECT_EQ(str(type_of(m, "r2")), "[batch,seq,12,64]");
  EXPECT_EQ(str(type_of(m, "r3")), "[batch,seq,12,64]");  // 768 / 64
  EXPECT_EQ(str(type_of(m, "t")), "[batch,12,seq,64]");
  // -1 stands for batch*seq: not a single symbol, so it stays unknown rather than guessed.
  EXPECT_EQ(str(type_of(m, "f")), "[?,768]");
  EXPECT_EQ(str(type_of(m, "scores")), "[batch,12,seq,seq]");
  EXPECT_EQ(type_of(m, "scores").dtype, DType::kFloat32);
}

TEST(ShapeInference, CostBindsDynamicDims) {
  Model m = bert_like();
  auto c = estimate_cost(m, {{"batch", 1}, {"seq", 128}});
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  const double matmul = 2.0 * 128 * 768 * 768, add = 128.0 * 768, scores = 2.0 * 12 * 128 * 128 * 64;
  EXPECT_DOUBLE_EQ(c->flops, matmul + add + scores);
  EXPECT_EQ(c->unknown_nodes, 0);
  EXPECT_GT(c->bytes, 768.0 * 768 * 4);
  auto unbound = estimate_cost(m, {});
  ASSERT_TRUE(unbound.is_ok());
  EXPECT_GT(unbound->unknown_nodes, 0);
}

TEST(ShapeInference, BroadcastKeepsSymbolsAndRejectsClashes) {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back({"a", tensor_type(DType::kFloat32, {sym("batch"), known_dim(1), sym("seq")}), ""});
  m.graph.inputs.push_back({"b", tensor_type(DType::kFloat32, {known_dim(4), sym("seq")}), ""});
  m.graph.inputs.push_back({"c", tensor_type(DType::kFloat32, {Dim{}, known_dim(1)}), ""});
  m.graph.nodes.push_back(make_node("Add", {"a", "b"}, {"ab"}));
  m.graph.nodes.push_back(make_node("Mul", {"ab", "c"}, {"abc"}));
  m.graph.nodes.push_back(make_node("Less", {"a", "b"}, {"lt"}));
  ASSERT_TRUE(infer_shapes(m).is_ok());
  EXPECT_EQ(str(type_of(m, "ab")), "[batch,4,seq]");
  EXPECT_EQ(str(type_of(m, "abc")), "[batch,4,seq]");
  EXPECT_EQ(type_of(m, "lt").dtype, DType::kBool);

  Model bad;
  bad.opsets[""] = 17;
  bad.graph.inputs.push_back({"a", tensor_type(DType::kFloat32, {known_dim(3)}), ""});
  bad.graph.inputs.push_back({"b", tensor_type(DType::kFloat32, {known_dim(4)}), ""});
  bad.graph.nodes.push_back(make_node("Add", {"a", "b"}, {"c"}));
  Status st = infer_shapes(bad);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("Add"), std::string::npos) << st.message();
}

// A scalar X where TfIdfVectorizer wants 1-D or 2-D (a fuzzed model): inference leaves the output
// unranked for the kernel to report, where it had read the first dim of an empty shape.
TEST(ShapeInference, TfIdfVectorizerOfAScalarStaysUnranked) {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back({"x", tensor_type(DType::kInt64, {}), ""});
  Node n = make_node("TfIdfVectorizer", {"x"}, {"y"});
  n.attrs.push_back(Attribute::of_ints("ngram_indexes", {0, 1}));
  m.graph.nodes.push_back(n);
  ASSERT_TRUE(infer_shapes(m).is_ok());
  EXPECT_FALSE(type_of(m, "y").has_shape) << str(type_of(m, "y"));
  m.graph.inputs[0].type = tensor_type(DType::kInt64, {known_dim(5)});  // 1-D: 2 n-grams out
  ASSERT_TRUE(infer_shapes(m).is_ok());
  EXPECT_EQ(str(type_of(m, "y")), "[2]");
}

// Window sweeps of a named dim get derived names, the same for the same arithmetic: a 3x3
// stride-2 conv padded 1, a 1x1 stride-2 conv and a 3x3 stride-2 max pool padded 1 all give
// (W+1)//2, so their sum keeps a known shape; a stride-1 3x3 unpadded conv gives W-2, and a
// ceil_mode pool stays unknown.
TEST(ShapeInference, WindowSweepsNameTheirOutputDims) {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back({"x", tensor_type(DType::kFloat32, {known_dim(1), known_dim(4), known_dim(16), sym("W")}), ""});
  m.graph.initializers["w3"] = Tensor::make(DType::kFloat32, {4, 4, 3, 3}).value();
  m.graph.initializers["w1"] = Tensor::make(DType::kFloat32, {4, 4, 1, 1}).value();
  Node c3 = make_node("Conv", {"x", "w3"}, {"c3"});
  c3.attrs.push_back(ints_attr("strides", {2, 2}));
  c3.attrs.push_back(ints_attr("pads", {1, 1, 1, 1}));
  m.graph.nodes.push_back(c3);
  Node c1 = make_node("Conv", {"x", "w1"}, {"c1"});
  c1.attrs.push_back(ints_attr("strides", {2, 2}));
  m.graph.nodes.push_back(c1);
  Node pool = make_node("MaxPool", {"x"}, {"p"});
  pool.attrs.push_back(ints_attr("kernel_shape", {3, 3}));
  pool.attrs.push_back(ints_attr("strides", {2, 2}));
  pool.attrs.push_back(ints_attr("pads", {1, 1, 1, 1}));
  m.graph.nodes.push_back(pool);
  Node ceil_pool = pool;
  ceil_pool.outputs = {"pc"};
  Attribute ceil;
  ceil.name = "ceil_mode";
  ceil.type = Attribute::Type::kInt;
  ceil.i = 1;
  ceil_pool.attrs.push_back(ceil);
  m.graph.nodes.push_back(ceil_pool);
  m.graph.nodes.push_back(make_node("Add", {"c3", "c1"}, {"sum"}));
  m.graph.nodes.push_back(make_node("Conv", {"x", "w3"}, {"valid"}));
  ASSERT_TRUE(infer_shapes(m).is_ok());
  EXPECT_EQ(str(type_of(m, "c3")), "[1,4,8,(W+1)//2]");
  EXPECT_EQ(str(type_of(m, "c1")), "[1,4,8,(W+1)//2]");
  EXPECT_EQ(str(type_of(m, "p")), "[1,4,8,(W+1)//2]");
  EXPECT_EQ(str(type_of(m, "sum")), "[1,4,8,(W+1)//2]");
  EXPECT_EQ(str(type_of(m, "pc")), "[1,4,9,?]");
  EXPECT_EQ(str(type_of(m, "valid")), "[1,4,14,W-2]");
}

TEST(ShapeInference, UnknownStaysUnknown) {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back({"x", tensor_type(DType::kFloat32, {Dim{}, known_dim(8)}), ""});
  m.graph.inputs.push_back({"s", tensor_type(DType::kInt64, {known_dim(3)}), ""});
  m.graph.nodes.push_back(make_node("Reshape", {"x", "s"}, {"y"}));
  m.graph.nodes.push_back(make_node("NonZero", {"x"}, {"nz"}));
  m.graph.nodes.push_back(make_node("Relu", {"x"}, {"r"}));
  ASSERT_TRUE(infer_shapes(m).is_ok());
  EXPECT_EQ(str(type_of(m, "y")), "[?,?,?]");
  EXPECT_EQ(str(type_of(m, "nz")), "[2,?]");
  EXPECT_EQ(type_of(m, "nz").dtype, DType::kInt64);
  EXPECT_EQ(str(type_of(m, "r")), "[?,8]");
}

// A declared shape that contradicts inference yields to it (exporters write wrong output shapes);
// one that agrees fills the dims inference left open; a contradicting element type stays an error.
TEST(ShapeInference, WrongDeclaredShapeYieldsToInference) {
  Model m;
  m.opsets[""] = 17;
  m.graph.inputs.push_back({"x", tensor_type(DType::kFloat32, {known_dim(20), known_dim(1), Dim{}}), ""});
  m.graph.nodes.push_back(make_node("Relu", {"x"}, {"y"}));
  m.graph.nodes.push_back(make_node("Relu", {"x"}, {"z"}));
  m.graph.nodes.push_back(make_node("Relu", {"x"}, {"w"}));
  m.graph.outputs.push_back({"y", tensor_type(DType::kFloat32, {known_dim(1), sym("seqlen")}), ""});
  m.graph.outputs.push_back({"z", tensor_type(DType::kFloat32, {known_dim(20), known_dim(2), known_dim(5)}), ""});
  m.graph.outputs.push_back({"w", tensor_type(DType::kFloat32, {known_dim(20), known_dim(1), known_dim(8210)}), ""});
  ASSERT_TRUE(infer_shapes(m).is_ok());
  EXPECT_EQ(str(m.graph.outputs[0].type), "[20,1,?]");
  EXPECT_EQ(str(m.graph.outputs[1].type), "[20,1,?]");
  EXPECT_EQ(str(m.graph.outputs[2].type), "[20,1,8210]");

  m.graph.outputs[0].type = tensor_type(DType::kInt64, {known_dim(20), known_dim(1), Dim{}});
  Status st = infer_shapes(m);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("declared int64"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kiln::ir
