// Import -> export -> import is lossless: for every conformance model, the two IRs are
// structurally equal (nodes, attributes with subgraphs, initializer bytes, value infos, opsets,
// metadata, functions) and exporting the second gives the same bytes as exporting the first.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "ir/graph.h"
#include "onnx/model_io.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

fs::path conformance_root() {
  for (fs::path p : {fs::path("../shared/onnx-conformance"), fs::path(KILN_SOURCE_DIR) / "../shared/onnx-conformance"})
    if (fs::exists(p)) return p;
  return {};
}

// Structural comparison that reports the path to the first difference ("" when equal).
struct Diff {
  std::string where;
  bool found = false;
  std::string what;

  bool fail(const std::string& path, const std::string& msg) {
    if (!found) {
      found = true;
      where = path;
      what = msg;
    }
    return false;
  }
  template <typename T>
  bool eq(const std::string& path, const T& a, const T& b) {
    if (a == b) return true;
    std::ostringstream s;
    if constexpr (requires(std::ostream& o, const T& v) { o << v; }) s << a << " vs " << b;
    else s << "values differ";
    return fail(path, s.str());
  }

  bool tensor(const std::string& path, const Tensor& a, const Tensor& b) {
    if (!eq(path + ".defined", a.defined(), b.defined())) return false;
    if (!a.defined()) return true;
    if (!eq(path + ".dtype", static_cast<int>(a.dtype()), static_cast<int>(b.dtype()))) return false;
    if (!eq(path + ".shape", shape_str(a.shape()), shape_str(b.shape()))) return false;
    if (a.dtype() == DType::kString) {
      for (int64_t i = 0; i < a.numel(); ++i)
        if (!eq(path + "[" + std::to_string(i) + "]", a.data<std::string>()[i], b.data<std::string>()[i])) return false;
      return true;
    }
    if (a.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) != 0) return fail(path, "bytes differ");
    return true;
  }

  bool type(const std::string& path, const ir::TypeInfo& a, const ir::TypeInfo& b) {
    if (!eq(path + ".kind", static_cast<int>(a.kind), static_cast<int>(b.kind))) return false;
    if (!eq(path + ".dtype", static_cast<int>(a.dtype), static_cast<int>(b.dtype))) return false;
    if (!eq(path + ".has_shape", a.has_shape, b.has_shape)) return false;
    if (!eq(path + ".rank", a.shape.size(), b.shape.size())) return false;
    for (size_t i = 0; i < a.shape.size(); ++i) {
      const std::string p = path + ".shape[" + std::to_string(i) + "]";
      if (!eq(p + ".value", a.shape[i].value, b.shape[i].value)) return false;
      if (!eq(p + ".symbol", a.shape[i].symbol, b.shape[i].symbol)) return false;
    }
    if (!eq(path + ".has_elem", a.elem != nullptr, b.elem != nullptr)) return false;
    return !a.elem || type(path + ".elem", *a.elem, *b.elem);
  }

  bool value_infos(const std::string& path, const std::vector<ir::ValueInfo>& a, const std::vector<ir::ValueInfo>& b) {
    if (!eq(path + ".size", a.size(), b.size())) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string p = path + "[" + a[i].name + "]";
      if (!eq(p + ".name", a[i].name, b[i].name) || !eq(p + ".doc", a[i].doc, b[i].doc) ||
          !type(p + ".type", a[i].type, b[i].type))
        return false;
    }
    return true;
  }

  bool attribute(const std::string& path, const ir::Attribute& a, const ir::Attribute& b) {
    if (!eq(path + ".name", a.name, b.name) || !eq(path + ".type", static_cast<int>(a.type), static_cast<int>(b.type)) ||
        !eq(path + ".doc", a.doc, b.doc) || !eq(path + ".ref_attr_name", a.ref_attr_name, b.ref_attr_name))
      return false;
    // Floats compare by bit pattern so that NaN attributes round-trip too.
    if (std::memcmp(&a.f, &b.f, sizeof(float)) != 0) return fail(path + ".f", "floats differ");
    if (!eq(path + ".i", a.i, b.i) || !eq(path + ".s", a.s, b.s) || !eq(path + ".ints", a.ints, b.ints) ||
        !eq(path + ".strings", a.strings, b.strings))
      return false;
    if (!eq(path + ".floats.size", a.floats.size(), b.floats.size())) return false;
    if (!a.floats.empty() && std::memcmp(a.floats.data(), b.floats.data(), a.floats.size() * sizeof(float)) != 0)
      return fail(path + ".floats", "floats differ");
    if (!tensor(path + ".t", a.t, b.t)) return false;
    if (!eq(path + ".tensors.size", a.tensors.size(), b.tensors.size())) return false;
    for (size_t i = 0; i < a.tensors.size(); ++i)
      if (!tensor(path + ".tensors[" + std::to_string(i) + "]", a.tensors[i], b.tensors[i])) return false;
    if (!eq(path + ".has_g", a.g != nullptr, b.g != nullptr)) return false;
    if (a.g && !graph(path + ".g", *a.g, *b.g)) return false;
    if (!eq(path + ".graphs.size", a.graphs.size(), b.graphs.size())) return false;
    for (size_t i = 0; i < a.graphs.size(); ++i)
      if (!graph(path + ".graphs[" + std::to_string(i) + "]", *a.graphs[i], *b.graphs[i])) return false;
    if (!type(path + ".tp", a.tp, b.tp)) return false;
    if (!eq(path + ".tps.size", a.tps.size(), b.tps.size())) return false;
    for (size_t i = 0; i < a.tps.size(); ++i)
      if (!type(path + ".tps[" + std::to_string(i) + "]", a.tps[i], b.tps[i])) return false;
    return true;
  }

  bool node(const std::string& path, const ir::Node& a, const ir::Node& b) {
    if (!eq(path + ".name", a.name, b.name) || !eq(path + ".op_type", a.op_type, b.op_type) ||
        !eq(path + ".domain", a.domain, b.domain) || !eq(path + ".doc", a.doc, b.doc) ||
        !eq(path + ".inputs", a.inputs, b.inputs) || !eq(path + ".outputs", a.outputs, b.outputs) ||
        !eq(path + ".attrs.size", a.attrs.size(), b.attrs.size()))
      return false;
    for (size_t i = 0; i < a.attrs.size(); ++i)
      if (!attribute(path + ".attr[" + a.attrs[i].name + "]", a.attrs[i], b.attrs[i])) return false;
    return true;
  }

  bool nodes(const std::string& path, const std::vector<ir::Node>& a, const std::vector<ir::Node>& b) {
    if (!eq(path + ".size", a.size(), b.size())) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!node(path + "[" + std::to_string(i) + "]", a[i], b[i])) return false;
    return true;
  }

  bool graph(const std::string& path, const ir::Graph& a, const ir::Graph& b) {
    if (!eq(path + ".name", a.name, b.name) || !eq(path + ".doc", a.doc, b.doc)) return false;
    if (!value_infos(path + ".inputs", a.inputs, b.inputs) || !value_infos(path + ".outputs", a.outputs, b.outputs) ||
        !value_infos(path + ".value_info", a.value_info, b.value_info))
      return false;
    if (!eq(path + ".initializers.size", a.initializers.size(), b.initializers.size())) return false;
    for (auto ia = a.initializers.begin(), ib = b.initializers.begin(); ia != a.initializers.end(); ++ia, ++ib) {
      if (!eq(path + ".initializer.name", ia->first, ib->first)) return false;
      if (!tensor(path + ".initializer[" + ia->first + "]", ia->second, ib->second)) return false;
    }
    return nodes(path + ".nodes", a.nodes, b.nodes);
  }

  bool model(const ir::Model& a, const ir::Model& b) {
    if (!eq("ir_version", a.ir_version, b.ir_version) || !eq("producer_name", a.producer_name, b.producer_name) ||
        !eq("producer_version", a.producer_version, b.producer_version) || !eq("domain", a.domain, b.domain) ||
        !eq("model_version", a.model_version, b.model_version) || !eq("doc", a.doc, b.doc))
      return false;
    if (!eq("opsets.size", a.opsets.size(), b.opsets.size())) return false;
    for (auto ia = a.opsets.begin(), ib = b.opsets.begin(); ia != a.opsets.end(); ++ia, ++ib)
      if (!eq("opset.domain", ia->first, ib->first) || !eq("opset[" + ia->first + "]", ia->second, ib->second))
        return false;
    if (!eq("metadata.size", a.metadata.size(), b.metadata.size())) return false;
    for (size_t i = 0; i < a.metadata.size(); ++i)
      if (!eq("metadata.key", a.metadata[i].first, b.metadata[i].first) ||
          !eq("metadata[" + a.metadata[i].first + "]", a.metadata[i].second, b.metadata[i].second))
        return false;
    if (!graph("graph", a.graph, b.graph)) return false;
    if (!eq("functions.size", a.functions.size(), b.functions.size())) return false;
    for (size_t i = 0; i < a.functions.size(); ++i) {
      const ir::Function& fa = a.functions[i];
      const ir::Function& fb = b.functions[i];
      const std::string p = "function[" + fa.name + "]";
      if (!eq(p + ".name", fa.name, fb.name) || !eq(p + ".domain", fa.domain, fb.domain) ||
          !eq(p + ".doc", fa.doc, fb.doc) || !eq(p + ".inputs", fa.inputs, fb.inputs) ||
          !eq(p + ".outputs", fa.outputs, fb.outputs) || !eq(p + ".attributes", fa.attributes, fb.attributes) ||
          !eq(p + ".opsets", fa.opsets.size(), fb.opsets.size()) || !nodes(p + ".nodes", fa.nodes, fb.nodes))
        return false;
      if (fa.opsets != fb.opsets) return fail(p + ".opsets", "opsets differ");
    }
    return true;
  }
};

