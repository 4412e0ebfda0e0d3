// Runs the ONNX backend conformance data (../shared/onnx-conformance) through kiln and compares
// every output with the stored one, by the suite's rule: |a - e| <= 1e-7 + 1e-3 * |e|, NaN == NaN.
//   kiln_conformance [--root DIR] [--filter REGEX] [--known-failures FILE] [--threads N]
//                    [--optimize LEVEL] [-v]   (--optimize: load each model at that optimize_level; default 0)
// Prints each failing test with its reason and a last line "N passed, N failed". With
// --known-failures, exits non-zero only when a test not on the list fails.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include "core/float_convert.h"
#include "ir/graph.h"
#include "kiln/session.h"
#include "onnx/model_io.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

constexpr double kRtol = 1e-3, kAtol = 1e-7;

Status compare_tensor(const Tensor& got, const Tensor& want, const std::string& what) {
  if (got.dtype() != want.dtype())
    return Status::error(what + ": type " + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype()));
  if (got.shape() != want.shape())
    return Status::error(what + ": shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape()));
  const DType t = want.dtype();
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (t == DType::kString) {
      if (got.data<std::string>()[i] != want.data<std::string>()[i])
        return Status::error(what + ": string " + std::to_string(i) + " is '" + got.data<std::string>()[i] +
                             "', expected '" + want.data<std::string>()[i] + "'");
      continue;
    }
    const int parts = (t == DType::kComplex64 || t == DType::kComplex128) ? 2 : 1;
    for (int p = 0; p < parts; ++p) {
      double a, e;
      if (parts == 2) {
        a = t == DType::kComplex64 ? got.data<float>()[2 * i + p] : got.data<double>()[2 * i + p];
        e = t == DType::kComplex64 ? want.data<float>()[2 * i + p] : want.data<double>()[2 * i + p];
      } else {
        a = load_as_double(t, got.raw_data(), i);
        e = load_as_double(t, want.raw_data(), i);
      }
      bool ok;
      if (dtype_is_float(t) || parts == 2) {
        ok = (std::isnan(a) && std::isnan(e)) || a == e || std::fabs(a - e) <= kAtol + kRtol * std::fabs(e);
      } else if (t == DType::kInt64 || t == DType::kUInt64) {
        ok = std::memcmp(static_cast<const char*>(got.raw_data()) + 8 * i,
                         static_cast<const char*>(want.raw_data()) + 8 * i, 8) == 0;
      } else {
        ok = a == e;
      }
      if (!ok) {
        std::ostringstream m;
        m << what << ": element " << i << " is " << a << ", expected " << e;
        return Status::error(m.str());
      }
    }
  }
  return Status::ok();
}

Status compare_value(const Value& got, const Value& want, const std::string& what) {
  if (want.is_sequence()) {
    if (!got.is_sequence()) return Status::error(what + ": expected a sequence");
    if (got.sequence.size() != want.sequence.size())
      return Status::error(what + ": sequence of " + std::to_string(got.sequence.size()) +
                           " items, expected " + std::to_string(want.sequence.size()));
    for (size_t i = 0; i < want.sequence.size(); ++i)
      KILN_RETURN_IF_ERROR(compare_tensor(got.sequence[i], want.sequence[i], what + "[" + std::to_string(i) + "]"));
    return Status::ok();
  }
  if (want.is_optional()) {
    const bool got_has = got.is_optional() ? got.has_element : true;
    if (got_has != want.has_element)
      return Status::error(what + (want.has_element ? ": expected a value" : ": expected an empty optional"));
    if (!want.has_element) return Status::ok();
    Value g = got, w = want;
    g.kind = got.is_optional() ? got.element_kind : got.kind;
    w.kind = want.element_kind;
    return compare_value(g, w, what);
  }
  if (!got.is_tensor()) {
    if (got.is_optional() && got.has_element && got.element_kind == Value::Kind::kTensor)
      return compare_tensor(got.tensor, want.tensor, what);
    return Status::error(what + ": expected a tensor");
  }
  return compare_tensor(got.tensor, want.tensor, what);
}

Result<Value> read_value(const fs::path& file, const ir::TypeInfo& type) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, onnx_io::read_file(file.string()));
  auto v = onnx_io::parse_value(bytes, type);
  if (!v) return v.status().with_context(file.filename().string());
  // The suite stores bfloat16 data as uint16 bit patterns (numpy has no bfloat16): take the bits.
  Tensor& t = v->tensor;
  if (v->is_tensor() && type.dtype == DType::kBFloat16 && t.dtype() == DType::kUInt16)
    t = Tensor::wrap(DType::kBFloat16, t.shape(), t.raw_data(), std::make_shared<Tensor>(t));
  return v;
}

