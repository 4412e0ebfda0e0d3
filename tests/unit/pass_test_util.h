// Helpers shared by the pass tests: a small model builder, running a pass by name, running a model,
// and comparing two models' outputs on the same feeds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "ir/graph.h"
#include "kiln/optimize.h"
#include "kiln/session.h"
#include "passes/pass.h"

namespace kiln::test {

// Whether this build runs under AddressSanitizer (tests/fuzz/run_fuzz.sh's build): its
// instrumentation changes what allocations and timings a test may count on.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// Short names for ir::Attribute's factories, as the tests spell them.
inline ir::Attribute attr_f(const std::string& name, float v) { return ir::Attribute::of_float(name, v); }
inline ir::Attribute attr_i(const std::string& name, int64_t v) { return ir::Attribute::of_int(name, v); }
inline ir::Attribute attr_ints(const std::string& name, std::vector<int64_t> v) {
  return ir::Attribute::of_ints(name, std::move(v));
}
inline ir::Attribute attr_floats(const std::string& name, std::vector<float> v) {
  return ir::Attribute::of_floats(name, std::move(v));
}
inline ir::Attribute attr_strings(const std::string& name, std::vector<std::string> v) {
  return ir::Attribute::of_strings(name, std::move(v));
}
inline ir::Attribute attr_s(const std::string& name, std::string v) { return ir::Attribute::of_string(name, std::move(v)); }

// A rank-0 tensor of type t holding v (rounded, for integer types, as a store of v would be).
inline Tensor scalar_of(DType t, double v) {
  Tensor s = Tensor::make(t, {}).value();
  store_from_double(t, s.raw_data(), 0, v);
  return s;
}

inline Tensor int64s(std::vector<int64_t> v) {
  Tensor t = Tensor::make(DType::kInt64, {static_cast<int64_t>(v.size())}).value();
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

inline ir::Dim sym(const std::string& name) { return ir::Dim{-1, name}; }
inline ir::Dim num(int64_t v) { return ir::Dim{v, ""}; }

// A small float model built in code.
struct Builder {
  ir::Model m;
  std::mt19937 rng{7};

  explicit Builder(int64_t opset = 20) { m.opsets[""] = opset; }
  void input(const std::string& name, const Shape& shape) {
    m.graph.inputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(DType::kFloat32, shape), ""});
  }
  // An input with symbolic dims, e.g. {sym("batch"), num(8)}.
  void input_dims(const std::string& name, std::vector<ir::Dim> dims, DType dtype = DType::kFloat32) {
    ir::ValueInfo vi{name, ir::TypeInfo::tensor(dtype), ""};
    vi.type.has_shape = true;
    vi.type.shape = std::move(dims);
    m.graph.inputs.push_back(std::move(vi));
  }
  void output(const std::string& name) {
    m.graph.outputs.push_back(ir::ValueInfo{name, ir::TypeInfo::tensor(DType::kFloat32), ""});
  }
  // An output with a declared shape, which shape inference must agree with.
  void output_dims(const std::string& name, std::vector<ir::Dim> dims,
                   DType dtype = DType::kFloat32) {
    ir::ValueInfo vi{name, ir::TypeInfo::tensor(dtype), ""};
    vi.type.has_shape = true;
    vi.type.shape = std::move(dims);
    m.graph.outputs.push_back(std::move(vi));
  }
  Tensor random(const Shape& shape, float lo = -1, float hi = 1) {
    Tensor t = Tensor::make(DType::kFloat32, shape).value();
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
    return t;
  }
  void weight(const std::string& name, const Shape& shape) { m.graph.initializers[name] = random(shape); }
  void scalar(const std::string& name, float v) {
    m.graph.initializers[name] = Tensor::scalar<float>(DType::kFloat32, v);
  }
  void ints(const std::string& name, std::vector<int64_t> v) { m.graph.initializers[name] = int64s(std::move(v)); }
  // A float initializer holding exactly v, one value per element of shape.
  void floats(const std::string& name, const Shape& shape, const std::vector<float>& v) {
    Tensor t = Tensor::make(DType::kFloat32, shape).value();
    EXPECT_EQ(t.numel(), static_cast<int64_t>(v.size())) << "initializer " << name;
    const size_t n = std::min<size_t>(v.size(), static_cast<size_t>(t.numel()));
    std::copy_n(v.begin(), n, t.data<float>());
    m.graph.initializers[name] = t;
  }
  ir::Node& add(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
                std::vector<ir::Attribute> attrs = {}) {
    ir::Node n;
    n.name = op + std::to_string(m.graph.nodes.size());
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    n.attrs = std::move(attrs);
    m.graph.nodes.push_back(std::move(n));
    return m.graph.nodes.back();
  }
  // Conv of x into y (c channels in, mo out, k x k, same padding) with a bias.
  void conv(const std::string& x, const std::string& y, int64_t c, int64_t mo, int64_t k = 3) {
    weight(y + "_w", {mo, c, k, k});
    weight(y + "_b", {mo});
    add("Conv", {x, y + "_w", y + "_b"}, {y}, {attr_ints("pads", {k / 2, k / 2, k / 2, k / 2})});
  }
};

