// Backends (backends/backend.h): SessionOptions::backend picks whose kernels run the nodes that
// backend takes, kiln's own the rest; an unknown name is an error. With the OpenBLAS backend
// built, its MatMul and Gemm are checked against double loops written here from the ONNX
// definitions (Gemm's in gemm_test_case.h), over sizes down to 1, with batches, transposes and
// each broadcast of C.
#include "backends/backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend_run.h"
#include "core/cpu_features.h"
#include "gemm_test_case.h"
#include "kiln/optimize.h"
#include "onnx/model_io.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::run_with;

TEST(Backends, KilnIsAlwaysThere) { EXPECT_TRUE(backends::registered().count(backends::kKiln)); }

// kiln's kernel variants are choices the tuner times, under kiln's version, not backends.
TEST(Backends, VariantsOfKilnsKernelsAreNotBackends) {
  const std::set<std::string> variants = backends::variants(), libraries = backends::registered();
  EXPECT_TRUE(variants.count("kiln.direct"));
  for (const std::string& v : variants) {
    EXPECT_EQ(v.rfind("kiln.", 0), 0u) << v;
    EXPECT_FALSE(libraries.count(v)) << v;
    EXPECT_EQ(backends::version(v), backends::version(backends::kKiln)) << v;
  }
  for (const std::string& b : libraries) EXPECT_EQ(b.find('.'), std::string::npos) << b;
}

// Every registered backend reports a version (the tuning cache's key holds it); others have none.
TEST(Backends, VersionsOfRegisteredBackends) {
  EXPECT_EQ(backends::version(backends::kKiln).rfind("kiln ", 0), 0u);
  for (const std::string& b : backends::registered()) EXPECT_NE(backends::version(b), "") << b;
  EXPECT_EQ(backends::version("no-such-backend"), "");
}

TEST(Backends, UnknownBackendIsAnErrorNamingIt) {
  test::Builder b;
  b.input("a", {2, 3});
  b.add("Relu", {"a"}, {"y"});
  b.output("y");
  auto r = run_with(b.m, {b.random({2, 3})}, "no-such-backend", 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("unknown backend 'no-such-backend'"), std::string::npos)
      << r.status().message();
}

// kiln's direct variant of BlockedConv ("kiln.direct", forced here as a backend is) takes the 3x3
// stride-1 convs that Winograd would run, and only those; its outputs agree with kiln's own
// (Winograd) kernel's.
TEST(Backends, KilnDirectVariantTakesWinogradConvs) {
  test::Builder b;
  b.input("x", {1, 32, 14, 14});
  b.conv("x", "c1", 32, 32);
  b.add("Relu", {"c1"}, {"r"});
  b.conv("r", "c2", 32, 32, 1);
  b.output("c2");
  ASSERT_TRUE(optimize(b.m, OptimizeOptions{}).is_ok());
  const Tensor x = b.random({1, 32, 14, 14});
  auto own = run_with(b.m, {x}, backends::kKiln, 1);
  auto direct = run_with(b.m, {x}, "kiln.direct", 1);
  ASSERT_TRUE(own.is_ok()) << own.status().message();
  ASSERT_TRUE(direct.is_ok()) << direct.status().message();
  std::map<std::string, int> convs;  // BlockedConv nodes per backend
  for (size_t i = 0; i < direct->backends.size(); ++i)
    if (b.m.graph.nodes[i].op_type == "BlockedConv") ++convs[direct->backends[i].second];
  EXPECT_EQ(convs, (std::map<std::string, int>{{"kiln", 1}, {"kiln.direct", 1}}));
  const Tensor& a = own->outputs[0].tensor;
  const Tensor& d = direct->outputs[0].tensor;
  ASSERT_EQ(a.shape(), d.shape());
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.data<float>()[i], d.data<float>()[i], 1e-4 * (1 + std::fabs(a.data<float>()[i])));
}