// One test folder: model.onnx plus test_data_set_N/{input,output}_K.pb.
Status run_node_test(const fs::path& dir, const SessionOptions& options) {
  KILN_ASSIGN_OR_RETURN(auto session, Session::load((dir / "model.onnx").string(), options));
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return Status::error("no test_data_set folders");
  const ir::Graph& g = session->model().graph;
  for (const auto& set : sets) {
    std::vector<Value> inputs;
    for (size_t k = 0;; ++k) {
      fs::path f = set / ("input_" + std::to_string(k) + ".pb");
      if (!fs::exists(f)) break;
      if (k >= session->inputs().size()) return Status::error("more input files than model inputs");
      const ir::ValueInfo* vi = g.find_value_info(session->inputs()[k].name);
      KILN_ASSIGN_OR_RETURN(Value v, read_value(f, vi->type));
      inputs.push_back(std::move(v));
    }
    // Trailing optional inputs may be left out of the data set; feed them as absent.
    auto outs = session->run(inputs);
    if (!outs) return outs.status().with_context(set.filename().string());
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      fs::path f = set / ("output_" + std::to_string(k) + ".pb");
      if (!fs::exists(f)) continue;
      KILN_ASSIGN_OR_RETURN(Value want, read_value(f, g.outputs[k].type));
      KILN_RETURN_IF_ERROR(compare_value((*outs)[k], want, set.filename().string() + " output " + g.outputs[k].name));
    }
  }
  return Status::ok();
}

// light/NAME.onnx: input arange(n)/n (dynamic dims as 1), expected output NAME_output_0.pb.
Status run_light_test(const fs::path& model, const SessionOptions& options) {
  KILN_ASSIGN_OR_RETURN(auto session, Session::load(model.string(), options));
  std::vector<Value> inputs;
  for (const IoInfo& io : session->inputs()) {
    Shape shape;
    for (int64_t d : io.dims) shape.push_back(d < 0 ? 1 : d);
    KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::make(DType::kFloat32, shape));
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = static_cast<float>(static_cast<double>(i) / static_cast<double>(t.numel()));
    inputs.push_back(Value::of(std::move(t)));
  }
  KILN_ASSIGN_OR_RETURN(auto outs, session->run(inputs));
  fs::path want_file = model.parent_path() / (model.stem().string() + "_output_0.pb");
  KILN_ASSIGN_OR_RETURN(Value want, read_value(want_file, session->model().graph.outputs[0].type));
  return compare_value(outs[0], want, "output 0");
}

std::map<std::string, std::string> read_known_failures(const std::string& path) {
  std::map<std::string, std::string> known;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string name, reason;
    ss >> name;
    std::getline(ss, reason);
    known[name] = reason;
  }
  return known;
}

fs::path default_root() {
  for (fs::path p : {fs::path("../shared/onnx-conformance"), fs::path(KILN_SOURCE_DIR) / "../shared/onnx-conformance"})
    if (fs::exists(p)) return p;
  return "../shared/onnx-conformance";
}

}  // namespace

int main(int argc, char** argv) {
  fs::path root = default_root();
  std::string filter = ".*", known_file;
  bool verbose = false;
  SessionOptions options;
  options.threads = 1;
  options.optimize_level = 0;  // the suite checks the importer and kernels; --optimize adds passes
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--root") root = next();
    else if (a == "--filter") filter = next();
    else if (a == "--known-failures") known_file = next();
    else if (a == "--threads") options.threads = std::atoi(next().c_str());
    else if (a == "-v") verbose = true;
    else if (a == "--optimize") options.optimize_level = std::atoi(next().c_str());
    else {
      std::cerr << "usage: kiln_conformance [--root DIR] [--filter REGEX] [--known-failures FILE] [--threads N] [--optimize LEVEL] [-v]\n";
      return 2;
    }
  }
  const std::regex re(filter);
  std::map<std::string, std::string> known = known_file.empty() ? std::map<std::string, std::string>{} : read_known_failures(known_file);
  std::vector<std::pair<std::string, fs::path>> tests;
  for (const char* suite : {"node", "simple", "pytorch-converted", "pytorch-operator"}) {
    if (!fs::exists(root / suite)) continue;
    for (const auto& e : fs::directory_iterator(root / suite))
      if (e.is_directory()) tests.emplace_back(std::string(suite) + "/" + e.path().filename().string(), e.path());
  }
  if (fs::exists(root / "light"))
    for (const auto& e : fs::directory_iterator(root / "light"))
      if (e.path().extension() == ".onnx") tests.emplace_back("light/" + e.path().stem().string(), e.path());
  std::sort(tests.begin(), tests.end());
  if (tests.empty()) {
    std::cerr << "no conformance tests under " << root << "\n";
    return 2;
  }
  int passed = 0, failed = 0, unexpected = 0;
  for (const auto& [name, path] : tests) {
    if (!std::regex_search(name, re)) continue;
    auto t0 = std::chrono::steady_clock::now();
    Status st = name.rfind("light/", 0) == 0 ? run_light_test(path, options) : run_node_test(path, options);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (st.is_ok()) {
      ++passed;
      if (verbose) std::cout << "ok   " << name << " (" << secs << " s)\n";
      if (known.count(name)) std::cout << "NOW PASSING (remove from the known failures): " << name << "\n";
    } else {
      ++failed;
      const bool is_known = known.count(name) > 0;
      if (!is_known) ++unexpected;
      std::cout << (is_known ? "known " : "FAIL ") << name << ": " << st.message().substr(0, 400) << "\n";
    }
    std::cout.flush();
  }
  if (!known_file.empty()) std::cout << unexpected << " unexpected failures\n";
  std::cout << passed << " passed, " << failed << " failed\n";
  return (known_file.empty() ? failed : unexpected) > 0 ? 1 : 0;
}