inline Result<int64_t> run_pass(ir::Model& m, const std::string& name, OptimizeOptions options = {}) {
  for (const auto* p : passes::PassRegistry::global().sorted())
    if (p->name == name) {
      passes::PassContext ctx(m, options);
      return p->create()->run(m, ctx);
    }
  return Status::error("no pass " + name);
}

// Pass `name` runs on a copy of m and rewrites nothing.
inline void expect_no_rewrite(const ir::Model& m, const std::string& name) {
  ir::Model copy = m;
  auto n = run_pass(copy, name);
  ASSERT_TRUE(n.is_ok()) << name << ": " << n.status().message();
  EXPECT_EQ(*n, 0) << name;
}

// Runs the named passes at -O1 in order, as many rounds as they keep changing something.
inline void run_passes(ir::Model& m, const std::vector<std::string>& names) {
  OptimizeOptions options;
  options.level = 1;
  for (int round = 0; round < 8; ++round) {
    int64_t changed = 0;
    for (const auto& name : names) {
      auto r = run_pass(m, name, options);
      ASSERT_TRUE(r.is_ok()) << name << ": " << r.status().message();
      changed += *r;
    }
    if (changed == 0) break;
  }
}

inline std::vector<Value> run_model(const ir::Model& m, const std::vector<Tensor>& feeds, SessionOptions opts = {}) {
  auto s = Session::create(std::make_shared<const ir::Model>(m), opts);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  if (!s.is_ok()) return {};
  std::vector<Value> in;
  for (const auto& t : feeds) in.push_back(Value::of(t));
  auto out = (*s)->run(in);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  return out.is_ok() ? std::move(out).value() : std::vector<Value>{};
}

inline std::vector<std::string> op_types(const ir::Model& m) {
  std::vector<std::string> ops;
  for (const auto& n : m.graph.nodes) ops.push_back(n.op_type);
  return ops;
}

inline std::map<std::string, int> histogram(const ir::Model& m) {
  std::map<std::string, int> h;
  for (const auto& n : m.graph.nodes) ++h[n.op_type];
  return h;
}

// Like histogram, with ops outside the ONNX domain keyed "domain.op" ("ai.kiln.LayerNorm"), so a
// kiln op never passes for the ONNX op of the same name.
inline std::map<std::string, int> qualified_histogram(const ir::Model& m) {
  std::map<std::string, int> h;
  for (const auto& n : m.graph.nodes) ++h[(n.domain.empty() ? "" : n.domain + ".") + n.op_type];
  return h;
}

// Runs both models on the same feeds; float outputs must agree within tol relative (absolute
// below 1), other outputs exactly.
inline void expect_same_outputs(const ir::Model& before, const ir::Model& after,
                                const std::vector<Tensor>& feeds, float tol = 1e-5f) {
  const std::vector<Value> a = run_model(before, feeds), b = run_model(after, feeds);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = a[i].tensor;
    const Tensor& y = b[i].tensor;
    ASSERT_EQ(x.shape(), y.shape()) << "output " << i;
    ASSERT_EQ(x.dtype(), y.dtype()) << "output " << i;
    if (x.dtype() != DType::kFloat32) {
      ASSERT_EQ(x.nbytes(), y.nbytes());
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << "output " << i;
      continue;
    }
    for (int64_t j = 0; j < x.numel(); ++j) {
      const float p = x.data<float>()[j], q = y.data<float>()[j];
      ASSERT_LE(std::fabs(p - q), tol * std::max(1.0f, std::fabs(p))) << "output " << i << " element " << j;
    }
  }
}

// Runs pass `name` on a copy of b's model; checks the ops left and that outputs stay the same on
// random inputs of the given shapes. Returns the rewritten model.
inline ir::Model check_pass(Builder& b, const std::string& name, const std::vector<std::string>& want_ops,
                            const std::vector<Shape>& input_shapes, float lo = -1, float hi = 1,
                            float tol = 1e-5f) {
  std::vector<Tensor> feeds;
  for (const auto& s : input_shapes) feeds.push_back(b.random(s, lo, hi));
  ir::Model after = b.m;
  auto n = run_pass(after, name);
  EXPECT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(op_types(after), want_ops);
  if (n.is_ok() && *n > 0 && std::any_of(after.graph.nodes.begin(), after.graph.nodes.end(),
                                         [](const ir::Node& x) { return x.domain == "ai.kiln"; })) {
    EXPECT_EQ(after.opsets["ai.kiln"], 1);
  }
  expect_same_outputs(b.m, after, feeds, tol);
  return after;
}

}  // namespace kiln::test