// kiln's narrow-tile variant ("kiln.tile6x16": the AVX2 6x16 register tile where the
// best is AVX-512's) takes MatMul, Gemm (transB), and FusedMatMul (MatMul + Add + Relu optimized)
// against a 2-D weight; over sizes that leave partial tiles of rows and columns its outputs agree
// with kiln's own kernel's.
TEST(Backends, KilnNarrowTileVariantAgreesWithOwnKernel) {
  if (!cpu_features().has_avx512()) GTEST_SKIP() << "the narrow tile is the best one here";
  for (const char* op : {"MatMul", "Gemm", "FusedMatMul"})
    for (int64_t m : {1, 7, 50})
      for (int64_t k : {5, 64})
        for (int64_t n : {3, 33, 100}) {
          const std::string op_type = op;
          test::Builder b;
          b.input("x", {m, k});
          b.weight("bias", {n});
          if (op_type == "Gemm") {
            b.weight("w", {n, k});
            b.add("Gemm", {"x", "w", "bias"}, {"y"}, {test::attr_i("transB", 1)});
          } else {
            b.weight("w", {k, n});
            b.add("MatMul", {"x", "w"}, {op_type == "MatMul" ? "y" : "p"});
            if (op_type == "FusedMatMul") {
              b.add("Add", {"p", "bias"}, {"s"});
              b.add("Relu", {"s"}, {"y"});
            }
          }
          b.output("y");
          if (op_type == "FusedMatMul") {
            ASSERT_TRUE(optimize(b.m, OptimizeOptions{}).is_ok());
          }
          ASSERT_EQ(b.m.graph.nodes.size(), 1u) << op_type;
          const Tensor x = b.random({m, k});
          auto own = run_with(b.m, {x}, backends::kKiln, 2);
          auto narrow = run_with(b.m, {x}, "kiln.tile6x16", 2);
          ASSERT_TRUE(own.is_ok()) << own.status().message();
          ASSERT_TRUE(narrow.is_ok()) << narrow.status().message();
          EXPECT_EQ(narrow->backends.at(0).second, "kiln.tile6x16") << op_type;
          const Tensor& a = own->outputs[0].tensor;
          const Tensor& t = narrow->outputs[0].tensor;
          ASSERT_EQ(a.shape(), t.shape());
          for (int64_t i = 0; i < a.numel(); ++i)
            ASSERT_NEAR(a.data<float>()[i], t.data<float>()[i],
                        1e-4 * (1 + std::fabs(a.data<float>()[i])))
                << op_type << " " << m << "x" << k << "x" << n << " at " << i;
        }
}

#ifdef KILN_WITH_OPENBLAS

const float* f32(const Tensor& t) { return t.data<float>(); }

// y = a [m, k] x w [k, n] in double, both row-major.
std::vector<double> product(const float* a, const float* w, int64_t m, int64_t k, int64_t n) {
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) y[i * n + j] += double(a[i * k + p]) * w[p * n + j];
  return y;
}

void expect_near(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(f32(got)[i], want[i], 1e-4 * std::max(1.0, std::fabs(want[i])))
        << what << " element " << i;
}

// MatMul [2, M, K] x W [K, N] then x V [N, 3]: the second reads the first's result, whose type
// only inference knows. Both run OpenBLAS's kernel, on 1 and 2 threads.
TEST(Backends, OpenBlasMatMulMatchesLoops) {
  for (int64_t m : {1, 5, 37})
    for (int threads : {1, 2}) {
      const int64_t k = 70, n = 45;
      test::Builder b;
      b.input("a", {2, m, k});
      b.weight("w", {k, n});
      b.weight("v", {n, 3});
      b.add("MatMul", {"a", "w"}, {"t"});
      b.add("MatMul", {"t", "v"}, {"y"});
      b.output("y");
      const Tensor a = b.random({2, m, k});
      auto r = run_with(b.m, {a}, "openblas", threads);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      const std::string what = "m=" + std::to_string(m) + " threads=" + std::to_string(threads);
      for (const auto& [node, backend] : r->backends)
        EXPECT_EQ(backend, "openblas") << node << " " << what;
      const std::vector<double> t =
          product(f32(a), f32(b.m.graph.initializers.at("w")), 2 * m, k, n);
      std::vector<float> tf(t.begin(), t.end());
      expect_near(r->outputs[0].tensor,
                  product(tf.data(), f32(b.m.graph.initializers.at("v")), 2 * m, n, 3), what);
    }
}

// Gemm with transA / transB, alpha, beta and each broadcast of C.
TEST(Backends, OpenBlasGemmMatchesLoops) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& c_shape : test::GemmCase::c_shapes()) {
        const test::GemmCase g(ta, tb, c_shape);
        auto r = run_with(g.b.m, {g.a}, "openblas", 2);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        ASSERT_EQ(r->backends.size(), 1u);
        EXPECT_EQ(r->backends[0].second, "openblas") << g.describe();
        expect_near(r->outputs[0].tensor, g.expected(), g.describe());
      }
}