std::vector<fs::path> conformance_models() {
  std::vector<fs::path> out;
  const fs::path root = conformance_root();
  if (root.empty()) return out;
  for (const char* suite : {"node", "simple", "pytorch-converted", "pytorch-operator"}) {
    if (!fs::exists(root / suite)) continue;
    for (const auto& e : fs::directory_iterator(root / suite))
      if (fs::exists(e.path() / "model.onnx")) out.push_back(e.path() / "model.onnx");
  }
  if (fs::exists(root / "light"))
    for (const auto& e : fs::directory_iterator(root / "light"))
      if (e.path().extension() == ".onnx") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Roundtrip, EveryConformanceModelIsLossless) {
  const auto models = conformance_models();
  if (models.empty()) GTEST_SKIP() << "conformance data not found";
  int checked = 0;
  std::vector<std::string> failures;
  for (const fs::path& path : models) {
    const std::string name = path.parent_path().filename().string() + "/" + path.filename().string();
    auto first = onnx_io::load_model(path.string());
    if (!first) {
      failures.push_back(name + ": import failed: " + first.status().message());
      continue;
    }
    auto bytes1 = onnx_io::serialize_model(*first);
    if (!bytes1) {
      failures.push_back(name + ": export failed: " + bytes1.status().message());
      continue;
    }
    auto second = onnx_io::parse_model(*bytes1, "");
    if (!second) {
      failures.push_back(name + ": re-import failed: " + second.status().message());
      continue;
    }
    Diff diff;
    if (!diff.model(*first, *second)) {
      failures.push_back(name + ": IR differs at " + diff.where + ": " + diff.what);
      continue;
    }
    auto bytes2 = onnx_io::serialize_model(*second);
    if (!bytes2 || *bytes2 != *bytes1) {
      failures.push_back(name + ": second export gives different bytes");
      continue;
    }
    ++checked;
  }
  for (const auto& f : failures) ADD_FAILURE() << f;
  EXPECT_GT(checked, 1000);
  std::cout << "round-tripped " << checked << " of " << models.size() << " conformance models\n";
}

// The comparison itself must see differences, or the test above proves nothing.
TEST(Roundtrip, DiffSeesChanges) {
  const auto models = conformance_models();
  if (models.empty()) GTEST_SKIP() << "conformance data not found";
  fs::path conv;
  for (const auto& p : models)
    if (p.parent_path().filename() == "test_conv_with_strides_padding") conv = p;
  if (conv.empty()) GTEST_SKIP();
  auto a = onnx_io::load_model(conv.string());
  ASSERT_TRUE(a.is_ok());
  ir::Model b = *a;
  EXPECT_TRUE(Diff().model(*a, b));
  b.graph.nodes[0].attrs[0].ints.push_back(1);
  EXPECT_FALSE(Diff().model(*a, b));
  b = *a;
  b.graph.inputs[0].type.shape[0].value = 7;
  EXPECT_FALSE(Diff().model(*a, b));
  b = *a;
  b.opsets["com.example"] = 1;
  EXPECT_FALSE(Diff().model(*a, b));
}

}  // namespace
