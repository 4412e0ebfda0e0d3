// Backends (backends/backend.h): SessionOptions::backend picks whose kernels run the nodes that
// backend takes, kiln's own the rest; an unknown name is an error. With the OpenBLAS backend
// built, its MatMul and Gemm are checked against double loops written here from the ONNX
// definitions, over sizes down to 1, with batches, transposes and each broadcast of C.
#include "backends/backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "onnx/model_io.h"
#include "pass_test_util.h"

namespace kiln {
namespace {

using test::attr_f;
using test::attr_i;

struct Ran {
  std::vector<Value> outputs;
  std::vector<std::pair<std::string, std::string>> backends;
};

// Saves m, loads it back at -O0 with `backend` and runs it twice (a second run reuses what the
// first set up).
Result<Ran> run_with(const ir::Model& m, const std::vector<Tensor>& feeds,
                     const std::string& backend, int threads) {
  const std::string path = ::testing::TempDir() + "kiln_backend_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           ".onnx";
  KILN_RETURN_IF_ERROR(onnx_io::save_model(m, path));
  SessionOptions options;
  options.threads = threads;
  options.optimize_level = 0;
  options.backend = backend;
  auto s = Session::load(path, options);
  std::remove(path.c_str());
  if (!s) return s.status();
  std::vector<Value> in;
  for (const Tensor& t : feeds) in.push_back(Value::of(t));
  Ran r;
  for (int rep = 0; rep < 2; ++rep) {
    KILN_ASSIGN_OR_RETURN(r.outputs, (*s)->run(in));
  }
  r.backends = (*s)->node_backends();
  return r;
}

TEST(Backends, KilnIsAlwaysThere) { EXPECT_TRUE(backends::registered().count(backends::kKiln)); }

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

#ifdef KILN_WITH_OPENBLAS

const float* f32(const Tensor& t) { return t.data<float>(); }

// y = op(a) [m, k] x op(w) [k, n] in double, a row-major [m, k] (or [k, m] when ta), w [k, n] (or
// [n, k] when tw).
std::vector<double> product(const float* a, bool ta, const float* w, bool tw, int64_t m, int64_t k,
                            int64_t n) {
  std::vector<double> y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        y[i * n + j] +=
            double(ta ? a[p * m + i] : a[i * k + p]) * (tw ? w[j * k + p] : w[p * n + j]);
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
          product(f32(a), false, f32(b.m.graph.initializers.at("w")), false, 2 * m, k, n);
      std::vector<float> tf(t.begin(), t.end());
      expect_near(
          r->outputs[0].tensor,
          product(tf.data(), false, f32(b.m.graph.initializers.at("v")), false, 2 * m, n, 3), what);
    }
}

// Gemm with transA / transB, alpha, beta and each broadcast of C (none, [N], [1, N], [M, 1], [M,
// N]).
TEST(Backends, OpenBlasGemmMatchesLoops) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& c_shape : {Shape{}, Shape{40}, Shape{1, 40}, Shape{9, 1}, Shape{9, 40}}) {
        const int64_t m = 9, k = 33, n = 40;
        test::Builder b;
        b.input("a", ta ? Shape{k, m} : Shape{m, k});
        b.weight("w", tb ? Shape{n, k} : Shape{k, n});
        std::vector<std::string> in{"a", "w"};
        if (!c_shape.empty()) b.weight("c", c_shape), in.push_back("c");
        b.add("Gemm", in, {"y"},
              {attr_i("transA", ta), attr_i("transB", tb), attr_f("alpha", 0.5f),
               attr_f("beta", 2.0f)});
        b.output("y");
        const Tensor a = b.random(ta ? Shape{k, m} : Shape{m, k});
        auto r = run_with(b.m, {a}, "openblas", 2);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        const std::string what =
            "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " C " + shape_str(c_shape);
        ASSERT_EQ(r->backends.size(), 1u);
        EXPECT_EQ(r->backends[0].second, "openblas") << what;
        std::vector<double> want =
            product(f32(a), ta, f32(b.m.graph.initializers.at("w")), tb, m, k, n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double& y = want[i * n + j];
            y *= 0.5;
            if (c_shape.empty()) continue;
            const float* c = f32(b.m.graph.initializers.at("c"));
            const int64_t ci = c_shape.size() == 1 ? j
                               : c_shape[0] == 1   ? j
                               : c_shape[1] == 1   ? i
                                                   : i * n + j;
            y += 2.0 * c[ci];
          }
        expect_near(r->outputs[0].tensor, want, what);
      }
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