// The operand layouts the backend passes to OpenBLAS: a transposed A (Gemm, 40 rows), one row (a
// matrix-vector product, cblas_sgemv) with A and B each stored either way, and a batched MatMul
// with both operands given, one batch and three.
TEST(Backends, OpenBlasOperandLayoutsMatchLoops) {
  const int64_t m = 40, k = 19, n = 23;
  {
    test::Builder b;
    b.input("at", {k, m});
    b.weight("w", {k, n});
    b.add("Gemm", {"at", "w"}, {"y"}, {test::attr_i("transA", 1)});
    b.output("y");
    const Tensor at = b.random({k, m});
    auto r = run_with(b.m, {at}, "openblas", 2);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_EQ(r->backends.size(), 1u);
    EXPECT_EQ(r->backends[0].second, "openblas");
    std::vector<float> a(m * k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) a[i * k + p] = f32(at)[p * m + i];
    expect_near(r->outputs[0].tensor,
                product(a.data(), f32(b.m.graph.initializers.at("w")), m, k, n), "transA");
  }
  // One row (a matrix-vector product), with A and B each stored either way.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      test::Builder b;
      b.input("a", ta ? Shape{k, 1} : Shape{1, k});
      b.weight("w", tb ? Shape{n, k} : Shape{k, n});
      b.add("Gemm", {"a", "w"}, {"y"}, {test::attr_i("transA", ta), test::attr_i("transB", tb)});
      b.output("y");
      const Tensor a = b.random(ta ? Shape{k, 1} : Shape{1, k});
      auto r = run_with(b.m, {a}, "openblas", 2);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      ASSERT_EQ(r->backends.size(), 1u);
      EXPECT_EQ(r->backends[0].second, "openblas");
      const float* w = f32(b.m.graph.initializers.at("w"));
      std::vector<float> wk(k * n);  // W as [k, n]
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) wk[p * n + j] = tb ? w[j * k + p] : w[p * n + j];
      expect_near(r->outputs[0].tensor, product(f32(a), wk.data(), 1, k, n),
                  "one row, transA=" + std::to_string(ta) + " transB=" + std::to_string(tb));
    }
  for (int64_t batches : {1, 3}) {
    test::Builder b;
    b.input("a", {batches, m, k});
    b.input("w", {batches, k, n});
    b.add("MatMul", {"a", "w"}, {"y"});
    b.output("y");
    const Tensor a = b.random({batches, m, k}), w = b.random({batches, k, n});
    auto r = run_with(b.m, {a, w}, "openblas", 2);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    ASSERT_EQ(r->backends.size(), 1u);
    EXPECT_EQ(r->backends[0].second, "openblas");
    std::vector<double> want;
    for (int64_t i = 0; i < batches; ++i) {
      const std::vector<double> y = product(f32(a) + i * m * k, f32(w) + i * k * n, m, k, n);
      want.insert(want.end(), y.begin(), y.end());
    }
    expect_near(r->outputs[0].tensor, want, "batches=" + std::to_string(batches));
  }
}

// Two sessions running OpenBLAS products at once, as two threads of a server would: Debian's serial
// OpenBLAS has an unlocked table of packing buffers, and without the backend's lock two calls at
// once pack into the same buffer (46 wrong products in 4000 pairs of bare calls here).
TEST(Backends, OpenBlasProductsFromTwoThreadsAtOnceAgree) {
  test::Builder b;
  b.input("a", {test::GemmCase::kM, 64});
  b.weight("w", {64, 96});
  b.add("MatMul", {"a", "w"}, {"y"});
  b.output("y");
  // Two sessions, loaded here: load_with saves the model under the test's name.
  auto first_session = test::load_with(b.m, "openblas", 1);
  auto second_session = test::load_with(b.m, "openblas", 1);
  ASSERT_TRUE(first_session.is_ok()) << first_session.status().message();
  ASSERT_TRUE(second_session.is_ok()) << second_session.status().message();
  const Tensor a = b.random({test::GemmCase::kM, 64});
  const std::vector<double> want =
      product(f32(a), f32(b.m.graph.initializers.at("w")), test::GemmCase::kM, 64, 96);
  std::atomic<int> wrong{0}, failed{0};
  auto runs = [&](Session& s) {
    for (int rep = 0; rep < 400; ++rep) {
      auto y = s.run({Value::of(a)});
      if (!y) return void(++failed);
      const float* yd = f32(y->at(0).tensor);
      for (size_t i = 0; i < want.size(); ++i)
        if (std::fabs(yd[i] - want[i]) > 1e-4 * (1 + std::fabs(want[i]))) {
          ++wrong;
          break;
        }
    }
  };
  std::thread first(runs, std::ref(**first_session)), second(runs, std::ref(**second_session));
  first.join();
  second.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0) << "of 800 products";
}

// A node the backend does not take (an int32 MatMul) runs kiln's own kernel: forcing a backend
// never makes a model fail that kiln runs.
TEST(Backends, NodesOpenBlasDeclinesRunKilnsOwn) {
  test::Builder b;
  ir::ValueInfo a{"a", ir::TypeInfo::tensor(DType::kInt32, {2, 3}), ""};
  ir::ValueInfo w{"w", ir::TypeInfo::tensor(DType::kInt32, {3, 2}), ""};
  b.m.graph.inputs = {a, w};
  b.add("MatMul", {"a", "w"}, {"y"});
  b.m.graph.outputs.push_back(ir::ValueInfo{"y", ir::TypeInfo::tensor(DType::kInt32), ""});
  Tensor at = Tensor::make(DType::kInt32, {2, 3}).value(),
         wt = Tensor::make(DType::kInt32, {3, 2}).value();
  for (int i = 0; i < 6; ++i) at.data<int32_t>()[i] = i + 1, wt.data<int32_t>()[i] = 2 * i - 3;
  auto r = run_with(b.m, {at, wt}, "openblas", 1);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->backends.size(), 1u);
  EXPECT_EQ(r->backends[0].second, "kiln");
  const Tensor& y = r->outputs[0].tensor;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      int32_t want = 0;
      for (int p = 0; p < 3; ++p)
        want += at.data<int32_t>()[i * 3 + p] * wt.data<int32_t>()[p * 2 + j];
      EXPECT_EQ(y.data<int32_t>()[i * 2 + j], want) << i << "," << j;
    }
}

#endif  // KILN_WITH_OPENBLAS

}  // namespace
}  // namespace kiln
